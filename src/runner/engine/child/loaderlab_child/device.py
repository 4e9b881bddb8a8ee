"""The step.

The stand-in's host side and emulated device (src/train/host.rs and src/train/stand_in.rs, the same rules),
or a network of loaderlab's trained on the CPU.
"""

from __future__ import annotations

import copy
import hashlib
import threading
import time

import torch
import torch.nn.functional as F

from .protocol import NetworkSpec, StandInSpec

SPIN_CHUNK = 64 << 10


def spin(seconds: float, buffer: memoryview) -> None:
    """Spin until this thread has used ``seconds`` more of CPU time (its own CPU clock).

    It reads through ``buffer`` 64 KiB at a time as a real step's activations are read: it
    evicts what a worker beside it caches, as a real step does.

    The hash releases the GIL (CPython's hashlib does for 2 KiB or more), so several spinning threads
    run on their own cores at once.
    """
    end = time.thread_time() + seconds
    at = 0
    while time.thread_time() < end:
        hashlib.blake2b(buffer[at : at + SPIN_CHUNK])
        at = (at + SPIN_CHUNK) % len(buffer)


class HostWork:
    """The stand-in's host side.

    Each step the training thread and ``threads - 1`` helpers each spin until their own thread has used
    ``ms`` more of CPU time; the step goes on when all are done.
    """

    def __init__(self, ms: float, threads: int, buffer: int) -> None:
        """``ms`` of CPU time on ``threads`` threads, each reading a buffer of ``buffer`` bytes."""
        self.s = max(0.0, ms) / 1e3
        self.threads = max(1, threads)
        self.buffer = memoryview(bytes(buffer)) if self.s > 0 else memoryview(b"")
        self.helpers: list[threading.Thread] = []
        self.start = threading.Barrier(self.threads)
        self.end = threading.Barrier(self.threads)
        if self.s > 0:
            for _ in range(self.threads - 1):
                helper = threading.Thread(target=self.help, args=(memoryview(bytes(buffer)),), daemon=True)
                helper.start()
                self.helpers.append(helper)

    def help(self, buffer: memoryview) -> None:
        """A helper: one spin per step, until closed."""
        try:
            while True:
                self.start.wait()
                spin(self.s, buffer)
                self.end.wait()
        except threading.BrokenBarrierError:
            return

    def spend(self) -> None:
        """One step's host side."""
        if self.s <= 0:
            return
        if self.helpers:
            self.start.wait()
        spin(self.s, self.buffer)
        if self.helpers:
            self.end.wait()

    def close(self) -> None:
        """Release the helpers."""
        self.start.abort()
        self.end.abort()


class EmulatedDevice:
    """The stand-in's device on the CPU, as the native engine runs it.

    The host copies the batch into device memory (h2d), then only enqueues the step; a device thread
    runs the steps in order on its own schedule (a step starts when enqueued or when the previous one
    ended, whichever is later, and ends ``step_ms`` later) and sleeps while busy, holding no core. The
    host's enqueue waits only when ``depth`` steps already wait behind the running one.
    """

    def __init__(self, step_ms: float, depth: int) -> None:
        """A device busy ``step_ms`` per step, ``depth`` steps queued behind the running one."""
        self.step_s = step_ms / 1e3
        self.depth = depth
        self.cv = threading.Condition()
        self.queue: list[tuple[torch.Tensor, torch.Tensor, float]] = []
        self.enqueued = 0
        self.done = 0
        self.marks: list[tuple[float, float]] = []
        self.recording = False
        self.checksum = 0.0
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def next_job(self) -> tuple[torch.Tensor, torch.Tensor, float] | None:
        """The next step to run; None once closed."""
        with self.cv:
            while not self.queue and not self.stop:
                self.cv.wait()
            return None if self.stop else self.queue[0]

    def run(self) -> None:
        """The device thread."""
        free_at = 0.0
        while (job := self.next_job()) is not None:
            images, labels, enqueued = job
            start = max(enqueued, free_at)
            # The device reads every byte of the batch (so the copy cannot be skipped).
            self.checksum += float(images.sum()) + float(labels.sum())
            end = start + self.step_s
            now = time.perf_counter()
            if end > now:
                time.sleep(end - now)
            free_at = end
            with self.cv:
                self.queue.pop(0)
                self.done += 1
                if self.recording:
                    self.marks.append((start, end))
                self.cv.notify_all()

    def enqueue(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """Queue one step; waits while ``depth`` steps wait behind the running one."""
        with self.cv:
            while self.enqueued - self.done > self.depth:
                self.cv.wait()
            self.queue.append((images, labels, time.perf_counter()))
            self.enqueued += 1
            self.cv.notify_all()

    def synchronize(self) -> None:
        """Wait until every queued step has run."""
        with self.cv:
            while self.done < self.enqueued:
                self.cv.wait()

    def record(self, on: bool) -> None:
        """Start (afresh) or stop recording each step's (start, end)."""
        with self.cv:
            self.recording = on
            if on:
                self.marks = []

    def close(self) -> None:
        """Stop the device thread."""
        with self.cv:
            self.stop = True
            self.cv.notify_all()


def host_copy(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The host's copy of a batch into the emulated device's memory."""
    return images.clone(), labels.clone()


class StandInStep:
    """loaderlab's stand-in step: its host side, then (unless ``step_ms`` is 0.

    The step is all host, synchronous as a CPU job's) its emulated device.
    """

    def __init__(self, spec: StandInSpec) -> None:
        """The stand-in ``spec`` describes."""
        self.host = HostWork(spec.host_ms, spec.host_threads, spec.host_buffer)
        self.device = EmulatedDevice(spec.step_ms, spec.queue_depth) if spec.step_ms > 0 else None
        self.synchronous = self.device is None
        self.loss: float | None = None

    @property
    def marks(self) -> list[tuple[float, float]]:
        """The device's recorded steps (none when all host)."""
        return self.device.marks if self.device else []

    def reset(self) -> None:
        """Nothing to reset: the stand-in trains nothing."""

    def upload(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The host's copy into the device's memory; all host, nothing to copy."""
        return host_copy(images, labels) if self.device else (images, labels)

    def enqueue(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """One step: the host side, then the device's step queued."""
        self.host.spend()
        if self.device:
            self.device.enqueue(images, labels)

    def synchronize(self) -> None:
        """Wait for the device."""
        if self.device:
            self.device.synchronize()

    def record(self, on: bool) -> None:
        """Record the device's steps."""
        if self.device:
            self.device.record(on)

    def close(self) -> None:
        """Stop the helpers and the device."""
        self.host.close()
        if self.device:
            self.device.close()


class NetworkStep:
    """A network of loaderlab's, trained with the experiment's optimizer on the CPU.

    Its layer list is built by pytorch_model.py as ``bench step`` builds it.

    Synchronous, so the host's times are the device's; every run starts from the same initial weights
    and optimizer state.
    """

    synchronous = True
    marks: list[tuple[float, float]] = []

    def __init__(self, spec: NetworkSpec, seed: int) -> None:
        """The network ``spec`` lays out, from the seed's initial weights."""
        import pytorch_model

        torch.set_num_threads(spec.threads)
        torch.manual_seed(seed)
        self.build = pytorch_model
        self.model = pytorch_model.build(spec.layers)
        self.initial = copy.deepcopy(self.model.state_dict())
        self.optimizer_settings = spec.optimizer
        self.loss: float | None = None
        self.reset()

    def reset(self) -> None:
        """The initial weights and a fresh optimizer."""
        self.model.load_state_dict(self.initial)
        self.optimizer = self.build.make_optimizer(self.model.parameters(), self.optimizer_settings)

    def upload(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's copy, as candle's CPU path copies it."""
        return host_copy(images, labels)

    def enqueue(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        """One training step on the batch: forward, loss, backward, the optimizer's step."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.model(images), labels)
        loss.backward()
        self.optimizer.step()
        self.loss = float(loss)

    def synchronize(self) -> None:
        """Nothing queued: the step is synchronous."""

    def record(self, on: bool) -> None:
        """No device clock: the host's times are the device's."""

    def close(self) -> None:
        """Nothing to stop."""


Step = StandInStep | NetworkStep


def make_step(spec: StandInSpec | NetworkSpec, seed: int) -> Step:
    """The step ``spec`` describes.

    The stand-in runs with the host side's threads as torch's intra-op threads (one by default): the
    emulated device's read of a batch spawns no others.
    """
    if isinstance(spec, NetworkSpec):
        return NetworkStep(spec, seed)
    torch.set_num_threads(max(1, spec.host_threads))
    return StandInStep(spec)
