# `bench step` on the CPU: 3 warm-up steps, then the median of `steps` steps (loss read each
# step). Prints [median_ms, torch_version]. Runs after pytorch_model.py.
import time

torch.set_num_threads(spec["threads"])
x, y = formula_batch()
torch.manual_seed(42)
model = build(spec["layers"]).train()
opt = make_optimizer(model.parameters())


def step():
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


for _ in range(3):
    step()
times = []
for _ in range(spec["steps"]):
    t0 = time.perf_counter()
    step()
    times.append((time.perf_counter() - t0) * 1e3)
times.sort()
n = len(times)
print(json.dumps([(times[(n - 1) // 2] + times[n // 2]) / 2, torch.__version__]))
