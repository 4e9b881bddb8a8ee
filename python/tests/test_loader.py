"""loaderlab.Loader and the command from the Python package (built by `maturin develop`).

Run: `bash scripts/test-python.sh` (builds the module into target/venv, then runs pytest).
"""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn

import loaderlab

# Synthetic 28×28 images through the seed's chain; 600 images / 64 = 9 batches per epoch, so
# the 15 batches below cross an epoch boundary.
EXPERIMENT = """
[experiment]
name = "module"
seed = 5

[dataset]
kind = "synthetic"
synthetic_size = 600

[loader]
batch_size = 64

[model]
kind = "stand_in"
step_ms = 1

[device]
kind = "cpu"

[protocol]
warmup_steps = 3
timed_steps = 12
rounds = 1
profile = false
headroom = false

[matrix]
"loader.workers" = [0, 2]
"""
BATCHES = 15
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_with_loaderlab.py"


def command(*args, cwd=None):
    """`python -m loaderlab ARGS` (the command the wheel installs), without LOADERLAB_* leaking
    in from the environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERLAB_")}
    return subprocess.run(
        [sys.executable, "-m", "loaderlab", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The experiment, run by the command: (file, {condition: [(epoch, fingerprint)] per
    timed step})."""
    d = tmp_path_factory.mktemp("run")
    file = d / "module.toml"
    file.write_text(EXPERIMENT)
    done = command("run", str(file), "--out", str(d / "out"), "--quiet")
    assert done.returncode == 0, done.stderr
    steps = {}
    with open(d / "out" / "steps.csv", newline="") as f:
        for row in csv.DictReader(f):
            steps.setdefault(row["condition"], []).append(
                (int(row["step"]), int(row["epoch"]), row["fingerprint"])
            )
    return file, {c: [(e, fp) for _, e, fp in sorted(rows)] for c, rows in steps.items()}


def batches(loader, n):
    """The first `n` batches, across epochs, as (epoch, fingerprint computed from the tensors)."""
    per_epoch = len(loader)
    return [(i // per_epoch, loaderlab.fingerprint(x, y)) for i, (x, y) in enumerate(stream(loader, n))]


def stream(loader, n):
    """The first `n` batches of `loader`, pass after pass."""
    while True:
        for batch in loader:
            yield batch
            n -= 1
            if n == 0:
                return


def test_the_modules_batches_are_the_commands_at_0_and_2_workers(run):
    file, steps = run
    assert len(steps) == 2
    for condition, timed in steps.items():
        assert len(timed) == 12
        with loaderlab.Loader.from_experiment(file, condition) as loader:
            assert len(loader) == 9
            got = batches(loader, BATCHES)
        # The run's timed steps come after its 3 warm-up steps.
        assert got[3:] == timed, condition
    # Every worker count, the same batches; and they are not all alike.
    assert len({fp for _, fp in got}) == BATCHES


def test_keywords_take_the_files_tables(run):
    file, steps = run
    timed = next(iter(steps.values()))
    loader = loaderlab.Loader(
        dataset={"kind": "synthetic", "synthetic_size": 600},
        batch_size=64,
        num_workers=2,
        # The command's defaults (DataLoader's are False).
        shuffle=True,
        drop_last=True,
        seed=5,
    )
    assert batches(loader, BATCHES)[3:] == timed
    # An override layered as --set does.
    other = loaderlab.Loader.from_experiment(file, seed=6)
    assert batches(other, 4) != batches(loaderlab.Loader.from_experiment(file), 4)


def test_set_epoch_gives_that_epochs_batches(run):
    file, _ = run
    whole = batches(loaderlab.Loader.from_experiment(file, workers=2), 18)
    loader = loaderlab.Loader.from_experiment(file, workers=2)
    loader.set_epoch(1)
    second = [loaderlab.fingerprint(x, y) for x, y in loader]
    assert second == [fp for e, fp in whole[9:18]]
    # A pass left early: the next pass is the next epoch.
    loader = loaderlab.Loader.from_experiment(file, workers=2)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    assert [loaderlab.fingerprint(x, y) for x, y in loader] == [fp for e, fp in whole[9:18]]


def example():
    """examples/train_with_loaderlab.py as a module (its SmallCNN is the seed's network)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_with_loaderlab", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def train(batches):
    torch.manual_seed(0)
    model = example().SmallCNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for images, labels in batches:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_training_on_the_loader_matches_training_on_the_commands_batches(run):
    file, steps = run
    timed = next(iter(steps.values()))
    # The command's batches, collected: copies kept, each checked against the run's steps.
    collected = [
        (x.clone(), y.clone()) for x, y in stream(loaderlab.Loader.from_experiment(file, workers=0), 20)
    ]
    assert [loaderlab.fingerprint(x, y) for x, y in collected[3:BATCHES]] == [fp for _, fp in timed]
    want = train(collected)
    # Streamed: 2 workers, every tensor in a loaderlab buffer, freed and rebuilt into as
    # training goes on.
    got = train(stream(loaderlab.Loader.from_experiment(file, workers=2), 20))
    assert len(got) == 20
    assert got == want


def rss_kb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_tensors_share_loaderlab_buffers_and_memory_stays_flat():
    loader = loaderlab.Loader(
        dataset={"kind": "synthetic", "synthetic_size": 2048}, batch_size=64, num_workers=2
    )
    seen = 0
    before = None
    peak = 0
    while seen < 2000:
        for images, labels in loader:
            ptr = images.data_ptr()
            assert any(start <= ptr < start + size for start, size in loader.buffers()), (
                "a tensor outside loaderlab's buffers: copied"
            )
            assert images.shape == (64, 1, 28, 28) and images.dtype == torch.float32
            assert labels.dtype == torch.int64
            seen += 1
            if seen == 200:
                before = rss_kb()
            elif seen > 200:
                peak = max(peak, rss_kb())
            if seen == 2000:
                break
    # Buffers are reused: 2 workers × prefetch 2 in the loader, plus the batch the loop holds
    # while the next is taken.
    assert len(loader.buffers()) <= 2 * 2 + 2
    assert peak < before * 1.05, f"RSS grew from {before} kB to {peak} kB over 1,800 batches"


def test_a_tensor_kept_keeps_its_batch():
    loader = loaderlab.Loader(
        dataset={"kind": "synthetic", "synthetic_size": 640}, batch_size=64, num_workers=2
    )
    kept = []
    for images, labels in loader:
        kept.append((images, labels, loaderlab.fingerprint(images, labels)))
    for images, labels in loader:  # the next epoch, built while the first epoch's are held
        pass
    assert all(loaderlab.fingerprint(x, y) == fp for x, y, fp in kept)
    assert len({fp for _, _, fp in kept}) == len(kept) == 10


@pytest.mark.parametrize(
    "kwargs, key, error",
    [
        ({"num_workrs": 2}, "unexpected keyword argument 'num_workrs'", TypeError),
        ({"workers": 2}, "num_workers", TypeError),
        ({"num_workers": -1}, "num_workers", ValueError),
        ({"batch_size": "many"}, "batch_size", TypeError),
        ({"batch_size": 0}, "batch_size", ValueError),
        ({"dataset": {"kind": "nope"}}, "dataset.kind", ValueError),
        ({"transforms": [{"op": "blur"}]}, "transforms", ValueError),
        ({"prefetch_factor": object(), "num_workers": 2}, "prefetch_factor", TypeError),
        ({"prefetch_factor": 2}, "prefetch_factor", ValueError),
        ({"shuffle": True, "sampler": [0, 1]}, "mutually exclusive", ValueError),
        ({"dataset": ["synthetic"]}, "dataset: a list", ValueError),
    ],
)
def test_a_bad_argument_names_its_key(kwargs, key, error):
    kwargs = {"dataset": {"kind": "synthetic", "synthetic_size": 64}, **kwargs}
    with pytest.raises(error, match=key.replace(".", r"\.").replace("[", r"\[")):
        loaderlab.Loader(**kwargs)


def test_from_experiment_names_the_file_and_the_condition(run, tmp_path):
    file, _ = run
    with pytest.raises(FileNotFoundError, match="missing.toml"):
        loaderlab.Loader.from_experiment(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="condition"):
        loaderlab.Loader.from_experiment(file, "no-such-condition")
    with pytest.raises(ValueError, match=r"--set loader\.workers=-3"):
        loaderlab.Loader.from_experiment(file, workers=-3)


def image_folder(root):
    from PIL import Image

    for c in range(2):
        (root / f"class{c}").mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (8, 8), (40 * i, 20 * c, 7)).save(root / f"class{c}" / f"{i}.png")
    (root / "class1" / "2.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not an image" * 10)
    return root / "class1" / "2.png"


@pytest.mark.parametrize("workers", [0, 2])
def test_a_corrupt_image_raises_with_its_path_or_is_skipped(tmp_path, workers):
    bad = image_folder(tmp_path / "images")
    dataset = {"kind": "image_folder", "root": str(tmp_path / "images")}
    settings = dict(
        transforms=[{"op": "resize", "size": [8, 8]}, {"op": "to_tensor"}],
        batch_size=4,
        num_workers=workers,
        shuffle=False,
    )
    loader = loaderlab.Loader(dataset=dataset, **settings)
    with pytest.raises(loaderlab.LoaderError, match=str(bad)):
        for _ in loader:
            pass
    loader.close()
    skipping = loaderlab.Loader(dataset={**dataset, "on_error": "skip"}, **settings)
    assert sum(len(y) for _, y in skipping) == 8


def test_the_gil_is_released_while_a_batch_is_built():
    # workers = 0: the calling thread builds each batch (2 ms of CPU work per image, 8 per batch).
    loader = loaderlab.Loader(
        dataset={"kind": "synthetic", "synthetic_size": 64},
        transforms=[{"op": "cpu_work", "us": 2000}, {"op": "to_tensor"}],
        batch_size=8,
        num_workers=0,
    )
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    started = time.monotonic()
    for _ in loader:
        pass
    took = time.monotonic() - started
    stop.set()
    t.join()
    # 8 batches × 16 ms held the GIL for all of it were it not released: the other thread
    # would barely run.
    assert took > 0.1
    assert ticks > took * 1000 * 0.3, f"{ticks} ticks in {took:.3f} s"


CTRL_C = """
import os, sys, gc, time, loaderlab
# torch is imported before the Ctrl-C can land: an import cut short by it (the loader imports
# torch on its first pass) leaves torch's own threads and state behind, which is not the
# loader's to clean up.
import torch

def threads():
    return len(os.listdir("/proc/self/task"))

def names():
    tasks = "/proc/self/task"
    return ",".join(open(f"{tasks}/{t}/comm").read().strip() for t in sorted(os.listdir(tasks)))

before = threads()
loader = loaderlab.Loader(
    dataset={"kind": "synthetic", "synthetic_size": 4096},
    transforms=[{"op": "cpu_work", "us": 500}, {"op": "to_tensor"}],
    batch_size=16, num_workers=2,
)
print("started", flush=True)
try:
    while True:
        for images, labels in loader:
            pass
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
del loader
gc.collect()
# A joined thread is woken for before the kernel has finished removing it from
# /proc/self/task: on a loaded machine it can still be listed for a moment. One that was
# never joined stays there.
deadline = time.monotonic() + 5
while threads() > before and time.monotonic() < deadline:
    time.sleep(0.01)
print("threads", before, threads(), names(), flush=True)
"""


def test_ctrl_c_raises_keyboard_interrupt_and_leaves_no_thread():
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(CTRL_C)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline().strip() == "started"
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        # Never leave it behind: a child that ignored the Ctrl-C keeps two cores busy.
        child.kill()
        out, err = child.communicate()
        raise AssertionError(f"the Ctrl-C did not stop the loop within 60 s: {out}{err}") from None
    assert child.returncode == 0, err
    lines = out.splitlines()
    assert lines[0] == "KeyboardInterrupt"
    _, before, after, names = lines[1].split(maxsplit=3)
    assert before == after, f"threads before {before}, after {after}: {names}"


def test_an_interpreter_that_exits_mid_pass_stops_the_workers_cleanly():
    # Never closed, left mid-pass with batches still held: the atexit hook joins the workers.
    script = textwrap.dedent(
        """
        import loaderlab
        loader = loaderlab.Loader(dataset={"kind": "synthetic", "synthetic_size": 4096}, batch_size=32, num_workers=2)
        held = [batch for _, batch in zip(range(5), loader)]
        print("leaving", len(held), flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "leaving 5"
    assert done.stderr == ""


def test_the_command_is_the_binarys(run, tmp_path):
    file, _ = run
    assert command("validate", str(file)).returncode == 0
    bad = tmp_path / "bad.toml"
    bad.write_text("[loader]\nworkers = -1\n")
    done = command("validate", str(bad))
    assert done.returncode == 2
    assert "loader.workers" in done.stderr
    version = command("--version")
    assert version.returncode == 0 and "loaderlab" in version.stdout
    # The script pip puts beside the interpreter.
    script = Path(sys.executable).parent / "loaderlab"
    assert script.exists()
    assert subprocess.run([script, "--help"], capture_output=True).returncode == 0


def png_folder(root, n=640, classes=4, size=(30, 26)):
    """`n` PNG images in `classes` class folders, each of its own colours."""
    from PIL import Image

    rng = torch.Generator().manual_seed(1)
    for i in range(n):
        folder = root / f"class{i % classes}"
        folder.mkdir(parents=True, exist_ok=True)
        pixels = torch.randint(0, 256, (size[1], size[0], 3), generator=rng, dtype=torch.uint8)
        Image.fromarray(pixels.numpy()).save(folder / f"{i:04d}.png")
    return root


def test_the_report_gives_the_replacement_as_code_and_it_builds_the_native_batches(tmp_path):
    # The user's DataLoader (the pytorch engine, the baseline) beside ours at 0 workers on an
    # ImageFolder: ours builds the seed's chain many times faster, so the report shows the change
    # as code — the same dataset object, one line changed.
    import torchvision
    import torchvision.transforms as T

    root = png_folder(tmp_path / "images")
    file = tmp_path / "engines.toml"
    file.write_text(
        EXPERIMENT.replace('"loader.workers" = [0, 2]', '"loader.engine" = ["pytorch", "native"]')
        .replace('kind = "synthetic"\nsynthetic_size = 600', f'kind = "image_folder"\nroot = "{root}"')
        .replace("timed_steps = 12", "timed_steps = 6")
        .replace("rounds = 1", "rounds = 2")
        + f'\n[pytorch]\npython = "{sys.executable}"\n\n[report]\nbaseline = "engine=pytorch"\n'
    )
    done = command("run", str(file), "--out", str(tmp_path / "out"), "--quiet")
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    code = result["analysis"]["engine_switch"]["adopt"]
    assert code["yours"] == "engine=pytorch" and code["native"] == "engine=native"
    assert code["dataloader"].startswith("loader = torch.utils.data.DataLoader(dataset, batch_size=64,")
    assert code["loader"].startswith("loader = loaderlab.Loader(dataset, batch_size=64,"), code["loader"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Adopt loaderlab's loader" in report
    assert code["loader"] in report
    headline = report.split("\n", 3)[2]
    assert f'loaderlab.Loader.from_experiment("{file}", "engine=native")' in headline, headline

    with open(tmp_path / "out" / "steps.csv", newline="") as f:
        native = [r for r in csv.DictReader(f) if r["condition"] == "engine=native"]
    first = min(int(r["run"]) for r in native)
    want = [r["fingerprint"] for r in sorted(native, key=lambda r: int(r["step"])) if int(r["run"]) == first]
    assert len(want) == 6
    # The user's own ImageFolder with the seed's Compose, as their code builds it.
    chain = T.Compose([T.RandomResizedCrop(28, scale=(0.75, 1.0)), T.RandomRotation(15), T.ToTensor()])
    dataset = torchvision.datasets.ImageFolder(str(root), transform=chain)
    for form in ("loader", "from_experiment"):
        scope = {}
        exec(code[form], {"loaderlab": loaderlab, "dataset": dataset}, scope)
        got = [loaderlab.fingerprint(x, y) for x, y in stream(scope["loader"], 9)]
        assert got[3:] == want, form


@pytest.mark.parametrize("which", ["loaderlab", "dataloader"])
def test_the_example_trains_and_its_trace_is_diagnosed(tmp_path, which):
    trace = tmp_path / "trace.json"
    args = ["--loader", which, "--synthetic", "512", "--batch-size", "64", "--workers", "2"]
    args += ["--warmup", "2", "--steps", "5", "--profile-steps", "4", "--trace", str(trace)]
    done = subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{which}, 2 workers:" in done.stdout
    diagnosed = command("diagnose", str(trace), "--out", str(tmp_path / "d"), "--quiet")
    assert diagnosed.returncode == 0, diagnosed.stderr
    (rank,) = json.loads((tmp_path / "d" / "result.json").read_text())["ranks"]
    assert rank["steps"] == 4 and rank["wait_span"] == "batch_wait"
