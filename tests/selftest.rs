//! `loaderlab selftest`: on the CPU every case passes (the hand-written layers against candle's);
//! without a CUDA build, `--device cuda` fails clearly.

mod common;
use common::loaderlab;

#[test]
fn the_cpu_selftest_passes_every_model_and_optimizer() {
    let output = loaderlab()
        .args(["selftest", "--device", "cpu"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let ok = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(ok, 15, "5 models × 3 optimizers: {stdout}");
    assert!(stdout.contains("selftest passed: 15 cases"), "{stdout}");
}

#[test]
fn the_cuda_selftest_says_when_the_build_has_no_cuda() {
    if cfg!(feature = "cuda") {
        return;
    }
    let output = loaderlab().arg("selftest").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("built without CUDA support"), "{stderr}");
}
