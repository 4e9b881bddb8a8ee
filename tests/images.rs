//! Image folders and encoded images: torchvision's ImageFolder order and labels, JPEG / PNG
//! decoding against Pillow, colour modes, the cache modes, and the failures a user meets (a
//! corrupt or truncated image, an empty class folder, a root without classes, files the
//! decoder does not read, images of different sizes, link loops, decompression bombs).

use std::path::Path;
use std::sync::Arc;

use loaderlab::config::{CacheMode, ColorMode, DatasetKind, OnError, Settings, seed_transforms};
use loaderlab::data::{self, Dataset, ImageFolder, decode, encode};
use loaderlab::loader::{Loader, LoaderConfig, LoaderError, Shard};
use loaderlab::shape::ImageShape;
use loaderlab::transforms::Pipeline;
use serde_json::Value;

fn base64(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        _ => 63,
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').map(value).collect();
    bytes
        .chunks(4)
        .flat_map(|q| {
            let n = q.iter().fold(0u32, |acc, &v| acc << 6 | v as u32) << (6 * (4 - q.len()));
            let all = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
            all.into_iter().take(q.len() - 1)
        })
        .collect()
}

/// Planar pixels to interleaved (Pillow's `tobytes` order).
fn interleave(planar: &[u8], channels: usize) -> Vec<u8> {
    let n = planar.len() / channels;
    (0..n)
        .flat_map(|i| (0..channels).map(move |c| planar[c * n + i]))
        .collect()
}

/// Our decoder against Pillow on files Pillow wrote (tests/fixtures/make_jpeg_fixture.py):
/// PNG identical; JPEG close (zune-jpeg is not libjpeg-turbo, bit for bit).
#[test]
fn decoder_agrees_with_pillow() {
    let text = std::fs::read_to_string("tests/fixtures/jpeg_fixture.json").unwrap();
    let fixture: Value = serde_json::from_str(&text).unwrap();
    let mut report = Vec::new();
    for case in fixture["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let file = base64(case["file"].as_str().unwrap());
        for (mode, key, channels) in [(ColorMode::Rgb, "pixels", 3), (ColorMode::L, "grey", 1)] {
            let want = base64(case[key].as_str().unwrap());
            let mut got = Vec::new();
            let shape = decode(&file, mode, &mut got).unwrap();
            assert_eq!(
                (shape.width, shape.height, shape.channels),
                (
                    case["width"].as_u64().unwrap() as usize,
                    case["height"].as_u64().unwrap() as usize,
                    channels
                ),
                "{name}"
            );
            let got = interleave(&got, channels);
            let diffs: Vec<i32> = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (*a as i32 - *b as i32).abs())
                .collect();
            let identical = diffs.iter().filter(|&&d| d == 0).count();
            let within1 = diffs.iter().filter(|&&d| d <= 1).count();
            let worst = diffs.iter().copied().max().unwrap_or(0);
            let n = diffs.len() as f64;
            report.push(format!(
                "{name} {mode:?}: {:.2} % identical, {:.2} % within 1, worst {worst}",
                100.0 * identical as f64 / n,
                100.0 * within1 as f64 / n
            ));
            // zune-jpeg's IDCT is libjpeg-turbo's within 1 (grey: 99 % identical); its chroma
            // upsampling of 4:2:0 files is not libjpeg-turbo's "fancy" one, hence the wider
            // bound for colour.
            let (share, bound) = match (name.ends_with(".png"), mode) {
                (true, _) => (1.0, 0),
                (false, ColorMode::L) => (0.99, 1),
                (false, ColorMode::Rgb) => (0.85, 4),
            };
            assert!(
                within1 as f64 >= share * n && worst <= bound,
                "{name} {mode:?}: {}",
                report.last().unwrap()
            );
        }
    }
    eprintln!(
        "decoder vs Pillow {}:\n{}",
        fixture["pillow"],
        report.join("\n")
    );
}

/// Write `root/<class>/<name>` as a JPEG or PNG of a formula image of `w`×`h`.
fn put(root: &Path, class: &str, name: &str, w: usize, h: usize, seed: u8) {
    let shape = ImageShape::new(3, h, w);
    let pixels: Vec<u8> = (0..shape.len())
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed))
        .collect();
    let bytes = encode(&pixels, shape, name.ends_with(".jpg").then_some(90));
    let dir = root.join(class);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let path = match name.strip_prefix("sub_") {
        Some(inner) => dir.join("sub").join(inner),
        None => dir.join(name),
    };
    std::fs::write(path, bytes).unwrap();
}

fn open(root: &Path, cache: CacheMode, on_error: OnError) -> Result<ImageFolder, String> {
    ImageFolder::open(root, ColorMode::Rgb, cache, on_error).map_err(|e| e.to_string())
}

#[test]
fn folder_order_and_labels_are_torchvisions() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    put(root, "dog", "b.png", 20, 10, 1);
    put(root, "dog", "a.jpg", 30, 40, 2);
    put(root, "dog", "sub_c.jpg", 16, 16, 3);
    put(root, "cat", "z.JPEG", 25, 25, 4);
    std::fs::write(root.join("cat").join("notes.txt"), "not an image").unwrap();
    std::fs::write(root.join("README"), "loose file").unwrap();
    let f = open(root, CacheMode::None, OnError::Fail).unwrap();
    assert_eq!(f.class_names(), ["cat", "dog"]);
    // Classes sorted; within a class, the class folder's files sorted, then its sub-folders.
    let names: Vec<String> = (0..f.len())
        .map(|i| f.path(i).strip_prefix(root).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        ["cat/z.JPEG", "dog/a.jpg", "dog/b.png", "dog/sub/c.jpg"]
    );
    let labels: Vec<u8> = (0..f.len()).map(|i| f.label(i)).collect();
    assert_eq!(labels, [0, 1, 1, 1]);
    let mut buf = Vec::new();
    assert_eq!(
        f.read_image(1, &mut buf).unwrap(),
        ImageShape::new(3, 40, 30)
    );
    assert_eq!(
        f.read_image(2, &mut buf).unwrap(),
        ImageShape::new(3, 10, 20)
    );
    // PNG is lossless: the pixels come back as written, planar.
    let want: Vec<u8> = (0..600)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(1))
        .collect();
    assert_eq!(buf, want);
    // Grey mode: one plane, Pillow's luma.
    let grey = ImageFolder::open(root, ColorMode::L, CacheMode::Decoded, OnError::Fail).unwrap();
    let mut g = Vec::new();
    assert_eq!(
        grey.read_image(2, &mut g).unwrap(),
        ImageShape::new(1, 10, 20)
    );
    assert_eq!(g[0], loaderlab::shape::luma(want[0], want[200], want[400]));
    // Every cache mode serves the same pixels.
    for cache in [CacheMode::Encoded, CacheMode::Decoded] {
        let c = open(root, cache, OnError::Fail).unwrap();
        for i in 0..f.len() {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            f.read_image(i, &mut a).unwrap();
            c.read_image(i, &mut b).unwrap();
            assert_eq!(a, b, "{cache:?} sample {i}");
        }
    }
}

#[test]
fn broken_folders_are_refused_at_open_naming_what_was_found() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("x.jpg"), b"loose").unwrap();
    let err = open(root, CacheMode::None, OnError::Fail).err().unwrap();
    assert!(
        err.contains("no class folders") && err.contains("1 loose files"),
        "{err}"
    );
    put(root, "cat", "a.png", 8, 8, 0);
    std::fs::create_dir_all(root.join("dog")).unwrap();
    std::fs::write(root.join("dog").join("readme.txt"), "x").unwrap();
    let err = open(root, CacheMode::None, OnError::Fail).err().unwrap();
    assert!(
        err.contains("no images") && err.contains("dog") && err.contains("cat, dog"),
        "{err}"
    );
    std::fs::write(root.join("dog").join("b.webp"), "x").unwrap();
    let err = open(root, CacheMode::None, OnError::Fail).err().unwrap();
    assert!(
        err.contains("b.webp") && err.contains("does not decode"),
        "{err}"
    );
    let err = open(&root.join("missing"), CacheMode::None, OnError::Fail)
        .err()
        .unwrap();
    assert!(err.contains("is not a folder"), "{err}");
}

fn config(workers: usize) -> LoaderConfig {
    LoaderConfig {
        batch_size: 2,
        workers,
        prefetch_factor: 2,
        shuffle: false,
        drop_last: true,
        persistent_workers: true,
        seed: 5,
        read_ahead: 1,
        shard: Shard::WHOLE,
    }
}

#[test]
fn corrupt_images_fail_naming_the_file_or_are_skipped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for (k, (w, h)) in [(30, 20), (44, 50), (28, 28), (64, 32)].iter().enumerate() {
        put(root, "a", &format!("{k}.jpg"), *w, *h, k as u8);
    }
    // Truncated in the middle of its scan, and one that is not an image at all.
    let good = std::fs::read(root.join("a").join("1.jpg")).unwrap();
    std::fs::write(root.join("a").join("1.jpg"), &good[..good.len() / 2]).unwrap();
    std::fs::write(root.join("a").join("3.jpg"), b"GIF89a not really").unwrap();
    // Images of four sizes made one size by the seed's crop.
    let pipeline = Arc::new(Pipeline::new(
        &seed_transforms(),
        1,
        ImageShape::new(3, 0, 0),
    ));
    for workers in [0, 2] {
        let fail: Arc<dyn Dataset> = Arc::new(open(root, CacheMode::None, OnError::Fail).unwrap());
        let mut loader = Loader::new(fail, Arc::clone(&pipeline), config(workers)).unwrap();
        let err = loop {
            match loader.next_batch() {
                Ok(_) => continue,
                Err(e) => break e,
            }
        };
        let msg = err.to_string();
        assert!(
            matches!(err, LoaderError::Sample { batch: 0, .. })
                && msg.contains("1.jpg")
                && msg.contains("cannot decode"),
            "workers={workers}: {msg}"
        );
    }
    let skip = Arc::new(open(root, CacheMode::None, OnError::Skip).unwrap());
    let mut loader = Loader::new(
        Arc::clone(&skip) as Arc<dyn Dataset>,
        Arc::clone(&pipeline),
        config(0),
    )
    .unwrap();
    for _ in 0..2 {
        let batch = loader.next_batch().unwrap();
        assert_eq!(batch.shape, ImageShape::new(3, 28, 28));
    }
    assert_eq!(
        skip.storage().skipped(),
        2,
        "1.jpg and 3.jpg were served as the next image"
    );
}

#[test]
fn synthetic_jpeg_decodes_in_the_loader_and_validates_in_an_experiment() {
    let mut s = Settings::default();
    s.dataset.kind = DatasetKind::Synthetic;
    s.dataset.synthetic_size = 8;
    s.dataset.size = [60, 80];
    s.dataset.channels = 3;
    s.dataset.encoding = loaderlab::config::Encoding::Jpeg;
    let d = data::open(&s.dataset, s.experiment.seed, true).unwrap();
    assert!(d.describe().contains("JPEG-encoded"), "{}", d.describe());
    let mut buf = Vec::new();
    assert_eq!(
        d.read_image(3, &mut buf).unwrap(),
        ImageShape::new(3, 60, 80)
    );
    // Close to the raw image it was encoded from (quality 75).
    s.dataset.encoding = loaderlab::config::Encoding::Raw;
    let raw = data::open(&s.dataset, s.experiment.seed, true).unwrap();
    let mut want = Vec::new();
    raw.read_image(3, &mut want).unwrap();
    let mean_error = buf
        .iter()
        .zip(&want)
        .map(|(a, b)| (*a as f64 - *b as f64).abs())
        .sum::<f64>()
        / buf.len() as f64;
    assert!(mean_error < 12.0, "mean error {mean_error}");
}

mod common;

/// A JPEG / PNG folder of mixed sizes through the real binary: a run with 0 and 2 workers, its
/// report naming the folder and the colour model, and a colour preview.
#[test]
fn an_image_folder_runs_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("my_images");
    for k in 0..12 {
        let class = ["ant", "bee", "cow"][k % 3];
        let ext = if k % 2 == 0 { "jpg" } else { "png" };
        put(
            &root,
            class,
            &format!("{k:02}.{ext}"),
            40 + 3 * k,
            36 + k,
            k as u8,
        );
    }
    let file = dir.path().join("exp.toml");
    std::fs::write(
        &file,
        format!(
            "[experiment]\nname = \"folder\"\n[dataset]\nkind = \"image_folder\"\nroot = {:?}\n\
             [[transforms]]\nop = \"random_resized_crop\"\nsize = 32\n[[transforms]]\n\
             op = \"random_horizontal_flip\"\n[[transforms]]\nop = \"to_tensor\"\n[[transforms]]\n\
             op = \"normalize\"\nmean = [0.5, 0.5, 0.5]\nstd = [0.25, 0.25, 0.25]\n[loader]\n\
             batch_size = 4\n[protocol]\nwarmup_steps = 1\ntimed_steps = 2\nrounds = 1\n\
             profile_steps = 2\n[matrix]\n\"loader.workers\" = [0, 2]\n",
            root.display().to_string()
        ),
    )
    .unwrap();
    let out = dir.path().join("out");
    common::loaderlab()
        .arg(&file)
        .args(["-q", "--out"])
        .arg(&out)
        .assert()
        .success();
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        report.contains("image folder") && report.contains("12 images, 3 classes"),
        "{report}"
    );
    assert!(
        report.contains("SmallCNN, input 3×32×32, 3 classes"),
        "{report}"
    );
    let preview = dir.path().join("preview");
    common::loaderlab()
        .args(["preview"])
        .arg(&file)
        .args(["--n", "3", "--out"])
        .arg(&preview)
        .assert()
        .success();
    let samples: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(preview.join("samples.json")).unwrap())
            .unwrap();
    assert_eq!(samples[0]["ops"][0]["op"], "random_resized_crop");
    assert!(samples[0]["ops"][1]["flipped"].is_boolean());
    let npy = std::fs::read(preview.join("augmented.npy")).unwrap();
    let header = String::from_utf8_lossy(&npy[10..90]).replace(' ', "");
    assert!(header.contains("(3,32,32,3,)"), "{header}");
}

#[test]
fn link_loops_are_refused_and_two_links_to_one_folder_are_walked_twice() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    put(root, "cat", "a.png", 8, 8, 0);
    put(root, "dog", "b.png", 8, 8, 1);
    // Two links to one folder elsewhere: walked twice, as os.walk(followlinks=True) does.
    std::fs::create_dir_all(root.join("shared")).unwrap();
    put(root, "shared", "s.png", 8, 8, 2);
    std::os::unix::fs::symlink(root.join("shared"), root.join("cat").join("l1")).unwrap();
    std::os::unix::fs::symlink(root.join("shared"), root.join("cat").join("l2")).unwrap();
    let folder = open(root, CacheMode::None, OnError::Fail);
    assert!(folder.is_ok(), "{:?}", folder.err());
    // cat: a.png, l1/s.png, l2/s.png (and the empty sub/); dog: b.png; shared: s.png.
    assert_eq!(folder.unwrap().len(), 5);
    // A link back to a folder that contains it would never end.
    std::os::unix::fs::symlink(root.join("dog"), root.join("dog").join("sub").join("up")).unwrap();
    let err = open(root, CacheMode::None, OnError::Fail).err().unwrap();
    assert!(
        err.contains("a link loop") && err.contains("up") && err.contains("dog"),
        "{err}"
    );
}

/// `bytes` with the first JPEG frame header's height and width set to `side`.
fn jpeg_claiming(bytes: &[u8], side: u16) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let sof = out.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    out[sof + 5..sof + 7].copy_from_slice(&side.to_be_bytes());
    out[sof + 7..sof + 9].copy_from_slice(&side.to_be_bytes());
    out
}

/// `bytes` (a PNG) with its header's width and height set to `side`, the CRC made right.
fn png_claiming(bytes: &[u8], side: u32) -> Vec<u8> {
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    let mut out = bytes.to_vec();
    // Signature (8), length (4), "IHDR" (4), width, height, 5 more bytes, CRC over type + data.
    out[16..20].copy_from_slice(&side.to_be_bytes());
    out[20..24].copy_from_slice(&side.to_be_bytes());
    let crc = crc32(&out[12..29]);
    out[29..33].copy_from_slice(&crc.to_be_bytes());
    out
}

#[test]
fn decompression_bombs_are_refused_from_the_header() {
    let shape = ImageShape::new(3, 8, 8);
    let pixels = vec![100u8; shape.len()];
    let mut out = Vec::new();
    for (what, bytes) in [
        (
            "jpeg",
            jpeg_claiming(&encode(&pixels, shape, Some(90)), 20_000),
        ),
        ("png", png_claiming(&encode(&pixels, shape, None), 20_000)),
    ] {
        let err = decode(&bytes, ColorMode::Rgb, &mut out).unwrap_err();
        assert!(
            err.contains("20000 × 20000") && err.contains("decompression-bomb"),
            "{what}: {err}"
        );
        assert!(
            out.capacity() < 1 << 20,
            "{what}: nothing large was allocated"
        );
    }
    // Under the limit the same header change is an ordinary decode error or image.
    let small = png_claiming(&encode(&pixels, shape, None), 8);
    assert!(decode(&small, ColorMode::Rgb, &mut out).is_ok());
}

/// A leading RandomResizedCrop lets the loader decode only the crop (ROI decoding): the same
/// box, the same random numbers for the ops after it, the same batches as decoding whole.
#[test]
fn decoding_only_the_crop_changes_no_batch() {
    for quality in [Some(80), None] {
        let inner = data::Synthetic::with_shape(24, 3, ImageShape::new(3, 90, 121), 7);
        let encoded: Arc<dyn Dataset> = Arc::new(data::EncodedSynthetic::new(inner, quality));
        // The seed's chain: RandomResizedCrop(28), then RandomRotation (more random numbers).
        let pipeline = Arc::new(Pipeline::new(
            &seed_transforms(),
            3,
            ImageShape::new(3, 0, 0),
        ));
        let mut buf = Vec::new();
        for i in 0..encoded.len() {
            let crop = |shape| pipeline.leading_crop(shape, 0, i as u64);
            let read = encoded.read_region(i, &mut buf, &crop).unwrap();
            let b = read.region.expect("a region is read");
            assert_eq!(buf.len(), 3 * b.height * b.width);
            assert!(b.height < 90 || b.width < 121, "{b:?}");
        }
        let whole: Arc<dyn Dataset> = Arc::new(data::Adapted {
            inner: Arc::clone(&encoded),
            adapt: data::WholeImages,
        });
        // `dataset.roi_decode = false` reads whole images.
        let mut s = Settings::default();
        s.dataset.kind = DatasetKind::Synthetic;
        s.dataset.synthetic_size = 2;
        s.dataset.size = [90, 121];
        s.dataset.channels = 3;
        s.dataset.encoding = loaderlab::config::Encoding::Jpeg;
        for (roi, expected) in [(true, true), (false, false)] {
            s.dataset.roi_decode = roi;
            let d = data::open(&s.dataset, s.experiment.seed, true).unwrap();
            let crop = |shape| pipeline.leading_crop(shape, 0, 1);
            let read = d.read_region(1, &mut buf, &crop).unwrap();
            assert_eq!(read.region.is_some(), expected, "roi_decode = {roi}");
        }
        for workers in [0, 2] {
            let mut a =
                Loader::new(Arc::clone(&encoded), Arc::clone(&pipeline), config(workers)).unwrap();
            let mut b =
                Loader::new(Arc::clone(&whole), Arc::clone(&pipeline), config(workers)).unwrap();
            for _ in 0..12 {
                let x = a.next_batch().unwrap();
                let (fx, ix) = (x.fingerprint, x.images().to_vec());
                let y = b.next_batch().unwrap();
                assert_eq!(
                    (fx, ix),
                    (y.fingerprint, y.images().to_vec()),
                    "{quality:?}"
                );
            }
        }
    }
}
