"""The profiled run: separate from the timed ones, under torch.profiler with the seed's spans.

Its stage clocks run for the whole run (at 0 workers the batches are built on this thread; with workers, the
workers started now carry them): each op per image, the item's whole fetch, the collate, and with workers
the hand-off — from the later of a worker's batch being ready and this loop asking for it, to this loop
holding it (the trip through the queue, less any time the batch sat ready in it before the loop asked).
"""

from __future__ import annotations

import json
import time
from typing import Any

from torch.profiler import ProfilerActivity, profile, record_function, schedule

from .clocks import Clocks
from .condition import Condition, Feed
from .protocol import Profiled, StageClock, say


class Taker:
    """Takes batches of a profiled run's feed, adding their clocks and hand-offs up."""

    def __init__(self, feed: Feed, inline: bool) -> None:
        """Batches of ``feed``; ``inline``: built on this thread (0 workers)."""
        self.feed, self.inline = feed, inline
        self.stages: Clocks = {}
        self.handoff = [0, 0]

    def take(self, counted: bool) -> Any:  # noqa: ANN401 - the collate's batch
        """The next batch; its clocks (and hand-off) counted when ``counted``."""
        asked_ns = time.perf_counter_ns()
        batch, ready_ns, clocks = self.feed.next()
        if counted:
            if not self.inline:
                self.handoff[0] += 1
                self.handoff[1] += time.perf_counter_ns() - max(ready_ns, asked_ns)
            for name, v in clocks.items():
                entry = self.stages.setdefault(name, [0, 0, 0])
                for k in range(3):
                    entry[k] += v[k]
        return batch


def keep_spans(path: str) -> None:
    """The trace without its per-operator events (category cpu_op.

    Every aten call of every sample's transforms, tens of MB at batch 256): the steps, the
    record_function spans and the DataLoader's own spans stay, which is what Perfetto and loaderlab read
    of it.
    """
    with open(path) as f:
        trace = json.load(f)
    trace["traceEvents"] = [e for e in trace.get("traceEvents", []) if e.get("cat") != "cpu_op"]
    with open(path, "w") as f:
        json.dump(trace, f)


def record(cond: Condition, taker: Taker, steps: int, path: str) -> None:
    """Run ``steps`` steps under torch.profiler on a schedule, as a user's own profiling has.

    The trace then marks each step with ProfilerStep#N (what ``loaderlab diagnose`` reads):
    one step of the profiler's warm-up (recorded by no one), then the recorded ones, written as
    the last ends.
    """
    device = cond.device
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(path),
    ) as prof:
        for i in range(steps + 1):
            # The profiler records this process's operators: at 0 workers the builds under it
            # are slowed, so only the warm-up's clocks count; workers build unrecorded.
            with record_function("batch_wait"):
                if taker.inline:
                    with record_function("build_batch"):
                        images, labels = taker.take(False)
                else:
                    images, labels = taker.take(True)
            with record_function("h2d_transfer"):
                on_device = device.upload(images, labels)
            with record_function("forward_backward_adam"):
                device.enqueue(*on_device)
            # The device's queue drains inside the last recorded step.
            if i == steps:
                device.synchronize()
            prof.step()


def clocked_run(cond: Condition, warmup: int, steps: int, path: str) -> Profiled:
    """The profiled run with the clocks running; what it measured."""
    device = cond.device
    inline = cond.spec.loader.workers == 0
    feed = cond.start("the profiled run")
    taker = Taker(feed, inline)
    # At 0 workers the warm-up's batches are built on this thread: their build times, outside
    # the profiler (whose per-operator recording slows a build by tens of percent), are the
    # loader's work per batch on one thread. The first batch was taken as the loader started
    # (its start-up): not a timed build.
    builds = []
    if feed.pending and warmup > 0:
        device.enqueue(*device.upload(*taker.take(False)))
        warmup -= 1
    for _ in range(warmup):
        t0 = time.perf_counter()
        batch = taker.take(True)
        builds.append(time.perf_counter() - t0)
        device.enqueue(*device.upload(*batch))
    device.synchronize()
    record(cond, taker, steps, path)
    keep_spans(path)
    stages = taker.stages
    item, collate = stages.pop("item", [0, 0, 0]), stages.pop("collate", [0, 0, 0])
    ops = [StageClock(k, v[0], v[1]) for k, v in stages.items()]
    # The item's fetch less its ops: reading and decoding.
    read_ns = max(0, item[1] - sum(o.ns for o in ops))
    clocks = [
        StageClock("read_decode", item[0], read_ns),
        *ops,
        StageClock("collate", collate[0], collate[1]),
    ]
    return Profiled(
        startup_ms=feed.startup_ms,
        # At 0 workers the build as this thread saw it; with workers, a worker's own work per
        # batch (its items and the collate) on its clocks.
        build_ns=int(sum(builds) * 1e9) if inline else item[1] + collate[1],
        batches=len(builds) if inline else collate[0],
        # The build's time on a CPU, over the wall time of the same clocks (the items and the
        # collate): what is asleep in them (a Dataset waiting for storage) stretches the cap.
        clocked_ns=item[1] + collate[1],
        clocked_cpu_ns=item[2] + collate[2],
        stages=clocks if item[0] else [],
        handoff_batches=taker.handoff[0],
        handoff_ns=taker.handoff[1],
    )


def run(cond: Condition, warmup: int, steps: int, path: str) -> None:
    """The profiled run, its trace written to ``path``, its figures said."""
    cond.clocks.running = True
    try:
        say(clocked_run(cond, warmup, steps, path))
    finally:
        cond.clocks.running = False
