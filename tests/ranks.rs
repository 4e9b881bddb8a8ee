//! Several ranks per node (`[distributed] ranks`): each rank's loader serves its own share of
//! every epoch, deterministically at any worker count; a planted cost on one rank makes it the
//! named straggler while the others' lost time shows at the barrier; one rank is the same run
//! as no `[distributed]` section; and the workers-per-rank prediction meets the knee of a
//! sweep. The timing tests run one at a time (a lock).

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

mod common;
use common::{loaderlab, run_experiment as run, split_csv};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Synthetic 28×28 images, batch 16, a stand-in step of `step_ms`, `cpu_us` of CPU work per
/// image on every rank, and `rest` appended.
fn experiment(name: &str, step_ms: f64, cpu_us: f64, rest: &str) -> String {
    format!(
        r#"
[experiment]
name = "{name}"
seed = 11

[dataset]
kind = "synthetic"
synthetic_size = 512

[loader]
batch_size = 16
workers = 1

[model]
kind = "stand_in"
step_ms = {step_ms}

[device]
kind = "cpu"

[[transforms]]
op = "random_resized_crop"
size = 28
scale = [0.75, 1.0]

[[transforms]]
op = "cpu_work"
us = {cpu_us}

[[transforms]]
op = "to_tensor"

{rest}
"#
    )
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn condition<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["analysis"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["condition"] == name)
        .unwrap_or_else(|| panic!("{name} not in {r}"))
}

/// steps.csv as (run, rank, step) → (fingerprint, epoch).
fn fingerprints(out: &Path) -> BTreeMap<(u64, u64, u64), (String, u64)> {
    let text = std::fs::read_to_string(out.join("steps.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let at = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (run, rank, step, fp, epoch) = (
        at("run"),
        at("rank"),
        at("step"),
        at("fingerprint"),
        at("epoch"),
    );
    lines
        .map(|l| {
            let f = split_csv(l);
            let n = |i: usize| f[i].parse::<u64>().unwrap();
            ((n(run), n(rank), n(step)), (f[fp].clone(), n(epoch)))
        })
        .collect()
}

fn verify(out: &Path) {
    let verify = loaderlab().arg("verify").arg(out).output().unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

#[test]
fn each_rank_sees_its_own_batches_the_same_at_any_worker_count() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    // 512 images over 2 ranks, batches of 16: 16 steps per rank per epoch; 40 timed steps
    // cross two epoch boundaries.
    let text = experiment(
        "shares",
        2.0,
        0.0,
        "[protocol]\nwarmup_steps = 0\ntimed_steps = 40\nrounds = 1\nprofile = false\n\
         headroom = false\n\n[matrix]\n\"distributed.ranks\" = [1, 2]\n\
         \"loader.workers\" = [1, 2]\n",
    );
    let out = run(dir.path(), "shares", &text);
    let r = json(&out.join("result.json"));
    // One rank and two see different batches; within each, every worker count the same.
    let d = &r["analysis"]["determinism"];
    assert_eq!(d["groups"].as_array().unwrap().len(), 2, "{d}");
    assert_eq!(d["groups_follow_settings"], true, "{d}");
    let fps = fingerprints(&out);
    // Runs 2 and 3: two ranks at workers 1 and 2, identical rank by rank, step by step.
    for rank in 0..2 {
        for step in 0..40 {
            assert_eq!(fps[&(2, rank, step)], fps[&(3, rank, step)]);
        }
    }
    // Within an epoch no batch is dealt twice, to either rank: the ranks split it.
    for epoch in 0..2u64 {
        let batches: Vec<&String> = fps
            .iter()
            .filter(|((run, _, _), (_, e))| *run == 2 && *e == epoch)
            .map(|(_, (fp, _))| fp)
            .collect();
        assert_eq!(batches.len(), 32, "16 steps × 2 ranks in epoch {epoch}");
        assert_eq!(batches.iter().collect::<HashSet<_>>().len(), 32);
    }
    verify(&out);
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn a_planted_cost_on_one_rank_makes_it_the_named_straggler() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    // Rank 0 does 2 ms of extra CPU work per image: 32 ms per batch of 16 on its one worker,
    // against a 10 ms step. Rank 1 has nothing extra.
    let text = experiment(
        "straggler",
        10.0,
        0.0,
        "[distributed]\nranks = 2\n\n[[distributed.rank]]\nrank = 0\ncpu_work_us = 2000\n\n\
         [protocol]\nwarmup_steps = 3\ntimed_steps = 15\nrounds = 2\nprofile_steps = 5\n\
         headroom_steps = 6\n",
    );
    let out = run(dir.path(), "straggler", &text);
    let r = json(&out.join("result.json"));
    let c = condition(&r, "default");
    let node = &c["node"];
    assert_eq!(node["straggler"], 0, "{node}");
    assert!(node["skew"]["low"].as_f64().unwrap() >= 3.0, "{node}");
    let (r0, r1) = (&node["ranks"][0], &node["ranks"][1]);
    // Rank 0 waits for its batches; rank 1 waits at the barrier, not for data.
    assert!(r0["wait_share"].as_f64().unwrap() > 0.4, "{r0}");
    assert!(r1["wait_share"].as_f64().unwrap() < 0.05, "{r1}");
    assert!(r1["sync_share"].as_f64().unwrap() > 0.4, "{r1}");
    assert!(r0["sync_share"].as_f64().unwrap() < 0.05, "{r0}");
    // The node's throughput: both ranks' images over the window, held to rank 0's pace.
    let img_per_s = c["img_per_s"]["point"].as_f64().unwrap();
    assert!(
        img_per_s < 2.0 * 16.0 / 0.020,
        "{img_per_s} img/s: faster than rank 0's loader allows"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## Ranks"), "{report}");
    assert!(report.contains("Straggler: rank 0 of default"), "{report}");
    assert!(out.join("charts/ranks.svg").is_file());
    verify(&out);
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn one_rank_is_the_same_run_as_no_distributed_section() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let protocol = "[protocol]\nwarmup_steps = 3\ntimed_steps = 20\nrounds = 3\nprofile = false\n\
                    headroom = false\n";
    let plain = run(
        dir.path(),
        "plain",
        &experiment("plain", 5.0, 100.0, protocol),
    );
    let one = run(
        dir.path(),
        "one",
        &experiment(
            "one",
            5.0,
            100.0,
            &format!("[distributed]\nranks = 1\n\n{protocol}"),
        ),
    );
    assert_eq!(fingerprints(&plain), fingerprints(&one), "the same batches");
    let compare = loaderlab()
        .arg("compare")
        .arg(&plain)
        .arg(&one)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&compare.stdout);
    assert!(compare.status.success(), "{stdout}");
    // The same throughput: within noise, or — a device-bound step's rounds vary so little that
    // a 0.1 % drift between two processes can leave the interval short of 1 — within 1 %.
    let ips = |dir: &Path| {
        json(&dir.join("result.json"))["analysis"]["conditions"][0]["img_per_s"]["point"]
            .as_f64()
            .unwrap()
    };
    let change = ips(&one) / ips(&plain) - 1.0;
    assert!(
        stdout.contains("within noise") || change.abs() < 0.01,
        "{change}: {stdout}"
    );
    assert!(json(&one.join("result.json"))["analysis"]["conditions"][0]["node"].is_null());
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn the_workers_per_rank_prediction_meets_the_knee_of_a_sweep() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    // 750 µs per image, batches of 16: 12 ms of loader work per batch against a 20 ms step.
    // One worker per rank keeps up (2 ranks × 0.6 of a core on 2 cores).
    let text = experiment(
        "knee",
        20.0,
        750.0,
        "[distributed]\nranks = 2\n\n[protocol]\nwarmup_steps = 3\ntimed_steps = 15\n\
         rounds = 2\nprofile_steps = 6\nheadroom_steps = 6\n\n\
         [matrix]\n\"loader.workers\" = [1, 2, 3]\n",
    );
    let out = run(dir.path(), "knee", &text);
    let r = json(&out.join("result.json"));
    let p = &r["analysis"]["prediction"];
    let predicted = p["workers"].as_i64().unwrap();
    let knee = [1, 2, 3]
        .into_iter()
        .find(|w| condition(&r, &format!("workers={w}"))["judgement"]["input_bound"] == "not")
        .unwrap_or_else(|| panic!("no worker count kept up: {r}"));
    assert!(
        (predicted - knee).abs() <= 1,
        "predicted {predicted} workers per rank, the knee is at {knee}: {p}"
    );
    // Two ranks share this machine's cores: at most half of them per rank.
    let cores = r["run"]["environment"]["cores"].as_i64().unwrap();
    assert_eq!(p["cap"].as_i64().unwrap(), (cores / 2).max(1), "{p}");
}

#[test]
fn ranks_need_the_stand_in_step_and_existing_ranks() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[model]\nkind = \"small_cnn\"\n\n[distributed]\nranks = 2\n\n\
         [[distributed.rank]]\nrank = 5\ncpu_work_us = 10\n",
    )
    .unwrap();
    let output = loaderlab().arg("validate").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("bad.toml:5") && stderr.contains("need model.kind = \"stand_in\""),
        "{stderr}"
    );
    assert!(stderr.contains("rank 5 does not exist"), "{stderr}");
    std::fs::write(&file, "[[distributed.rank]]\nrank = 0\ncpu_wrk_us = 10\n").unwrap();
    let output = loaderlab().arg("validate").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("did you mean `cpu_work_us`"), "{stderr}");
}

#[test]
fn a_real_network_on_several_ranks_is_valid_on_gpus_and_this_build_says_it_has_no_cuda() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gpus.toml");
    std::fs::write(
        &file,
        "[dataset]\nkind = \"synthetic\"\nsynthetic_size = 512\n\n[model]\nkind = \"small_cnn\"\n\n\
         [device]\nkind = \"cuda\"\n\n[distributed]\nranks = 2\n",
    )
    .unwrap();
    let output = loaderlab().arg("validate").arg(&file).output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    if cfg!(feature = "cuda") {
        return;
    }
    let out = dir.path().join("out");
    let output = loaderlab()
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("built without CUDA support"), "{stderr}");
    assert!(!out.exists(), "no results folder is left behind");
}
