"""`loaderlab.watch(loader, out=...)`: every step of your own training loop, and the stages inside
your loader, into a results folder that `loaderlab report`, `verify`, `compare` and `diagnose` read.

    for epoch in range(10):
        for images, labels in loaderlab.watch(loader, out="runs/my_job"):
            train_step(images, labels)

Per step, on the monotonic clock of the training thread: the wait inside the loader's `next()` (the
first of an epoch from `iter()` on, so a DataLoader's worker start-up counts), the step (from the
batch being handed over to the loop's next `next()`), the batch's size and, on CUDA, the device's
time between two events recorded on the current stream at the step's ends (read back a few steps
later, never synchronising). The rows stream to `out/steps.csv` as they are measured (to the OS at
least once a second), so a job that dies keeps them.

Inside a torch DataLoader (in each worker process, sent back with the batch): every item's
`__getitem__` and every collate, each transform of the dataset's `Compose` (by class name) on one
item in `every`, and with workers the hand-off to the loop. Inside `loaderlab.Loader`: its own
stage clocks.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

from . import _loaderlab
from .stages import Clocked, LoaderClocks

__all__ = ["Watch", "watch"]

# One item in this many is timed transform by transform (every item's whole fetch is timed).
DEFAULT_EVERY = 16
# Steps per block: each block is a run of the results folder, over which every CI is taken.
DEFAULT_BLOCK_STEPS = 50
# CUDA events awaiting their read-back before the oldest is waited for.
_EVENTS_IN_FLIGHT = 8

_clock = time.perf_counter_ns
_watches: dict[str, Watch] = {}
# DataLoader.__iter__ before `loaderlab watch -- COMMAND` hooked it (None: not hooked; see hook.py).
_original_iter: Any = None


def _sizer(batch: Any) -> Any:  # noqa: ANN401
    """A function giving a batch's size, for batches shaped like `batch`."""
    if hasattr(batch, "shape") and len(batch.shape) > 0:
        return len
    if isinstance(batch, (tuple, list)) and batch:
        if hasattr(batch[0], "shape") and len(batch[0].shape) > 0:
            return lambda b: len(b[0])
        inner = _sizer(batch[0])
        return lambda b: inner(b[0])
    if isinstance(batch, dict) and batch:
        key = next(iter(batch))
        inner = _sizer(batch[key])
        return lambda b: inner(b[key])
    if hasattr(batch, "__len__"):
        return len
    return lambda b: 1


def _describe_device(device: str) -> tuple[str, str, int]:
    """(a person's name for it, "cpu" or "cuda", torch's intra-op threads)."""
    import torch

    threads = torch.get_num_threads()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        i = torch.cuda.current_device()
        return f"cuda:{i} ({torch.cuda.get_device_name(i)})", "cuda", threads
    return f"cpu ({threads} thread{'s' if threads != 1 else ''})", "cpu", threads


class _Mark:
    """A span of the user's own inside a step (`watch.mark("forward")`)."""

    __slots__ = ("name", "t0", "watch")

    def __init__(self, watch: Watch, name: str) -> None:
        """Span `name` of `watch`."""
        self.watch, self.name = watch, name

    def __enter__(self) -> _Mark:
        """Start timing."""
        self.t0 = _clock()
        return self

    def __exit__(self, *exc: object) -> None:
        """Stop timing; the span belongs to the step in progress."""
        w = self.watch
        # The steps recorded so far, and on CUDA those awaiting their events: this step's index.
        step = w._recorder.steps + len(w._events)
        w._marks.append((step, self.name, (_clock() - self.t0) / 1e6))


class Watch:
    """A loader watched into a results folder; iterate it as you would the loader."""

    def __init__(
        self,
        loader: Any,  # noqa: ANN401
        out: str,
        every: int = DEFAULT_EVERY,
        block_steps: int = DEFAULT_BLOCK_STEPS,
        name: str | None = None,
        device: str = "auto",
    ) -> None:
        """Start watching `loader` into `out` (refused where `out` holds another run)."""
        for label, v in (("every", every), ("block_steps", block_steps)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"loaderlab.watch: {label} must be a whole number ≥ 1, not {v!r}")
        import torch

        self.loader, self.out, self.every = loader, os.path.abspath(out), every
        self._epoch = 0
        self._marks: list[tuple[int, str, float]] = []
        self._marks_written = 0
        self._native_totals: str | None = None
        self._clocks = LoaderClocks(every)
        dataset = getattr(loader, "dataset", None)
        self._transforms = self._clocks.install(loader)
        shown, kind, threads = _describe_device(device)
        self._cuda = kind == "cuda"
        self._events: list[tuple[Any, ...]] = []
        self._free_events: list[Any] = []
        workers = int(getattr(loader, "num_workers", 0) or 0)
        self._workers = workers
        cls = type(loader)
        loader_name = (
            "torch.utils.data.DataLoader"
            if isinstance(loader, torch.utils.data.DataLoader)
            else "loaderlab.Loader"
            if cls.__module__.startswith("loaderlab")
            else f"{cls.__module__}.{cls.__qualname__}"
        )
        described = "an iterable"
        if dataset is not None:
            try:
                described = f"{type(dataset).__name__} ({len(dataset):,} items)"
            except TypeError:
                described = type(dataset).__name__
        info = {
            "id": f"{socket.gethostname()}:{os.getpid()}:{time.time_ns()}",
            "name": name or os.path.basename(self.out.rstrip("/")),
            "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "started_unix_s": int(time.time()),
            "loader": loader_name,
            "dataset": described,
            "transforms": list(self._transforms),
            "batch_size": int(getattr(loader, "batch_size", None) or 1),
            "workers": workers,
            "prefetch_factor": getattr(loader, "prefetch_factor", None) if workers else None,
            "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
            "pin_memory": bool(getattr(loader, "pin_memory", False)),
            "device": shown,
            "compute_device": kind,
            "cpu_threads": threads,
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "block_steps": block_steps,
            "every": every,
        }
        try:
            self._recorder = _loaderlab.Recorder(self.out, json.dumps(info))
        except BaseException:
            self._clocks.uninstall(loader)
            raise
        self._loader_name = loader_name
        self._checked = _clock()

    # What was measured, to the folder.

    def _write_stages(self, native: Any = None) -> None:  # noqa: ANN401
        """stages.json: the clocks so far (with a live native pass's)."""
        if native is not None:
            live = native.stage_totals()
            totals = (
                live
                if self._native_totals is None
                else _loaderlab.add_stage_totals(self._native_totals, live)
            )
            if json.loads(totals)["batches"]:
                self._recorder.stages(totals)
            return
        if self._native_totals is not None:
            self._recorder.stages(self._native_totals)
            return
        fields = self._clocks.json()
        if fields is not None:
            self._recorder.stages(fields)

    def _write_marks(self) -> None:
        """marks.csv: the user's own spans so far."""
        new = self._marks[self._marks_written :]
        if not new:
            return
        path = os.path.join(self.out, "marks.csv")
        fresh = not os.path.exists(path)
        with open(path, "a") as f:
            if fresh:
                f.write("step,name,ms\n")
            f.writelines(f"{s},{n.replace(',', ';')},{ms:.6f}\n" for s, n, ms in new)
        self._marks_written = len(self._marks)

    # CUDA: the device's time per step from events, read back later.

    def _event(self) -> Any:  # noqa: ANN401
        """A timing event recorded now on the current stream."""
        import torch

        ev = self._free_events.pop() if self._free_events else torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def _settle(self, wait: bool) -> None:
        """Rows whose events the device has reached (all of them when `wait`)."""
        while self._events:
            row = self._events[0]
            start, end = row[-2], row[-1]
            if not wait and not end.query():
                if len(self._events) <= _EVENTS_IN_FLIGHT:
                    return
            end.synchronize()
            self._events.pop(0)
            self._recorder.step(row[0], row[1], start.elapsed_time(end), row[2], row[3])
            self._free_events += [start, end]

    # The loop.

    def __len__(self) -> int:
        """The loader's length."""
        return len(self.loader)

    def mark(self, name: str) -> _Mark:
        """`with watch.mark("forward"): ...` — a span of your own inside the step, reported per
        step beside the wait."""
        return _Mark(self, name)

    def __iter__(self) -> Iterator[Any]:
        """One pass over the loader: its batches unchanged, each step recorded."""
        if self._recorder is None:
            raise ValueError(f"loaderlab.watch: the watch into {self.out} has ended")
        epoch = self._epoch
        self._epoch += 1
        step, cuda, workers = self._recorder.step, self._cuda, self._workers
        nan = float("nan")
        asked = _clock()
        if _original_iter is not None and self._loader_name == "torch.utils.data.DataLoader":
            it = _original_iter(self.loader)
        else:
            it = iter(self.loader)
        native = getattr(it, "_native", None)
        if native is not None:
            native.clock_stages(True)
        size = None
        images = wait = asked_before = 0
        taken = False
        start_ev = None
        ended = False
        next_check = self._checked + 2_000_000_000
        try:
            while True:
                try:
                    batch = next(it)
                except StopIteration:
                    ended = True
                    break
                got = _clock()
                if taken:
                    # The step before: from its batch being asked for until this ask.
                    if cuda:
                        self._events.append(
                            (wait, asked - asked_before, images, epoch, start_ev, self._event())
                        )
                        self._settle(False)
                    else:
                        step(wait, asked - asked_before, nan, images, epoch)
                if type(batch) is Clocked:
                    batch = self._clocks.absorb(batch, asked, got, workers)
                if size is None:
                    size = _sizer(batch)
                images = size(batch)
                wait, asked_before, taken = got - asked, asked, True
                if cuda:
                    start_ev = self._event()
                if got > next_check:
                    next_check = got + 2_000_000_000
                    self._write_stages(native)
                    self._write_marks()
                yield batch
                asked = _clock()
        finally:
            end = asked if ended else _clock()
            if taken:
                if cuda:
                    self._events.append((wait, end - asked_before, images, epoch, start_ev, self._event()))
                    self._settle(True)
                else:
                    step(wait, end - asked_before, nan, images, epoch)
            self._checked = _clock()
            if native is not None:
                live = native.stage_totals()
                self._native_totals = (
                    live
                    if self._native_totals is None
                    else _loaderlab.add_stage_totals(self._native_totals, live)
                )
            self._write_stages()
            self._write_marks()
            self._recorder.flush()

    def close(self) -> None:
        """End the watch: the dataset and loader given back, the folder completed as a results
        folder (`loaderlab report OUT` reads it)."""
        if self._recorder is None:
            return
        self._clocks.uninstall(self.loader)
        try:
            self._write_stages()
            self._write_marks()
            self._recorder.close()
        finally:
            self._recorder = None
            _watches.pop(self.out, None)

    def __enter__(self) -> Watch:
        """The watch, closed on exit."""
        return self

    def __exit__(self, *exc: object) -> None:
        """Close the watch."""
        self.close()


def watch(
    loader: Any,  # noqa: ANN401
    out: str = "runs/watch",
    every: int = DEFAULT_EVERY,
    block_steps: int = DEFAULT_BLOCK_STEPS,
    name: str | None = None,
    device: str = "auto",
) -> Watch:
    """Watch `loader` (a torch DataLoader, a `loaderlab.Loader`, any iterable of batches) into the
    results folder `out`: iterate what this returns as you would the loader. Called again with
    the same loader and `out` (each epoch), it gives the same watch: one folder per job. `out` is
    refused where it holds another run. The folder is completed when the watch is closed (`with`,
    `.close()`) or the interpreter exits; `loaderlab report OUT` also completes one whose job died.

    `every`: one item in this many is timed transform by transform inside a DataLoader;
    `block_steps`: steps per block (each block a run of the folder, over which CIs are taken);
    `device`: "auto" (CUDA where torch has it), "cpu" or "cuda"."""
    key = os.path.abspath(out)
    w = _watches.get(key)
    if w is not None:
        if w.loader is not loader:
            raise ValueError(
                f"loaderlab.watch: {key} is already watching another loader; give each loader its own out"
            )
        return w
    w = Watch(loader, out, every=every, block_steps=block_steps, name=name, device=device)
    _watches[key] = w
    return w


@atexit.register
def _close_all() -> None:
    for w in list(_watches.values()):
        try:
            w.close()
        except Exception as e:  # noqa: BLE001 - at exit, say it and go on with the others
            print(f"loaderlab.watch: {e}", file=sys.stderr)
