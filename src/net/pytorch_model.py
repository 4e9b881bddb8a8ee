# The network and optimizer of a `bench step` spec in PyTorch (prepended to the timing scripts,
# whose spec is their first argument; the pytorch engine's driver imports it as a module and
# passes its own optimizer settings).
import json
import sys
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

spec = json.loads(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].startswith("{") else None


class Res(nn.Module):
    def __init__(self, body, shortcut):
        super().__init__()
        self.body = body
        self.shortcut = shortcut

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


def build(layers):
    mods = []
    for layer in layers:
        k = layer[0]
        if k == "conv":
            mods.append(
                nn.Conv2d(layer[1], layer[2], layer[3], stride=layer[4], padding=layer[5], bias=layer[6])
            )
        elif k == "bn":
            mods.append(nn.BatchNorm2d(layer[1]))
        elif k == "relu":
            mods.append(nn.ReLU())
        elif k == "pool2":
            mods.append(nn.MaxPool2d(2))
        elif k == "pool3":
            mods.append(nn.MaxPool2d(3, 2, 1))
        elif k == "res":
            mods.append(Res(build(layer[1]), build(layer[2])))
        elif k == "gap":
            mods.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))
        elif k == "flatten":
            mods.append(nn.Flatten())
        elif k == "linear":
            mods.append(nn.Linear(layer[1], layer[2]))
    return nn.Sequential(*mods)


def make_optimizer(params, o=None, **extra):
    o = o or spec["optimizer"]
    if o["kind"] == "adam":
        return torch.optim.Adam(
            params, lr=o["lr"], betas=o["betas"], eps=o["eps"], weight_decay=o["weight_decay"], **extra
        )
    if o["kind"] == "adamw":
        return torch.optim.AdamW(
            params, lr=o["lr"], betas=o["betas"], eps=o["eps"], weight_decay=o["weight_decay"], **extra
        )
    return torch.optim.SGD(
        params,
        lr=o["lr"],
        momentum=o["momentum"],
        nesterov=o["nesterov"],
        weight_decay=o["weight_decay"],
        **extra,
    )


def formula_batch():
    c, h, w = spec["input"]
    batch = spec["batch"]
    x = torch.tensor(
        [0.5 + 0.5 * math.sin(0.13 * i + 1.0) for i in range(batch * c * h * w)], dtype=torch.float32
    ).reshape(batch, c, h, w)
    y = torch.tensor([n % spec["classes"] for n in range(batch)])
    return x, y
