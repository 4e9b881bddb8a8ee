"""The seed's training loop as PyTorch users write it: FashionMNIST with a Compose, a
DataLoader, a small CNN with Adam. `seed_loaderlab.py` is this file with one line changed.

    python examples/seed_dataloader.py --workers 2          # FashionMNIST under ./data
    python examples/seed_dataloader.py --fake --workers 2   # random images, no download
"""

import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from torchvision import datasets, transforms as T


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


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--root", default="data")
    p.add_argument("--fake", action="store_true", help="random images in FashionMNIST's files under --root")
    args = p.parse_args()
    if args.fake:
        from fake_fashion_mnist import write

        write(args.root)

    torch.manual_seed(0)
    transform = T.Compose([T.RandomResizedCrop(28, scale=(0.75, 1.0)), T.RandomRotation(15), T.ToTensor()])
    dataset = datasets.FashionMNIST(
        args.root, train=not args.fake, download=not args.fake, transform=transform
    )
    loader = DataLoader(dataset, batch_size=256, shuffle=True, num_workers=args.workers, drop_last=True)

    model = SmallCNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    steps, started = 0, time.perf_counter()
    while steps < args.steps:
        for images, labels in loader:
            opt.zero_grad()
            loss = loss_fn(model(images), labels)
            loss.backward()
            opt.step()
            steps += 1
            if steps == args.steps:
                break
    elapsed = time.perf_counter() - started
    print(f"{steps} steps, {steps * 256 / elapsed:,.0f} img/s, last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
