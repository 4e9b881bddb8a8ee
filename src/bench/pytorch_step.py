import json, sys, time, math
import torch, torch.nn as nn, torch.nn.functional as F
spec = json.loads(sys.argv[1])
class Res(nn.Module):
    def __init__(self, body, shortcut):
        super().__init__(); self.body = body; self.shortcut = shortcut
    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))
def build(layers):
    mods = []
    for l in layers:
        k = l[0]
        if k == "conv": mods.append(nn.Conv2d(l[1], l[2], l[3], stride=l[4], padding=l[5], bias=l[6]))
        elif k == "bn": mods.append(nn.BatchNorm2d(l[1]))
        elif k == "relu": mods.append(nn.ReLU())
        elif k == "pool2": mods.append(nn.MaxPool2d(2))
        elif k == "pool3": mods.append(nn.MaxPool2d(3, 2, 1))
        elif k == "res": mods.append(Res(build(l[1]), build(l[2])))
        elif k == "gap": mods.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))
        elif k == "flatten": mods.append(nn.Flatten())
        elif k == "linear": mods.append(nn.Linear(l[1], l[2]))
    return nn.Sequential(*mods)
torch.set_num_threads(spec["threads"])
c, h, w = spec["input"]; batch = spec["batch"]
x = torch.tensor([0.5 + 0.5 * math.sin(0.13 * i + 1.0) for i in range(batch * c * h * w)], dtype=torch.float32).reshape(batch, c, h, w)
y = torch.tensor([n % spec["classes"] for n in range(batch)])
torch.manual_seed(42); model = build(spec["layers"]).train()
o = spec["optimizer"]
if o["kind"] == "adam": opt = torch.optim.Adam(model.parameters(), lr=o["lr"], betas=o["betas"], eps=o["eps"], weight_decay=o["weight_decay"])
elif o["kind"] == "adamw": opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=o["betas"], eps=o["eps"], weight_decay=o["weight_decay"])
else: opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"], nesterov=o["nesterov"], weight_decay=o["weight_decay"])
def step():
    opt.zero_grad(set_to_none=True); loss = F.cross_entropy(model(x), y); loss.backward(); opt.step(); return loss.item()
for _ in range(3): step()
times = []
for _ in range(spec["steps"]):
    t0 = time.perf_counter(); step(); times.append((time.perf_counter() - t0) * 1e3)
times.sort(); n = len(times)
print(json.dumps([(times[(n - 1) // 2] + times[n // 2]) / 2, torch.__version__]))
