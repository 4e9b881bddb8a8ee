"""Each of loaderlab's transform ops as its torchvision twin, with the same parameters.

The Rust side decides each op's twin (``Op::torchvision``: the class and every argument) and sends it in the
request; here it is only called. An op without a twin is refused by ``validate`` on this engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from torchvision import transforms as T
from torchvision.transforms import InterpolationMode

Spec = dict[str, Any]


class CpuWork:
    """loaderlab's cpu_work: a busy loop of ``us`` microseconds per image; the image passes unchanged."""

    def __init__(self, us: float) -> None:
        """``us`` µs of the thread's CPU time per image."""
        self.s = us / 1e6

    def __call__(self, img: Any) -> Any:  # noqa: ANN401 - any image passes through unchanged
        """Spin on the thread's CPU clock, then hand ``img`` on."""
        end = time.thread_time() + self.s
        while time.thread_time() < end:
            pass
        return img

    def __repr__(self) -> str:
        """As loaderlab names it."""
        return f"CpuWork(us={self.s * 1e6:g})"


def twin(call: Spec) -> Callable[[Any], Any]:
    """One of loaderlab's transform ops as its torchvision twin, as the Rust side describes it.

    The description is a class of ``torchvision.transforms`` (or ``CpuWork``) and every keyword
    argument, an ``interpolation`` by its ``InterpolationMode`` value.
    """
    kwargs = dict(call["kwargs"])
    if call["class"] == "CpuWork":
        return CpuWork(**kwargs)
    if "interpolation" in kwargs:
        kwargs["interpolation"] = InterpolationMode(kwargs["interpolation"])
    build = getattr(T, call["class"], None)
    if build is None:
        raise ValueError(f"op {call['op']!r}: torchvision.transforms has no {call['class']}")
    return build(**kwargs)
