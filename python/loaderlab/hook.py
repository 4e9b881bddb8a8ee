"""`loaderlab watch --out DIR -- COMMAND`: every torch DataLoader the command's script iterates is
watched (`loaderlab.watch`), through a hook on `DataLoader.__iter__` that `_hook/sitecustomize.py`
installs as the interpreter starts."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from typing import Any

# The module (the package's `watch` attribute is the function of that name).
watching = importlib.import_module(f"{__package__}.watch")


def install(out: str, every: int) -> None:
    """Watch every torch DataLoader this process iterates: the first into `out`, the next into
    `out-2`, `out-3` … (each loader keeps its folder across epochs)."""
    from torch.utils.data import DataLoader

    if watching._original_iter is not None:
        return
    watching._original_iter = DataLoader.__iter__
    folders: dict[int, str] = {}

    def __iter__(self: DataLoader) -> Iterator[Any]:
        key = id(self)
        if key not in folders:
            folders[key] = out if not folders else f"{out}-{len(folders) + 1}"
            print(
                f"loaderlab watch: {type(self.dataset).__name__} DataLoader → {folders[key]}", file=sys.stderr
            )
        return iter(watching.watch(self, folders[key], every=every))

    DataLoader.__iter__ = __iter__
