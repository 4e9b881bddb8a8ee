"""A torchvision dataset and its transforms, translated into loaderlab's terms.

`loaderlab.Loader(your_torchvision_dataset, ...)` reads the dataset's own files with loaderlab's
readers and runs its `transform` as loaderlab's chain, op by op with every parameter carried
over. Anything loaderlab does not run exactly as torchvision does (a `Lambda`, a class of your
own, an interpolation or argument loaderlab has no twin of) is refused with one message naming
the transform, its place in the Compose and the argument — nothing is dropped or approximated.
The pytorch engine runs any Dataset and any transform (`[pytorch] dataset` in an experiment).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

ENGINE_HINT = (
    "the pytorch engine runs any Dataset and any transform as your code does "
    '([pytorch] dataset = "my_data.py:make_dataset" in an experiment file)'
)

# The ops a Compose may hold, by torchvision's class name (v1 and v2).
SUPPORTED = (
    "RandomResizedCrop, RandomCrop, CenterCrop, Resize, RandomHorizontalFlip, RandomVerticalFlip, "
    "RandomRotation, ColorJitter, Grayscale, RandomGrayscale, ToTensor (or v2's ToImage + "
    "ToDtype(torch.float32, scale=True)), Normalize"
)


class TranslationError(ValueError):
    """A dataset or transform loaderlab does not run exactly as torchvision does."""


@dataclass
class Translated:
    """A dataset in an experiment file's terms: its `[dataset]` table, its `[[transforms]]`, and
    each of the user's transforms beside the loaderlab op it became (for `repr`)."""

    dataset: dict[str, Any]
    transforms: list[dict[str, Any]] | None
    shown: list[tuple[str, str]] = field(default_factory=list)
    # The user's transform object each op came from (None for to_tensor and the dict form).
    sources: list[Any] | None = None


# Files written for a translation (a samples list, CIFAR-10's records), removed at exit.
_scratch: list[str] = []


@atexit.register
def _remove_scratch() -> None:
    for d in _scratch:
        shutil.rmtree(d, ignore_errors=True)


def _scratch_dir() -> str:
    d = tempfile.mkdtemp(prefix="loaderlab-")
    _scratch.append(d)
    return d


def _mode_name(mode: Any) -> str:
    """An InterpolationMode (v1) or its word (v2) as its word."""
    return str(getattr(mode, "value", mode)).lower()


def _size(size: Any) -> Any:
    """torchvision's size as loaderlab's: an int, or [height, width]."""
    if isinstance(size, int):
        return size
    size = list(size)
    return size[0] if len(size) == 1 else size


def _fill(fill: Any, where: str) -> int:
    """A fill value loaderlab takes: one byte for every channel."""
    if fill is None:
        return 0
    if isinstance(fill, (int, float)) and float(fill).is_integer() and 0 <= fill <= 255:
        return int(fill)
    if isinstance(fill, (list, tuple)) and fill and len(set(fill)) == 1:
        return _fill(fill[0], where)
    raise TranslationError(f"{where}: fill={fill!r} (loaderlab fills every channel with one byte, 0 to 255)")


def _jitter(value: Any, centre: float, where: str, name: str) -> float:
    """ColorJitter's range for one factor as loaderlab's single number (a symmetric range)."""
    if value is None:
        return 0.0
    lo, hi = float(value[0]), float(value[1])
    amount = hi - centre
    expected = max(0.0, centre - amount) if centre == 1.0 else centre - amount
    if not math.isclose(lo, expected, abs_tol=1e-9):
        raise TranslationError(
            f"{where}: {name}={tuple(value)} is not symmetric about {centre:g} (loaderlab's "
            f"ColorJitter takes one amount per factor, as ColorJitter({name}=x) sets it)"
        )
    return amount


def _interpolation(t: Any, want: str, where: str) -> None:
    mode = _mode_name(getattr(t, "interpolation", want))
    if mode != want:
        raise TranslationError(
            f"{where}: interpolation={mode} (loaderlab runs {want} here, as torchvision's default)"
        )


def _antialias(t: Any, where: str) -> None:
    antialias = getattr(t, "antialias", True)
    if antialias not in (True, None, "warn"):
        raise TranslationError(
            f"{where}: antialias={antialias!r} (loaderlab resizes as Pillow does, antialiased)"
        )


def _random_resized_crop(t: Any, where: str) -> dict[str, Any]:
    _interpolation(t, "bilinear", where)
    _antialias(t, where)
    return {
        "op": "random_resized_crop",
        "size": _size(t.size),
        "scale": [float(t.scale[0]), float(t.scale[1])],
        "ratio": [float(t.ratio[0]), float(t.ratio[1])],
    }


def _resize(t: Any, where: str) -> dict[str, Any]:
    _interpolation(t, "bilinear", where)
    _antialias(t, where)
    op: dict[str, Any] = {"op": "resize", "size": _size(t.size)}
    if t.max_size:
        op["max_size"] = int(t.max_size)
    return op


def _random_crop(t: Any, where: str) -> dict[str, Any]:
    padding = t.padding
    if padding is None:
        padding = []
    elif isinstance(padding, int):
        padding = [padding]
    return {
        "op": "random_crop",
        "size": _size(t.size),
        "padding": [int(p) for p in padding],
        "pad_if_needed": bool(t.pad_if_needed),
        "fill": _fill(t.fill, where),
        "padding_mode": str(t.padding_mode),
    }


def _random_rotation(t: Any, where: str) -> dict[str, Any]:
    _interpolation(t, "nearest", where)
    lo, hi = float(t.degrees[0]), float(t.degrees[1])
    if not math.isclose(lo, -hi):
        raise TranslationError(f"{where}: degrees=({lo:g}, {hi:g}) (loaderlab rotates within ±d: degrees=d)")
    if t.expand:
        raise TranslationError(f"{where}: expand=True (loaderlab keeps the image's size: expand=False)")
    if t.center is not None:
        raise TranslationError(
            f"{where}: center={t.center!r} (loaderlab rotates about the centre: center=None)"
        )
    return {"op": "random_rotation", "degrees": hi, "fill": _fill(t.fill, where)}


def _color_jitter(t: Any, where: str) -> dict[str, Any]:
    return {
        "op": "color_jitter",
        "brightness": _jitter(t.brightness, 1.0, where, "brightness"),
        "contrast": _jitter(t.contrast, 1.0, where, "contrast"),
        "saturation": _jitter(t.saturation, 1.0, where, "saturation"),
        "hue": _jitter(t.hue, 0.0, where, "hue"),
    }


def _normalize(t: Any, where: str) -> dict[str, Any]:
    return {"op": "normalize", "mean": [float(m) for m in t.mean], "std": [float(s) for s in t.std]}


# torchvision's class name -> the op it becomes, for the ops that work on PIL images.
_PIL_OPS = {
    "RandomResizedCrop": _random_resized_crop,
    "RandomCrop": _random_crop,
    "CenterCrop": lambda t, w: {"op": "center_crop", "size": _size(t.size)},
    "Resize": _resize,
    "RandomHorizontalFlip": lambda t, w: {"op": "random_horizontal_flip", "p": float(t.p)},
    "RandomVerticalFlip": lambda t, w: {"op": "random_vertical_flip", "p": float(t.p)},
    "RandomRotation": _random_rotation,
    "ColorJitter": _color_jitter,
    "Grayscale": lambda t, w: {"op": "grayscale", "num_output_channels": int(t.num_output_channels)},
    "RandomGrayscale": lambda t, w: {"op": "random_grayscale", "p": float(t.p)},
}


def _is_torchvision(t: Any) -> bool:
    module = type(t).__module__
    return module.startswith("torchvision.transforms")


def _parts(transform: Any) -> list[Any]:
    """A Compose's transforms (v1 or v2), or the one transform."""
    if transform is None:
        return []
    if _is_torchvision(transform) and type(transform).__name__ == "Compose":
        return list(transform.transforms)
    return [transform]


def translate_transforms(transform: Any) -> tuple[list[dict[str, Any]], list[tuple[str, str]], list[Any]]:
    """A torchvision transform (a Compose, v1 or v2) as loaderlab's ops, each part beside the op
    it became, and the object each op came from; a part loaderlab does not run exactly is
    refused, named."""
    parts = _parts(transform)
    ops: list[dict[str, Any]] = []
    shown: list[tuple[str, str]] = []
    sources: list[Any] = []
    tensor = False
    i = 0
    while i < len(parts):
        t = parts[i]
        name = type(t).__name__
        where = f"transform {i} of the Compose, {name}"
        if not _is_torchvision(t):
            raise TranslationError(
                f"{where}: not one of torchvision's transforms (loaderlab.Loader translates "
                f"{SUPPORTED}); {ENGINE_HINT}"
            )
        if name == "ToTensor" or (name == "ToImage" and i + 1 < len(parts) and _to_float(parts[i + 1])):
            step = 1 if name == "ToTensor" else 2
            ops.append({"op": "to_tensor"})
            sources.append(None)
            shown.append((" + ".join(type(p).__name__ for p in parts[i : i + step]), "to_tensor"))
            tensor = True
            i += step
            continue
        if name == "Normalize" and tensor:
            op = _normalize(t, where)
        elif name in _PIL_OPS and not tensor:
            try:
                op = _PIL_OPS[name](t, where)
            except TranslationError as e:
                raise TranslationError(f"{e}; {ENGINE_HINT}") from None
        elif name in _PIL_OPS:
            raise TranslationError(
                f"{where}: after ToTensor/ToImage torchvision runs it on tensors, with other "
                f"kernels than Pillow's; put it before (loaderlab runs Pillow's); {ENGINE_HINT}"
            )
        else:
            raise TranslationError(
                f"{where}: loaderlab has no twin of it (it translates {SUPPORTED}); {ENGINE_HINT}"
            )
        ops.append(op)
        sources.append(t)
        shown.append((repr(t).replace("\n", " "), _op_text(op)))
        i += 1
    if not tensor:
        raise TranslationError(
            f"the Compose ends without ToTensor (or v2's ToImage + ToDtype(torch.float32, "
            f"scale=True)): a DataLoader could not batch its PIL images; {ENGINE_HINT}"
        )
    return ops, shown, sources


def _op_text(op: dict[str, Any]) -> str:
    """An op as loaderlab runs it: `random_rotation(degrees=15.0, fill=0)`."""
    args = ", ".join(f"{k}={v}" for k, v in op.items() if k != "op")
    return f"{op['op']}({args})"


def _to_float(t: Any) -> bool:
    """v2's ToDtype(torch.float32, scale=True): with ToImage before it, ToTensor's twin."""
    import torch

    if type(t).__name__ != "ToDtype" or not _is_torchvision(t):
        return False
    dtype = t.dtype
    if isinstance(dtype, dict):
        dtype = next(iter(dtype.values()), None)
    return dtype == torch.float32 and bool(t.scale)


def _folder(ds: Any) -> dict[str, Any]:
    """An ImageFolder or DatasetFolder: its own samples list, read by loaderlab's decoders."""
    from torchvision.datasets.folder import default_loader, pil_loader

    if ds.loader not in (default_loader, pil_loader):
        raise TranslationError(
            f"{type(ds).__name__}: loader={getattr(ds.loader, '__name__', ds.loader)!r} (loaderlab decodes "
            f"as torchvision's default_loader does: Pillow, RGB); {ENGINE_HINT}"
        )
    d = _scratch_dir()
    listing = os.path.join(d, "samples.json")
    with open(listing, "w") as f:
        samples = [[os.path.abspath(p), int(c)] for p, c in ds.samples]
        json.dump({"classes": list(ds.classes), "samples": samples}, f)
    return {"kind": "image_folder", "root": os.path.abspath(ds.root), "samples": listing, "mode": "rgb"}


def _idx(ds: Any, kind: str) -> dict[str, Any]:
    """MNIST or FashionMNIST: their files under root, as torchvision lays them out."""
    return {"kind": kind, "root": str(ds.root), "split": "train" if ds.train else "test", "download": False}


def _cifar10(ds: Any) -> dict[str, Any]:
    """CIFAR-10: torchvision holds the Python version's pixels in memory (`data`, N×32×32×3);
    they are written as the binary version's records (a label byte, then the red, green and
    blue planes), which loaderlab reads."""
    import numpy as np

    data, targets = np.asarray(ds.data), list(ds.targets)
    if data.shape[1:] != (32, 32, 3) or len(data) % 10_000:
        raise TranslationError(
            f"CIFAR10: {len(data)} images of {data.shape[1:]} (loaderlab reads CIFAR-10's own split)"
        )
    d = _scratch_dir()
    folder = os.path.join(d, "cifar-10-batches-bin")
    os.makedirs(folder)
    planar = data.transpose(0, 3, 1, 2).reshape(len(data), -1)
    records = np.concatenate([np.asarray(targets, dtype=np.uint8)[:, None], planar], axis=1)
    names = (
        [f"data_batch_{k + 1}.bin" for k in range(len(data) // 10_000)] if ds.train else ["test_batch.bin"]
    )
    for k, name in enumerate(names):
        records[k * 10_000 : (k + 1) * 10_000].tofile(os.path.join(folder, name))
    with open(os.path.join(folder, "batches.meta.txt"), "w") as f:
        f.write("\n".join(ds.classes) + "\n")
    return {"kind": "cifar10", "root": d, "split": "train" if ds.train else "test", "download": False}


def translate_dataset(ds: Any) -> Translated:
    """A torchvision dataset object (ImageFolder, DatasetFolder, MNIST, FashionMNIST, CIFAR10)
    with its transform, in loaderlab's terms."""
    import torchvision.datasets as D

    kind = type(ds).__name__
    if getattr(ds, "target_transform", None) is not None:
        raise TranslationError(
            f"{kind}: target_transform={ds.target_transform!r} (loaderlab's labels are the class "
            f"indices); {ENGINE_HINT}"
        )
    for base in (D.DatasetFolder, D.MNIST, D.CIFAR10):
        if isinstance(ds, base) and type(ds).__getitem__ is not base.__getitem__:
            raise TranslationError(
                f"{kind}: its own __getitem__ (loaderlab reads {base.__name__}'s files as "
                f"{base.__name__}.__getitem__ does, not your code); {ENGINE_HINT}"
            )
    if isinstance(ds, D.DatasetFolder):
        dataset = _folder(ds)
    elif type(ds) is D.FashionMNIST:
        dataset = _idx(ds, "fashion_mnist")
    elif type(ds) is D.MNIST:
        dataset = _idx(ds, "mnist")
    elif type(ds) is D.CIFAR10:
        dataset = _cifar10(ds)
    else:
        raise TranslationError(
            f"dataset: a {kind}; loaderlab.Loader reads torchvision's ImageFolder, DatasetFolder, MNIST, "
            f"FashionMNIST and CIFAR10 (or a dict of [dataset] keys); {ENGINE_HINT}"
        )
    ops, shown, sources = translate_transforms(ds.transform)
    return Translated(dataset, ops, shown, sources)
