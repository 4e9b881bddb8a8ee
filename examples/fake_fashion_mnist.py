"""Random images in FashionMNIST's files, laid out as torchvision keeps them
(`ROOT/FashionMNIST/raw/*-ubyte`), for running the seed's examples where FashionMNIST cannot be
downloaded. The test split holds its 10,000 images; the train files hold one image (torchvision
asks that all four files exist, and the examples read the test split).

    python examples/fake_fashion_mnist.py data-fake
"""

import sys
from pathlib import Path

import numpy as np


def idx(path, magic, dims, data):
    """One IDX file: the magic number, each dimension, then the bytes."""
    with open(path, "wb") as f:
        f.write(magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + data.tobytes())


def write(root, seed=0):
    """The four files under `root`/FashionMNIST/raw, unless they are there already."""
    raw = Path(root) / "FashionMNIST" / "raw"
    if (raw / "t10k-images-idx3-ubyte").exists():
        return
    raw.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    # Smooth blobs rather than noise, so crops and rotations move something.
    coarse = rng.integers(0, 256, (10_000, 7, 7), dtype=np.uint8)
    images = coarse.repeat(4, axis=1).repeat(4, axis=2)
    labels = rng.integers(0, 10, 10_000, dtype=np.uint8)
    idx(raw / "t10k-images-idx3-ubyte", 2051, [10_000, 28, 28], images)
    idx(raw / "t10k-labels-idx1-ubyte", 2049, [10_000], labels)
    idx(raw / "train-images-idx3-ubyte", 2051, [1, 28, 28], images[:1])
    idx(raw / "train-labels-idx1-ubyte", 2049, [1], labels[:1])


if __name__ == "__main__":
    write(sys.argv[1] if len(sys.argv) > 1 else "data-fake")
