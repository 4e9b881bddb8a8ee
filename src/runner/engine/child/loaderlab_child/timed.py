"""A timed run: a new DataLoader, the warm-up, then every step on the monotonic clock."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .condition import Condition, Feed
from .metering import cpu_s, fingerprint, peak_rss_mib
from .protocol import Done, Started, Step, say


@dataclass
class Measured:
    """One timed step: its row and its batch's images."""

    row: Step
    images: int


def warm_up(cond: Condition, feed: Feed, steps: int) -> None:
    """``steps`` untimed steps, then the device synchronised."""
    device = cond.device
    for _ in range(steps):
        device.enqueue(*device.upload(*feed.next()))
    device.synchronize()


def timed_step(cond: Condition, feed: Feed, step: int) -> Measured:
    """One timed step on the monotonic clock: the batch request, the copy, the step."""
    device = cond.device
    t0 = time.perf_counter()
    images, labels = feed.next()
    t1 = time.perf_counter()
    on_device = device.upload(images, labels)
    t2 = time.perf_counter()
    device.enqueue(*on_device)
    t3 = time.perf_counter()
    row = Step(
        step=step,
        batch_wait_ms=(t1 - t0) * 1e3,
        h2d_ms=(t2 - t1) * 1e3,
        compute_ms=(t3 - t2) * 1e3,
        step_ms=(t3 - t0) * 1e3,
        # A synchronous step (a network's, a stand-in's that is all host): the device's time is
        # the host's; else the device's own marks, read after the window.
        device_ms=(t3 - t1) * 1e3 if device.synchronous else None,
        loss=device.loss,
        fingerprint=fingerprint(images, labels, cond.spec.fingerprint_sample),
        epoch=feed.epoch,
    )
    return Measured(row, int(labels.shape[0]))


def run(cond: Condition, warmup: int, timed: int) -> None:
    """One timed run.

    A new DataLoader, ``warmup`` untimed steps, then ``timed`` steps each on the monotonic clock; the
    rows and the window's totals said when it ends.
    """
    device = cond.device
    # Exactly one "started": Ctrl-C lands between any two bytecodes, so it is said outside the
    # guarded start.
    try:
        feed: Feed | None = cond.start("the timed run")
    except KeyboardInterrupt:
        feed = None
    say(Started(feed.startup_ms if feed else 0.0))
    workers_set = cond.spec.loader.workers
    if feed is None:
        cond.watchdog.check(workers_set)
        say(Done.interrupted_early())
        return
    try:
        warm_up(cond, feed, warmup)
    except KeyboardInterrupt:
        cond.watchdog.check(workers_set)
        say(Done.interrupted_early())
        return
    workers = feed.worker_pids()
    cpu0 = {pid: cpu_s(pid) for pid in workers}
    main0 = time.process_time()
    steps: list[Measured] = []
    interrupted = False
    device.record(True)
    window = time.perf_counter()
    try:
        for step in range(timed):
            steps.append(timed_step(cond, feed, step))
    except KeyboardInterrupt:
        interrupted = True
    device.synchronize()
    elapsed_s = time.perf_counter() - window
    device.record(False)
    main_cpu = time.process_time() - main0
    workers_cpu = sum(cpu_s(pid) - cpu0.get(pid, 0.0) for pid in workers)
    peak = peak_rss_mib([os.getpid(), *workers])
    for m, (start, end) in zip(steps, device.marks, strict=False):
        m.row.device_ms = (end - start) * 1e3
    for m in steps:
        say(m.row)
    # A stall ends the run after its rows, said as the error it is.
    cond.watchdog.check(workers_set)
    say(
        Done(
            elapsed_s=elapsed_s,
            images=sum(m.images for m in steps),
            process_cpu_s=main_cpu + workers_cpu,
            workers_cpu_s=workers_cpu,
            training_cpu_s=main_cpu,
            peak_rss_mib=peak,
            interrupted=interrupted,
        )
    )
