"""The seed's training loop (SmallCNN, Adam, cross-entropy) fed by loaderlab.Loader, or by
torch's DataLoader with torchvision for comparison, with the seed's record_function spans
(batch_wait, h2d_transfer, forward_backward_adam) and a profiled window written as a Chrome
trace that `loaderlab diagnose` reads and sets beside the DataLoader's.

    pip install target/wheels/loaderlab-*.whl            # built by: cd python && maturin build --release
    python examples/train_with_loaderlab.py --trace loaderlab.json
    python examples/train_with_loaderlab.py --loader dataloader --trace dataloader.json
    loaderlab diagnose loaderlab.json --out reports/loaderlab_job
    loaderlab diagnose dataloader.json --out reports/dataloader_job

By default it reads FashionMNIST under ./data (downloaded if missing, by loaderlab or by
torchvision). `--synthetic N` trains on N synthetic 28×28 images instead, with no download;
with `--loader dataloader`, torchvision then transforms the same synthetic images, so only the
loader differs.
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import loaderlab

# The seed's chain, as the experiment file's tables.
TRANSFORMS = [
    {"op": "random_resized_crop", "size": 28, "scale": [0.75, 1.0]},
    {"op": "random_rotation", "degrees": 15},
    {"op": "to_tensor"},
]


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10)
        )

    def forward(self, x):
        return self.classifier(self.features(x))


def ours(args):
    dataset = (
        {"kind": "synthetic", "synthetic_size": args.synthetic}
        if args.synthetic
        else {"kind": "fashion_mnist", "root": args.root}
    )
    return loaderlab.Loader(
        dataset=dataset,
        transforms=TRANSFORMS,
        batch_size=args.batch_size,
        num_workers=args.workers,
        shuffle=True,
        drop_last=True,
        seed=args.seed,
    )


def theirs(args):
    from torch.utils.data import DataLoader, TensorDataset
    from torchvision import datasets, transforms

    chain = transforms.Compose(
        [
            transforms.RandomResizedCrop(28, scale=(0.75, 1.0)),
            transforms.RandomRotation(15),
            transforms.ToTensor(),
        ]
    )
    if args.synthetic:
        # Untransformed synthetic images (the same bytes loaderlab reads), transformed per
        # sample by torchvision as the seed's pipeline does.
        raw = loaderlab.Loader(
            dataset={"kind": "synthetic", "synthetic_size": args.synthetic},
            transforms=[{"op": "to_tensor"}],
            batch_size=args.synthetic,
            shuffle=False,
            drop_last=False,
        )
        images, labels = next(iter(raw))
        pil = transforms.ToPILImage()

        class Synthetic(TensorDataset):
            def __getitem__(self, i):
                x, y = super().__getitem__(i)
                return chain(pil(x)), y

        dataset = Synthetic(images.clone(), labels.clone())
    else:
        dataset = datasets.FashionMNIST(args.root, train=True, download=True, transform=chain)
    workers = args.workers
    return DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=workers,
        prefetch_factor=2 if workers else None,
        persistent_workers=workers > 0,
        drop_last=True,
    )


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loader", choices=["loaderlab", "dataloader"], default="loaderlab")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=100, help="timed steps, after the warm-up")
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--profile-steps", type=int, default=20)
    p.add_argument("--trace", help="write the profiled window's Chrome trace here")
    p.add_argument("--root", default="data")
    p.add_argument("--synthetic", type=int, default=0, metavar="N")
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = SmallCNN().to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    loader = ours(args) if args.loader == "loaderlab" else theirs(args)

    def batches():
        while True:
            yield from loader

    it = batches()

    def step():
        with record_function("batch_wait"):
            images, labels = next(it)
        with record_function("h2d_transfer"):
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
        with record_function("forward_backward_adam"):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(images), labels)
            loss.backward()
            opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    loss = loss.item()  # waits for the device
    elapsed = time.perf_counter() - started
    print(
        f"{args.loader}, {args.workers} workers: {args.steps * args.batch_size / elapsed:,.0f} img/s "
        f"over {args.steps} steps, last loss {loss:.4f}"
    )

    if args.trace:
        # One step of the profiler's warm-up, then the recorded steps, each marked
        # ProfilerStep#N (what `loaderlab diagnose` reads).
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        when = schedule(wait=0, warmup=1, active=args.profile_steps, repeat=1)
        with profile(
            activities=activities,
            schedule=when,
            on_trace_ready=lambda prof: prof.export_chrome_trace(args.trace),
        ) as prof:
            for _ in range(args.profile_steps + 1):
                step()
                prof.step()
        print(f"trace: {args.trace}")
    if hasattr(loader, "close"):
        loader.close()


if __name__ == "__main__":
    main()
