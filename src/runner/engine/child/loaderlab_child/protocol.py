"""The line protocol, typed: what loaderlab sends and what the child says.

The dataclasses match the Rust types of src/runner/engine/child/protocol.rs field for field
(``ConditionSpec``, ``Request``, ``Reply``); the Rust side reads replies with ``deny_unknown_fields``, so a
field added on one side only fails there.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from dataclasses import asdict, dataclass, field
from typing import Any

PROTOCOL = 1

Json = dict[str, Any]


@dataclass(frozen=True)
class UserCode:
    """The user's own code the DataLoader takes, as absolute ``file.py:function`` references."""

    collate_fn: str | None = None
    worker_init_fn: str | None = None


@dataclass(frozen=True)
class LoaderSpec:
    """``[loader]`` as torch's DataLoader takes it."""

    batch_size: int
    workers: int
    prefetch_factor: int
    persistent_workers: bool
    pin_memory: bool
    shuffle: bool
    drop_last: bool


@dataclass(frozen=True)
class StandInSpec:
    """The stand-in: host time on host threads, then device time on the emulated device."""

    step_ms: float
    host_ms: float
    host_threads: int
    host_buffer: int
    queue_depth: int


@dataclass(frozen=True)
class NetworkSpec:
    """A network of loaderlab's (its layer list) trained with the experiment's optimizer."""

    layers: list[Any]
    optimizer: Json
    threads: int


@dataclass(frozen=True)
class HeadroomSpec:
    """The headroom run's constants, as the native engine's."""

    batches: int
    segments: int
    warmup: int


@dataclass(frozen=True)
class StorageSpec:
    """``[dataset.storage]``: latency, a shared link, requests in flight (0: each off)."""

    latency_ms: float
    bandwidth_mb_s: float
    max_in_flight: int


@dataclass(frozen=True)
class ConditionSpec:
    """The condition as the child builds it."""

    seed: int
    ranks: int
    dataset: Json
    storage: StorageSpec | None
    user: UserCode
    transforms: list[Json]
    loader: LoaderSpec
    step: StandInSpec | NetworkSpec
    headroom: HeadroomSpec
    fingerprint_sample: int
    stall_s: float

    @staticmethod
    def parse(line: str) -> ConditionSpec:
        """The condition from its JSON line."""
        raw = json.loads(line)
        step = dict(raw["step"])
        kind = step.pop("kind")
        storage = raw.get("storage")
        return ConditionSpec(
            seed=raw["seed"],
            ranks=raw["ranks"],
            dataset=raw["dataset"],
            storage=StorageSpec(**storage) if storage else None,
            user=UserCode(**raw["user"]),
            transforms=raw["transforms"],
            loader=LoaderSpec(**raw["loader"]),
            step=StandInSpec(**step) if kind == "stand_in" else NetworkSpec(**step),
            headroom=HeadroomSpec(**raw["headroom"]),
            fingerprint_sample=raw["fingerprint_sample"],
            stall_s=raw["stall_s"],
        )


@dataclass(frozen=True)
class Request:
    """One command.

    ``run`` (warmup, timed), ``profile`` (warmup, steps, trace), ``headroom`` (steps) or ``quit``.
    """

    cmd: str
    warmup: int = 0
    timed: int = 0
    steps: int = 0
    trace: str = ""

    @staticmethod
    def parse(line: str) -> Request:
        """The request from its JSON line."""
        return Request(**json.loads(line))


# --- replies ---------------------------------------------------------------------------------


@dataclass
class Ready:
    """The child runs and imports torch and torchvision."""

    protocol: int
    torch: str
    torchvision: str
    python: str
    kind: str = "ready"


@dataclass
class Prepared:
    """The dataset is built: its length."""

    len: int
    kind: str = "prepared"


@dataclass
class Started:
    """A run's DataLoader gave its first batch: the workers' start-up."""

    startup_ms: float
    kind: str = "started"


@dataclass
class Step:
    """One timed step on the monotonic clock: a steps.csv row."""

    step: int
    batch_wait_ms: float
    h2d_ms: float
    compute_ms: float
    step_ms: float
    device_ms: float | None
    loss: float | None
    fingerprint: str
    epoch: int
    rank: int = 0
    sync_ms: float = 0.0
    kind: str = "step"


@dataclass
class Done:
    """A timed window's totals."""

    elapsed_s: float
    images: int
    process_cpu_s: float
    workers_cpu_s: float
    training_cpu_s: float
    peak_rss_mib: float
    interrupted: bool
    kind: str = "done"

    @staticmethod
    def interrupted_early() -> Done:
        """Ctrl-C before the timed window: a run with no steps, marked interrupted."""
        return Done(0.0, 0, 0.0, 0.0, 0.0, 0.0, True)


@dataclass
class StageClock:
    """One stage of the stage clocks."""

    name: str
    count: int
    ns: int


@dataclass
class Profiled:
    """The profiled run's start-up and stage clocks."""

    startup_ms: float
    build_ns: int
    batches: int
    clocked_ns: int
    clocked_cpu_ns: int
    stages: list[StageClock] = field(default_factory=list)
    handoff_batches: int = 0
    handoff_ns: int = 0
    kind: str = "profiled"


@dataclass
class Headroom:
    """A headroom run, in the results' own record."""

    batches: int
    steps: int
    images: int
    elapsed_s: float
    step_ms: list[float]
    segments: list[list[float]]
    kind: str = "headroom"


@dataclass
class Error:
    """An exception: where it happened, what it was, and the end of its traceback."""

    where: str
    message: str
    traceback: str
    kind: str = "error"

    @staticmethod
    def of(where: str, exc: BaseException) -> Error:
        """The error for ``exc``, raised at ``where``, in the user's terms.

        Its traceback keeps the frames in the user's files and hides the child's own and
        torch's. An exception a DataLoader worker raised (torch re-raises it in this process
        as "Caught X in DataLoader worker process N" with the worker's traceback as text) is
        said as the worker's own.
        """
        text = str(exc)
        everything = traceback.extract_tb(exc.__traceback__)
        frames = [f for f in everything if not hidden(f.filename)]
        if not frames:
            # Nothing of the user's raised it (a corrupt image in torchvision's reader): the
            # last frames outside the child's own say where.
            frames = [f for f in everything if not own(f.filename)][-2:]
        shown = "".join(traceback.format_list(frames))
        if text.startswith("Caught ") and "Original Traceback" in text:
            head, _, original = text.partition("Original Traceback (most recent call last):")
            lines = [line for line in original.splitlines() if line.strip()]
            worker = head.split(" in ", 1)[-1].strip().rstrip(".")
            return Error(where, f"in {worker}: {lines[-1] if lines else head}", user_frames(lines[:-1]))
        return Error(where, f"{type(exc).__name__}: {text}", shown)


def own(path: str) -> bool:
    """Whether a traceback frame's file is the child's own."""
    return path.startswith(os.path.dirname(os.path.abspath(__file__)))


def hidden(path: str) -> bool:
    """Whether a traceback frame's file is the child's own or a library's, not the user's."""
    return own(path) or f"{os.sep}site-packages{os.sep}" in path or "/multiprocessing/" in path


def user_frames(lines: list[str]) -> str:
    """The frames of a traceback given as text that lie in the user's files.

    Each frame is a ``File "...", line N, in f`` line and its code line.
    """
    kept: list[str] = []
    keep = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith('File "'):
            keep = not hidden(stripped[6 : stripped.find('"', 6)])
        if keep:
            kept.append(line)
    return "\n".join(kept)


Reply = Ready | Prepared | Started | Step | Done | Profiled | Headroom | Error


def say(reply: Reply) -> None:
    """Write one reply as a JSON line, ``kind`` first."""
    body = asdict(reply)
    kind = body.pop("kind")
    sys.stdout.write(json.dumps({"kind": kind, **body}) + "\n")
    sys.stdout.flush()
