"""WebDataset tar shards as a torch IterableDataset, read as the ``webdataset`` library reads them."""

from __future__ import annotations

import io
import random
import tarfile
from collections.abc import Callable, Iterator
from typing import Any

import torch
from PIL import Image
from torch.utils.data import IterableDataset, get_worker_info

from .protocol import Json
from .storage import Storage

Sample = tuple[bytes, int]


def split_member(name: str) -> tuple[str, str] | None:
    """(key, extension) of a tar member: the key is the path up to the file name's first dot."""
    base = name.rfind("/") + 1
    dot = name.find(".", base)
    if dot < 0:
        return None
    return name[:dot], name[dot + 1 :].lower()


def read_shard(shard: str, storage: Storage | None) -> Iterator[Sample]:
    """(image bytes, label) of every sample of one shard, in archive order.

    Behind emulated storage the shard is one request (its latency) streamed on (each image's bytes), as
    the native engine's storage streams a shard.
    """
    pending: dict[str, dict[str, bytes]] = {}
    opened = False
    with tarfile.open(shard, "r|") as tar:
        for member in tar:
            parts = split_member(member.name) if member.isfile() else None
            if parts is None or parts[1] not in ("jpg", "jpeg", "png", "cls"):
                continue
            key, ext = parts
            extracted = tar.extractfile(member)
            data = extracted.read() if extracted else b""
            if storage and ext != "cls":
                storage.transfer(len(data), new=not opened)
                opened = True
            part = pending.setdefault(key, {})
            part["cls" if ext == "cls" else "image"] = data
            if len(part) == 2:
                del pending[key]
                yield part["image"], int(part["cls"].decode().strip())
    for key, part in pending.items():
        if "image" in part:
            raise ValueError(f"{shard}: sample {key} has an image but no .cls label")


def buffered(stream: Iterator[Sample], size: int, rng: random.Random) -> Iterator[Sample]:
    """``stream`` through a shuffle buffer of ``size`` samples drawn from ``rng``."""
    buffer: list[Sample] = []
    for sample in stream:
        if len(buffer) < size:
            buffer.append(sample)
            continue
        k = rng.randrange(len(buffer))
        buffer[k], sample = sample, buffer[k]
        yield sample
    rng.shuffle(buffer)
    yield from buffer


class Shards(IterableDataset):
    """A rank's share of WebDataset shards, streamed by each worker.

    Each worker takes every n-th shard of its rank's (split by rank, then by worker), streams
    its members in archive order, groups ``key.jpg|jpeg|png`` with ``key.cls``, with
    ``shuffle`` draws the shards' order and a shuffle buffer of ``shuffle_buffer`` samples
    (their bytes) from the seed torch gives the worker for this epoch, and decodes each sample
    with Pillow and transforms it as it leaves the buffer.
    """

    def __init__(
        self,
        d: Json,
        shuffle: bool,
        transform: Callable[[Any], Any],
        rank: tuple[int, int],
        storage: Storage | None = None,
    ) -> None:
        """The shards ``d`` names, this rank's share of them."""
        self.shards, self.mode, self.buffer = d["shards"], d["mode"], d["shuffle_buffer"]
        self.shuffle, self.transform, self.rank, self.storage = shuffle, transform, rank, storage
        self.count = sum(1 for shard in self.shards for _ in read_shard(shard, None))

    def __len__(self) -> int:
        """Samples over every shard."""
        return self.count

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        """This worker's samples of an epoch, decoded and transformed."""
        for image, label in self.shuffled():
            yield self.transform(Image.open(io.BytesIO(image)).convert(self.mode)), label

    def shuffled(self) -> Iterator[Sample]:
        """This worker's samples of an epoch, in the order the seed draws."""
        info = get_worker_info()
        # Each epoch's iterator gets its seed from the DataLoader's seeded generator: in a
        # worker, torch's seed for it; at 0 workers, a draw from the seeded main process.
        seed = info.seed if info else int(torch.empty((), dtype=torch.int64).random_().item())
        rng = random.Random(seed)
        shards = list(self.shards)
        if self.shuffle:
            rng.shuffle(shards)
        rank, ranks = self.rank
        shards = shards[rank::ranks]
        if info:
            shards = shards[info.id :: info.num_workers]
        stream = (sample for shard in shards for sample in read_shard(shard, self.storage))
        if not self.shuffle or self.buffer <= 1:
            return stream
        return buffered(stream, self.buffer, rng)
