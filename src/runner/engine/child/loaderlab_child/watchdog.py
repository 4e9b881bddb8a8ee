"""A stalled DataLoader, named: no batch for ``[pytorch] stall_s`` seconds ends the run.

A DataLoader's own ``timeout`` covers workers only and says nothing of where; here one watchdog
thread per condition watches every wait for a batch (at any worker count, in every kind of run).
When a wait passes the limit it marks the stall (what was awaited, for how long) and sends this
process SIGINT, which interrupts the wait wherever it blocks (a sleep, a socket read, the
DataLoader's queue) as Ctrl-C does; the run then ends with the rows it measured and an error
that says the stall.
"""

from __future__ import annotations

import os
import signal
import threading
import time


class StallError(Exception):
    """A wait for a batch passed ``[pytorch] stall_s``: the message says where."""


class Watchdog:
    """Watches the waits for a batch of one condition."""

    def __init__(self, stall_s: float) -> None:
        """Waits of more than ``stall_s`` seconds end the run."""
        self.stall_s = stall_s
        self.lock = threading.Lock()
        self.since: float | None = None
        self.what = ""
        self.stalled: str | None = None
        threading.Thread(target=self.watch, daemon=True).start()

    def waiting(self, what: str) -> None:
        """A wait for ``what`` (e.g. "step 5 of the timed run") begins."""
        with self.lock:
            self.since, self.what = time.monotonic(), what

    def done(self) -> None:
        """The wait ended."""
        with self.lock:
            self.since = None

    def take(self) -> str | None:
        """The stall since the last take, if any (said once)."""
        with self.lock:
            stalled, self.stalled = self.stalled, None
            return stalled

    def check(self, workers: int) -> None:
        """Raise the stall, if one ended the last wait, as the user reads it."""
        stalled = self.take()
        if stalled:
            raise StallError(
                f"{stalled}, with {workers} DataLoader workers ([pytorch] stall_s = {self.stall_s:g}): "
                "the DataLoader stalled — your Dataset's __getitem__ (or collate_fn) did not "
                "return, as a hung read does"
            )

    def watch(self) -> None:
        """The watchdog thread."""
        while True:
            time.sleep(min(0.5, self.stall_s / 4))
            with self.lock:
                late = self.since is not None and time.monotonic() - self.since > self.stall_s
                if late and self.stalled is None:
                    self.stalled = f"no batch for {self.stall_s:g} s while waiting for {self.what}"
                    self.since = None
            if late:
                os.kill(os.getpid(), signal.SIGINT)
