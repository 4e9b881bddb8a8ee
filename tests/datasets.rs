//! MNIST and CIFAR-10 read from files the tests write (torchvision's layouts), with the
//! failures a user meets: a truncated file, a label out of range, an archive that tries to
//! leave its folder or holds a link, torchvision's Python layout in place of the binary one.

use std::io::Write;
use std::path::Path;

use loaderlab::config::{DatasetKind, Settings, Split};
use loaderlab::data::{self, CIFAR_DIR, Dataset, IdxArray, write_idx};

fn settings(kind: DatasetKind, root: &Path, split: Split) -> Settings {
    let mut s = Settings::default();
    s.dataset.kind = kind;
    s.dataset.root = root.display().to_string();
    s.dataset.split = split;
    s.dataset.download = false;
    s
}

fn open(s: &Settings) -> Result<std::sync::Arc<dyn Dataset>, String> {
    data::open(&s.dataset, s.experiment.seed, true).map_err(|e| e.to_string())
}

#[test]
fn mnist_reads_torchvision_raw_files() {
    let root = tempfile::tempdir().unwrap();
    let raw = root.path().join("MNIST").join("raw");
    std::fs::create_dir_all(&raw).unwrap();
    let n = 10_000;
    let images = IdxArray {
        dims: vec![n, 28, 28],
        data: (0..n * 784).map(|i| (i * 31 % 251) as u8).collect(),
    };
    let labels = IdxArray {
        dims: vec![n],
        data: (0..n).map(|i| (i % 10) as u8).collect(),
    };
    std::fs::write(raw.join("t10k-images-idx3-ubyte"), write_idx(&images)).unwrap();
    std::fs::write(raw.join("t10k-labels-idx1-ubyte"), write_idx(&labels)).unwrap();
    let d = open(&settings(DatasetKind::Mnist, root.path(), Split::Test)).unwrap();
    assert_eq!(d.len(), n);
    assert_eq!(d.shape(), loaderlab::shape::ImageShape::GREY_28);
    assert_eq!(d.describe(), "MNIST test (10000 images)");
    let mut buf = vec![0u8; 784];
    d.image_into(3, &mut buf);
    assert_eq!(buf, images.data[3 * 784..4 * 784]);
    assert_eq!(d.label(13), 3);
    // FashionMNIST's folder is not MNIST's: the message names MNIST's file and checksum.
    let err = open(&settings(DatasetKind::Mnist, root.path(), Split::Train))
        .err()
        .unwrap();
    assert!(
        err.contains("MNIST/raw/train-images-idx3-ubyte.gz")
            && err.contains("f68b3c2dcbeaaa9fbdd348bbdeb94873"),
        "{err}"
    );
}

/// One CIFAR-10 binary batch file: record k has label k % 10 and pixels from a formula.
fn cifar_batch(records: usize, seed: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(records * 3073);
    for k in 0..records {
        out.push((k % 10) as u8);
        out.extend((0..3072).map(|i| ((i * 7 + k * 13 + seed) % 256) as u8));
    }
    out
}

#[test]
fn cifar10_reads_the_binary_version_planar() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(CIFAR_DIR);
    std::fs::create_dir_all(&dir).unwrap();
    let batch = cifar_batch(10_000, 5);
    std::fs::write(dir.join("test_batch.bin"), &batch).unwrap();
    let d = open(&settings(DatasetKind::Cifar10, root.path(), Split::Test)).unwrap();
    assert_eq!(d.len(), 10_000);
    assert_eq!(d.shape(), loaderlab::shape::ImageShape::new(3, 32, 32));
    assert_eq!(d.classes(), 10);
    let mut buf = vec![0u8; 3072];
    d.image_into(77, &mut buf);
    // The record's bytes as they are: red plane, green plane, blue plane.
    assert_eq!(buf, batch[77 * 3073 + 1..78 * 3073]);
    assert_eq!(d.label(77), 7);

    // Truncated: the message names the file and what it expected.
    std::fs::write(dir.join("test_batch.bin"), &batch[..batch.len() - 100]).unwrap();
    let err = open(&settings(DatasetKind::Cifar10, root.path(), Split::Test))
        .err()
        .unwrap();
    assert!(
        err.contains("test_batch.bin") && err.contains("truncated"),
        "{err}"
    );
    // A label outside 0–9.
    let mut bad = batch.clone();
    bad[5 * 3073] = 10;
    std::fs::write(dir.join("test_batch.bin"), &bad).unwrap();
    let err = open(&settings(DatasetKind::Cifar10, root.path(), Split::Test))
        .err()
        .unwrap();
    assert!(err.contains("record 5 has label 10"), "{err}");
}

#[test]
fn cifar10_missing_says_what_to_place_and_recognises_torchvisions_python_layout() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("cifar-10-batches-py")).unwrap();
    let err = open(&settings(DatasetKind::Cifar10, root.path(), Split::Train))
        .err()
        .unwrap();
    for needle in [
        "cifar-10-binary.tar.gz",
        "c32a1d4ab5d03f1284b67883e8d87530",
        "data_batch_1.bin",
        "cifar-10-batches-py",
        "does not read",
        "dataset.kind=synthetic",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from: {err}");
    }
}

/// A tar.gz from (path, kind, bytes) members, written by hand so that members a safe unpacker
/// must refuse (`../`, links) can be made.
fn archive(members: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, kind, body) in members {
        let mut header = tar::Header::new_gnu();
        {
            // Set the raw name: `append_data` would refuse `..` itself.
            let name = &mut header.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
        }
        header.set_entry_type(*kind);
        header.set_size(if kind.is_file() { body.len() as u64 } else { 0 });
        if kind.is_symlink() {
            header.set_link_name("/etc/passwd").unwrap();
        }
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append(&header, if kind.is_file() { *body } else { &[][..] })
            .unwrap();
    }
    let tar = builder.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

#[test]
fn cifar10_unpacking_takes_only_expected_regular_files() {
    use tar::EntryType::{Directory, Regular, Symlink};
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("out").join(CIFAR_DIR);
    let small: &[u8] = b"x";
    let files = [
        "data_batch_1.bin",
        "data_batch_2.bin",
        "data_batch_3.bin",
        "data_batch_4.bin",
        "data_batch_5.bin",
        "test_batch.bin",
    ];
    let mut members: Vec<(String, tar::EntryType, &[u8])> =
        vec![("cifar-10-batches-bin/".into(), Directory, &[][..])];
    members.extend(
        files
            .iter()
            .map(|f| (format!("cifar-10-batches-bin/{f}"), Regular, small)),
    );
    members.push(("cifar-10-batches-bin/readme.html".into(), Regular, small));
    members.push(("elsewhere.bin".into(), Regular, small));
    let as_refs = |m: &[(String, tar::EntryType, &[u8])]| -> Vec<u8> {
        let v: Vec<(&str, tar::EntryType, &[u8])> =
            m.iter().map(|(p, k, b)| (p.as_str(), *k, *b)).collect();
        archive(&v)
    };
    let good = root.path().join("good.tar.gz");
    std::fs::write(&good, as_refs(&members)).unwrap();
    data::unpack_cifar(&good, &dir).unwrap();
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    assert_eq!(found, files, "only the expected files, no .part left");
    assert!(!root.path().join("out").join("elsewhere.bin").exists());

    for (evil, kind, what) in [
        (
            "cifar-10-batches-bin/../../escaped.bin",
            Regular,
            "leaves the archive's folder",
        ),
        ("/tmp/absolute.bin", Regular, "leaves the archive's folder"),
        ("cifar-10-batches-bin/test_batch.bin", Symlink, "is a link"),
    ] {
        let mut m = members.clone();
        m.insert(1, (evil.into(), kind, small));
        let path = root.path().join("evil.tar.gz");
        std::fs::write(&path, as_refs(&m)).unwrap();
        let err = data::unpack_cifar(&path, &root.path().join("evil"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(what) && err.contains("refusing"),
            "{evil}: {err}"
        );
        assert!(!root.path().join("escaped.bin").exists());
    }

    // An archive without the test batch.
    let partial: Vec<_> = members
        .iter()
        .filter(|(p, _, _)| !p.ends_with("test_batch.bin"))
        .cloned()
        .collect();
    let path = root.path().join("partial.tar.gz");
    std::fs::write(&path, as_refs(&partial)).unwrap();
    let err = data::unpack_cifar(&path, &root.path().join("partial"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("lacks cifar-10-batches-bin/test_batch.bin"),
        "{err}"
    );
}
