//! From measurement to advice, with planted answers: `cpu_work` makes a known loader cost;
//! the classification, the headroom ceiling, the stage table, the worker prediction, `tune`
//! and `compare` must find what was planted. The timing tests run one at a time (a lock), so
//! they do not share the two cores with each other.

use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

mod common;
use common::{interrupt_after_rows, loaderlab, run_experiment as run};

/// Timing tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// An experiment on 28×28 synthetic images, batch 16, one compute thread, with `transforms`
/// and `rest` (matrix, protocol) appended.
fn experiment(name: &str, transforms: &str, rest: &str) -> String {
    format!(
        r#"
[experiment]
name = "{name}"
seed = 3

[dataset]
kind = "synthetic"
synthetic_size = 1024

[loader]
batch_size = 16

[model]
kind = "small_cnn"
width = 2

[device]
kind = "cpu"
threads = 1

{transforms}

{rest}
"#
    )
}

const SEED_CHAIN: &str = r#"
[[transforms]]
op = "random_resized_crop"
size = 28
scale = [0.75, 1.0]

[[transforms]]
op = "to_tensor"
"#;

fn with_cpu_work(us: f64) -> String {
    format!(
        r#"
[[transforms]]
op = "random_resized_crop"
size = 28
scale = [0.75, 1.0]

[[transforms]]
op = "cpu_work"
us = {us}

[[transforms]]
op = "to_tensor"
"#
    )
}

fn result(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap()
}

fn condition<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["analysis"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["condition"] == name)
        .unwrap_or_else(|| panic!("{name} not in {r}"))
}

/// The median compute time per step (ms) of this machine's step on the test model, measured.
fn compute_ms(dir: &Path) -> f64 {
    let out = run(
        dir,
        "calibrate",
        &experiment(
            "calibrate",
            SEED_CHAIN,
            "[protocol]\nwarmup_steps = 3\ntimed_steps = 15\nrounds = 1\nprofile = false\nheadroom = false\n",
        ),
    );
    condition(&result(&out), "default")["compute_median_ms"]
        .as_f64()
        .unwrap()
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn a_planted_loader_cost_is_classified_predicted_and_tuned() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let compute = compute_ms(dir.path());
    // Loader work per batch ≈ 0.45 of the step's compute: at 0 workers it is waited for every
    // step (highly input-bound: about 0.3 of the step), one worker hides it with room to spare
    // (at 0.6 a CI run once saw preemptions push the one-worker wait share to 5.8 %, past the
    // 5 % line), so one worker is the answer on 2 cores.
    let us = (0.45 * compute * 1e3 / 16.0).max(50.0);
    let text = experiment(
        "planted",
        &with_cpu_work(us),
        "[protocol]\nwarmup_steps = 3\ntimed_steps = 25\nrounds = 3\nprofile_steps = 24\nheadroom_steps = 10\n\n[matrix]\n\"loader.workers\" = [0, 1]\n",
    );
    let out = run(dir.path(), "planted", &text);
    let r = result(&out);
    let zero = condition(&r, "workers=0");
    let one = condition(&r, "workers=1");
    assert_eq!(zero["judgement"]["input_bound"], "highly", "{zero}");
    assert_eq!(one["judgement"]["input_bound"], "not", "{one}");
    assert_eq!(zero["judgement"]["thresholds"]["highly_input_bound"], 0.2);

    // The ceiling: the headroom run's step is the compute alone, so workers=0 reached well
    // under it and workers=1 close to it.
    let share0 = zero["headroom"]["share_of_ceiling"].as_f64().unwrap();
    let share1 = one["headroom"]["share_of_ceiling"].as_f64().unwrap();
    // (0.81 and 0.87 were seen at workers=0, its ceiling measured on a separate headroom run
    // while the machine drifted: "well under" is under 0.9 and below workers=1's by 5 points.)
    assert!(share0 < 0.9, "workers=0 reached {share0} of its ceiling");
    assert!(share1 > 0.7, "workers=1 reached {share1} of its ceiling");
    assert!(
        share1 - share0 > 0.05,
        "workers=0 {share0}, workers=1 {share1}"
    );
    let bound = zero["speedup_bound"].as_f64().unwrap();
    let wait = zero["wait_share"].as_f64().unwrap();
    assert!((bound - 1.0 / (1.0 - wait)).abs() < 1e-9);

    // The stage table finds the planted cost under its own name.
    let profile = r["analysis"]["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["condition"] == "workers=0")
        .unwrap();
    let stages = profile["stages"].as_array().unwrap();
    let names: Vec<&str> = stages
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    for want in [
        "read_decode",
        "random_resized_crop",
        "cpu_work",
        "to_tensor_into_batch",
        "fingerprint",
        "other",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    let planted = stages.iter().find(|s| s["stage"] == "cpu_work").unwrap();
    let measured = planted["us_per_image"].as_f64().unwrap();
    assert!(
        measured >= 0.9 * us && measured <= 3.0 * us,
        "cpu_work measured {measured} µs per image for {us} planted"
    );
    assert!(planted["share"].as_f64().unwrap() > 0.5, "{planted}");
    // The shares add up to the loader's whole time, `other` included, none past it.
    let shares: Vec<f64> = stages
        .iter()
        .map(|s| s["share"].as_f64().unwrap())
        .collect();
    // Exactly 1: the per-image stages, timed on one image in 8 and scaled up, are fitted to
    // the whole build when a preempted sampled image carries them past it (one run in six did,
    // to 1.34, before that fit).
    let total: f64 = shares.iter().sum();
    assert!((0.999..=1.000_001).contains(&total), "{shares:?}");
    assert!(shares.iter().all(|s| (0.0..=1.0).contains(s)), "{shares:?}");

    // The prediction: about half a worker → 1, and the matrix bears it out.
    let p = &r["analysis"]["prediction"];
    assert_eq!(p["from"], "workers=0");
    assert_eq!(p["workers"], 1, "{p}");
    assert_eq!(p["confirmed"], true, "{p}");
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for want in [
        "**Input-bound** (TensorFlow Profiler's classes)",
        "## Headroom: the throughput if data were free",
        "### Loader stages",
        "Prediction: **1 worker(s)**",
        "The matrix bears it out.",
    ] {
        assert!(report.contains(want), "report lacks {want:?}");
    }
    assert!(out.join("charts/stages.svg").is_file());
    let verify = loaderlab().arg("verify").arg(&out).output().unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );

    // tune finds the planted answer from the file with no matrix.
    let tune_file = dir.path().join("tune.toml");
    std::fs::write(
        &tune_file,
        experiment(
            "tune_me",
            &with_cpu_work(us),
            "[protocol]\nprofile_steps = 6\n",
        ),
    )
    .unwrap();
    let tuned = dir.path().join("tuned");
    let output = loaderlab()
        .args(["tune"])
        .arg(&tune_file)
        .args([
            "--steps", "15", "--warmup", "3", "--rounds", "5", "--quiet", "--out",
        ])
        .arg(&tuned)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("chosen: loader.workers = 1"), "{stdout}");
    let search: Value =
        serde_json::from_str(&std::fs::read_to_string(tuned.join("search.json")).unwrap()).unwrap();
    assert_eq!(search["chosen"], 1);
    assert!(search["trials"].as_array().unwrap().len() >= 2, "{search}");
    // Each trial's folder, relative to the report, is a results folder of its own.
    for t in search["trials"].as_array().unwrap() {
        let folder = tuned.join(t["folder"].as_str().unwrap());
        assert!(folder.join("report.md").is_file(), "{}", folder.display());
    }
    let tuned_toml = std::fs::read_to_string(tuned.join("tuned.toml")).unwrap();
    assert!(tuned_toml.contains("workers = 1"), "{tuned_toml}");
    let report = std::fs::read_to_string(tuned.join("report.md")).unwrap();
    assert!(report.contains("## Search (`loaderlab tune`)"));
    assert!(report.contains("**Chosen: `loader.workers = 1`**"));
    loaderlab()
        .arg("validate")
        .arg(tuned.join("tuned.toml"))
        .assert()
        .success();
    // The report can be rebuilt from the folder alone, search section included.
    loaderlab().arg("report").arg(&tuned).assert().success();
    let rebuilt = std::fs::read_to_string(tuned.join("report.md")).unwrap();
    assert!(rebuilt.contains("## Search (`loaderlab tune`)"));
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn the_headroom_ceiling_matches_a_run_with_nothing_to_load() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    // Only to_tensor: the loader's work is a copy, so data are nearly free already.
    let text = experiment(
        "free",
        "[[transforms]]\nop = \"to_tensor\"\n",
        "[protocol]\nwarmup_steps = 3\ntimed_steps = 20\nrounds = 3\nprofile = false\nheadroom_steps = 20\n",
    );
    let out = run(dir.path(), "free", &text);
    let r = result(&out);
    let c = condition(&r, "default");
    let measured = c["img_per_s"]["point"].as_f64().unwrap();
    let ceiling = c["headroom"]["img_per_s"].as_f64().unwrap();
    let share = measured / ceiling;
    assert!(
        (0.7..=1.3).contains(&share),
        "measured {measured} img/s against a ceiling of {ceiling}"
    );
    let run_json: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    let h = &run_json["conditions"][0]["headroom"];
    assert_eq!(h["steps"], 20);
    assert_eq!(h["step_ms"].as_array().unwrap().len(), 20);
    // One share per round (6 + 7 + 7 steps), each timed in 3 segments.
    let segments = h["segments"].as_array().unwrap();
    assert_eq!(segments.len(), 9);
    let steps: Vec<u64> = segments.iter().map(|s| s[0].as_u64().unwrap()).collect();
    assert_eq!(steps, [2, 2, 2, 2, 2, 3, 2, 2, 3]);
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn compare_passes_a_folder_against_itself_and_fails_a_slowed_copy() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let text = experiment(
        "cmp",
        SEED_CHAIN,
        "[protocol]\nwarmup_steps = 2\ntimed_steps = 8\nrounds = 3\nprofile = false\nheadroom = false\n\n[matrix]\n\"loader.workers\" = [0, 1]\n",
    );
    let a = run(dir.path(), "cmp", &text);
    let same = loaderlab()
        .arg("compare")
        .arg(&a)
        .arg(&a)
        .args([
            "--fail-if",
            "img_per_s < -5%",
            "--fail-if",
            "batch_wait_ms > +10%",
        ])
        .arg("--out")
        .arg(dir.path().join("same"))
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&same.stdout);
    assert!(same.status.success(), "{md}");
    assert!(md.contains("| `workers=1` | 3 / 3 |"), "{md}");
    assert!(md.contains("passed in every condition"), "{md}");
    assert!(dir.path().join("same/compare.md").is_file());
    assert!(dir.path().join("same/compare.json").is_file());

    // The same runs at half the speed: every run's img/s halved, its elapsed time doubled.
    let slow = dir.path().join("slow");
    std::fs::create_dir_all(&slow).unwrap();
    for entry in std::fs::read_dir(&a).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), slow.join(entry.file_name())).unwrap();
        }
    }
    let runs = std::fs::read_to_string(a.join("runs.csv")).unwrap();
    let mut lines = runs.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| header.iter().position(|h| *h == n).unwrap();
    let (ips, elapsed) = (col("img_per_s"), col("elapsed_s"));
    let mut slowed = format!("{}\n", header.join(","));
    for line in lines {
        let mut f: Vec<String> = line.split(',').map(str::to_string).collect();
        f[ips] = (f[ips].parse::<f64>().unwrap() / 2.0).to_string();
        f[elapsed] = (f[elapsed].parse::<f64>().unwrap() * 2.0).to_string();
        slowed.push_str(&f.join(","));
        slowed.push('\n');
    }
    std::fs::write(slow.join("runs.csv"), slowed).unwrap();
    let out = loaderlab()
        .arg("compare")
        .arg(&a)
        .arg(&slow)
        .args(["--fail-if", "img_per_s < -5%"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("regression: img_per_s < -5% in workers=0"),
        "{err}"
    );
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(md.contains("**failed** in `workers=1`: -50.0 %"), "{md}");

    // A gate that does not parse is an invalid argument.
    let bad = loaderlab()
        .arg("compare")
        .arg(&a)
        .arg(&a)
        .args(["--fail-if", "speed < 5"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected FIGURE < CHANGE%"));
}

#[test]
fn a_model_and_worker_matrix_gets_the_crossover() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let text = experiment(
        "scale",
        &with_cpu_work(100.0),
        "[protocol]\nwarmup_steps = 2\ntimed_steps = 8\nrounds = 2\nprofile = false\nheadroom = false\n\n[matrix]\n\"model.width\" = [1, 4]\n\"loader.workers\" = [0, 1]\n",
    );
    let out = run(dir.path(), "scale", &text);
    let r = result(&out);
    let m = &r["analysis"]["model_scale"];
    let groups = m["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{m}");
    // Ordered by compute: width 4 costs more than width 1.
    assert_eq!(groups[0]["label"], "model.width=1");
    assert_eq!(groups[1]["label"], "model.width=4");
    assert!(groups[0]["compute_ms"].as_f64() < groups[1]["compute_ms"].as_f64());
    for g in groups {
        let points = g["points"].as_array().unwrap();
        assert_eq!(points.len(), 2);
        assert!(points[0]["speedup"].is_null());
        assert!(points[1]["speedup"]["point"].as_f64().unwrap() > 0.0);
        assert!(g["model"].as_str().unwrap().contains("parameters"), "{g}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## Model compute against workers"));
    assert!(
        [
            "hides the loader",
            "paid beyond noise",
            "beyond noise at any model size"
        ]
        .iter()
        .any(|w| report.contains(w)),
        "the verdict says where workers stop paying"
    );
    assert!(out.join("charts/model_scale.svg").is_file());
    assert!(out.join("charts/model_scale.png").is_file());
    // The setup names each condition's model and its parameter count.
    assert!(
        report.contains("`width=4,workers=0`: SmallCNN"),
        "setup table"
    );
}

#[test]
fn ctrl_c_during_tune_keeps_the_finished_trials() {
    use std::process::{Command as StdCommand, Stdio};
    use std::time::Duration;
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tune.toml");
    std::fs::write(
        &file,
        experiment(
            "ctrl_c",
            SEED_CHAIN,
            "[protocol]\nprofile_steps = 3\nheadroom_steps = 3\n",
        ),
    )
    .unwrap();
    let out = dir.path().join("tuned");
    // The probe has one round; the next trial's rounds never end.
    let child = StdCommand::new(assert_cmd::cargo::cargo_bin("loaderlab"))
        .arg("tune")
        .arg(&file)
        .args([
            "--steps", "4", "--warmup", "1", "--rounds", "100000", "--quiet", "--out",
        ])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let second = dir.path().join("tuned.trials/trial-2.partial/steps.csv");
    interrupt_after_rows(&child, &second, 2, Duration::from_secs(120));
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let search: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("search.json")).unwrap()).unwrap();
    assert_eq!(search["interrupted"], true);
    assert_eq!(search["trials"].as_array().unwrap().len(), 1, "{search}");
    assert!(
        search["reason"]
            .as_str()
            .unwrap()
            .starts_with("interrupted")
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("The search was interrupted"));
}
