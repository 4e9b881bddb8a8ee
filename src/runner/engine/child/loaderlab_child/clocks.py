"""Stage clocks: what each part of a batch's build costs, in the process that builds it.

One ``StageClocks`` object per condition, held by the wrappers below (no module globals). It runs only for
the profiled run: a DataLoader's workers fork with the state it has when they start, so setting ``running``
before the DataLoader starts carries it into every worker. Each stage keeps [count, wall ns, CPU ns];
``item`` and ``collate`` keep the process's CPU time (torch's own threads work for the item too; a worker
runs one). The collate hands each batch's clocks to the training loop with the batch and starts them afresh,
so what a worker process measured reaches the main process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import Dataset, IterableDataset

Clocks = dict[str, list[int]]


class StageClocks:
    """The stage clocks of one process (copied into each worker as it forks)."""

    def __init__(self) -> None:
        """Stopped, with nothing counted."""
        self.running = False
        self.stages: Clocks = {}

    def add(self, name: str, count: int, ns: int, cpu_ns: int = 0) -> None:
        """Count ``count`` of stage ``name`` taking ``ns`` of wall and ``cpu_ns`` of CPU time."""
        entry = self.stages.setdefault(name, [0, 0, 0])
        entry[0] += count
        entry[1] += ns
        entry[2] += cpu_ns

    def take(self) -> Clocks:
        """The clocks so far, started afresh."""
        taken = {k: list(v) for k, v in self.stages.items()}
        self.stages.clear()
        return taken


class Clocked:
    """One transform op, timed per image while the clocks run."""

    def __init__(self, name: str, op: Callable[[Any], Any], clocks: StageClocks) -> None:
        """``op`` under loaderlab's name ``name``."""
        self.name, self.op, self.clocks = name, op, clocks

    def __call__(self, img: Any) -> Any:  # noqa: ANN401 - a PIL image or a tensor, as torchvision's ops take
        """The op on ``img``, timed while the clocks run."""
        if not self.clocks.running:
            return self.op(img)
        t0 = time.perf_counter_ns()
        out = self.op(img)
        self.clocks.add(self.name, 1, time.perf_counter_ns() - t0)
        return out

    def __repr__(self) -> str:
        """The op's own repr."""
        return repr(self.op)


class ClockedItems(Dataset):
    """A dataset with each item's whole fetch timed (read, decode, transforms), wall and CPU."""

    def __init__(self, dataset: Dataset, clocks: StageClocks) -> None:
        """``dataset``, timed on ``clocks``."""
        self.dataset, self.clocks = dataset, clocks

    def __len__(self) -> int:
        """The dataset's length."""
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:  # noqa: ANN401 - the dataset's own item
        """Item ``i``, its fetch timed while the clocks run."""
        if not self.clocks.running:
            return self.dataset[i]
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        item = self.dataset[i]
        self.clocks.add("item", 1, time.perf_counter_ns() - t0, time.process_time_ns() - c0)
        return item


class ClockedStream(IterableDataset):
    """A stream of items (an IterableDataset) with each item's fetch timed as it streams."""

    def __init__(self, dataset: IterableDataset, clocks: StageClocks) -> None:
        """``dataset``, timed on ``clocks``."""
        self.dataset, self.clocks = dataset, clocks

    def __len__(self) -> int:
        """The stream's length."""
        return len(self.dataset)

    def __iter__(self) -> Iterator[Any]:
        """The stream's items, each fetch timed while the clocks run."""
        it = iter(self.dataset)
        while True:
            t0, c0 = time.perf_counter_ns(), time.process_time_ns()
            try:
                item = next(it)
            except StopIteration:
                return
            if self.clocks.running:
                self.clocks.add("item", 1, time.perf_counter_ns() - t0, time.process_time_ns() - c0)
            yield item


def clocked(dataset: Dataset, clocks: StageClocks) -> Dataset:
    """``dataset`` with each item's fetch timed: by index, or (an IterableDataset) as it streams."""
    if isinstance(dataset, IterableDataset):
        return ClockedStream(dataset, clocks)
    return ClockedItems(dataset, clocks)


class ClockedCollate:
    """A collate timed per batch.

    While the clocks run, a batch travels as (batch, the moment it was ready, the clocks of its build),
    read by the profiled run.
    """

    def __init__(self, collate: Callable[[list[Any]], Any], clocks: StageClocks) -> None:
        """``collate``, timed on ``clocks``."""
        self.collate, self.clocks = collate, clocks

    def __call__(self, items: list[Any]) -> Any:  # noqa: ANN401 - the collate's own batch
        """The batch of ``items``, with its clocks while they run."""
        if not self.clocks.running:
            return self.collate(items)
        t0, c0 = time.perf_counter_ns(), time.process_time_ns()
        out = self.collate(items)
        self.clocks.add("collate", 1, time.perf_counter_ns() - t0, time.process_time_ns() - c0)
        return out, time.perf_counter_ns(), self.clocks.take()
