"""loaderlab.watch: the user's own loop watched into a results folder that `report`, `verify`,
`compare` and `diagnose` read.

A CPU training loop over a Dataset with a planted per-item cost (a transform of the user's own that
spins 1 ms per image), watched at 0 and 2 workers.
"""

import csv
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

import loaderlab

PLANT_MS = 2.0
STEPS = 60


class Planted:
    """The planted cost: 1 ms of CPU per image."""

    def __call__(self, x):
        end = time.perf_counter() + PLANT_MS / 1e3
        while time.perf_counter() < end:
            pass
        return x


class Scale:
    """A cheap transform beside it."""

    def __call__(self, x):
        return x * 0.5


class Compose:
    """torchvision's Compose as users write theirs: a list of transforms."""

    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, x):
        for t in self.transforms:
            x = t(x)
        return x


class Items(Dataset):
    """Small images with labels, through the transform."""

    def __init__(self, n=512):
        g = torch.Generator().manual_seed(0)
        self.x = torch.rand(n, 3, 16, 16, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)
        self.transform = Compose([Scale(), Planted()])

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.transform(self.x[i]), int(self.y[i])


def train(loader, out, steps=STEPS, fail_at=None, **kw):
    """The user's loop, watched: a small MLP with SGD on the CPU, on one torch thread."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    done = 0
    with loaderlab.watch(loader, out=str(out), block_steps=10, **kw) as w:
        while done < steps:
            for x, y in w:
                with w.mark("forward_backward"):
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
                done += 1
                if done == fail_at:
                    raise RuntimeError("the loop failed")
                if done == steps:
                    break
    return done


def command(*args):
    """`python -m loaderlab ARGS`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOADERLAB_")}
    return subprocess.run([sys.executable, "-m", "loaderlab", *args], capture_output=True, text=True, env=env)


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def watched(tmp_path_factory):
    """The job at 0 and at 2 workers, each watched into its own folder."""
    tmp = tmp_path_factory.mktemp("watch")
    out = {}
    for workers in (0, 2):
        loader = DataLoader(
            Items(), batch_size=8, shuffle=True, num_workers=workers, persistent_workers=workers > 0
        )
        out[workers] = tmp / f"w{workers}"
        assert train(loader, out[workers]) == STEPS
    return out


def test_one_row_per_step_and_the_loader_given_back(watched):
    steps = rows(watched[0] / "steps.csv")
    assert len(steps) == STEPS
    assert {r["condition"] for r in steps} == {"job"}
    assert all(float(r["step_ms"]) >= float(r["batch_wait_ms"]) > 0 for r in steps)
    assert all(r["images"] == "8" for r in steps)
    # 512 items / 8 = 64 batches an epoch: all 60 steps in epoch 0, blocks of 10.
    assert [r["run"] for r in steps[::10]] == ["0", "1", "2", "3", "4", "5"]
    marks = rows(watched[0] / "marks.csv")
    assert len(marks) == STEPS and {m["name"] for m in marks} == {"forward_backward"}
    for name in ("plan.json", "runs.csv", "run.json", "config.resolved.toml", "stages.json"):
        assert (watched[0] / name).is_file(), name


def test_the_dataset_and_loader_are_given_back():
    ds = Items(16)
    loader = DataLoader(ds, batch_size=4)
    before = (ds.transform, loader.collate_fn)

    with _tmp_watch(loader) as w:
        for _ in w:
            pass
    assert (ds.transform, loader.collate_fn) == before
    assert "__getitems__" not in ds.__dict__
    x, y = next(iter(loader))
    assert x.shape == (4, 3, 16, 16)


class _tmp_watch:
    """A watch into a fresh temporary folder."""

    def __init__(self, loader):
        import tempfile

        self.dir = tempfile.mkdtemp()
        self.w = loaderlab.watch(loader, out=os.path.join(self.dir, "w"), block_steps=2)

    def __enter__(self):
        return self.w

    def __exit__(self, *exc):
        self.w.close()


def test_report_finds_the_0_worker_job_highly_input_bound_and_names_the_planted_transform(watched):
    for workers in (0, 2):
        r = command("report", str(watched[workers]))
        assert r.returncode == 0, r.stderr
        r = command("verify", str(watched[workers]))
        assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads((watched[0] / "result.json").read_text())
    job = result["analysis"]["conditions"][0]
    assert job["judgement"]["input_bound"] == "highly", job["judgement"]
    stages = result["analysis"]["profiles"][0]["stages"]
    largest = max(stages, key=lambda s: s["us_per_image"])
    assert largest["stage"] == "Planted", stages
    # 1 ms per image, as planted (the clocks on one item in 16).
    assert 0.8 * PLANT_MS * 1e3 < largest["us_per_image"] < 3 * PLANT_MS * 1e3, largest
    md = (watched[0] / "report.md").read_text()
    assert "Inside your loader" in md and "`Planted`" in md and "`Scale`" in md
    # With workers, the hand-off is a stage of its own.
    stages2 = json.loads((watched[2] / "result.json").read_text())["analysis"]["profiles"][0]["stages"]
    assert any(s["stage"] == "hand_off" for s in stages2), stages2


def test_compare_finds_the_2_worker_job_faster(watched, tmp_path):
    r = command("compare", str(watched[0]), str(watched[2]), "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    c = json.loads((tmp_path / "compare.json").read_text())
    figures = c["conditions"][0]["figures"]
    speed = next(x for x in figures if x["figure"] == "img_per_s")
    assert speed["ratio"]["low"] > 1.0, speed
    share = next(x for x in figures if x["figure"] == "wait_share")
    assert share["ratio"]["high"] < 1.0, share


def test_a_loop_that_raises_keeps_its_rows(tmp_path):
    loader = DataLoader(Items(256), batch_size=8)
    with pytest.raises(RuntimeError, match="the loop failed"):
        train(loader, tmp_path / "died", fail_at=25)
    assert len(rows(tmp_path / "died" / "steps.csv")) == 25
    r = command("report", str(tmp_path / "died"))
    assert r.returncode == 0, r.stderr
    runs = rows(tmp_path / "died" / "runs.csv")
    assert [r["interrupted"] for r in runs] == ["false", "false", "true"]


def test_a_killed_job_keeps_its_rows_and_report_completes_the_folder(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, time, torch
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from test_watch import Items
            import loaderlab
            from torch.utils.data import DataLoader
            w = loaderlab.watch(DataLoader(Items(256), batch_size=8), out={str(tmp_path / "killed")!r}, block_steps=5)
            for k, batch in enumerate(w):
                if k == 12:
                    time.sleep(1.2)   # past the once-a-second flush
                if k == 14:
                    os._exit(3)       # no atexit, no close
            """
        )
    )
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    assert not (tmp_path / "killed" / "plan.json").exists()
    assert len(rows(tmp_path / "killed" / "steps.csv")) >= 12
    r = command("report", str(tmp_path / "killed"))
    assert r.returncode == 0, r.stderr
    assert "did not end in order" in (tmp_path / "killed" / "report.md").read_text()


def test_a_subset_is_timed_through_its_dataset(tmp_path):
    ds = Items(64)
    train_part, _ = torch.utils.data.random_split(ds, [48, 16], generator=torch.Generator().manual_seed(0))
    with loaderlab.watch(DataLoader(train_part, batch_size=8), out=str(tmp_path / "subset"), every=1) as w:
        for _ in w:
            pass
    assert "__getitems__" not in ds.__dict__ and not hasattr(type(ds), "__getitems__")
    stages = json.loads((tmp_path / "subset" / "stages.json").read_text())
    assert [s["name"] for s in stages["stages"]] == ["__getitem__ (own code)", "Scale", "Planted", "collate"]
    assert stages["stages"][2]["count"] == 48


def test_workers_started_by_spawn_carry_the_clocks_too(tmp_path):
    """A spawned worker (macOS's and Windows' default; forkserver, Python 3.14's on Linux, the
    same way) gets the dataset pickled with the watch's wrappers."""
    loader = DataLoader(Items(64), batch_size=8, num_workers=2, multiprocessing_context="spawn")
    with loaderlab.watch(loader, out=str(tmp_path / "spawn"), every=1) as w:
        assert sum(1 for _ in w) == 8
    stages = json.loads((tmp_path / "spawn" / "stages.json").read_text())
    assert [(s["name"], s["count"]) for s in stages["stages"]] == [
        ("__getitem__ (own code)", 64),
        ("Scale", 64),
        ("Planted", 64),
        ("collate", 8),
    ]
    assert stages["handoff_batches"] == 8


def test_out_holding_another_run_is_refused(watched):
    loader = DataLoader(Items(16), batch_size=4)
    with pytest.raises(ValueError, match="another watched run"):
        loaderlab.watch(loader, out=str(watched[0]))


def test_a_loaderlab_loader_gives_its_stage_clocks(tmp_path):
    loader = loaderlab.Loader(
        {"kind": "synthetic", "synthetic_size": 256},
        transforms=[{"op": "random_resized_crop", "size": 28, "scale": [0.75, 1.0]}, {"op": "to_tensor"}],
        batch_size=16,
        num_workers=2,
    )
    steps = 0
    with loaderlab.watch(loader, out=str(tmp_path / "native"), block_steps=4) as w:
        for _ in range(2):
            for _ in w:
                steps += 1
    assert steps == 32
    assert command("report", str(tmp_path / "native")).returncode == 0
    result = json.loads((tmp_path / "native" / "result.json").read_text())
    names = [s["stage"] for s in result["analysis"]["profiles"][0]["stages"]]
    assert "read_decode" in names and "random_resized_crop" in names, names
    steps_csv = rows(tmp_path / "native" / "steps.csv")
    assert {r["epoch"] for r in steps_csv} == {"0", "1"}


def test_the_command_line_form_finds_the_scripts_dataloader(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            from test_watch import Items
            from torch.utils.data import DataLoader
            loader = DataLoader(Items(64), batch_size=8)
            n = 0
            for epoch in range(2):
                for x, y in loader:
                    n += 1
            print("steps", n)
            """
        )
    )
    out = tmp_path / "cli"
    r = command("watch", "--out", str(out), "--", sys.executable, str(script))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "steps 16" in r.stdout
    assert len(rows(out / "steps.csv")) == 16
    assert (out / "plan.json").is_file()
    assert command("verify", str(out)).returncode == 0
    # A command that iterates no DataLoader leaves nothing to read: said, exit 1.
    quiet = tmp_path / "quiet.py"
    quiet.write_text("print('no loader')\n")
    r = command("watch", "--out", str(tmp_path / "none"), "--", sys.executable, str(quiet))
    assert r.returncode == 1 and "iterated no torch DataLoader" in r.stderr, r.stderr


def test_diagnose_emit_on_a_watched_folder_writes_a_valid_experiment(watched, tmp_path):
    emitted = tmp_path / "replay.toml"
    r = command("diagnose", str(watched[0]), "--out", str(tmp_path / "d"), "--emit", str(emitted))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "highly input-bound" in r.stdout, r.stdout
    r = command("validate", str(emitted))
    assert r.returncode == 0, r.stdout + r.stderr
