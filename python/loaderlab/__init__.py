"""loaderlab for Python: `loaderlab.Loader`, loaderlab's loader as a drop-in for
torch.utils.data.DataLoader, and `loaderlab.fingerprint`, the batch fingerprint of steps.csv.

Every batch is built by loaderlab's worker threads straight into a reusable buffer and handed to
torch without a copy (DLPack): the tensor shares the buffer, which goes back to the loader only
when torch frees the tensor. The GIL is released while a batch is built or awaited.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import weakref
from typing import Any, Iterator, Mapping, Optional, Sequence, Tuple

from ._loaderlab import LoaderError, NativeLoader, __version__
from ._loaderlab import fingerprint as _fingerprint

__all__ = ["Loader", "LoaderError", "fingerprint", "__version__"]

# Where a keyword of Loader(...) goes in the experiment's tables; any other keyword is a
# [loader] key (and an unknown one is refused by the same checks as a TOML file's).
_SECTION_OF = {"seed": ("experiment", "seed")}

# Names the keyword form in messages, where a file's name would stand.
_KEYWORDS = "loaderlab.Loader()"


def _toml(value: Any, key: str) -> str:
    """`value` as a TOML value (the syntax --set takes); `key` names it in a TypeError."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        # JSON's escapes are TOML's basic-string escapes.
        return json.dumps(os.fspath(value), ensure_ascii=False)
    if isinstance(value, Mapping):
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"{key}: keys must be strings, not {type(k).__name__}")
            items.append(f"{json.dumps(k)} = {_toml(v, f'{key}.{k}')}")
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v, f"{key}[{i}]") for i, v in enumerate(value)) + "]"
    raise TypeError(
        f"{key}: a {type(value).__name__} has no TOML form (use a bool, int, float, str, list or dict)"
    )


def _dotted(name: str) -> str:
    section, key = _SECTION_OF.get(name, ("loader", name))
    return f"{section}.{key}"


def _overrides(
    dataset: Optional[Mapping[str, Any]],
    transforms: Optional[Sequence[Mapping[str, Any]]],
    loader: Mapping[str, Any],
) -> list:
    """Keyword arguments as `--set` arguments, in the experiment file's terms."""
    out = []
    if dataset is not None:
        if not isinstance(dataset, Mapping):
            raise TypeError(f"dataset: expected a dict, not {type(dataset).__name__}")
        for k, v in dataset.items():
            out.append(f"dataset.{k}={_toml(v, f'dataset.{k}')}")
    if transforms is not None:
        if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Sequence):
            raise TypeError(f"transforms: expected a list of dicts, not {type(transforms).__name__}")
        out.append(f"transforms={_toml(list(transforms), 'transforms')}")
    for name, v in loader.items():
        out.append(f"{_dotted(name)}={_toml(v, _dotted(name))}")
    return out


def _document(
    dataset: Optional[Mapping[str, Any]],
    transforms: Optional[Sequence[Mapping[str, Any]]],
    loader: Mapping[str, Any],
) -> str:
    """Keyword arguments as an experiment file's text (one table per line), so that a problem
    is named by its key as in a file."""
    tables: dict = {}
    if dataset is not None:
        if not isinstance(dataset, Mapping):
            raise TypeError(f"dataset: expected a dict, not {type(dataset).__name__}")
        tables["dataset"] = dataset
    if transforms is not None:
        if isinstance(transforms, (str, bytes)) or not isinstance(transforms, Sequence):
            raise TypeError(f"transforms: expected a list of dicts, not {type(transforms).__name__}")
        tables["transforms"] = list(transforms)
    for name, v in loader.items():
        section, key = _dotted(name).split(".")
        tables.setdefault(section, {})[key] = v
    # No step runs here: the stand-in, which asks nothing of the images (the default network
    # would refuse images too small for its poolings).
    tables["model"] = {"kind": "stand_in", "step_ms": 1}
    return "".join(f"{k} = {_toml(v, k)}\n" for k, v in tables.items())


# Loaders still open, closed at interpreter exit (their worker threads joined first).
_open: "weakref.WeakSet[Loader]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for loader in list(_open):
        loader.close()


class Loader:
    """Batches of a declared dataset and transform chain, built by loaderlab's workers.

    Loader(dataset={"kind": "fashion_mnist", "root": "data"},
           transforms=[{"op": "random_rotation", "degrees": 15}, {"op": "to_tensor"}],
           batch_size=256, workers=2, prefetch_factor=2, shuffle=True, seed=42, drop_last=True)

    The dicts and keywords are the experiment file's tables and [loader] keys (`seed` is
    [experiment] seed), checked by the same code with the same messages: a bad one raises
    ValueError naming the key. Iterating yields (images, labels): float32 N×C×H×W and int64 N
    torch tensors. One pass is one epoch; the next pass is the next epoch, unless `set_epoch`
    says otherwise. For the same settings, the batches are those of `loaderlab run` (the same
    fingerprints, in the same order) at any worker count.
    """

    def __init__(
        self,
        dataset: Optional[Mapping[str, Any]] = None,
        transforms: Optional[Sequence[Mapping[str, Any]]] = None,
        **loader: Any,
    ) -> None:
        self._start(_KEYWORDS, _document(dataset, transforms, loader), None, [], loader)

    @classmethod
    def from_experiment(
        cls,
        path: "str | os.PathLike[str]",
        condition: Optional[str] = None,
        *,
        dataset: Optional[Mapping[str, Any]] = None,
        transforms: Optional[Sequence[Mapping[str, Any]]] = None,
        **loader: Any,
    ) -> "Loader":
        """The loader of `condition` (default: the first) of an experiment file, with keyword
        overrides layered on top as `--set` does (`workers=2` is `--set loader.workers=2`)."""
        self = cls.__new__(cls)
        overrides = _overrides(dataset, transforms, loader)
        self._start(os.fspath(path), None, condition, overrides, loader)
        return self

    def _start(
        self,
        file: str,
        text: Optional[str],
        condition: Optional[str],
        overrides: list,
        loader: Mapping[str, Any],
    ) -> None:
        self._native: Optional[NativeLoader] = None
        self._native = NativeLoader(file, text, condition, overrides)
        self._pin = self._native.pin_memory
        self._pinned: set = set()
        self._epoch_set: Optional[int] = None
        _open.add(self)

    def __len__(self) -> int:
        """Batches per epoch."""
        return self._loader().batches_per_epoch

    @property
    def batch_size(self) -> int:
        return self._loader().batch_size

    @property
    def settings(self) -> str:
        """The condition's [experiment], [dataset], [[transforms]] and [loader], as TOML."""
        return self._loader().settings

    def set_epoch(self, epoch: int) -> None:
        """The next pass is epoch `epoch` (its shuffle order and random transforms)."""
        if epoch < 0:
            raise ValueError(f"epoch: must be 0 or more, not {epoch}")
        native = self._loader()
        first = epoch * native.batches_per_epoch
        if native.position() != first:
            native.restart_at(first)

    def __iter__(self) -> Iterator[Tuple[Any, Any]]:
        import torch

        native = self._loader()
        per_epoch = native.batches_per_epoch
        position = native.position()
        if position % per_epoch:
            # A pass left before its end: the next pass starts the next epoch.
            native.restart_at((position // per_epoch + 1) * per_epoch)
        for _ in range(per_epoch):
            images, labels, _index, _epoch, _fp = native.next()
            images = torch.from_dlpack(images)
            if self._pin:
                self._pin_buffer(images)
            yield images, torch.from_dlpack(labels)

    def _pin_buffer(self, images: Any) -> None:
        """Page-lock the buffer `images` lies in, once, where torch has CUDA (PyTorch's
        pin_memory=True copies each batch into pinned memory instead)."""
        import torch

        if not torch.cuda.is_available():
            return
        ptr = images.data_ptr()
        for start, size in self._loader().buffers():
            if start <= ptr < start + size and start not in self._pinned:
                err = torch.cuda.cudart().cudaHostRegister(start, size, 0)
                if int(err) != 0:
                    raise LoaderError(f"pin_memory: cudaHostRegister failed ({err})")
                self._pinned.add(start)
                # The native side keeps it until it is unregistered (close).
                self._loader().pin(start)

    def buffers(self) -> list:
        """(address, bytes) of every buffer a batch has been handed over in: a tensor from
        this loader points inside one of them (the zero-copy check)."""
        return self._loader().buffers()

    def close(self) -> None:
        """Stop and join the worker threads. Tensors already handed out stay valid.

        Every buffer this loader page-locked is unregistered first (cudaHostUnregister), so no
        page-locked buffer is freed while registered.
        """
        native, self._native = getattr(self, "_native", None), None
        if native is None:
            return
        pinned = native.pinned()
        if pinned:
            import torch

            for start, _size in pinned:
                torch.cuda.cudart().cudaHostUnregister(start)
        native.close()

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def _loader(self) -> NativeLoader:
        if self._native is None:
            raise ValueError("the loader is closed")
        return self._native

    def __repr__(self) -> str:
        if self._native is None:
            return "loaderlab.Loader(closed)"
        n = self._native
        return (
            f"loaderlab.Loader(condition={n.condition!r}, batch_size={n.batch_size}, "
            f"batches_per_epoch={n.batches_per_epoch}, images={n.dataset_len})"
        )


def fingerprint(images: Any, labels: Any) -> str:
    """The fingerprint steps.csv records for a batch: images a float32 CPU tensor, labels an
    integer one. Equal fingerprints mean bit-identical batches."""
    from torch.utils.dlpack import to_dlpack

    return _fingerprint(to_dlpack(images.contiguous()), to_dlpack(labels.contiguous()))
