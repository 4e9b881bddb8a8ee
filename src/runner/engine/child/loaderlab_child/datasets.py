"""What the DataLoader reads.

The declared dataset over the same bytes as the native engine, or the user's own Dataset.

Each of loaderlab's dataset kinds says how the child opens it (``data::kinds`` on the Rust side):
torchvision's own class over the same files, the bytes loaderlab wrote for it (synthetic images exist only
in its memory), a WebDataset stream (``shards``), or ``user``: a function of the user's that returns their
Dataset.
"""

from __future__ import annotations

import importlib.util
import io
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from PIL import Image
from torch.utils.data import Dataset, IterableDataset
from torchvision import datasets

from .protocol import Json
from .shards import Shards
from .storage import Storage

Transform = Callable[[Any], Any]


class StoredImages(Dataset):
    """Images loaderlab wrote into one file with a label file beside it: the same bytes both engines read.

    The file is read in each worker, after the fork or spawn.
    """

    def __init__(self, path: str, labels: str, transform: Transform) -> None:
        """The images in ``path``, their labels (one byte each) in ``labels``."""
        self.path, self.transform = path, transform
        with open(labels, "rb") as f:
            self.targets = list(f.read())
        self.data: bytes | None = None

    def __len__(self) -> int:
        """How many images."""
        return len(self.targets)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        """Sample ``i``: its image transformed, its label."""
        if self.data is None:
            with open(self.path, "rb") as f:
                self.data = f.read()
        return self.transform(self.image(i, self.data)), self.targets[i]

    def image(self, i: int, data: bytes) -> Image.Image:
        """Sample ``i``'s PIL image, from the file's bytes."""
        raise NotImplementedError


class RawImages(StoredImages):
    """Raw planar pixels of one shape."""

    def __init__(self, path: str, labels: str, shape: list[int], transform: Transform) -> None:
        """C×H×W images, planar, one after another."""
        super().__init__(path, labels, transform)
        self.shape = tuple(shape)

    def image(self, i: int, data: bytes) -> Image.Image:
        """Sample ``i``'s planes as a PIL image ("L" or "RGB")."""
        c, h, w = self.shape
        raw = data[i * c * h * w : (i + 1) * c * h * w]
        if c == 1:
            return Image.frombytes("L", (w, h), raw)
        planes = [Image.frombytes("L", (w, h), raw[k * h * w : (k + 1) * h * w]) for k in range(c)]
        return Image.merge("RGB", planes)


class EncodedImages(StoredImages):
    """Encoded files (JPEG, PNG) one after another with their offsets.

    Each is decoded with Pillow, as torchvision does.
    """

    def __init__(self, d: Json, transform: Transform, storage: Storage | None = None) -> None:
        """The files, offsets and labels ``d`` names, behind ``storage`` if any."""
        super().__init__(d["files"], d["labels"], transform)
        self.offsets, self.mode, self.storage = d["offsets"], d["mode"], storage

    def image(self, i: int, data: bytes) -> Image.Image:
        """Sample ``i``'s file, read (through the storage) and decoded."""
        raw = data[self.offsets[i] : self.offsets[i + 1]]
        if self.storage:
            self.storage.transfer(len(raw))
        return Image.open(io.BytesIO(raw)).convert(self.mode)


def load_user(ref: str) -> Callable[..., Any]:
    """An absolute ``file.py:function`` reference: the function, its file imported by path."""
    path, _, func = ref.rpartition(":")
    spec = importlib.util.spec_from_file_location(
        "loaderlab_user_" + os.path.basename(path).replace(".", "_"), path
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    return getattr(module, func)


def pil_loader(path: str, mode: str, storage: Storage | None = None) -> Image.Image:
    """An image file, read (through the storage) and decoded with Pillow in ``mode``."""
    with open(path, "rb") as f:
        if not storage:
            return Image.open(f).convert(mode)
        data = f.read()
    storage.transfer(len(data))
    return Image.open(io.BytesIO(data)).convert(mode)


class FolderLoader:
    """ImageFolder's loader: the file decoded in ``mode``, behind the storage if any."""

    def __init__(self, mode: str, storage: Storage | None) -> None:
        """Decode in ``mode`` (PIL's convert), behind ``storage``."""
        self.mode, self.storage = mode, storage

    def __call__(self, path: str) -> Image.Image:
        """The image at ``path``."""
        return pil_loader(path, self.mode, self.storage)


def describe(value: object) -> str:
    """A value as the user reads it: its type, and a tuple's or list's items' types."""
    if isinstance(value, tuple | list):
        kinds = ", ".join(type(v).__name__ for v in value[:4])
        return f"a {type(value).__name__} of {len(value)} ({kinds}{', …' if len(value) > 4 else ''})"
    return f"a {type(value).__name__}"


def is_item(item: object) -> bool:
    """Whether ``item`` is (image tensor, label)."""
    return isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[0], torch.Tensor)


class CheckedItems(Dataset):
    """The user's Dataset, each item checked to be (image tensor, label) as it is fetched."""

    def __init__(self, dataset: Dataset) -> None:
        """``dataset``, checked."""
        self.dataset = dataset

    def __len__(self) -> int:
        """The dataset's length."""
        return len(self.dataset)

    def __getitem__(self, i: int) -> Any:  # noqa: ANN401 - the user's item
        """Item ``i``, or a TypeError naming it and what it is."""
        item = self.dataset[i]
        if not is_item(item):
            raise TypeError(f"item {i} is {describe(item)}: items must be (image tensor, label)")
        return item


def users_dataset(function: str) -> Dataset:
    """The Dataset the user's function returns, refused in the user's terms where it is not one."""
    made = load_user(function)()
    if not (hasattr(made, "__getitem__") or hasattr(made, "__iter__")):
        raise TypeError(
            f"the function returned {describe(made)} ({made!r:.80}), not a torch Dataset: return an "
            "object with __len__ and __getitem__ (or an IterableDataset)"
        )
    if isinstance(made, IterableDataset):
        return made
    return CheckedItems(made)


def dataset_of(
    d: Json, transform: Transform, shuffle: bool, rank: tuple[int, int], storage: Storage | None
) -> Dataset:
    """The dataset ``d`` describes, each sample through ``transform``."""
    kind = d["kind"]
    if kind == "user":
        return users_dataset(d["function"])
    if kind == "raw":
        return RawImages(d["images"], d["labels"], d["shape"], transform)
    if kind == "encoded":
        return EncodedImages(d, transform, storage)
    if kind == "webdataset":
        return Shards(d, shuffle, transform, rank, storage)
    if kind in ("fashion_mnist", "mnist", "cifar10"):
        cls = {"fashion_mnist": datasets.FashionMNIST, "mnist": datasets.MNIST, "cifar10": datasets.CIFAR10}
        return cls[kind](d["root"], train=d["train"], transform=transform, download=False)
    if kind == "image_folder":
        loader = FolderLoader(d.get("mode", "RGB"), storage)
        return datasets.ImageFolder(d["root"], transform=transform, loader=loader)
    raise ValueError(f"dataset kind {kind!r} is not read by the pytorch engine")


def check_items(dataset: Dataset, where: str, items: Json | None) -> None:
    """The user's Dataset must give (image tensor, label).

    Where a network was built for its items (``[pytorch] image_shape``, ``classes``), a float tensor of
    that shape and a label below ``classes``.
    """
    if hasattr(dataset, "__len__") and len(dataset) == 0:
        raise ValueError("your Dataset is empty (len 0): a DataLoader has no batch to give")
    if isinstance(dataset, IterableDataset):
        return
    item = dataset[0]
    if not items:
        return
    image, label = item
    if list(image.shape) != items["shape"] or not image.is_floating_point():
        raise TypeError(
            f"{where}: the network was built for float image tensors of shape {items['shape']} "
            f"([pytorch] image_shape); item 0's is {list(image.shape)}, {image.dtype}"
        )
    if not 0 <= int(label) < items["classes"]:
        raise ValueError(
            f"{where}: item 0's label {int(label)} is not below [pytorch] classes = {items['classes']}"
        )
