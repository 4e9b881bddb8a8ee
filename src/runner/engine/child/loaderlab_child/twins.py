"""Each of loaderlab's transform ops as its torchvision twin, with the same parameters.

One builder per op, registered in ``TWINS`` by loaderlab's op name (an op loaderlab has without a twin here
is refused by ``validate`` on this engine: a unit test on the Rust side holds the two lists in step).
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


def _random_resized_crop(s: Spec) -> T.RandomResizedCrop:
    return T.RandomResizedCrop(
        s["size"], scale=tuple(s["scale"]), ratio=tuple(s["ratio"]), interpolation=InterpolationMode.BILINEAR
    )


def _random_rotation(s: Spec) -> T.RandomRotation:
    return T.RandomRotation(s["degrees"], interpolation=InterpolationMode.NEAREST, fill=s.get("fill", 0))


def _resize(s: Spec) -> T.Resize:
    return T.Resize(s["size"], interpolation=InterpolationMode.BILINEAR, max_size=s.get("max_size") or None)


def _random_crop(s: Spec) -> T.RandomCrop:
    return T.RandomCrop(
        s["size"],
        padding=s.get("padding") or None,
        pad_if_needed=s.get("pad_if_needed", False),
        fill=s.get("fill", 0),
        padding_mode=s.get("padding_mode", "constant"),
    )


TWINS: dict[str, Callable[[Spec], Callable[[Any], Any]]] = {
    "random_resized_crop": _random_resized_crop,
    "random_rotation": _random_rotation,
    "random_horizontal_flip": lambda s: T.RandomHorizontalFlip(s["p"]),
    "random_vertical_flip": lambda s: T.RandomVerticalFlip(s["p"]),
    "resize": _resize,
    "center_crop": lambda s: T.CenterCrop(s["size"]),
    "random_crop": _random_crop,
    "color_jitter": lambda s: T.ColorJitter(s["brightness"], s["contrast"], s["saturation"], s["hue"]),
    "grayscale": lambda s: T.Grayscale(s["num_output_channels"]),
    "random_grayscale": lambda s: T.RandomGrayscale(s["p"]),
    "to_tensor": lambda s: T.ToTensor(),
    "normalize": lambda s: T.Normalize(s["mean"], s["std"]),
    "cpu_work": lambda s: CpuWork(s["us"]),
}


def twin(spec: Spec) -> Callable[[Any], Any]:
    """The torchvision twin of one of loaderlab's transform ops, with the same parameters."""
    build = TWINS.get(spec["op"])
    if build is None:
        raise ValueError(f"op {spec['op']!r} has no torchvision twin")
    return build(spec)
