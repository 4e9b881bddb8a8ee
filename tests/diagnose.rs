//! `loaderlab diagnose` on torch.profiler traces recorded with planted waiting
//! (tests/fixtures/make_trace_fixtures.py): every share within 1 percentage point of the one
//! pandas computed from the same spans, the ranks of a folder with the slowest named, the
//! emitted stand-in experiment valid, and every bad input a clear message with exit 2.

use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
use common::loaderlab;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/traces")
}

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap())
        .unwrap()
}

/// Run `diagnose` with `args` into `out`; returns result.json.
fn diagnose(out: &Path, args: &[&str]) -> Value {
    let output = loaderlab()
        .arg("diagnose")
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap()
}

/// Run `diagnose` expecting exit 2; returns stderr.
fn refused(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let output = loaderlab()
        .arg("diagnose")
        .args(args)
        .arg("--out")
        .arg(dir.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn planted_waiting_shares_match_pandas_within_a_point() {
    let want = expected();
    let dir = tempfile::tempdir().unwrap();
    for (name, wait_span) in [
        ("wait_02", "enumerate(DataLoader)#…__next__"),
        ("wait_12", "enumerate(DataLoader)#…__next__"),
        ("wait_40", "enumerate(DataLoader)#…__next__"),
        ("batch_wait", "batch_wait"),
    ] {
        let trace = fixtures().join(format!("{name}.json.gz"));
        let r = diagnose(&dir.path().join(name), &[trace.to_str().unwrap()]);
        let rank = &r["ranks"][0];
        let e = &want["traces"][name];
        let share = rank["waiting_share"]["point"].as_f64().unwrap();
        let pandas = e["waiting_share"].as_f64().unwrap();
        assert!(
            (share - pandas).abs() < 0.01,
            "{name}: {share} against pandas' {pandas}"
        );
        assert_eq!(rank["wait_span"], wait_span, "{name}");
        assert_eq!(rank["steps"], e["steps"], "{name}");
        assert_eq!(rank["classified_by"], "waiting", "CPU traces: {name}");
        let (low, high) = (
            rank["waiting_share"]["low"].as_f64().unwrap(),
            rank["waiting_share"]["high"].as_f64().unwrap(),
        );
        assert!(low <= share && share <= high, "{name}: CI {low}–{high}");
        let bound = rank["bound"].as_f64().unwrap();
        assert!((bound - 1.0 / (1.0 - share)).abs() < 1e-9);
        assert_eq!(rank["batch_size"], e["batch_size"], "{name}");
    }
    // The classes follow TensorFlow's thresholds (5 %, 20 %).
    let class = |name: &str| {
        let trace = fixtures().join(format!("{name}.json.gz"));
        let r = diagnose(
            &dir.path().join(format!("c_{name}")),
            &[trace.to_str().unwrap()],
        );
        r["ranks"][0]["input_bound"].as_str().unwrap().to_string()
    };
    assert_eq!(class("wait_02"), "not");
    assert_eq!(class("wait_12"), "moderately");
    assert_eq!(class("wait_40"), "highly");
    let report = std::fs::read_to_string(dir.path().join("wait_40/report.md")).unwrap();
    assert!(
        report.starts_with("# Is this job waiting for data?"),
        "{report}"
    );
    assert!(report.contains("**The job: highly input-bound"), "{report}");
    assert!(dir.path().join("wait_40/charts/steps.svg").is_file());
}

#[test]
fn a_folder_is_one_row_per_rank_with_the_slowest_named() {
    let want = expected();
    let dir = tempfile::tempdir().unwrap();
    let ranks = fixtures().join("ranks");
    let r = diagnose(dir.path(), &[ranks.to_str().unwrap()]);
    let rows = r["ranks"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for (k, row) in rows.iter().enumerate() {
        assert_eq!(row["rank"], format!("rank {k}"));
        let pandas = want["traces"][format!("ranks/rank{k}")]["waiting_share"]
            .as_f64()
            .unwrap();
        let share = row["waiting_share"]["point"].as_f64().unwrap();
        assert!(
            (share - pandas).abs() < 0.01,
            "rank {k}: {share} vs {pandas}"
        );
    }
    assert_eq!(r["slowest"], "rank 1");
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("The slowest rank (longest median step) is **rank 1**"));
}

#[test]
fn the_emitted_stand_in_experiment_is_valid_and_carries_the_step() {
    let want = expected();
    let dir = tempfile::tempdir().unwrap();
    let emitted = dir.path().join("stand_in.toml");
    let trace = fixtures().join("wait_12.json.gz");
    diagnose(
        &dir.path().join("out"),
        &[trace.to_str().unwrap(), "--emit", emitted.to_str().unwrap()],
    );
    loaderlab().arg("validate").arg(&emitted).assert().success();
    let text = std::fs::read_to_string(&emitted).unwrap();
    let toml: toml::Table = text.parse().unwrap();
    assert_eq!(toml["model"]["kind"].as_str(), Some("stand_in"));
    // A CPU trace: the step is all host (its time outside the wait), no device.
    assert_eq!(toml["model"]["step_ms"].as_integer(), Some(0), "{text}");
    let host_ms = toml["model"]["host_ms"].as_float().unwrap();
    let pandas = want["traces"]["wait_12"]["step_without_wait_ms"]
        .as_f64()
        .unwrap();
    assert!(
        (host_ms / pandas - 1.0).abs() < 0.01,
        "host_ms {host_ms} against the step without waiting {pandas}"
    );
    assert!(
        text.contains("host_threads = 1          # SET: your job's torch.get_num_threads()"),
        "{text}"
    );
    // The file's own name in its Run line; the batch read off the first operator after the
    // wait, named.
    assert!(text.contains("# Run: loaderlab stand_in.toml "), "{text}");
    assert!(
        text.contains(
            "batch_size = 32          # from the trace: aten::to's first input [32, 1, 28, 28]"
        ),
        "{text}"
    );
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out/result.json")).unwrap())
            .unwrap();
    let rank = &r["ranks"][0];
    assert_eq!(rank["stand_in_step_ms"], 0.0, "{rank}");
    assert!(rank["device_busy_ms"].is_null(), "{rank}");
    assert!(
        rank["host_ms"]["p95"].as_f64().unwrap() >= host_ms,
        "{rank}"
    );
    let report = std::fs::read_to_string(dir.path().join("out/report.md")).unwrap();
    assert!(report.contains("| host p50 / p95 |"), "{report}");
    assert!(report.contains("0 (no device work)"), "{report}");
    assert_eq!(toml["loader"]["batch_size"].as_integer(), Some(32));
    assert!(text.contains("PLACEHOLDER: replace this chain with your own transforms"));
    // The worker count it reads is the user's DataLoader's; both engines one line away.
    assert_eq!(toml["loader"]["engine"].as_str(), Some("pytorch"));
    assert!(
        text.contains("# dataset = \"my_data.py:make_dataset\""),
        "{text}"
    );
    assert!(
        text.contains("# \"loader.engine\" = [\"pytorch\", \"native\"]"),
        "{text}"
    );
}

#[test]
fn bad_traces_give_their_messages_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.to_str().unwrap().to_string()
    };
    let no_wait = fixtures().join("no_wait.json.gz");
    let e = refused(&[no_wait.to_str().unwrap()]);
    assert!(
        e.contains("no span of waiting for data")
            && e.contains("batch_wait")
            && e.contains("enumerate(DataLoader)")
            && e.contains("--wait-span"),
        "{e}"
    );
    let e = refused(&[no_wait.to_str().unwrap(), "--wait-span", "no_such_span"]);
    assert!(e.contains("\"no_such_span\""), "{e}");
    // A span that is there serves as the wait.
    let r = diagnose(
        &dir.path().join("named"),
        &[no_wait.to_str().unwrap(), "--wait-span", "aten::to"],
    );
    assert_eq!(r["ranks"][0]["wait_span"], "aten::to");

    let gz = std::fs::read(fixtures().join("wait_12.json.gz")).unwrap();
    let e = refused(&[&write("cut.json.gz", &gz[..gz.len() / 2])]);
    assert!(e.contains("truncated"), "{e}");
    let e = refused(&[&write("bad.json", b"{\"traceEvents\": [oops]}")]);
    assert!(
        e.contains("not a JSON trace") && e.contains("column"),
        "{e}"
    );
    let e = refused(&[&write("other.json", b"{\"events\": []}")]);
    assert!(e.contains("no \"traceEvents\" array"), "{e}");
    let e = refused(&[&write("empty.json", b"{\"traceEvents\": []}")]);
    assert!(e.contains("no ProfilerStep#N spans"), "{e}");
    let e = refused(&[dir.path().join("missing.json").to_str().unwrap()]);
    assert!(e.contains("cannot open"), "{e}");
}
