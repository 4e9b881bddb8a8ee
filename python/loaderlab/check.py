"""The translation proven on the user's own data: each op of loaderlab's chain against
torchvision's functional form of the same op, on the same input, with the parameters loaderlab
drew.

For each image checked, the native side runs the chain op by op and gives each op's output and
what it drew; here torchvision's functional form of that op runs on the same input (the
previous op's output, as loaderlab made it, so each op is judged alone) with the same
parameters, and the largest difference is kept per op. The final tensor (ToTensor, Normalize)
is set against torchvision's on the last image.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

# Ops whose torchvision form rounds differently from loaderlab's in the last bit of a pixel
# (a float's rounding in Pillow's resampling or colour arithmetic): within 1/255 passes. Every
# other op must agree exactly.
ROUNDS_DIFFERENTLY = {"resize", "random_resized_crop", "color_jitter"}
TOLERANCE = 1 / 255


@dataclass
class OpCheck:
    """One op's largest difference from torchvision over the images checked."""

    op: str
    max_abs_diff: float = 0.0
    images: int = 0

    @property
    def tolerance(self) -> float:
        """What it may differ by: 0, or 1/255 where torchvision rounds differently."""
        return TOLERANCE if self.op in ROUNDS_DIFFERENTLY else 0.0

    @property
    def passed(self) -> bool:
        """Whether it agreed within its tolerance on every image."""
        return self.max_abs_diff <= self.tolerance + 1e-7


@dataclass
class CheckReport:
    """Every op's check: `passed` when all agree; `failed` names the ops that differ."""

    images: int
    ops: list[OpCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether every op agreed."""
        return all(o.passed for o in self.ops)

    @property
    def failed(self) -> list[str]:
        """The ops that differ beyond their tolerance."""
        return [o.op for o in self.ops if not o.passed]

    def __str__(self) -> str:
        """A table: op, largest difference, tolerance, verdict."""
        lines = [f"loaderlab's chain against torchvision's, op by op, on {self.images} images:"]
        for o in self.ops:
            verdict = "exact" if o.max_abs_diff == 0 else ("within 1/255" if o.passed else "DIFFERS")
            lines.append(f"  {o.op:<24} max |difference| {o.max_abs_diff:.6f}  ({verdict})")
        lines.append("passed" if self.passed else f"FAILED: {', '.join(self.failed)} differ")
        return "\n".join(lines)


def _image(shape: tuple[int, int, int], pixels: bytes) -> Any:  # noqa: ANN401 - a PIL image
    """Planar bytes as a PIL image ("L" or "RGB")."""
    import numpy as np
    from PIL import Image

    c, h, w = shape
    planes = np.frombuffer(pixels, dtype=np.uint8).reshape(c, h, w)
    if c == 1:
        return Image.fromarray(planes[0], mode="L")
    return Image.fromarray(np.ascontiguousarray(planes.transpose(1, 2, 0)), mode="RGB")


def _array(img: Any) -> Any:  # noqa: ANN401 - numpy
    import numpy as np

    a = np.asarray(img, dtype=np.float64)
    return a[:, :, None] if a.ndim == 2 else a


def _hw(size: Any) -> list[int]:
    return [size, size] if isinstance(size, int) else list(size)


def _replay(spec: dict[str, Any], drew: dict[str, Any] | None, img: Any, t: Any) -> Any:  # noqa: ANN401, C901, PLR0911
    """torchvision's functional form of one op on `img`, with what loaderlab drew. Its other
    parameters are read from `t`, the user's own transform object, where there is one (so a
    parameter the translation carried wrong shows), else from `spec`."""
    import torchvision.transforms.functional as F
    from torchvision.transforms import InterpolationMode

    def arg(name: str, default: Any) -> Any:  # noqa: ANN401
        value = getattr(t, name) if t is not None else default
        # v2 keeps an interpolation as its word.
        return InterpolationMode(value) if name == "interpolation" and isinstance(value, str) else value

    op = spec["op"]
    if op == "random_resized_crop":
        return F.resized_crop(
            img,
            drew["top"],
            drew["left"],
            drew["height"],
            drew["width"],
            arg("size", _hw(spec["size"])),
            arg("interpolation", InterpolationMode.BILINEAR),
            antialias=arg("antialias", True),
        )
    if op == "random_rotation":
        return F.rotate(
            img,
            drew["angle"],
            arg("interpolation", InterpolationMode.NEAREST),
            expand=arg("expand", False),
            center=arg("center", None),
            fill=arg("fill", spec.get("fill", 0)),
        )
    if op in ("random_horizontal_flip", "random_vertical_flip"):
        if not drew["flipped"]:
            return img
        return F.hflip(img) if op == "random_horizontal_flip" else F.vflip(img)
    if op == "center_crop":
        return F.center_crop(img, arg("size", _hw(spec["size"])))
    if op == "resize":
        size = spec["size"]
        return F.resize(
            img,
            arg("size", [size] if isinstance(size, int) else size),
            arg("interpolation", InterpolationMode.BILINEAR),
            max_size=arg("max_size", spec.get("max_size") or None),
            antialias=arg("antialias", True),
        )
    if op == "random_crop":
        if t is not None:
            spec = {
                "size": list(t.size),
                "padding": t.padding,
                "pad_if_needed": t.pad_if_needed,
                "fill": t.fill,
                "padding_mode": t.padding_mode,
            }
        return _random_crop(spec, drew, img)
    if op == "color_jitter":
        adjust = {
            "brightness": F.adjust_brightness,
            "contrast": F.adjust_contrast,
            "saturation": F.adjust_saturation,
            "hue": F.adjust_hue,
        }
        for name in drew["order"]:
            if drew.get(name) is not None:
                img = adjust[name](img, drew[name])
        return img
    if op == "grayscale":
        return F.rgb_to_grayscale(img, arg("num_output_channels", spec.get("num_output_channels", 1)))
    if op == "random_grayscale":
        return F.rgb_to_grayscale(img, len(img.getbands())) if drew["applied"] else img
    return img  # cpu_work: no pixel changes


def _random_crop(spec: dict[str, Any], drew: dict[str, Any], img: Any) -> Any:  # noqa: ANN401
    """RandomCrop as torchvision runs it: the padding, the padding a small image needs, the crop."""
    import torchvision.transforms.functional as F

    h, w = _hw(spec["size"])
    fill, mode = spec.get("fill", 0), spec.get("padding_mode", "constant")
    if spec.get("padding"):
        img = F.pad(img, spec["padding"], fill, mode)
    if spec.get("pad_if_needed"):
        width, height = img.size
        if width < w:
            img = F.pad(img, [w - width, 0], fill, mode)
        if height < h:
            img = F.pad(img, [0, h - height], fill, mode)
    return F.crop(img, drew["top"], drew["left"], h, w)


def check(native: Any, specs: list[dict[str, Any]], n: int, sources: list[Any] | None = None) -> CheckReport:  # noqa: ANN401, C901
    """Each op of `specs` (loaderlab's chain, as `native` runs it) against torchvision's on `n`
    images of the dataset, spread over it; `sources`, where given, the user's transform object
    each op was translated from (its parameters are the ones torchvision's side runs with)."""
    import numpy as np
    import torch
    import torchvision.transforms.functional as F

    sources = sources or [None] * len(specs)
    total = native.dataset_len
    indices = sorted({int(k * total / max(1, n)) for k in range(min(n, total))})
    pixel = [(s, t) for s, t in zip(specs, sources) if s["op"] not in ("to_tensor", "normalize")]
    checks = [OpCheck(s["op"]) for s, _ in pixel]
    normalize = next(((s, t) for s, t in zip(specs, sources) if s["op"] == "normalize"), None)
    final = OpCheck("to_tensor + normalize" if normalize else "to_tensor")
    for i in indices:
        shape, pixels, steps, out_shape, tensor = native.trace(i, 0)
        img = _image(shape, pixels)
        for c, ((_, drew, oshape, opixels), (spec, source)) in zip(checks, zip(steps, pixel)):
            theirs = _array(_replay(spec, json.loads(drew), img, source))
            ours_img = _image(oshape, opixels)
            ours = _array(ours_img)
            diff = float(np.abs(ours - theirs).max()) / 255 if ours.shape == theirs.shape else float("inf")
            c.max_abs_diff, c.images = max(c.max_abs_diff, diff), c.images + 1
            # The next op is judged on loaderlab's output: each op alone.
            img = ours_img
        theirs_t = F.to_tensor(img)
        if normalize is not None:
            spec, t = normalize
            mean, std = (t.mean, t.std) if t is not None else (spec["mean"], spec["std"])
            theirs_t = F.normalize(theirs_t, list(mean), list(std))
        ours_t = torch.from_numpy(np.frombuffer(tensor, dtype=np.float32).reshape(out_shape).copy())
        diff = float((ours_t - theirs_t).abs().max()) if ours_t.shape == theirs_t.shape else float("inf")
        final.max_abs_diff, final.images = max(final.max_abs_diff, diff), final.images + 1
    return CheckReport(len(indices), [*checks, final])
