"""loaderlab.Loader against torch.utils.data.DataLoader, the one-line change: the same
torchvision dataset object with its Compose, the same arguments, only the class differs. At 0, 1
and 2 workers, interleaved (each repetition times every pair back to back, alternating which
goes first), the ratio reported as the median of the pairs' ratios.

    python python/bench/bench_loader.py [--reps 5] [--chain seed|imagenet|both] [--loop]

The seed's chain: FashionMNIST's test split (10,000 random 28×28 images written in its files,
examples/fake_fashion_mnist.py), RandomResizedCrop(28, scale 0.75–1) + RandomRotation(15) +
ToTensor, batch 256. The ImageNet-style chain: an ImageFolder of JPEG files of 500×375 (written
here with Pillow, quality 75) → RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
Normalize, batch 64. Each timing starts a fresh loader, lets it build `warmup` batches untimed
(worker start-up excluded, as the command's protocol excludes it), then times the next `timed`
batches: the loader alone, or with `--loop` the seed's training step (examples/seed_dataloader.py's
SmallCNN with Adam) on each batch of the seed's chain. torch runs on one thread throughout. img/s per core divides by
the cores building batches: 1 at 0 workers, else the workers.
"""

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

import loaderlab

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name):
    """A module of examples/."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seed_chain(root):
    example("fake_fashion_mnist").write(root)
    chain = transforms.Compose(
        [
            transforms.RandomResizedCrop(28, scale=(0.75, 1.0)),
            transforms.RandomRotation(15),
            transforms.ToTensor(),
        ]
    )
    return datasets.FashionMNIST(str(root), train=False, transform=chain), 256


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
    chain = transforms.Compose(
        [
            transforms.RandomResizedCrop(224, scale=(0.08, 1.0)),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )
    return datasets.ImageFolder(str(root), transform=chain), 64


def timed(make, warmup, n, step=None):
    """img/s of `n` batches after `warmup`, on a fresh loader, across passes; `step` (the
    training step) runs on each batch where given."""
    loader = make()

    def stream():
        while True:
            yield from loader

    it = stream()
    for _ in range(warmup):
        x, y = next(it)
        if step:
            step(x, y)
    images = 0
    started = time.perf_counter()
    for _ in range(n):
        x, y = next(it)
        if step:
            step(x, y)
        images += len(x)
    elapsed = time.perf_counter() - started
    del it
    if hasattr(loader, "close"):
        loader.close()
    return images / elapsed


def training_step():
    """The seed's step: SmallCNN, Adam, cross-entropy, on the CPU."""
    torch.manual_seed(0)
    model = example("seed_dataloader").SmallCNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(images, labels):
        opt.zero_grad()
        loss_fn(model(images), labels).backward()
        opt.step()

    return step


def bench(name, dataset, batch, reps, timed_batches, loop):
    what = "the training loop" if loop else "the loader alone"
    print(
        f"\n{name}, {what} (batch {batch}; {timed_batches} timed batches a timing, {reps} interleaved reps)"
    )
    print(
        "| workers | loaderlab.Loader img/s | DataLoader img/s | per core, ours | per core, theirs | ratio (median of pairs) | pairs |"
    )
    print("|---:|---:|---:|---:|---:|---:|---|")
    for workers in (0, 1, 2):
        cores = max(1, workers)
        warmup = 2 * max(1, workers) * 2
        # DataLoader's arguments, the same for both: only the class differs.
        args = dict(
            batch_size=batch,
            shuffle=True,
            num_workers=workers,
            prefetch_factor=2 if workers else None,
            persistent_workers=workers > 0,
            drop_last=True,
        )

        def mine():
            return loaderlab.Loader(dataset, **args)

        def yours():
            return DataLoader(dataset, **args)

        # The loader alone: ours is timed over more batches (it is that much faster).
        more = 1 if loop else 4
        a, b, ratios = [], [], []
        for r in range(reps):
            step = training_step() if loop else None
            if r % 2 == 0:
                x = timed(mine, warmup, timed_batches * more, step)
                y = timed(yours, warmup, timed_batches, step)
            else:
                y = timed(yours, warmup, timed_batches, step)
                x = timed(mine, warmup, timed_batches * more, step)
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
    p.add_argument("--loop", action="store_true", help="time the seed's training step on each batch too")
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"loaderlab {loaderlab.__version__}, torch {torch.__version__}")
    with tempfile.TemporaryDirectory() as d:
        if args.chain in ("seed", "both"):
            dataset, batch = seed_chain(Path(d) / "fashion")
            bench("Seed chain", dataset, batch, args.reps, 8, args.loop)
        if args.chain in ("imagenet", "both"):
            dataset, batch = imagenet_chain(Path(d) / "images", 512)
            # The seed's SmallCNN takes 28×28 grey images: the loader alone here.
            bench("ImageNet-style chain", dataset, batch, args.reps, 4, False)


if __name__ == "__main__":
    main()
