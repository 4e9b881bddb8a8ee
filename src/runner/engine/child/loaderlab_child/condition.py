"""One condition in the child: its dataset, its step, and a new DataLoader for each run."""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, default_collate
from torchvision import transforms as T

from .clocks import Clocked, ClockedCollate, StageClocks, clocked
from .datasets import dataset_of, load_user
from .device import Step, make_step
from .protocol import ConditionSpec
from .storage import Storage
from .twins import twin
from .watchdog import Watchdog


class Feed:
    """One DataLoader's batches across epochs, its first one taken at once.

    The time to the first batch is the workers' start-up. Every wait for a batch is watched
    (``[pytorch] stall_s``): ``stage`` and the batches taken say which wait stalled.
    """

    def __init__(self, loader: DataLoader, watchdog: Watchdog, stage: str) -> None:
        """Start ``loader`` and take its first batch."""
        self.loader, self.watchdog, self.stage = loader, watchdog, stage
        self.taken = 0
        self.epoch = 0
        started = time.perf_counter()
        self.watchdog.waiting(f"the first batch of {stage}")
        self.it = iter(loader)
        self.pending = [self.fetch()]
        self.watchdog.done()
        self.startup_ms = (time.perf_counter() - started) * 1e3

    def fetch(self) -> Any:  # noqa: ANN401 - the collate's batch
        """The next batch of the iterator, starting the next epoch where one ends."""
        try:
            return next(self.it)
        except StopIteration:
            self.epoch += 1
            if hasattr(self.loader.sampler, "set_epoch"):
                self.loader.sampler.set_epoch(self.epoch)
            self.it = iter(self.loader)
            return next(self.it)

    def next(self) -> Any:  # noqa: ANN401 - the collate's batch, or with the clocks (batch, ready, clocks)
        """The next batch, its wait watched."""
        self.taken += 1
        if self.pending:
            return self.pending.pop()
        self.watchdog.waiting(f"batch {self.taken} of {self.stage}")
        batch = self.fetch()
        self.watchdog.done()
        return batch

    def worker_pids(self) -> list[int]:
        """The DataLoader's worker processes."""
        return [w.pid for w in getattr(self.it, "_workers", [])]


class Condition:
    """The dataset (with its stage clocks) and the step of one condition, for rank ``rank`` of the node."""

    def __init__(self, spec: ConditionSpec, rank: int = 0) -> None:
        """Build the dataset (its transforms as torchvision twins) and the step."""
        self.spec = spec
        self.rank = (rank, spec.ranks)
        self.clocks = StageClocks()
        torch.manual_seed(spec.seed)
        transform = T.Compose([Clocked(s["op"], twin(s), self.clocks) for s in spec.transforms])
        storage = Storage(spec.storage) if spec.storage else None
        raw = dataset_of(spec.dataset, transform, spec.loader.shuffle, self.rank, storage)
        self.user_dataset = raw
        self.dataset: Dataset = clocked(raw, self.clocks)
        self.device: Step = make_step(spec.step, spec.seed)
        self.watchdog = Watchdog(spec.stall_s)

    def loader(self) -> DataLoader:
        """A DataLoader with the condition's settings, its generator seeded from the seed."""
        lc, user = self.spec.loader, self.spec.user
        generator = torch.Generator()
        generator.manual_seed(self.spec.seed)
        extra: dict[str, Any] = {}
        if lc.workers > 0:
            extra = {"prefetch_factor": lc.prefetch_factor, "persistent_workers": lc.persistent_workers}
        collate = load_user(user.collate_fn) if user.collate_fn else default_collate
        extra["collate_fn"] = ClockedCollate(collate, self.clocks)
        if user.worker_init_fn:
            extra["worker_init_fn"] = load_user(user.worker_init_fn)
        stream = isinstance(self.dataset, IterableDataset)
        rank, ranks = self.rank
        if ranks > 1 and not stream:
            # This rank's share of every epoch, as a DDP job deals it.
            extra["sampler"] = DistributedSampler(
                self.dataset,
                num_replicas=ranks,
                rank=rank,
                shuffle=lc.shuffle,
                seed=self.spec.seed,
                drop_last=lc.drop_last,
            )
        return DataLoader(
            self.dataset,
            batch_size=lc.batch_size,
            # A stream (WebDataset shards) shuffles itself: the DataLoader refuses a sampler.
            shuffle=lc.shuffle and not stream and "sampler" not in extra,
            num_workers=lc.workers,
            pin_memory=lc.pin_memory and torch.cuda.is_available(),
            drop_last=lc.drop_last,
            generator=generator,
            **extra,
        )

    def start(self, stage: str) -> Feed:
        """A new DataLoader and its first batch, for ``stage`` (a run, as the user reads it).

        Every run draws the same random transform parameters: at 0 workers from this process's
        generator, with workers from the per-worker seeds the loader's own seeded generator hands
        out. Its workers' start-up is timed to the first batch.
        """
        torch.manual_seed(self.spec.seed)
        self.device.reset()
        return Feed(self.loader(), self.watchdog, stage)
