"""loaderlab.Loader against torch.utils.data.DataLoader with torchvision: the same chain on the
same images, at 0, 1 and 2 workers, interleaved (each repetition times every pair back to back,
alternating which goes first), the ratio reported as the median of the pairs' ratios.

    python python/bench/bench_loader.py [--reps 5] [--chain seed|imagenet|both]

The seed's chain: 28×28 grey images (loaderlab's synthetic ones, the same pixels on both
sides), RandomResizedCrop(28, scale 0.75–1) + RandomRotation(15) + ToTensor, batch 256. The
ImageNet-style chain: a folder of JPEG files of 500×375 (written here with Pillow, quality 75),
decoded per sample → RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize,
batch 64, read by ImageFolder and by loaderlab's image_folder. Each timing starts a fresh
loader, lets it build `warmup` batches untimed (worker start-up excluded, as the command's
protocol excludes it), then times the next `timed` batches. img/s per core divides by the
cores building batches: 1 at 0 workers, else the workers.
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets, transforms

import loaderlab

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class GreyImages(Dataset):
    """uint8 28×28 images as PIL images, transformed per sample (torchvision's FashionMNIST)."""

    def __init__(self, pixels, labels, chain):
        self.pixels, self.labels, self.chain = pixels, labels, chain
        self.pil = transforms.ToPILImage()

    def __len__(self):
        return len(self.pixels)

    def __getitem__(self, i):
        return self.chain(self.pil(self.pixels[i])), int(self.labels[i])


def seed_chain(size):
    ours = dict(
        dataset={"kind": "synthetic", "synthetic_size": size},
        transforms=[
            {"op": "random_resized_crop", "size": 28, "scale": [0.75, 1.0]},
            {"op": "random_rotation", "degrees": 15},
            {"op": "to_tensor"},
        ],
        batch_size=256,
    )
    raw = loaderlab.Loader(
        dataset=ours["dataset"], transforms=[{"op": "to_tensor"}], batch_size=size, shuffle=False
    )
    images, labels = next(iter(raw))
    raw.close()
    pixels = (images * 255).round().to(torch.uint8)
    chain = transforms.Compose(
        [
            transforms.RandomResizedCrop(28, scale=(0.75, 1.0)),
            transforms.RandomRotation(15),
            transforms.ToTensor(),
        ]
    )
    return ours, GreyImages(pixels, labels, chain), 256


def imagenet_chain(root, size):
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for c in range(4):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
    for i in range(size):
        # Smooth colour fields plus noise: JPEG sizes like photographs' (tens of kB).
        base = torch.rand(3, 12, 16, generator=g)
        img = torch.nn.functional.interpolate(base[None], size=(375, 500), mode="bilinear")[0]
        img = (img * 200 + torch.rand(3, 375, 500, generator=g) * 55).clamp(0, 255)
        Image.fromarray(img.permute(1, 2, 0).to(torch.uint8).numpy()).save(
            root / f"class{i % 4}" / f"{i}.jpg", quality=75
        )
    ours = dict(
        dataset={"kind": "image_folder", "root": str(root)},
        transforms=[
            {"op": "random_resized_crop", "size": 224, "scale": [0.08, 1.0]},
            {"op": "random_horizontal_flip"},
            {"op": "to_tensor"},
            {"op": "normalize", "mean": MEAN, "std": STD},
        ],
        batch_size=64,
    )
    chain = transforms.Compose(
        [
            transforms.RandomResizedCrop(224, scale=(0.08, 1.0)),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )
    return ours, datasets.ImageFolder(str(root), transform=chain), 64


def timed(make, warmup, n):
    """img/s of `n` batches after `warmup`, on a fresh loader, across passes."""
    loader = make()

    def stream():
        while True:
            yield from loader

    it = stream()
    for _ in range(warmup):
        next(it)
    images = 0
    started = time.perf_counter()
    for _ in range(n):
        x, _ = next(it)
        images += len(x)
    elapsed = time.perf_counter() - started
    del it
    if hasattr(loader, "close"):
        loader.close()
    return images / elapsed


def bench(name, ours, theirs, batch, reps, timed_batches):
    print(f"\n{name} (batch {batch}; {timed_batches} timed batches a timing, {reps} interleaved reps)")
    print(
        "| workers | loaderlab.Loader img/s | DataLoader img/s | per core, ours | per core, theirs | ratio (median of pairs) | pairs |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    for workers in (0, 1, 2):
        cores = max(1, workers)
        warmup = 2 * max(1, workers) * 2

        def mine():
            return loaderlab.Loader(**ours, workers=workers, prefetch_factor=2, shuffle=True)

        def yours():
            return DataLoader(
                theirs,
                batch_size=batch,
                shuffle=True,
                num_workers=workers,
                prefetch_factor=2 if workers else None,
                persistent_workers=workers > 0,
                drop_last=True,
            )

        a, b, ratios = [], [], []
        for r in range(reps):
            if r % 2 == 0:
                x, y = timed(mine, warmup, timed_batches * 4), timed(yours, warmup, timed_batches)
            else:
                y, x = timed(yours, warmup, timed_batches), timed(mine, warmup, timed_batches * 4)
            a.append(x)
            b.append(y)
            ratios.append(x / y)
        ma, mb = statistics.median(a), statistics.median(b)
        print(
            f"| {workers} | {ma:,.0f} | {mb:,.0f} | {ma / cores:,.0f} | {mb / cores:,.0f} | "
            f"{statistics.median(ratios):.1f}× | {', '.join(f'{r:.1f}' for r in ratios)} |",
            flush=True,
        )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--chain", choices=["seed", "imagenet", "both"], default="both")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"loaderlab {loaderlab.__version__}, torch {torch.__version__}")
    if args.chain in ("seed", "both"):
        ours, theirs, batch = seed_chain(4096)
        bench("Seed chain", ours, theirs, batch, args.reps, timed_batches=8)
    if args.chain in ("imagenet", "both"):
        with tempfile.TemporaryDirectory() as d:
            ours, theirs, batch = imagenet_chain(Path(d) / "images", 512)
            bench("ImageNet-style chain", ours, theirs, batch, args.reps, timed_batches=4)


if __name__ == "__main__":
    main()
