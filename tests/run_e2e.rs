//! The whole pipeline through the real binary on generated data: run, files, traces, report,
//! verify and its tampering checks, rebuilding the report, Ctrl-C, and bad output folders.

use std::path::{Path, PathBuf};
use std::process::{Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{interrupt_after_rows, loaderlab};

/// A small experiment: 2 conditions × 2 rounds × 12 timed steps of batch 16.
const QUICK: &str = r#"
[experiment]
name = "quick"
seed = 5

[dataset]
kind = "synthetic"
synthetic_size = 512

[loader]
batch_size = 16

[device]
kind = "cpu"
threads = 1

[protocol]
warmup_steps = 2
timed_steps = 12
rounds = 2
profile_steps = 4

[matrix]
"loader.workers" = [0, 2]
"#;

fn csv_rows(path: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

fn run_quick(dir: &Path) -> PathBuf {
    let file = dir.join("quick.toml");
    std::fs::write(&file, QUICK).unwrap();
    let out = dir.join("results");
    // From a folder outside the repository, as a user runs an installed binary.
    let output = loaderlab()
        .current_dir(dir)
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("workers=2") && stdout.contains("report:"),
        "{stdout}"
    );
    out
}

#[test]
fn a_run_writes_every_file_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_quick(dir.path());
    for f in [
        "steps.csv",
        "runs.csv",
        "config.resolved.toml",
        "plan.json",
        "run.json",
        "result.json",
        "report.md",
        "summary.csv",
        "steps.parquet",
        "charts/throughput.svg",
        "charts/throughput.png",
        "charts/batch_wait.svg",
        "charts/timeline.png",
        "charts/step_time.svg",
        "traces/workers=0.json",
        "traces/workers=2.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    assert!(!dir.path().join("results.partial").exists());

    // result.json names the commit the binary was built from, though it ran outside any
    // checkout (the tests are built from this one).
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let head = StdCommand::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    if let Some(head) = head {
        assert_eq!(result["environment"]["git_commit"], head.as_str());
        assert!(result["environment"]["git_dirty"].is_boolean());
    }

    let steps = csv_rows(&out.join("steps.csv"));
    assert_eq!(steps.len(), 4 * 12);
    let runs = csv_rows(&out.join("runs.csv"));
    assert_eq!(runs.len(), 4);
    assert!(runs.iter().all(|r| r[10] == "false"));

    // Same batches for every run: the fingerprint sequence of each run is identical.
    let seq = |run: &str| {
        steps
            .iter()
            .filter(|r| r[0] == run)
            .map(|r| r[10].clone())
            .collect::<Vec<_>>()
    };
    for run in ["1", "2", "3"] {
        assert_eq!(seq(run), seq("0"));
    }
    // On the CPU the device's busy time is the step's own copy + compute (column 12).
    for r in &steps {
        let f = |i: usize| r[i].parse::<f64>().unwrap();
        assert!((f(12) - (f(6) + f(7))).abs() < 1e-5, "{r:?}");
    }
    // Each run starts from the same weights: the first loss is identical in every run.
    let first_loss: Vec<&String> = steps
        .iter()
        .filter(|r| r[4] == "0")
        .map(|r| &r[9])
        .collect();
    assert!(
        first_loss.windows(2).all(|w| w[0] == w[1]),
        "{first_loss:?}"
    );

    // Traces: valid JSON, profile_steps spans of each stage on the training thread, small.
    for c in ["workers=0", "workers=2"] {
        let path = out.join("traces").join(format!("{c}.json"));
        assert!(std::fs::metadata(&path).unwrap().len() < 1_000_000);
        let events: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        for name in ["batch_wait", "h2d_transfer", "forward_backward_adam"] {
            let n = events
                .iter()
                .filter(|e| e["ph"] == "B" && e["name"] == name)
                .count();
            assert_eq!(n, 4, "{c}: {name}");
        }
        if c == "workers=2" {
            let names: Vec<&str> = events
                .iter()
                .filter(|e| e["ph"] == "M")
                .filter_map(|e| e["args"]["name"].as_str())
                .collect();
            assert!(
                names.contains(&"loader-worker-0") && names.contains(&"loader-worker-1"),
                "{names:?}"
            );
            assert!(
                events
                    .iter()
                    .any(|e| e["name"] == "build_batch" && !e["args"]["batch"].is_null())
            );
        }
    }

    // The report states a verdict and the results table.
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    for needle in [
        "## Verdict",
        "## Results",
        "workers=2",
        "charts/throughput.svg",
        "Perfetto",
        "## Reproduce",
        "device idle",
        "busy time from host timers (CPU)",
    ] {
        assert!(report.contains(needle), "{needle} missing");
    }
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let idle = result.pointer("/analysis/conditions/0/device_idle_median");
    let idle = idle.and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
    assert!(
        (0.0..=1.0).contains(&idle),
        "device idle {idle}: {:#}",
        result["analysis"]
    );

    // verify passes on the untouched folder.
    loaderlab().arg("verify").arg(&out).assert().success();

    // report rebuilds the same report.md from the folder alone.
    std::fs::remove_file(out.join("report.md")).unwrap();
    std::fs::remove_dir_all(out.join("charts")).unwrap();
    loaderlab().arg("report").arg(&out).assert().success();
    assert_eq!(
        std::fs::read_to_string(out.join("report.md")).unwrap(),
        report
    );
    assert!(out.join("charts/throughput.png").is_file());

    // verify fails on each kind of tampering.
    let tamper = |file: &str, edit: &dyn Fn(String) -> String, needle: &str| {
        let copy = dir
            .path()
            .join(format!("tampered-{}", file.replace('/', "_")));
        copy_dir(&out, &copy);
        let path = copy.join(file);
        std::fs::write(&path, edit(std::fs::read_to_string(&path).unwrap())).unwrap();
        let output = loaderlab().arg("verify").arg(&copy).output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        assert!(!output.status.success(), "{file}: verify passed:\n{stdout}");
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("FAIL") && l.contains(needle)),
            "{file}: no FAIL line about {needle}:\n{stdout}"
        );
    };
    tamper(
        "steps.csv",
        &|t| {
            let mut lines: Vec<&str> = t.lines().collect();
            lines.remove(7);
            lines.join("\n") + "\n"
        },
        "steps.csv rows",
    );
    tamper(
        "summary.csv",
        &|t| {
            let mut lines: Vec<String> = t.lines().map(str::to_string).collect();
            let mut cells: Vec<String> = lines[1].split(',').map(str::to_string).collect();
            cells[3] = "99999.0".into();
            lines[1] = cells.join(",");
            lines.join("\n") + "\n"
        },
        "summary.csv",
    );
    tamper(
        "result.json",
        &|t| t.replacen("\"batch_wait_p50_ms\": ", "\"batch_wait_p50_ms\": 1", 1),
        "result.json",
    );
    tamper(
        "traces/workers=2.json",
        &|t| t[..t.len() / 2].to_string(),
        "trace of workers=2",
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn loss_falls_on_synthetic_data() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("learn.toml");
    std::fs::write(
        &file,
        r#"
[experiment]
name = "learn"
[dataset]
kind = "synthetic"
synthetic_size = 4096
[[transforms]]
op = "to_tensor"
[loader]
batch_size = 32
[device]
kind = "cpu"
[optimizer]
lr = 0.003
[protocol]
warmup_steps = 0
timed_steps = 40
rounds = 1
profile = false
"#,
    )
    .unwrap();
    let out = dir.path().join("r");
    let status = loaderlab()
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .arg("-q")
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let losses: Vec<f64> = csv_rows(&out.join("steps.csv"))
        .iter()
        .map(|r| r[9].parse().unwrap())
        .collect();
    let first: f64 = losses[..5].iter().sum::<f64>() / 5.0;
    let last: f64 = losses[35..].iter().sum::<f64>() / 5.0;
    assert!(last < 0.7 * first, "loss {first:.3} → {last:.3}");
}

#[test]
fn ctrl_c_keeps_rows_and_leaves_earlier_results_intact() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_quick(dir.path());
    let before = std::fs::read_to_string(out.join("steps.csv")).unwrap();
    // A long experiment into the same folder, interrupted mid-run.
    let file = dir.path().join("long.toml");
    std::fs::write(
        &file,
        QUICK.replace("timed_steps = 12", "timed_steps = 100000"),
    )
    .unwrap();
    let bin = assert_cmd::cargo::cargo_bin("loaderlab");
    let mut child = StdCommand::new(bin)
        .arg(&file)
        .arg("--out")
        .arg(&out)
        .arg("--quiet")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let partial = dir.path().join("results.partial");
    interrupt_after_rows(
        &child,
        &partial.join("steps.csv"),
        5,
        Duration::from_secs(60),
    );
    let code = child.wait().unwrap().code();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    // Earlier complete results untouched.
    assert_eq!(
        std::fs::read_to_string(out.join("steps.csv")).unwrap(),
        before
    );
    // The partial folder keeps every measured row and marks the run interrupted.
    assert!(csv_rows_if(&partial.join("steps.csv")) >= 5);
    let runs = csv_rows(&partial.join("runs.csv"));
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0][10], "true");
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(partial.join("run.json")).unwrap()).unwrap();
    assert_eq!(meta["interrupted"], true);
}

fn csv_rows_if(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count().saturating_sub(1))
        .unwrap_or(0)
}

#[test]
fn unwritable_output_is_an_error_before_training() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("quick.toml");
    std::fs::write(&file, QUICK).unwrap();
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "not a folder").unwrap();
    let started = Instant::now();
    let output = loaderlab()
        .arg(&file)
        .arg("--out")
        .arg(blocker.join("results"))
        .arg("-q")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot use the output folder") && stderr.contains("a-file"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "failed before any training"
    );
}

#[test]
fn cuda_on_a_cpu_build_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("quick.toml");
    std::fs::write(&file, QUICK).unwrap();
    let output = loaderlab()
        .arg(&file)
        .args(["--set", "device.kind=cuda", "-q", "--out"])
        .arg(dir.path().join("o"))
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("built without CUDA support") && stderr.contains("--features cuda"),
        "{stderr}"
    );
}

#[test]
fn preview_writes_images_parameters_and_arrays_that_agree() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("preview");
    loaderlab()
        .args(["preview", "experiments/smoke.toml", "--n", "6", "--out"])
        .arg(&out)
        .assert()
        .success();
    let samples: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(out.join("samples.json")).unwrap()).unwrap();
    assert_eq!(samples.len(), 6);
    let png = std::fs::read(out.join("preview.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 1000);
    let npy = |name: &str| {
        let bytes = std::fs::read(out.join(name)).unwrap();
        assert!(bytes.starts_with(b"\x93NUMPY"), "{name}");
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        let header = String::from_utf8_lossy(&bytes[10..10 + header_len]).to_string();
        let compact: String = header.chars().filter(|c| !c.is_whitespace()).collect();
        assert!(
            compact.contains("u1'") && compact.contains("(6,28,28"),
            "{header}"
        );
        bytes[10 + header_len..].to_vec()
    };
    let (originals, augmented) = (npy("originals.npy"), npy("augmented.npy"));
    assert_eq!(originals.len(), 6 * 784);
    // Re-applying the recorded parameters to the originals gives the augmented images.
    let mut scratch = loaderlab::transforms::ResizeScratch::default();
    for (k, s) in samples.iter().enumerate() {
        let ops = s["ops"].as_array().unwrap();
        assert_eq!(ops[0]["op"], "random_resized_crop");
        assert_eq!(ops[1]["op"], "random_rotation");
        let c = &ops[0];
        let b = loaderlab::transforms::CropBox {
            top: c["top"].as_u64().unwrap() as usize,
            left: c["left"].as_u64().unwrap() as usize,
            height: c["height"].as_u64().unwrap() as usize,
            width: c["width"].as_u64().unwrap() as usize,
        };
        let mut cropped = vec![0u8; 784];
        loaderlab::transforms::crop_resize(
            &originals[k * 784..(k + 1) * 784],
            28,
            b,
            28,
            28,
            &mut cropped,
            &mut scratch,
        );
        let mut rotated = vec![0u8; 784];
        loaderlab::transforms::rotate_nearest(
            &cropped,
            28,
            28,
            ops[1]["angle"].as_f64().unwrap(),
            0,
            &mut rotated,
        );
        assert_eq!(rotated, augmented[k * 784..(k + 1) * 784], "sample {k}");
        assert!(s["index"].is_u64() && s["label"].is_u64());
    }
}

#[test]
fn charts_are_valid_svg_and_png_of_sane_size() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_quick(dir.path());
    for name in ["throughput", "batch_wait", "timeline", "step_time"] {
        let svg = std::fs::read_to_string(out.join("charts").join(format!("{name}.svg"))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{name}.svg"
        );
        assert!(
            svg.contains("<text") && svg.len() > 2_000,
            "{name}.svg has no text or is tiny"
        );
        let png = std::fs::read(out.join("charts").join(format!("{name}.png"))).unwrap();
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "{name}.png");
        let (w, h) = (
            u32::from_be_bytes(png[16..20].try_into().unwrap()),
            u32::from_be_bytes(png[20..24].try_into().unwrap()),
        );
        assert!(
            (600..=2000).contains(&w) && (150..=1200).contains(&h),
            "{name}.png is {w}×{h}"
        );
        assert!(png.len() > 10_000, "{name}.png is nearly empty");
    }
}
