"""A timed run of a node (``[distributed] ranks = R``): a process per rank, as torchrun starts them.

Each rank has its own DataLoader (its own workers, over its DistributedSampler share of every epoch) and its
own emulated device, meeting at a barrier after every step — the stand-in for the gradient all-reduce; the
wait there is the step's ``sync_ms``, inside its ``step_ms``. The window runs from the ranks' common start
to every rank's device having finished; images, CPU time and peak memory count every rank's processes.
Ctrl-C here is decided at the barrier, so every rank stops after the same step.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from typing import Any

import torch

from .condition import Condition
from .metering import cpu_s, peak_rss_mib
from .protocol import ConditionSpec, Done, Started, Step, say
from .timed import timed_step
from .watchdog import StallError


def decide(stop: Synchronized, decided: Synchronized) -> None:
    """The barrier's action, run once all ranks have arrived: whether they all stop here."""
    decided.value = stop.value


def stalled(cond: Condition, signum: int, frame: Any) -> None:  # noqa: ANN401 - the signal's frame
    """SIGINT in a rank: a stall its watchdog marked interrupts the wait; any other is ignored."""
    if cond.watchdog.stalled is not None:
        raise KeyboardInterrupt


def failure(rank: int, exc: BaseException) -> str:
    """A rank's exception as the launcher says it, with the end of its traceback."""
    tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
    return f"rank {rank}: {type(exc).__name__}: {exc}\n{tail}"


def rank_main(
    cond: Condition,
    rank: int,
    warmup: int,
    timed: int,
    barrier: Barrier,
    decided: Synchronized,
    results: Queue,
) -> None:
    """Rank ``rank``'s timed run, in its own process; its rows and totals sent to ``results``."""
    device = cond.device
    feed = cond.start(f"rank {rank}'s timed run")
    results.put(("started", feed.startup_ms))
    for _ in range(warmup):
        device.enqueue(*device.upload(*feed.next()))
        barrier.wait()
        if decided.value:
            break
    device.synchronize()
    barrier.wait()
    workers = feed.worker_pids()
    cpu0 = {pid: cpu_s(pid) for pid in workers}
    main0 = time.process_time()
    device.record(True)
    window = time.perf_counter()
    steps = []
    for k in range(timed):
        if decided.value:
            break
        m = timed_step(cond, feed, k)
        arrived = time.perf_counter()
        barrier.wait()
        m.row.sync_ms = (time.perf_counter() - arrived) * 1e3
        m.row.step_ms += m.row.sync_ms
        m.row.rank = rank
        steps.append(m)
    device.synchronize()
    # The window closes when every rank's device has finished.
    barrier.wait()
    elapsed_s = time.perf_counter() - window
    device.record(False)
    for m, (start, end) in zip(steps, device.marks, strict=False):
        m.row.device_ms = (end - start) * 1e3
    for m in steps:
        results.put(("step", (m.row, m.images)))
    results.put(
        (
            "done",
            {
                "elapsed_s": elapsed_s,
                "training_cpu_s": time.process_time() - main0,
                "workers_cpu_s": sum(cpu_s(pid) - cpu0.get(pid, 0.0) for pid in workers),
                "peak_rss_mib": peak_rss_mib([os.getpid(), *workers]),
                "interrupted": bool(decided.value),
            },
        )
    )
    device.close()


def rank_entry(
    spec: ConditionSpec,
    rank: int,
    warmup: int,
    timed: int,
    barrier: Barrier,
    decided: Synchronized,
    results: Queue,
) -> None:
    """A rank's process: the condition built afresh for this rank, its timed run."""
    # The node's Ctrl-C is decided at the barrier: SIGINT reaches a rank only as its watchdog's,
    # for a stalled DataLoader.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The rank's DataLoader forks its workers, as on a node torchrun started (a process the fork
    # server started has the fork server as its default).
    mp.set_start_method("fork", force=True)
    # One intra-op thread per rank, as torchrun sets OMP_NUM_THREADS=1 for several processes per
    # node.
    torch.set_num_threads(1)
    cond: Condition | None = None
    try:
        cond = Condition(spec, rank)
        signal.signal(signal.SIGINT, functools.partial(stalled, cond))
        rank_main(cond, rank, warmup, timed, barrier, decided, results)
    except KeyboardInterrupt:
        # The watchdog's: the stall named as the user reads it, not the child's frames.
        try:
            if cond is not None:
                cond.watchdog.check(spec.loader.workers)
            results.put(("error", f"rank {rank}: interrupted"))
        except StallError as exc:
            results.put(("error", f"rank {rank}: {exc}"))
        barrier.abort()
    except Exception as exc:  # the launcher says it, with the traceback
        results.put(("error", failure(rank, exc)))
        barrier.abort()
    results.close()
    results.join_thread()


class Node:
    """What the ranks have said so far."""

    def __init__(self, ranks: int) -> None:
        """Nothing yet from ``ranks`` ranks."""
        self.ranks = ranks
        self.started: list[float] = []
        self.done: list[dict[str, Any]] = []
        self.steps: list[tuple[Step, int]] = []
        self.errors: list[str] = []

    def answered(self) -> bool:
        """Whether every rank is done or failed."""
        return len(self.done) + len(self.errors) >= self.ranks

    def take(self, kind: str, payload: Any, barrier: Barrier) -> None:  # noqa: ANN401 - one rank's message
        """One message of a rank's."""
        if kind == "started":
            self.started.append(payload)
            if len(self.started) == self.ranks:
                say(Started(max(self.started)))
        elif kind == "step":
            self.steps.append(payload)
        elif kind == "done":
            self.done.append(payload)
        else:
            self.errors.append(payload)
            barrier.abort()

    def dead(self, procs: list[Any], barrier: Barrier) -> bool:
        """A rank that died unanswered (killed) is a failure, which releases the others.

        True once every process has ended after one did.
        """
        dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
        if dead and not self.errors:
            self.errors.append(f"rank {dead[0]} ended with exit status {procs[dead[0]].exitcode}")
            barrier.abort()
        return bool(dead) and all(p.exitcode is not None for p in procs)


def run(cond: Condition, warmup: int, timed: int) -> None:
    """The node's timed run; its rows and totals said as one run's."""
    # Each rank starts from a fork server, a clean process with torch imported and no thread
    # pool run yet (a process forked from this one after torch's threads ran would hang in its
    # first parallel op), and builds the condition from the same description.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torchvision.transforms", "PIL.Image"])
    ranks = cond.spec.ranks
    stop, decided = ctx.Value("b", 0), ctx.Value("b", 0)
    barrier = ctx.Barrier(ranks, action=functools.partial(decide, stop, decided))
    results = ctx.Queue()
    procs = [
        ctx.Process(target=rank_entry, args=(cond.spec, r, warmup, timed, barrier, decided, results))
        for r in range(ranks)
    ]
    for proc in procs:
        proc.start()
    node = Node(ranks)
    while not node.answered():
        try:
            kind, payload = results.get(timeout=1.0)
        except KeyboardInterrupt:
            stop.value = 1
            continue
        except queue.Empty:
            if node.dead(procs, barrier):
                break
            continue
        node.take(kind, payload, barrier)
    for proc in procs:
        proc.join(timeout=None if not node.errors else 5)
        if proc.is_alive():
            proc.kill()
    if node.errors:
        # The rank that failed first, not one the broken barrier released.
        first = [e for e in node.errors if "BrokenBarrierError" not in e] or node.errors
        raise RuntimeError(first[0])
    for row, _ in sorted(node.steps, key=lambda s: (s[0].step, s[0].rank)):
        say(row)
    done = node.done
    training = sum(d["training_cpu_s"] for d in done)
    workers = sum(d["workers_cpu_s"] for d in done)
    say(
        Done(
            elapsed_s=max(d["elapsed_s"] for d in done),
            images=sum(images for _, images in node.steps),
            process_cpu_s=training + workers,
            workers_cpu_s=workers,
            training_cpu_s=training,
            peak_rss_mib=sum(d["peak_rss_mib"] for d in done),
            interrupted=bool(decided.value) or any(d["interrupted"] for d in done),
        )
    )
