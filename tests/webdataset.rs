//! WebDataset tar shards: the same images as shards and as a folder give the same batches
//! (shuffle off), every worker count the same batches (shuffle on, through the buffer), and a
//! broken archive or a sample without a label is a clear error.

use std::path::Path;

use serde_json::Value;

mod common;
use common::{loaderlab, put_member as put, run_experiment, shards_and_folder as dataset};

fn experiment(dataset: &str, shuffle: bool) -> String {
    format!(
        r#"
[experiment]
name = "wds"
seed = 4

[dataset]
{dataset}

[[transforms]]
op = "center_crop"
size = 16

[[transforms]]
op = "to_tensor"

[loader]
batch_size = 4
shuffle = {shuffle}

[model]
kind = "mlp"

[device]
kind = "cpu"
threads = 1

[protocol]
warmup_steps = 0
timed_steps = 4
rounds = 1
profile = false
headroom = false

[matrix]
"loader.workers" = [0, 2]
"#
    )
}

/// Each condition's fingerprints in step order.
fn fingerprints(out: &Path) -> Vec<(String, Vec<String>)> {
    let text = std::fs::read_to_string(out.join("steps.csv")).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let (c, f) = (
        header.iter().position(|h| *h == "condition").unwrap(),
        header.iter().position(|h| *h == "fingerprint").unwrap(),
    );
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in lines {
        let fields: Vec<&str> = line.split(',').collect();
        match out.iter_mut().find(|(name, _)| name == fields[c]) {
            Some((_, v)) => v.push(fields[f].to_string()),
            None => out.push((fields[c].to_string(), vec![fields[f].to_string()])),
        }
    }
    out
}

const SHARDS: &str = "kind = \"webdataset\"\nroot = \"{root}\"\nshards = [\"part-{000..001}.tar\"]";

fn shards_section(dir: &Path) -> String {
    SHARDS.replace("{root}", &dir.join("shards").display().to_string())
}

#[test]
fn shards_give_the_folders_batches_and_the_same_batches_at_every_worker_count() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), true);
    let folder = format!(
        "kind = \"image_folder\"\nroot = \"{}\"",
        dir.path().join("folder").display()
    );
    let a = run_experiment(dir.path(), "out_folder", &experiment(&folder, false));
    let b = run_experiment(
        dir.path(),
        "out_shards",
        &experiment(&shards_section(dir.path()), false),
    );
    let (fa, fb) = (fingerprints(&a), fingerprints(&b));
    assert_eq!(
        fa, fb,
        "shuffle off: shards and folder must give the same batches"
    );
    assert_eq!(fb[0].1, fb[1].1, "0 and 2 workers");

    // Shuffled (shard order and a 6-sample buffer): the same at 0 and 2 workers, and not the
    // archive order.
    let shuffled = experiment(
        &format!("{}\nshuffle_buffer = 6", shards_section(dir.path())),
        true,
    );
    let c = run_experiment(dir.path(), "out_shuffled", &shuffled);
    let fc = fingerprints(&c);
    assert_eq!(fc[0].1, fc[1].1, "0 and 2 workers");
    assert_ne!(fc[0].1, fb[0].1, "shuffled");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(c.join("result.json")).unwrap()).unwrap();
    assert_eq!(r["analysis"]["determinism"]["identical"], true);
    loaderlab().arg("verify").arg(&c).assert().success();
}

#[test]
fn a_broken_shard_or_a_sample_without_a_label_is_named() {
    let dir = tempfile::tempdir().unwrap();
    dataset(dir.path(), false);
    let run = |name: &str| {
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(&file, experiment(&shards_section(dir.path()), false)).unwrap();
        let output = loaderlab()
            .arg(&file)
            .arg("--out")
            .arg(dir.path().join(name))
            .arg("--quiet")
            .output()
            .unwrap();
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let e = run("unlabelled");
    assert!(
        e.contains("part-000.tar") && e.contains("sample0005 has an image but no .cls label"),
        "{e}"
    );
    // A shard cut in the middle of a member.
    dataset(dir.path(), true);
    let path = dir.path().join("shards/part-001.tar");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2 + 100]).unwrap();
    let e = run("cut");
    assert!(e.contains("part-001.tar") && e.contains("tar"), "{e}");
    // No shards listed: a validate-time error naming the key.
    let file = dir.path().join("none.toml");
    std::fs::write(&file, "[dataset]\nkind = \"webdataset\"\n").unwrap();
    let output = loaderlab().arg("validate").arg(&file).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("dataset.shards"));
}

/// 400 small PNGs (10 classes) as a folder and as 4 shards of 100.
fn many(dir: &Path) {
    std::fs::create_dir_all(dir.join("shards")).unwrap();
    for s in 0..4u32 {
        let tar = std::fs::File::create(dir.join(format!("shards/big-{s:03}.tar"))).unwrap();
        let mut shard = tar::Builder::new(tar);
        for i in 0..100u32 {
            let n = s * 100 + i;
            let class = n % 10;
            let folder = dir.join(format!("folder/c{class}"));
            std::fs::create_dir_all(&folder).unwrap();
            let img = image::RgbImage::from_fn(32, 32, |x, y| {
                image::Rgb([(x * 7 + n) as u8, (y * 5) as u8, (n / 3) as u8])
            });
            let mut png = Vec::new();
            img.write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
                .unwrap();
            std::fs::write(folder.join(format!("{n:04}.png")), &png).unwrap();
            put(&mut shard, format!("s{n:04}.png"), &png);
            put(
                &mut shard,
                format!("s{n:04}.cls"),
                class.to_string().as_bytes(),
            );
        }
        shard.finish().unwrap();
    }
}

#[test]
fn behind_storage_latency_a_shard_is_one_request_and_a_file_one_per_image() {
    let dir = tempfile::tempdir().unwrap();
    many(dir.path());
    let text = format!(
        r#"
[experiment]
name = "streams"
seed = 4

[dataset]
kind = "image_folder"
root = "{folder}"

[dataset.storage]
latency_ms = 10.0

[[transforms]]
op = "center_crop"
size = 28

[[transforms]]
op = "to_tensor"

[loader]
batch_size = 16
workers = 1

[model]
kind = "stand_in"
step_ms = 1.0

[device]
kind = "cpu"

[protocol]
warmup_steps = 1
timed_steps = 6
rounds = 1
profile = false
headroom = false

[[conditions]]
name = "files"

[[conditions]]
name = "shards"
dataset.kind = "webdataset"
dataset.root = "{shards}"
dataset.shards = ["big-{{000..003}}.tar"]
"#,
        folder = dir.path().join("folder").display(),
        shards = dir.path().join("shards").display(),
    );
    let out = run_experiment(dir.path(), "streams", &text);
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("result.json")).unwrap()).unwrap();
    let ips = |name: &str| {
        r["analysis"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["condition"] == name)
            .unwrap()["img_per_s"]["point"]
            .as_f64()
            .unwrap()
    };
    let (files, shards) = (ips("files"), ips("shards"));
    eprintln!("behind 10 ms per request: files {files:.1} img/s, shards {shards:.1} img/s");
    // One request per file: at most 100 img/s at one worker.
    assert!(files <= 100.0, "{files} img/s from files 10 ms apart");
    assert!(
        shards >= 5.0 * files,
        "shards {shards} img/s, files {files}"
    );
}
