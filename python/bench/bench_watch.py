"""What `loaderlab.watch` costs the job it watches.

    python python/bench/bench_watch.py [--reps 5] [--steps 20]

1. The training thread's cost per step: iterating 50,000 ready batches (a list) through `watch`
   against iterating them bare, the difference per step (median of `reps` interleaved pairs): the
   generator, two clock readings, the row formatted and buffered in Rust, the once-a-second flush.
2. The stage clocks' cost per item inside a DataLoader's worker (or, at 0 workers, the training
   thread): items that cost nothing, through a Compose of three transforms that do nothing,
   fetched through the watch's timed `__getitems__` and `Compose` (one item in 16 timed transform
   by transform) against the bare fetch, per item.
3. The seed's training loop (FashionMNIST's files with random images, the seed's Compose, batch 256,
   SmallCNN + Adam on the CPU; examples/seed_dataloader.py) at 0 and 2 workers, with and without
   `watch`: img/s of `steps` steps after 3 untimed ones, each timing a fresh DataLoader, the pairs
   interleaved (alternating which goes first); the cost is 1 − with / without, the median of the
   pairs, their range beside it. On a 2-core VM whose speed drifts ±30 % within minutes the pairs'
   spread is far wider than the cost, which parts 1 and 2 measure directly.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision import transforms as T

import loaderlab
from loaderlab.stages import _Clocks, _TimedCompose, _TimedItems

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(EXAMPLES))
    spec.loader.exec_module(module)
    return module


def per_step_cost(reps, tmp):
    """µs per step on the training thread: watched minus bare iteration over ready batches."""
    batch = (torch.zeros(4, 1), torch.zeros(4, dtype=torch.long))
    data = [batch] * 50_000
    diffs = []
    for r in range(reps):
        w = loaderlab.watch(data, out=str(Path(tmp) / f"cost{r}"), device="cpu")
        t0 = time.perf_counter()
        for _ in data:
            pass
        bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in w:
            pass
        watched = time.perf_counter() - t0
        w.close()
        diffs.append((watched - bare) / len(data) * 1e6)
    return diffs


class _Nothing:
    """A transform that does nothing: what is left to time is the clocks."""

    def __call__(self, x):
        return x


class _Items:
    """A dataset whose items cost nothing, through a Compose of three transforms (as the seed's)."""

    def __init__(self):
        self.transform = T.Compose([_Nothing(), _Nothing(), _Nothing()])

    def __getitem__(self, i):
        return self.transform(i), 0


def per_item_cost(reps):
    """µs per item of the stage clocks: a fetch through the watch's timed `__getitems__` and
    `Compose` minus the bare fetch, on a dataset whose items cost nothing, 100,000 at a time."""
    n = 100_000
    idx = list(range(n))
    dataset = _Items()
    compose = dataset.transform
    clocks = _Clocks(16)
    diffs = []
    for _ in range(reps):
        dataset.transform = compose
        t0 = time.perf_counter()
        [dataset[i] for i in idx]
        bare = time.perf_counter() - t0
        dataset.transform = _TimedCompose(compose, clocks)
        timed = _TimedItems(dataset, clocks, None)
        t0 = time.perf_counter()
        timed(idx)
        watched = time.perf_counter() - t0
        diffs.append((watched - bare) / n * 1e6)
    dataset.transform = compose
    return diffs


def loop_rate(dataset, workers, steps, watched, tmp, k):
    """img/s of the seed's loop over a fresh DataLoader, `steps` steps after 3 untimed."""
    torch.manual_seed(0)
    model = example("seed_dataloader").SmallCNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=workers, drop_last=True)
    w = loaderlab.watch(loader, out=str(Path(tmp) / f"loop{k}"), device="cpu") if watched else None
    it = iter(w if watched else loader)
    images = 0
    for s in range(3 + steps):
        if s == 3:
            started = time.perf_counter()
        x, y = next(it)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if s >= 3:
            images += len(x)
    elapsed = time.perf_counter() - started
    del it
    if w is not None:
        w.close()
    return images / elapsed


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=20)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"loaderlab {loaderlab.__version__}, torch {torch.__version__}, one torch thread")
    with tempfile.TemporaryDirectory() as tmp:
        example("fake_fashion_mnist").write(tmp)
        chain = T.Compose([T.RandomResizedCrop(28, scale=(0.75, 1.0)), T.RandomRotation(15), T.ToTensor()])
        dataset = datasets.FashionMNIST(tmp, train=False, transform=chain)

        d = per_step_cost(args.reps, tmp)
        print(
            f"\ntraining thread, per step: {statistics.median(d):.2f} µs (pairs {', '.join(f'{v:.2f}' for v in d)})"
        )
        d = per_item_cost(args.reps)
        print(
            f"stage clocks, per item: {statistics.median(d):.2f} µs (pairs {', '.join(f'{v:.2f}' for v in d)})"
        )

        print(
            f"\nthe seed's training loop, batch 256 ({args.steps} timed steps a timing, {args.reps} interleaved pairs)"
        )
        print("| workers | without img/s | with watch img/s | cost (median of pairs) | pairs |")
        print("|---:|---:|---:|---:|---|")
        k = 0
        for workers in (0, 2):
            a, b, costs = [], [], []
            for r in range(args.reps):
                k += 1
                if r % 2 == 0:
                    x = loop_rate(dataset, workers, args.steps, False, tmp, k)
                    y = loop_rate(dataset, workers, args.steps, True, tmp, k)
                else:
                    y = loop_rate(dataset, workers, args.steps, True, tmp, k)
                    x = loop_rate(dataset, workers, args.steps, False, tmp, k)
                a.append(x)
                b.append(y)
                costs.append(1 - y / x)
            print(
                f"| {workers} | {statistics.median(a):,.0f} | {statistics.median(b):,.0f} | "
                f"{statistics.median(costs) * 100:+.2f} % | {', '.join(f'{c * 100:+.1f}' for c in costs)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
