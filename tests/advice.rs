//! From measurement to advice, with planted answers. The timing tests run one at a time (a lock), so
//! they do not share the two cores with each other.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;

mod common;
use common::loaderlab;

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

fn run(dir: &Path, name: &str, text: &str) -> PathBuf {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    let out = dir.join(name);
    let output = loaderlab()
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
    out
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

#[test]
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
}
