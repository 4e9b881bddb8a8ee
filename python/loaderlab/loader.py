"""`loaderlab.Loader`: loaderlab's loader with torch.utils.data.DataLoader's names and defaults.

    loader = loaderlab.Loader(your_torchvision_dataset, batch_size=64, shuffle=True, num_workers=8)

takes the dataset object your code already builds (ImageFolder, DatasetFolder, MNIST,
FashionMNIST, CIFAR10, with its `transform`), reads its files with loaderlab's readers and runs
its Compose as loaderlab's chain, op by op with every parameter carried over (`translate`);
`loader.check()` proves the translation on your own images (`check`). The dict form of an
experiment file's tables and `Loader.from_experiment` stay.

Every batch is built by loaderlab's worker threads straight into a reusable buffer and handed to
torch without a copy (DLPack): the tensor shares the buffer, which goes back to the loader only
when torch frees the tensor. The GIL is released while a batch is built or awaited.
"""

from __future__ import annotations

import json
import math
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ._loaderlab import NativeLoader
from .check import CheckReport, check
from .passes import Pass
from .translate import ENGINE_HINT, Translated, translate_dataset

# Names the keyword form in messages, where a file's name would stand.
_KEYWORDS = "loaderlab.Loader()"

# DataLoader's arguments loaderlab has no twin of, with the value that means "none of it".
_NOT_RUN = {
    "batch_sampler": None,
    "collate_fn": None,
    "timeout": 0,
    "worker_init_fn": None,
    "multiprocessing_context": None,
    "pin_memory_device": "",
}


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


def _document(
    dataset: Mapping[str, Any],
    transforms: Sequence[Mapping[str, Any]] | None,
    loader: Mapping[str, Any],
    seed: int,
) -> str:
    """An experiment file's text (one table per line), so that a problem is named by its key
    as in a file; `transforms` None leaves the file's default chain."""
    tables: dict[str, Any] = {"experiment": {"seed": seed}, "dataset": dict(dataset)}
    if transforms is not None:
        tables["transforms"] = list(transforms)
    # No step runs here: the stand-in, which asks nothing of the images.
    tables |= {"loader": dict(loader), "model": {"kind": "stand_in", "step_ms": 1}}
    return "".join(f"{k} = {_toml(v, k)}\n" for k, v in tables.items())


def _count(name: str, value: Any, least: int) -> None:  # noqa: ANN401 - checked here
    """Refuse `name=value` unless it is an int of at least `least`, as DataLoader does."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} should be an int, not {type(value).__name__} ({value!r})")
    if value < least:
        raise ValueError(f"{name} should be {least} or more, not {value}")


def _draw_seed(generator: Any) -> int:  # noqa: ANN401 - a torch.Generator or None
    """A seed for the loader's shuffle order and random transforms, drawn as a DataLoader draws
    its base seed: from `generator`, else from torch's global generator (torch.manual_seed
    makes it repeatable)."""
    import torch

    draw = torch.empty((), dtype=torch.int64).random_(generator=generator)
    return int(draw.item()) & ((1 << 63) - 1)


# Loaders still open, closed at interpreter exit (their worker threads joined first).
_open: weakref.WeakSet[Loader] = weakref.WeakSet()


class EpochSampler:
    """What `loader.sampler` is without a sampler of yours: the shuffle, and the epoch the next
    pass takes (`set_epoch`)."""

    def __init__(self, loader: Loader) -> None:
        """The sampler of `loader`."""
        self._loader = loader

    def __len__(self) -> int:
        """Samples per epoch."""
        return self._loader._native.dataset_len

    def set_epoch(self, epoch: int) -> None:
        """The next pass is epoch `epoch` (its shuffle order and random transforms)."""
        self._loader.set_epoch(epoch)

    def __repr__(self) -> str:
        """The shuffle and the seed."""
        return f"loaderlab.EpochSampler(shuffle={self._loader._shuffle}, seed={self._loader.seed})"


class Loader:
    """Batches of a dataset built by loaderlab's workers, with DataLoader's names and defaults.

    `dataset` is a torchvision dataset object (ImageFolder, DatasetFolder, MNIST, FashionMNIST,
    CIFAR10) with its transform, or a dict of an experiment file's `[dataset]` keys with
    `transforms=[...]` (a list of `[[transforms]]` tables). Iterating yields (images, labels):
    float32 N×C×H×W and int64 N torch tensors. Each `iter()` is a pass of its own over one epoch
    (two live iterators do not share a cursor): the next epoch, unless `set_epoch` (or a
    DistributedSampler's) says which. The shuffle order and every random transform parameter
    derive from `seed` (default: a DistributedSampler's seed, else drawn from `generator`, else
    from torch's global generator, as a DataLoader draws its base seed) and the epoch, so they are the same at any worker count.
    Beyond DataLoader's arguments: `transforms=` (the dict form), `rank=` and `world_size=`
    (a DDP rank's share without a DistributedSampler), and `read_ahead=` (images each worker
    keeps in flight from slow storage; see docs/storage.md).
    """

    def __init__(
        self,
        dataset: Any,  # noqa: ANN401 - a torchvision dataset or a dict
        batch_size: int = 1,
        shuffle: bool = False,
        sampler: Any = None,  # noqa: ANN401 - a DistributedSampler
        num_workers: int = 0,
        pin_memory: bool = False,
        drop_last: bool = False,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        generator: Any = None,  # noqa: ANN401 - a torch.Generator
        seed: int | None = None,
        *,
        transforms: Sequence[Mapping[str, Any]] | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        read_ahead: int | None = None,
        **unsupported: Any,
    ) -> None:
        """A loader of `dataset`, as `torch.utils.data.DataLoader(dataset, ...)` is one."""
        self._native: NativeLoader | None = None
        self._passes: weakref.WeakSet[Pass] = weakref.WeakSet()
        for name, value in unsupported.items():
            if name == "workers":
                raise TypeError("Loader() takes DataLoader's name for the worker count: num_workers=")
            if name not in _NOT_RUN:
                raise TypeError(f"Loader() got an unexpected keyword argument {name!r}")
            if value != _NOT_RUN[name]:
                raise ValueError(
                    f"{name}={value!r}: loaderlab.Loader builds (images, labels) batches itself, "
                    f"without DataLoader's {name}; {ENGINE_HINT}"
                )
        _count("batch_size", batch_size, 1)
        _count("num_workers", num_workers, 0)
        if prefetch_factor is not None:
            _count("prefetch_factor", prefetch_factor, 1)
        if shuffle and sampler is not None:
            raise ValueError("sampler option is mutually exclusive with shuffle (as DataLoader says)")
        if prefetch_factor is not None and num_workers == 0:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing (num_workers > 0)"
            )
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.sampler = sampler
        self._rank, self._world = self._share(sampler, rank, world_size)
        self._shuffle = bool(sampler.shuffle) if sampler is not None else bool(shuffle)
        if isinstance(dataset, Mapping):
            # No transforms=: the file's default chain (the seed's), read back once opened.
            listed = None if transforms is None else [dict(t) for t in transforms]
            self._translated = Translated(dict(dataset), listed)
        else:
            if transforms is not None:
                raise ValueError("transforms=: a torchvision dataset brings its own transform")
            self._translated = translate_dataset(dataset)
        if seed is None and sampler is None and self._world > 1:
            raise ValueError(
                "rank= and world_size= need seed= too: every rank must deal its share from the "
                "same permutation (a DistributedSampler brings its seed)"
            )
        if seed is None and sampler is not None:
            # Every rank must deal from the same permutation: the sampler's seed, which each
            # rank's DistributedSampler holds alike.
            seed = sampler.seed
        self.seed = int(seed) if seed is not None else _draw_seed(generator)
        loader = {
            "batch_size": batch_size,
            "workers": num_workers,
            "shuffle": self._shuffle,
            "drop_last": drop_last,
            "pin_memory": pin_memory,
            "persistent_workers": persistent_workers,
            "prefetch_factor": 2 if prefetch_factor is None else prefetch_factor,
        }
        if read_ahead is not None:
            _count("read_ahead", read_ahead, 1)
            loader["read_ahead"] = read_ahead
        text = _document(self._translated.dataset, self._translated.transforms, loader, self.seed)
        self._open(NativeLoader(_KEYWORDS, text, None, []))
        if self._translated.transforms is None:
            self._translated.transforms = json.loads(self._native.transforms)
        self.batch_size, self.num_workers = batch_size, num_workers
        self.drop_last, self.pin_memory = drop_last, pin_memory
        if self.sampler is None:
            self.sampler = EpochSampler(self)

    @staticmethod
    def _share(sampler: Any, rank: int | None, world_size: int | None) -> tuple[int, int]:  # noqa: ANN401
        """(rank, replicas): a DistributedSampler's, or `rank=` and `world_size=`."""
        if sampler is not None:
            import torch.utils.data as data

            if not isinstance(sampler, data.DistributedSampler):
                raise TypeError(
                    f"sampler: a {type(sampler).__name__} (loaderlab.Loader takes a "
                    f"DistributedSampler, whose rank's share it builds; {ENGINE_HINT})"
                )
            return int(sampler.rank), int(sampler.num_replicas)
        if (rank is None) != (world_size is None):
            raise ValueError("rank= and world_size= go together")
        return (rank or 0), (world_size or 1)

    @classmethod
    def from_experiment(
        cls, path: str | os.PathLike[str], condition: str | None = None, **overrides: Any
    ) -> Loader:
        """The loader of `condition` (default: the first) of an experiment file, its [loader]
        settings the file's, with keyword overrides layered on top as `--set` does
        (`workers=2` is `--set loader.workers=2`; `num_workers=` is read as `workers=`)."""
        self = cls.__new__(cls)
        self._native, self._passes = None, weakref.WeakSet()
        names = {"num_workers": "workers"}
        sets = []
        for name, value in overrides.items():
            key = "experiment.seed" if name == "seed" else f"loader.{names.get(name, name)}"
            sets.append(f"{key}={_toml(value, key)}")
        self._open(NativeLoader(os.fspath(path), None, condition, sets))
        self.dataset, self._rank, self._world = None, 0, 1
        self._translated = None
        self.seed = self._native.seed
        self._shuffle = "shuffle = true" in self._native.settings
        self.batch_size = self._native.batch_size
        self.num_workers = int(overrides.get("workers", overrides.get("num_workers", 0)))
        self.drop_last = self.pin_memory = None
        self.sampler = EpochSampler(self)
        return self

    def _open(self, native: NativeLoader) -> None:
        self._native = native
        self._pin = native.pin_memory
        self._next_epoch = 0
        _open.add(self)

    def __len__(self) -> int:
        """Batches per pass (per epoch), as DataLoader's len()."""
        return self._loader().batches_per_epoch(self._rank, self._world)

    def set_epoch(self, epoch: int) -> None:
        """The next pass is epoch `epoch` (its shuffle order and random transforms)."""
        if epoch < 0:
            raise ValueError(f"epoch: must be 0 or more, not {epoch}")
        self._next_epoch = epoch

    @property
    def settings(self) -> str:
        """The loader's [experiment], [dataset], [[transforms]] and [loader], as TOML."""
        return self._loader().settings

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """One pass over one epoch: a loader of its own (its workers, its cursor)."""
        epoch = self._next_epoch
        if hasattr(self.sampler, "epoch") and not isinstance(self.sampler, EpochSampler):
            epoch = int(self.sampler.epoch)
        self._next_epoch = epoch + 1
        p = Pass(self._loader().start(epoch, self._rank, self._world), self._pin)
        self._passes.add(p)
        return p

    def check(self, n: int = 64) -> CheckReport:
        """loaderlab's chain against torchvision's functional form of each op, on `n` of the
        dataset's images with the parameters loaderlab drew: the largest difference per op,
        passed at 0 (or within 1/255 where torchvision rounds differently)."""
        if self._translated is None:
            # An experiment's chain: torchvision's side runs with the file's parameters.
            return check(self._loader(), json.loads(self._loader().transforms), n)
        return check(self._loader(), self._translated.transforms, n, self._translated.sources)

    def buffers(self) -> list[tuple[int, int]]:
        """(address, bytes) of every buffer a batch of a live pass was handed over in: a tensor
        from this loader points inside one of them (the zero-copy check)."""
        return [b for p in list(self._passes) for b in p.buffers()]

    def close(self) -> None:
        """Stop every live pass's workers, and the loader kept between passes. Tensors already
        handed out stay valid."""
        for p in list(getattr(self, "_passes", ())):
            p.close()
        native = getattr(self, "_native", None)
        if native is not None:
            native.close()

    def __enter__(self) -> Loader:
        """The loader, closed on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the loader."""
        self.close()

    def __del__(self) -> None:
        """Close the loader."""
        self.close()

    def _loader(self) -> NativeLoader:
        if self._native is None:
            raise ValueError("the loader is closed")
        return self._native

    def __repr__(self) -> str:
        """The settings, and each of your transforms beside the loaderlab op it became."""
        n = self._native
        if n is None:
            return "loaderlab.Loader(closed)"
        head = (
            f"loaderlab.Loader(batch_size={self.batch_size}, shuffle={self._shuffle}, "
            f"num_workers={self.num_workers}, seed={self.seed}, images={n.dataset_len})"
        )
        if not self._translated or not self._translated.shown:
            return head
        width = max(len(t) for t, _ in self._translated.shown)
        lines = [f"  {t:<{width}}  ->  {op}" for t, op in self._translated.shown]
        return head + "\n" + "\n".join(lines)
