//! The replay is the job: a real PyTorch job on the CPU, traced with torch.profiler at 0, 1 and
//! 2 workers; its 0-worker trace → `diagnose --emit` → the emitted experiment, pointed at the
//! job's own Dataset, replayed on the pytorch engine at 0, 1 and 2 workers. Each worker count's
//! replayed waiting share lies within 5 points of the job's own traced share there, and the
//! knee (the fewest workers under 5 %) is the same.
//!
//! It needs an interpreter with torch and torchvision (`.ci/run` installs them into
//! `target/venv`); it measures real clocks, so it runs in the validation run.

use std::path::Path;
use std::process::Command as StdCommand;

use serde_json::Value;

mod common;
use common::loaderlab;

/// The job: PNG images decoded by PIL, a torchvision chain and a planted 2 ms of per-item Python
/// work (a Dataset of the job's own), a small CNN trained with Adam on the CPU with one torch
/// thread, traced as the README shows (`record_shapes=True`, a schedule, `ProfilerStep#N`).
/// `python job.py WORKERS TRACE` trains with WORKERS DataLoader workers and writes TRACE.
const JOB: &str = r#"
import io
import sys
import time

import torch
import torchvision.transforms as T
from PIL import Image
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.data import DataLoader, Dataset

ITEM_US = 2000.0


def spin(us):
    end = time.thread_time() + us / 1e6
    while time.thread_time() < end:
        pass


class Pngs(Dataset):
    def __init__(self):
        g = torch.Generator().manual_seed(0)
        pixels = torch.randint(0, 256, (16, 40, 40, 3), dtype=torch.uint8, generator=g)
        self.files = []
        for p in pixels:
            buf = io.BytesIO()
            Image.fromarray(p.numpy()).save(buf, format="PNG")
            self.files.append(buf.getvalue())
        self.chain = T.Compose(
            [T.RandomCrop(32), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize([0.5] * 3, [0.25] * 3)]
        )

    def __len__(self):
        return 2048

    def __getitem__(self, i):
        image = Image.open(io.BytesIO(self.files[i % 16])).convert("RGB")
        spin(ITEM_US)
        return self.chain(image), i % 10


def make_dataset():
    return Pngs()


def main():
    workers, trace = int(sys.argv[1]), sys.argv[2]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 96, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(96, 192, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(192 * 8 * 8, 10),
    )
    optimizer = torch.optim.Adam(model.parameters())
    loader = DataLoader(
        make_dataset(), batch_size=32, shuffle=True, drop_last=True, num_workers=workers,
        persistent_workers=workers > 0,
    )
    it = iter(loader)
    for _ in range(4):
        next(it)
    with profile(
        activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=20), record_shapes=True
    ) as prof:
        for _ in range(22):
            x, y = next(it)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            prof.step()
    prof.export_chrome_trace(trace)


if __name__ == "__main__":
    main()
"#;

/// `diagnose` on `trace` (writing `emit` too, when given): its first rank.
fn diagnosed(trace: &Path, out: &Path, emit: Option<&Path>) -> Value {
    let mut cmd = loaderlab();
    cmd.arg("diagnose")
        .arg(trace)
        .arg("--out")
        .arg(out)
        .arg("--quiet");
    if let Some(file) = emit {
        cmd.arg("--emit").arg(file);
    }
    let output = cmd.output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    r["ranks"][0].clone()
}

/// The fewest workers whose share is under 5 %, if any.
fn knee(shares: &[(u64, f64)]) -> Option<u64> {
    shares.iter().find(|(_, s)| *s < 0.05).map(|(w, _)| *w)
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn a_traced_cpu_job_replayed_on_its_own_dataset_gives_back_its_waiting_share() {
    let Some(python) = common::torch_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("job.py"), JOB).unwrap();
    // The job itself, traced at each worker count.
    let mut traced = Vec::new();
    for workers in [0u64, 1, 2] {
        let trace = dir.path().join(format!("trace_{workers}.json"));
        let o = StdCommand::new(&python)
            .arg("job.py")
            .arg(workers.to_string())
            .arg(&trace)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let emit = (workers == 0).then(|| dir.path().join("replay.toml"));
        let rank = diagnosed(
            &trace,
            &dir.path().join(format!("diagnosed_{workers}")),
            emit.as_deref(),
        );
        assert_eq!(rank["classified_by"], "waiting", "a CPU trace: {rank}");
        assert_eq!(
            rank["batch_size"], 32,
            "read off the trace's shapes: {rank}"
        );
        traced.push((workers, rank["share"].as_f64().unwrap()));
        if workers == 0 {
            // A CPU trace: all host, no device.
            assert_eq!(rank["stand_in_step_ms"].as_f64(), Some(0.0), "{rank}");
            let host = rank["stand_in_host_ms"].as_f64().unwrap();
            let without = rank["step_without_wait_ms"].as_f64().unwrap();
            assert!((host - without).abs() < 1e-9, "{rank}");
        }
    }
    // The emitted experiment, pointed at the job's own Dataset, replayed at each worker count.
    let file = dir.path().join("replay.toml");
    let emitted = std::fs::read_to_string(&file).unwrap();
    assert!(
        emitted.contains("# Run: loaderlab replay.toml"),
        "{emitted}"
    );
    assert!(emitted.contains("step_ms = 0 "), "{emitted}");
    assert!(emitted.contains("batch_size = 32 "), "{emitted}");
    let edited = emitted
        .replace(
            "# [pytorch]\n# python = \"/path/to/venv/bin/python\"",
            &format!("[pytorch]\npython = \"{}\"", python.display()),
        )
        .replace(
            "# dataset = \"my_data.py:make_dataset\"",
            "dataset = \"job.py:make_dataset\"",
        )
        .replace(
            "warmup_steps = 10\ntimed_steps = 50\nrounds = 3",
            "warmup_steps = 4\ntimed_steps = 20\nrounds = 2\nprofile = false\nheadroom = false",
        )
        .replace(
            "\"loader.workers\" = [0, 2, 4]",
            "\"loader.workers\" = [0, 1, 2]",
        );
    assert_ne!(edited, emitted);
    std::fs::write(&file, edited).unwrap();
    let out = dir.path().join("replayed");
    common::run_file(&file, &out, |cmd| {
        cmd.current_dir(dir.path());
    });
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let mut replayed = Vec::new();
    for c in r["analysis"]["conditions"].as_array().unwrap() {
        assert_eq!(c["judgement"]["classified_by"], "waiting", "all host: {c}");
        replayed.push((
            c["workers"].as_u64().unwrap(),
            c["judgement"]["share"].as_f64().unwrap(),
        ));
    }
    replayed.sort_by_key(|(w, _)| *w);
    eprintln!("| workers | the job's own trace | its replay |\n|---|---|---|");
    for ((w, t), (_, p)) in traced.iter().zip(&replayed) {
        eprintln!("| {w} | {:.1} % | {:.1} % |", t * 100.0, p * 100.0);
    }
    assert_eq!(replayed.len(), 3, "{replayed:?}");
    for ((w, t), (_, p)) in traced.iter().zip(&replayed) {
        assert!(
            (t - p).abs() <= 0.05,
            "{w} workers: the job waited {t:.3} of its steps, its replay {p:.3}"
        );
    }
    assert_eq!(knee(&traced), knee(&replayed), "{traced:?} {replayed:?}");
}
