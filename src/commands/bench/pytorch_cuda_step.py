# `bench step --device cuda`: PyTorch's step on the same GPU, TF32 off, the batch already on the
# device, in up to three variants: "eager" (the optimizer's default, foreach on CUDA), "fused"
# (fused=True) and "graph" (the whole step captured in a CUDA graph, capturable=True, as the
# CUDA-graphs documentation's whole-network example). Each: 3 warm-up steps, then `steps` steps
# with no synchronisation between them; step_ms = wall time / steps (synchronised at the end),
# host_ms = the median time the host spent queueing one step, device_ms = the median time
# between CUDA events around each step. Prints {"version", "variants": {name: figures or
# {"error": why}}}. Runs after pytorch_model.py.
import time

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = torch.device("cuda")
x, y = formula_batch()
x, y = x.to(dev), y.to(dev)


def median(v):
    v = sorted(v)
    n = len(v)
    return (v[(n - 1) // 2] + v[n // 2]) / 2


def timed(run, steps):
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(steps)]
    host = []
    t0 = time.perf_counter()
    for i in range(steps):
        starts[i].record()
        h = time.perf_counter()
        run()
        host.append((time.perf_counter() - h) * 1e3)
        ends[i].record()
    torch.cuda.synchronize()
    wall = (time.perf_counter() - t0) * 1e3 / steps
    return {
        "step_ms": wall,
        "host_ms": median(host),
        "device_ms": median([s.elapsed_time(e) for s, e in zip(starts, ends)]),
    }


def variant(name):
    torch.manual_seed(42)
    model = build(spec["layers"]).train().to(dev)
    extra = {"fused": {"fused": True}, "graph": {"capturable": True}}.get(name, {})
    if name == "graph" and spec["optimizer"]["kind"] == "sgd":
        extra = {}  # SGD keeps no step count on the host: nothing to make capturable
    opt = make_optimizer(model.parameters(), **extra)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if name != "graph":
        return timed(step, spec["steps"])
    # Warm up on a side stream (creates the gradients and the optimizer state), then capture.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return timed(g.replay, spec["steps"])


out = {"version": torch.__version__, "variants": {}}
for name in spec["variants"]:
    try:
        out["variants"][name] = variant(name)
    except Exception as e:  # one variant this torch lacks must not hide the others
        out["variants"][name] = {"error": f"{type(e).__name__}: {e}".splitlines()[0][:200]}
print(json.dumps(out))
