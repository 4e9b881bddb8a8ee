//! The stand-in step (`model.kind = "stand_in"`): an emulated device busy for a declared time
//! per batch. Its ceiling must be batch / `step_ms`, and a planted loader cost must be
//! classified, predicted and tuned against the declared step, not against a network trained on
//! the loader's cores. The timing tests run one at a time (a lock).

use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

mod common;
use common::{loaderlab, run_experiment as run};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Synthetic 28×28 images, batch 256, the stand-in step, `cpu_us` of CPU work per image, and
/// `rest` (protocol, matrix) appended.
fn experiment(name: &str, step_ms: f64, cpu_us: f64, rest: &str) -> String {
    format!(
        r#"
[experiment]
name = "{name}"
seed = 5

[dataset]
kind = "synthetic"
synthetic_size = 2048

[loader]
batch_size = 256

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

#[test]
fn the_ceiling_of_a_stand_in_step_is_batch_over_its_time() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let text = experiment(
        "ceiling",
        5.0,
        0.0,
        "[protocol]\nwarmup_steps = 2\ntimed_steps = 6\nrounds = 1\nprofile = false\n\
         headroom_steps = 12\n\n[matrix]\n\"model.step_ms\" = [5, 20, 80]\n",
    );
    let out = run(dir.path(), "ceiling", &text);
    let r = json(&out.join("result.json"));
    for step_ms in [5.0, 20.0, 80.0] {
        let name = format!("step_ms={step_ms}");
        let c = condition(&r, &name);
        let ceiling = c["headroom"]["img_per_s"].as_f64().unwrap();
        let want = 256.0 / (step_ms / 1e3);
        assert!(
            (ceiling / want - 1.0).abs() < 0.02,
            "{name}: ceiling {ceiling} img/s, batch / step_ms = {want}"
        );
        assert_eq!(c["device_clock"], "the emulated device's own schedule");
        assert_eq!(c["judgement"]["classified_by"], "device_idle", "{c}");
        // The device's busy time per step is the declared time.
        let device_ms = c["device_median_ms"].as_f64().unwrap();
        assert!(
            (device_ms / step_ms - 1.0).abs() < 0.02,
            "{name}: {device_ms} ms busy per step"
        );
    }
    // result.json and the report name the step for what it is.
    let meta = &r["run"]["conditions"];
    let models: Vec<&str> = meta
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["model"].as_str().unwrap())
        .collect();
    assert!(models.contains(&"stand-in step of 20 ms"), "{models:?}");
    assert!(
        meta.as_array()
            .unwrap()
            .iter()
            .all(|c| c["compute_device"] == "stand_in")
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("stand-in step of 80 ms"));
    assert!(report.contains("The step is a stand-in of declared device time"));
    let verify = loaderlab().arg("verify").arg(&out).output().unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn a_planted_loader_cost_is_judged_against_the_stand_in_step() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    // About 30 ms of CPU work per batch of 256 on one worker against a 20 ms step: one worker
    // leaves the device idle a third of the time, two keep it busy (on two cores: the
    // emulated device holds none).
    let us = 30_000.0 / 256.0;
    let text = experiment(
        "planted",
        20.0,
        us,
        "[protocol]\nwarmup_steps = 4\ntimed_steps = 20\nrounds = 2\nprofile_steps = 6\n\
         headroom_steps = 9\n\n[matrix]\n\"loader.workers\" = [1, 2]\n",
    );
    let out = run(dir.path(), "planted", &text);
    let r = json(&out.join("result.json"));
    let one = condition(&r, "workers=1");
    let two = condition(&r, "workers=2");
    assert_eq!(one["judgement"]["input_bound"], "highly", "{one}");
    assert_eq!(two["judgement"]["input_bound"], "not", "{two}");
    let p = &r["analysis"]["prediction"];
    assert_eq!(p["from"], "workers=1", "{p}");
    assert_eq!(p["workers"], 2, "{p}");
    assert_eq!(p["confirmed"], true, "{p}");

    let tune_file = dir.path().join("tune.toml");
    std::fs::write(
        &tune_file,
        experiment("tune_me", 20.0, us, "[protocol]\nprofile_steps = 6\n"),
    )
    .unwrap();
    let tuned = dir.path().join("tuned");
    let output = loaderlab()
        .arg("tune")
        .arg(&tune_file)
        .args([
            "--max-workers",
            "4",
            "--steps",
            "15",
            "--warmup",
            "3",
            "--rounds",
            "3",
            "--quiet",
            "--out",
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
    assert!(stdout.contains("chosen: loader.workers = 2"), "{stdout}");
}
