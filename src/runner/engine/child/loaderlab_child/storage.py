"""Emulated storage (``[dataset.storage]``, src/data/storage.rs) shared by the DataLoader's processes."""

from __future__ import annotations

import multiprocessing as mp
import time

from .protocol import StorageSpec


class Storage:
    """Every read waits the request's latency, then its bytes over a link all readers share.

    A FIFO reservation: a transfer starts when its latency has passed and the link is free; at most
    ``max_in_flight`` requests at once. Waiting sleeps, holding no core. Created before the workers
    start, so they share its lock, slots and link (CLOCK_MONOTONIC is one clock for every process). A
    worker reads one image at a time, as a DataLoader's does.
    """

    def __init__(self, spec: StorageSpec) -> None:
        """The storage ``spec`` describes (0 turns each part off)."""
        self.latency = spec.latency_ms / 1e3
        self.bytes_per_s = spec.bandwidth_mb_s * 1e6
        self.slots = mp.BoundedSemaphore(spec.max_in_flight) if spec.max_in_flight else None
        self.free_at = mp.Value("d", 0.0)

    def transfer(self, nbytes: int, new: bool = True) -> None:
        """Move ``nbytes`` over the link; return when they have arrived.

        After the request's latency when ``new``, else as the next bytes of a stream already
        open.
        """
        if self.slots:
            self.slots.acquire()
        try:
            done = time.monotonic() + (self.latency if new else 0.0)
            if self.bytes_per_s > 0:
                with self.free_at.get_lock():
                    done = max(done, self.free_at.value) + nbytes / self.bytes_per_s
                    self.free_at.value = done
            wait = done - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        finally:
            if self.slots:
                self.slots.release()
