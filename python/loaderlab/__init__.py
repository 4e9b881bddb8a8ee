"""loaderlab for Python.

- `loaderlab.Loader`: loaderlab's loader with torch.utils.data.DataLoader's names and defaults —
  `Loader(your_torchvision_dataset, batch_size=64, shuffle=True, num_workers=8)` reads your
  dataset's files and runs your Compose op by op as loaderlab's chain (`loader.check()` proves
  the translation on your own images);
- `loaderlab.watch`: every step of your own training loop and the stages inside your loader,
  into a results folder `loaderlab report` reads;
- `loaderlab.fingerprint`: the batch fingerprint of steps.csv;
- the `loaderlab` command itself (`python -m loaderlab`).
"""

from __future__ import annotations

import atexit
from typing import Any

from ._loaderlab import LoaderError, __version__
from ._loaderlab import fingerprint as _fingerprint
from .check import CheckReport
from .loader import Loader, _open
from .translate import TranslationError
from .watch import Watch, watch

__all__ = [
    "CheckReport",
    "Loader",
    "LoaderError",
    "TranslationError",
    "Watch",
    "__version__",
    "fingerprint",
    "watch",
]


@atexit.register
def _close_all() -> None:
    for loader in list(_open):
        loader.close()


def fingerprint(images: Any, labels: Any) -> str:
    """The fingerprint steps.csv records for a batch: images a float32 CPU tensor, labels an
    integer one. Equal fingerprints mean bit-identical batches."""
    from torch.utils.dlpack import to_dlpack

    return _fingerprint(to_dlpack(images.contiguous()), to_dlpack(labels.contiguous()))
