//! Shared by the integration tests that drive the binary.

use assert_cmd::Command;

/// The built `loaderlab`, with no `LOADERLAB_*` override leaking in from the environment.
pub fn loaderlab() -> Command {
    let mut cmd = Command::cargo_bin("loaderlab").unwrap();
    for (k, _) in std::env::vars() {
        if k.starts_with("LOADERLAB_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Say that a test could not run here and why; under `CI=true` (where `.ci/run` installs what
/// every test needs) a skip is a failure, so no test passes by being absent. Not every test
/// binary uses it.
#[allow(dead_code)]
pub fn skip(why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true, and this test cannot run: {why}"
    );
    eprintln!("SKIPPED: {why}");
}

/// Wait until `csv` holds at least `rows` data rows (failing after `limit`), then send the child
/// SIGINT, as Ctrl-C in a terminal does. Not every test binary uses it.
#[allow(dead_code)]
pub fn interrupt_after_rows(
    child: &std::process::Child,
    csv: &std::path::Path,
    rows: usize,
    limit: std::time::Duration,
) {
    let started = std::time::Instant::now();
    let data_rows =
        || std::fs::read_to_string(csv).map_or(0, |t| t.lines().count().saturating_sub(1));
    while data_rows() < rows {
        assert!(
            started.elapsed() < limit,
            "{} never reached {rows} rows",
            csv.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let status = std::process::Command::new("kill")
        .arg("-INT")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Write `text` to `<dir>/<name>.toml`, run it into `<dir>/<name>` quietly, and return that
/// folder; a failed run fails the test with its stderr.
#[allow(dead_code)]
pub fn run_experiment(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(&file, text).unwrap();
    let out = dir.join(name);
    run_file(&file, &out, |_| {});
    out
}

/// Run the experiment `file` into `out` quietly, `with` adding to the command (a working
/// folder, the environment); a failed run fails the test with its stderr.
#[allow(dead_code)]
pub fn run_file(file: &std::path::Path, out: &std::path::Path, with: impl FnOnce(&mut Command)) {
    let mut cmd = loaderlab();
    with(&mut cmd);
    let output = cmd
        .arg(file)
        .arg("--out")
        .arg(out)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// One CSV line's fields (a quoted field may hold commas).
#[allow(dead_code)]
pub fn split_csv(line: &str) -> Vec<String> {
    let (mut fields, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}

/// Append one member to a shard.
#[allow(dead_code)]
pub fn put_member(shard: &mut tar::Builder<std::fs::File>, name: String, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    shard.append_data(&mut h, name, data).unwrap();
}

/// 16 PNGs, 8 per class, written both as an image folder (`folder/c0/000.png` …) and as two
/// shards (`shards/part-000.tar` holds class 0, `part-001.tar` class 1), in the same order.
#[allow(dead_code)]
pub fn shards_and_folder(dir: &std::path::Path, label_every: bool) {
    for class in 0..2u32 {
        let folder = dir.join(format!("folder/c{class}"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::create_dir_all(dir.join("shards")).unwrap();
        let tar = std::fs::File::create(dir.join(format!("shards/part-{class:03}.tar"))).unwrap();
        let mut shard = tar::Builder::new(tar);
        for i in 0..8u32 {
            let img = image::RgbImage::from_fn(24, 20, |x, y| {
                image::Rgb([
                    (x * 9 + i * 7) as u8,
                    (y * 11) as u8,
                    (class * 120 + i) as u8,
                ])
            });
            let mut png = Vec::new();
            img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
                .unwrap();
            std::fs::write(folder.join(format!("{i:03}.png")), &png).unwrap();
            let key = format!("sample{class}{i:03}");
            put_member(&mut shard, format!("{key}.png"), &png);
            if label_every || i != 5 {
                put_member(
                    &mut shard,
                    format!("{key}.cls"),
                    class.to_string().as_bytes(),
                );
            }
        }
        shard.finish().unwrap();
    }
}

/// The interpreter with torch and torchvision the tests run the pytorch engine's child (and
/// their own PyTorch jobs) under, if any: `LOADERLAB_TEST_PYTHON`, else `target/venv` (which
/// `.ci/run` installs); elsewhere the caller's test says SKIPPED, and under `CI=true` fails.
#[allow(dead_code)]
pub fn torch_python() -> Option<std::path::PathBuf> {
    use std::path::{Path, PathBuf};
    let candidates = [
        std::env::var("LOADERLAB_TEST_PYTHON")
            .ok()
            .map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("target/venv/bin/python")),
    ];
    let found = candidates.into_iter().flatten().find(|p| {
        std::process::Command::new(p)
            .args(["-c", "import torch, torchvision"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        skip(
            "no Python with torch and torchvision (.ci/run installs them into target/venv; or \
             set LOADERLAB_TEST_PYTHON)",
        );
    }
    found
}
