//! Running an experiment as separate tasks and merging them: `run --only-run`, `merge` (and its
//! refusals), `slurm --dry-run`, and a real single-node Slurm cluster (skipped with a message
//! when Slurm is not installed, except under `CI=true`, where `.ci/run` installs it and its
//! absence fails the test).

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;
use std::time::{Duration, Instant};

mod common;
use common::loaderlab;

const TINY: &str = r#"
[experiment]
name = "tiny"
seed = 3
[dataset]
kind = "synthetic"
synthetic_size = 256
[loader]
batch_size = 16
[device]
kind = "cpu"
threads = 1
[protocol]
warmup_steps = 1
timed_steps = 4
rounds = 2
profile_steps = 2
[matrix]
"loader.workers" = [0, 1]
"#;

fn task(dir: &Path, file: &Path, name: &str, args: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let output = loaderlab()
        .arg("run")
        .arg(file)
        .args(args)
        .arg("-q")
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

#[test]
fn only_run_tasks_merge_into_a_folder_that_verifies_and_merge_refuses_mismatches() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tiny.toml");
    std::fs::write(&file, TINY).unwrap();
    let a = task(
        dir.path(),
        &file,
        "a",
        &["--only-run", "0", "--only-run", "3", "--with-profile"],
    );
    let b = task(
        dir.path(),
        &file,
        "b",
        &["--only-run", "1", "--with-profile"],
    );
    let c = task(dir.path(), &file, "c", &["--only-run", "2"]);
    let runs = std::fs::read_to_string(a.join("runs.csv")).unwrap();
    assert_eq!(
        runs.lines().count(),
        3,
        "task a ran runs 0 and 3 only:\n{runs}"
    );

    // Missing run 2.
    let output = loaderlab()
        .arg("merge")
        .arg(&a)
        .arg(&b)
        .arg("--out")
        .arg(dir.path().join("m1"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("missing runs 2"), "{stderr}");
    // Run 1 twice.
    let output = loaderlab()
        .arg("merge")
        .arg(&a)
        .arg(&b)
        .arg(&b)
        .arg(&c)
        .arg("--out")
        .arg(dir.path().join("m2"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("duplicated: run 1"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A task of a different configuration is refused, naming it.
    let other = task(
        dir.path(),
        &file,
        "other",
        &["--only-run", "2", "--set", "optimizer.lr=0.01"],
    );
    let output = loaderlab()
        .arg("merge")
        .arg(&a)
        .arg(&b)
        .arg(&other)
        .arg("--out")
        .arg(dir.path().join("m3"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success()
            && stderr.contains("other")
            && stderr.contains("different configuration"),
        "{stderr}"
    );

    // The right tasks merge into a folder with the same structure as a single-machine run.
    let merged = dir.path().join("merged");
    loaderlab()
        .arg("merge")
        .arg(&a)
        .arg(&b)
        .arg(&c)
        .arg("--out")
        .arg(&merged)
        .assert()
        .success();
    loaderlab().arg("verify").arg(&merged).assert().success();
    let single = dir.path().join("single");
    loaderlab()
        .arg(&file)
        .arg("-q")
        .arg("--out")
        .arg(&single)
        .assert()
        .success();
    let names = |d: &Path| {
        let mut v: Vec<String> = walk(d)
            .into_iter()
            .map(|p| p.strip_prefix(d).unwrap().display().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&merged), names(&single));
    let report = std::fs::read_to_string(merged.join("report.md")).unwrap();
    assert!(
        report.contains("separate tasks"),
        "the report says the runs ran separately"
    );
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("result.json")).unwrap())
            .unwrap();
    assert_eq!(result["run"]["tasks"].as_array().unwrap().len(), 3);
    assert!(result["run"]["tasks"][0]["host"].is_string());
}

fn walk(d: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn the_resolved_experiment_plans_the_same_runs() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let output = loaderlab()
        .args([
            "slurm",
            "experiments/dataloader_workers.toml",
            "--dry-run",
            "--partition",
            "gpu",
            "--gres",
            "gpu:1",
            "--time",
            "00:20:00",
            "--out",
        ])
        .arg(&shared)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let script = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "#SBATCH --array=0-5",
        "#SBATCH --partition=gpu",
        "#SBATCH --gres=gpu:1",
        "#SBATCH --time=00:20:00",
        "--only-run",
        "LOADERLAB_",
    ] {
        assert!(script.contains(needle), "{needle} missing:\n{script}");
    }
    let plan = |file: &Path| -> serde_json::Value {
        let out = loaderlab()
            .arg("plan")
            .arg(file)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let original = plan(Path::new("experiments/dataloader_workers.toml"));
    let resolved = plan(&shared.join("slurm/experiment.toml"));
    assert_eq!(original["runs"], resolved["runs"]);
    assert_eq!(original["conditions"], resolved["conditions"]);
}

fn installed(tool: &str) -> bool {
    StdCommand::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Stops the test cluster however the test ends.
struct Cluster(PathBuf);

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = StdCommand::new("bash")
            .arg("tests/slurm/cluster.sh")
            .arg("stop")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_real_slurm_job_array_runs_and_merges() {
    let missing: Vec<&str> = ["slurmctld", "slurmd", "sbatch", "squeue", "munged"]
        .into_iter()
        .filter(|t| !installed(t))
        .collect();
    if !missing.is_empty() {
        let why = format!(
            "Slurm is not installed here (missing {}); `apt-get install slurm-wlm munge` enables this test",
            missing.join(", ")
        );
        // CI installs Slurm (.ci/run): there a missing one is a failure, not a skip.
        common::skip(&why);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let conf_dir = dir.path().join("cluster");
    let cluster = Cluster(conf_dir.clone());
    let started = StdCommand::new("bash")
        .arg("tests/slurm/cluster.sh")
        .arg("start")
        .arg(&conf_dir)
        .output()
        .unwrap();
    assert!(
        started.status.success(),
        "cluster did not start: {}{}",
        String::from_utf8_lossy(&started.stdout),
        String::from_utf8_lossy(&started.stderr)
    );
    let conf = conf_dir.join("slurm.conf");

    // Folder names a shell would split or expand: the generated script, its #SBATCH lines and
    // the printed merge command must all survive them.
    let shared = dir.path().join("shared folder $(touch pwned)");
    let merged = dir.path().join("merged results");
    let output = loaderlab()
        .env("SLURM_CONF", &conf)
        .args(["slurm", "experiments/smoke.toml", "--out"])
        .arg(&shared)
        .arg("--set")
        .arg(format!("experiment.output='{}'", merged.display()))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let job = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(job.parse::<u64>().is_ok(), "job id {job:?}");

    let t0 = Instant::now();
    loop {
        let q = StdCommand::new("squeue")
            .env("SLURM_CONF", &conf)
            .args(["-h", "-j", &job])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&q.stdout).trim().is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(240),
            "job {job} still queued or running: {}",
            String::from_utf8_lossy(&q.stdout)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let tasks: Vec<PathBuf> = (0..4)
        .map(|k| shared.join("runs").join(format!("task-{k}")))
        .collect();
    for t in &tasks {
        if !t.join("runs.csv").is_file() {
            let logs: Vec<String> = walk(&shared.join("logs"))
                .iter()
                .map(|p| std::fs::read_to_string(p).unwrap_or_default())
                .collect();
            panic!(
                "{} has no results; task logs:\n{}",
                t.display(),
                logs.join("\n---\n")
            );
        }
    }
    assert!(
        walk(&shared.join("logs")).len() == 4,
        "each task's log lands in <shared>/logs"
    );
    // The merge command the submission printed, pasted into a shell as a user would.
    let stderr = String::from_utf8_lossy(&output.stderr);
    let hint = stderr
        .split("when it has finished: ")
        .nth(1)
        .and_then(|h| h.lines().next())
        .unwrap_or_else(|| panic!("no merge hint in {stderr}"));
    let binary = assert_cmd::cargo::cargo_bin("loaderlab");
    let pasted = hint.replacen("loaderlab", &format!("'{}'", binary.display()), 1);
    let merge = StdCommand::new("sh")
        .arg("-c")
        .arg(&pasted)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        merge.status.success(),
        "{pasted}: {}",
        String::from_utf8_lossy(&merge.stderr)
    );
    assert!(
        !dir.path().join("pwned").exists(),
        "nothing in a folder name ran"
    );
    let verify = loaderlab().arg("verify").arg(&merged).output().unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
    drop(cluster);
}
