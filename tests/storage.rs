//! Where the data lives and what the loader costs: the page cache under an image folder's
//! files (`dataset.page_cache`), and each run's CPU time and memory (runs.csv's resource
//! columns).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod common;
use common::loaderlab;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
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

/// runs.csv as (condition, column → value) rows.
fn runs(out: &Path) -> Vec<(String, std::collections::HashMap<String, f64>)> {
    let text = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            let fields: Vec<&str> = l.split(',').collect();
            let condition = fields[header.iter().position(|h| *h == "condition").unwrap()];
            let values = header
                .iter()
                .zip(&fields)
                .filter_map(|(h, v)| v.parse::<f64>().ok().map(|v| (h.to_string(), v)))
                .collect();
            (condition.to_string(), values)
        })
        .collect()
}

/// A folder of noise JPEGs (which compress poorly): `files` of 320×320, about 100 MB at 420.
fn jpeg_folder(root: &Path, files: usize) -> u64 {
    let mut bytes = 0;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for i in 0..files {
        let class = root.join(format!("c{}", i % 4));
        std::fs::create_dir_all(&class).unwrap();
        let mut img = image::RgbImage::new(320, 320);
        for p in img.pixels_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *p = image::Rgb([state as u8, (state >> 8) as u8, (state >> 16) as u8]);
        }
        let path = class.join(format!("{i:05}.jpg"));
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut out, 95)
            .encode_image(&img)
            .unwrap();
        drop(out);
        bytes += std::fs::metadata(&path).unwrap().len();
    }
    bytes
}

#[test]
fn a_cold_page_cache_holds_none_of_the_folder_and_a_warm_one_all_of_it() {
    let _turn = serial();
    // On disk under target/, not /tmp (which may be a tmpfs that cannot evict).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let probe = dir.path().join("probe.bin");
    std::fs::write(&probe, vec![7u8; 4 << 20]).unwrap();
    let probe_files = vec![probe];
    loaderlab::data::page_cache::evict(&probe_files);
    if loaderlab::data::page_cache::resident(&probe_files).is_none_or(|r| r > 0.05) {
        eprintln!("SKIPPED: this filesystem does not drop pages on POSIX_FADV_DONTNEED");
        return;
    }
    let root = dir.path().join("images");
    let bytes = jpeg_folder(&root, 420);
    assert!(bytes >= 100_000_000, "{bytes} bytes");
    let text = format!(
        r#"
[experiment]
name = "cache"
seed = 1

[dataset]
kind = "image_folder"
root = "{}"

[[transforms]]
op = "random_resized_crop"
size = 64

[[transforms]]
op = "to_tensor"

[loader]
batch_size = 8
workers = 1

[model]
kind = "stand_in"
step_ms = 1

[device]
kind = "cpu"

[protocol]
warmup_steps = 1
timed_steps = 3
rounds = 2
profile = false
headroom = false

[matrix]
"dataset.page_cache" = ["warm", "cold"]
"#,
        root.display()
    );
    let out = run(dir.path(), "cache", &text);
    let rows = runs(&out);
    assert_eq!(rows.len(), 4);
    for (condition, v) in &rows {
        let resident = v["page_cache_resident"];
        if condition.contains("cold") {
            assert!(resident <= 0.05, "{condition}: {resident} resident");
        } else {
            assert!(resident >= 0.95, "{condition}: {resident} resident");
        }
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("page cache at start"), "{report}");
}

#[test]
fn page_cache_settings_need_files_read_per_sample() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[dataset]\nkind = \"synthetic\"\npage_cache = \"cold\"\n",
    )
    .unwrap();
    let output = loaderlab().arg("validate").arg(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("dataset.page_cache") && err.contains("image folder read per sample"),
        "{err}"
    );
}

#[test]
fn the_workers_cpu_time_is_the_planted_work() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    // 2 ms of CPU per image, 4 images per batch, 40 timed batches against a stand-in step the
    // worker cannot keep up with: the worker works the whole window, so its CPU time is the
    // window's images × 2 ms within about one batch.
    let text = r#"
[experiment]
name = "cpu"
seed = 1

[dataset]
kind = "synthetic"
synthetic_size = 512

[[transforms]]
op = "cpu_work"
us = 2000

[[transforms]]
op = "to_tensor"

[loader]
batch_size = 4
workers = 1

[model]
kind = "stand_in"
step_ms = 1

[device]
kind = "cpu"

[protocol]
warmup_steps = 2
timed_steps = 40
rounds = 1
profile = false
headroom = false
"#;
    let out = run(dir.path(), "cpu", text);
    let rows = runs(&out);
    let v = &rows[0].1;
    let (images, elapsed) = (v["images"], v["elapsed_s"]);
    let workers = v["workers_cpu_s"];
    let planted = images * 2e-3;
    assert!(
        (workers / planted - 1.0).abs() < 0.06,
        "workers' CPU {workers} s for {images} images × 2 ms = {planted} s"
    );
    // Cores busy never exceeds the machine's cores.
    let process = v["process_cpu_s"];
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(
        process >= workers && process / elapsed <= cores + 0.05,
        "{v:?}"
    );
    assert!(v["peak_rss_mib"] > 1.0, "{v:?}");
    assert!(
        v["page_cache_resident"].is_nan(),
        "synthetic data: no files {v:?}"
    );
}
