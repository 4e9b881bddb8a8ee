"""The headroom run (the native engine's rule, src/runner/headroom.rs).

The step on batches built once and already in the emulated device's memory, replayed with no loader running:
the ceiling.
"""

from __future__ import annotations

import time

from .condition import Condition
from .protocol import Headroom, say


def run(cond: Condition, steps: int) -> None:
    """``steps`` replayed steps, timed in segments; the record said."""
    device, h = cond.device, cond.spec.headroom
    loader = cond.loader()
    it = iter(loader)
    batches = [next(it) for _ in range(max(1, min(steps, h.batches)))]
    on_device = [device.upload(x, y) for x, y in batches]
    # The loader stops: the replay must not share the cores with its workers.
    del it, loader, batches
    for k in range(h.warmup):
        device.enqueue(*on_device[k % len(on_device)])
    device.synchronize()
    step_ms: list[float] = []
    segments: list[list[float]] = []
    images, k = 0, 0
    window = time.perf_counter()
    count = min(h.segments, steps)
    for segment in range(count):
        end = steps * (segment + 1) // count
        start, first_k, first_images = time.perf_counter(), k, images
        while k < end:
            x, y = on_device[k % len(on_device)]
            t0 = time.perf_counter()
            device.enqueue(x, y)
            step_ms.append((time.perf_counter() - t0) * 1e3)
            images += int(y.shape[0])
            k += 1
        device.synchronize()
        segments.append([end - first_k, images - first_images, time.perf_counter() - start])
    say(Headroom(len(on_device), steps, images, time.perf_counter() - window, step_ms, segments))
