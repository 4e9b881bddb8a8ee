//! Where the data lives and what the loader costs: the page cache under an image folder's
//! files (`dataset.page_cache`), and each run's CPU time and memory (runs.csv's resource
//! columns).

use std::path::Path;
use std::sync::Mutex;

mod common;
use common::{loaderlab, run_experiment as run, split_csv};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// runs.csv as (condition, column → value) rows.
fn runs(out: &Path) -> Vec<(String, std::collections::HashMap<String, f64>)> {
    let text = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|l| {
            let fields = split_csv(l);
            let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
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
        common::skip("this filesystem does not drop pages on POSIX_FADV_DONTNEED");
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
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn the_workers_cpu_time_is_the_planted_work() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    // 2 ms of CPU per image, 4 images per batch, 40 timed batches against a stand-in step the
    // worker cannot keep up with: the worker works the whole window, so its CPU time is the
    // window's images × 2 ms within 3 % (0.2–0.3 % measured here).
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
    eprintln!("workers' CPU {workers:.4} s for {images} images × 2 ms = {planted:.4} s");
    assert!(
        (workers / planted - 1.0).abs() < 0.03,
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

/// A folder of 64 JPEGs of about 100 kB each that decode in microseconds: a 32×32 image
/// after two 48 kB comment segments (what storage moves is bytes; what the loader decodes
/// stays small, so the storage's figures stand out).
fn small_jpegs(root: &Path) -> f64 {
    let mut bytes = 0u64;
    for i in 0..64u32 {
        let class = root.join(format!("c{}", i % 2));
        std::fs::create_dir_all(&class).unwrap();
        let img = image::RgbImage::from_fn(32, 32, |x, y| {
            image::Rgb([(x * 8) as u8, (y * 8) as u8, (i * 4) as u8])
        });
        let mut jpeg = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90)
            .encode_image(&img)
            .unwrap();
        let mut file = jpeg[..2].to_vec(); // SOI
        for _ in 0..2 {
            let payload = 48_000usize;
            let len = (payload + 2) as u16;
            file.extend_from_slice(&[0xFF, 0xFE, (len >> 8) as u8, len as u8]);
            file.extend(std::iter::repeat_n(b'x', payload));
        }
        file.extend_from_slice(&jpeg[2..]);
        let path = class.join(format!("{i:03}.jpg"));
        std::fs::write(&path, &file).unwrap();
        bytes += file.len() as u64;
    }
    bytes as f64 / 64.0
}

/// An image folder behind `storage`, batch 8, a 0.5 ms stand-in step, with `rest` appended.
fn stored(root: &Path, storage: &str, rest: &str) -> String {
    format!(
        r#"
[experiment]
name = "stored"
seed = 1

[dataset]
kind = "image_folder"
root = "{}"
cache = "encoded"

[dataset.storage]
{storage}

[[transforms]]
op = "center_crop"
size = 32

[[transforms]]
op = "to_tensor"

[loader]
batch_size = 8

[model]
kind = "stand_in"
step_ms = 0.5

[device]
kind = "cpu"

{rest}
"#,
        root.display()
    )
}

fn img_per_s(out: &Path) -> Vec<(String, f64)> {
    runs(out)
        .into_iter()
        .map(|(c, v)| (c, v["img_per_s"]))
        .collect()
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn latency_is_paid_per_image_and_hidden_by_workers_or_read_ahead() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    small_jpegs(&root);
    let protocol = "[protocol]\nwarmup_steps = 1\ntimed_steps = 8\nrounds = 1\nprofile_steps = 4\nheadroom = false\n";
    // 10 ms per request: one worker reads at most 100 img/s, eight at least 7× that.
    let out = run(
        dir.path(),
        "latency",
        &stored(
            &root,
            "latency_ms = 10",
            &format!("{protocol}\n[matrix]\n\"loader.workers\" = [1, 8]\n"),
        ),
    );
    let rates = img_per_s(&out);
    let (one, eight) = (rates[0].1, rates[1].1);
    assert!(one <= 100.0 * 1.01, "1 worker: {one} img/s");
    assert!(eight >= 7.0 * one, "8 workers: {eight} img/s against {one}");
    // The stage table puts the wait under `storage`: 10 ms per image.
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let stages = &r["analysis"]["profiles"][0]["stages"];
    let storage = stages
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "storage")
        .unwrap_or_else(|| panic!("no storage stage: {stages}"));
    let us = storage["us_per_image"].as_f64().unwrap();
    assert!((10_000.0..10_600.0).contains(&us), "{us} µs per image");
    // The scheduler saw the build asleep, off the CPU, nearly all the time.
    let split = &r["analysis"]["profiles"][0]["build_split"];
    if !split.is_null() {
        let off = split["off_cpu"].as_f64().unwrap();
        assert!(off > 0.8, "off the CPU {off} of the build: {split}");
    }

    // Read-ahead 8 at one worker: the batch's 8 requests overlap.
    let out = run(
        dir.path(),
        "read_ahead",
        &stored(
            &root,
            "latency_ms = 10",
            &format!(
                "{protocol}\n[matrix]\n\"loader.workers\" = [1]\n\"loader.read_ahead\" = [1, 8]\n"
            ),
        ),
    );
    let rates = img_per_s(&out);
    let (without, with) = (rates[0].1, rates[1].1);
    assert!(
        with >= 6.0 * without,
        "read-ahead 8: {with} img/s against {without}"
    );
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn bandwidth_caps_throughput_at_any_worker_count() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    let mean = small_jpegs(&root);
    let out = run(
        dir.path(),
        "bandwidth",
        &stored(
            &root,
            "bandwidth_mb_s = 20",
            // Warm-up past the batches the workers hold ready (4 × 2), so the window starts in
            // the steady state the link sets.
            "[protocol]\nwarmup_steps = 12\ntimed_steps = 20\nrounds = 1\nprofile = false\nheadroom = false\n\n[matrix]\n\"loader.workers\" = [1, 4]\n",
        ),
    );
    let cap = 20e6 / mean;
    for (condition, rate) in img_per_s(&out) {
        assert!(
            (rate / cap - 1.0).abs() < 0.05,
            "{condition}: {rate} img/s against the link's {cap} (files of {mean} bytes)"
        );
    }
}

#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn the_prediction_meets_the_knee_of_a_worker_sweep_behind_storage() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    small_jpegs(&root);
    // 10 ms per image, 8 per batch: about 80 ms of loading per batch on one worker, asleep,
    // against a 12 ms stand-in step — about 7 workers, more than this machine's cores.
    let text = stored(&root, "latency_ms = 10", "").replace("step_ms = 0.5", "step_ms = 12")
        + "[protocol]\nwarmup_steps = 2\ntimed_steps = 10\nrounds = 1\nprofile_steps = 4\n\
           headroom_steps = 6\n\n[matrix]\n\"loader.workers\" = [1, 2, 3, 4, 5, 6, 7, 8]\n";
    let out = run(dir.path(), "knee", &text);
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let p = &r["analysis"]["prediction"];
    let predicted = p["workers"].as_i64().unwrap();
    let classes: Vec<(i64, String)> = r["analysis"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["workers"].as_i64().unwrap(),
                c["judgement"]["input_bound"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let knee = classes
        .iter()
        .find(|(_, class)| class == "not")
        .map(|(w, _)| *w)
        .unwrap_or_else(|| panic!("no worker count kept up: {classes:?}"));
    eprintln!("predicted {predicted} workers, the sweep's knee {knee}: {classes:?}");
    assert!(
        (predicted - knee).abs() <= 1,
        "predicted {predicted}, the sweep's knee {knee}: {classes:?}; {p}"
    );
}

/// Read-ahead overlaps decoding, as a real reader's does: one worker keeps `read_ahead`
/// requests in flight as a rolling window across images and batches (the next image's read on
/// its way while this one decodes), so it reads at about min(read_ahead / latency, the
/// decoder's own rate), not at one batch's reads and then its decoding in turn.
#[test]
#[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
fn read_ahead_keeps_requests_in_flight_while_images_decode() {
    let _turn = serial();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("images");
    // 96 noise JPEGs of 240×320 (the decoder's own rate: hundreds per second here).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..96 {
        let class = root.join(format!("c{}", i % 2));
        std::fs::create_dir_all(&class).unwrap();
        let img = image::RgbImage::from_fn(320, 240, |_, _| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            image::Rgb([state as u8, (state >> 8) as u8, (state >> 16) as u8])
        });
        img.save(class.join(format!("{i:03}.jpg"))).unwrap();
    }
    let experiment = |storage: &str, matrix: &str| {
        stored(
            &root,
            storage,
            &format!(
                "[protocol]\nwarmup_steps = 2\ntimed_steps = 12\nrounds = 1\nprofile = false\n\
                 headroom = false\n\n[matrix]\n\"loader.workers\" = [1]\n{matrix}\n"
            ),
        )
        .replace("size = 32", "size = 224")
        .replace("batch_size = 8", "batch_size = 16")
    };
    // The decoder's own rate: the same reads with no latency.
    let out = run(dir.path(), "decoder", &experiment("latency_ms = 0", ""));
    let decoder = img_per_s(&out)[0].1;
    let out = run(
        dir.path(),
        "ahead",
        &experiment("latency_ms = 8", "\"loader.read_ahead\" = [1, 6, 12]"),
    );
    let rates = img_per_s(&out);
    let mut lines = vec![format!("decoder alone: {decoder:.0} img/s")];
    for ((condition, rate), depth) in rates.iter().zip([1.0f64, 6.0, 12.0]) {
        let bound = (depth / 8e-3).min(decoder);
        lines.push(format!(
            "{condition}: {rate:.0} img/s, min(read_ahead / latency, decoder) = {bound:.0} \
             ({:.0} %)",
            rate / bound * 100.0
        ));
    }
    eprintln!("{}", lines.join("\n"));
    // One request at a time: a latency and a decode per image.
    assert!(rates[0].1 <= 125.0 * 1.02, "{lines:?}");
    for (k, depth) in [(1, 6.0f64), (2, 12.0)] {
        let bound = (depth / 8e-3).min(decoder);
        assert!(
            rates[k].1 >= 0.8 * bound,
            "read_ahead = {depth}: {} img/s against min(read_ahead / latency, decoder) = \
             {bound:.0}: {lines:?}",
            rates[k].1
        );
    }
}
