"""The stage clocks `loaderlab.watch` runs inside a torch DataLoader, in each process that builds
batches: every item's fetch (through an instance `__getitems__` the fetcher calls), each transform of
the dataset's `Compose` by class name on one item in `every`, and the collate. The clocks of a
batch's build travel back to the training loop with the batch (`Clocked`), where `LoaderClocks`
adds them up, with the hand-off from a worker's ready batch to the loop holding it.

Every class here is module-level, so a dataset carrying them pickles for workers started by spawn or
forkserver.
"""

from __future__ import annotations

import json
import time
from typing import Any

_clock = time.perf_counter_ns


class _Clocks:
    """The stage clocks of one process (copied into each DataLoader worker as it starts)."""

    def __init__(self, every: int) -> None:
        """Nothing counted; one item in `every` timed transform by transform."""
        self.every = every
        self.n = 0
        self.sampling = False
        self.reset()

    def reset(self) -> None:
        """Start afresh (what was counted went back with a batch)."""
        self.items_ns = 0
        self.items_cpu_ns = 0
        self.sampled = 0
        self.sampled_ns = 0
        self.ops: dict[str, list[int]] = {}

    def take(self, collate_ns: int, collate_cpu_ns: int) -> tuple[Any, ...]:
        """This batch's clocks, started afresh."""
        out = (
            self.items_ns + collate_ns,
            self.items_cpu_ns + collate_cpu_ns,
            self.sampled,
            self.sampled_ns,
            self.ops,
            collate_ns,
        )
        self.reset()
        return out


class Clocked:
    """A batch with the clocks of its build, on its way from a worker to the watched loop."""

    __slots__ = ("batch", "clocks", "ready_ns")

    def __init__(self, batch: Any, ready_ns: int, clocks: tuple[Any, ...]) -> None:  # noqa: ANN401
        """`batch`, ready at `ready_ns`, built as `clocks` say."""
        self.batch, self.ready_ns, self.clocks = batch, ready_ns, clocks

    def pin_memory(self, *args: Any) -> Clocked:  # noqa: ANN401
        """The batch page-locked, as the DataLoader's pin_memory thread asks."""
        from torch.utils.data._utils.pin_memory import pin_memory

        self.batch = pin_memory(self.batch, *args)
        return self


class _TimedItems:
    """The dataset's `__getitems__`: each item's fetch timed, one in `every` sampled."""

    def __init__(self, dataset: Any, clocks: _Clocks, own: Any) -> None:  # noqa: ANN401
        """Items of `dataset` (through its own `__getitems__` where it has one)."""
        self.dataset, self.clocks, self.own = dataset, clocks, own

    def __call__(self, indices: list[int]) -> list[Any]:
        """The items at `indices`, timed."""
        c = self.clocks
        if self.own is not None:
            t0, p0 = _clock(), time.process_time_ns()
            items = self.own(indices)
            c.items_ns += _clock() - t0
            c.items_cpu_ns += time.process_time_ns() - p0
            return items
        out = []
        get = self.dataset.__class__.__getitem__
        p0 = time.process_time_ns()
        for i in indices:
            c.n += 1
            sample = c.n % c.every == 0
            c.sampling = sample
            t0 = _clock()
            out.append(get(self.dataset, i))
            dt = _clock() - t0
            c.items_ns += dt
            if sample:
                c.sampled += 1
                c.sampled_ns += dt
                c.sampling = False
        c.items_cpu_ns += time.process_time_ns() - p0
        return out


class _TimedCompose:
    """The dataset's `Compose`: each transform timed by class name on sampled items."""

    def __init__(self, compose: Any, clocks: _Clocks) -> None:  # noqa: ANN401
        """`compose`'s transforms, named by class (a repeated class numbered)."""
        self.compose, self.clocks = compose, clocks
        self.names = []
        for t in compose.transforms:
            name = type(t).__name__
            k = 2
            while name in self.names:
                name = f"{type(t).__name__} #{k}"
                k += 1
            self.names.append(name)

    def __call__(self, img: Any) -> Any:  # noqa: ANN401
        """`img` through the transforms, each timed when the item is sampled."""
        if not self.clocks.sampling:
            return self.compose(img)
        ops = self.clocks.ops
        for name, t in zip(self.names, self.compose.transforms):
            t0 = _clock()
            img = t(img)
            e = ops.setdefault(name, [0, 0])
            e[0] += 1
            e[1] += _clock() - t0
        return img

    def __repr__(self) -> str:
        """The Compose's own repr."""
        return repr(self.compose)


class _TimedCollate:
    """The DataLoader's collate: timed; the batch leaves with its clocks."""

    def __init__(self, collate: Any, clocks: _Clocks) -> None:  # noqa: ANN401
        """`collate`, timed on `clocks`."""
        self.collate, self.clocks = collate, clocks

    def __call__(self, items: list[Any]) -> Clocked:
        """The batch of `items`, with the clocks of its build."""
        t0, p0 = _clock(), time.process_time_ns()
        batch = self.collate(items)
        t1 = _clock()
        return Clocked(batch, t1, self.clocks.take(t1 - t0, time.process_time_ns() - p0))


class LoaderClocks:
    """The stage clocks of one watched torch DataLoader: installed on its dataset and collate,
    added up as its batches arrive, written as stages.json's fields."""

    def __init__(self, every: int) -> None:
        """Nothing installed or counted; one item in `every` timed transform by transform."""
        self.every = every
        self.clocks = _Clocks(every)
        self.installed: list[tuple[Any, str, Any]] = []
        self.batches = self.build_ns = self.build_cpu_ns = self.sampled = self.sampled_ns = 0
        self.ops: dict[str, list[int]] = {}
        self.collate = [0, 0]
        self.handoff = [0, 0]

    def install(self, loader: Any) -> list[str]:  # noqa: ANN401
        """Time `loader`'s items, its dataset's Compose and its collate (a torch DataLoader over
        a map-style dataset, batched); the transforms' names."""
        import torch

        dataset = getattr(loader, "dataset", None)
        if not isinstance(loader, torch.utils.data.DataLoader) or dataset is None:
            return []
        if isinstance(dataset, torch.utils.data.IterableDataset) or loader.batch_size is None:
            return []
        names: list[str] = []
        # A Subset (random_split) fetches through its dataset's __getitems__: time that one.
        while isinstance(dataset, torch.utils.data.Subset):
            dataset = dataset.dataset
        compose = getattr(dataset, "transform", None)
        if compose is not None and isinstance(getattr(compose, "transforms", None), (list, tuple)):
            timed = _TimedCompose(compose, self.clocks)
            self.installed.append((dataset, "transform", compose))
            dataset.transform = timed
            names = timed.names
        own = dataset.__dict__.get("__getitems__", getattr(dataset, "__getitems__", None))
        self.installed.append((dataset, "__getitems__", dataset.__dict__.get("__getitems__")))
        dataset.__getitems__ = _TimedItems(dataset, self.clocks, own)
        self.installed.append((loader, "collate_fn", loader.collate_fn))
        loader.collate_fn = _TimedCollate(loader.collate_fn, self.clocks)
        return names

    def uninstall(self, loader: Any) -> None:  # noqa: ANN401
        """Give the dataset and the loader back as they were; persistent workers that carry the
        clocks are shut down (the next pass starts fresh ones)."""
        for obj, attr, before in reversed(self.installed):
            if attr == "__getitems__" and before is None:
                obj.__dict__.pop("__getitems__", None)
            else:
                setattr(obj, attr, before)
        self.installed.clear()
        it = getattr(loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
            loader._iterator = None

    def absorb(self, clocked: Clocked, asked: int, got: int, workers: int) -> Any:  # noqa: ANN401
        """The batch inside `clocked`, its clocks added up (with workers, its hand-off: from the
        later of its being ready and the loop asking, `asked`, to the loop holding it, `got`)."""
        build, cpu, sampled, sampled_ns, ops, collate = clocked.clocks
        self.batches += 1
        self.build_ns += build
        self.build_cpu_ns += cpu
        self.sampled += sampled
        self.sampled_ns += sampled_ns
        self.collate[0] += 1
        self.collate[1] += collate
        for k, v in ops.items():
            e = self.ops.setdefault(k, [0, 0])
            e[0] += v[0]
            e[1] += v[1]
        if workers > 0:
            self.handoff[0] += 1
            self.handoff[1] += max(0, got - max(clocked.ready_ns, asked))
        return clocked.batch

    def json(self) -> str | None:
        """stages.json's fields so far (None before any batch): the sampled items' own code
        (their fetch less their transforms), each transform, the collate, last."""
        if not self.batches:
            return None
        ops_ns = sum(v[1] for v in self.ops.values())
        own = {
            "name": "__getitem__ (own code)",
            "count": self.sampled,
            "ns": max(0, self.sampled_ns - ops_ns),
        }
        stages = [own, *({"name": k, "count": v[0], "ns": v[1]} for k, v in self.ops.items())]
        stages.append({"name": "collate", "count": self.collate[0], "ns": self.collate[1]})
        return json.dumps(
            {
                "batches": self.batches,
                "build_ns": self.build_ns,
                "build_cpu_ns": self.build_cpu_ns,
                "stages": stages,
                "handoff_batches": self.handoff[0],
                "handoff_ns": self.handoff[1],
                "every": self.every,
            }
        )
