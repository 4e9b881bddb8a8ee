//! CIFAR-10, the binary version: `<root>/cifar-10-batches-bin/` with `data_batch_1.bin` …
//! `data_batch_5.bin` (training) and `test_batch.bin`, each 10,000 records of one label byte
//! and 3,072 pixel bytes — the red plane, then green, then blue, 32×32 each: exactly the
//! planar layout the pipeline works in, so an image read is one copy.
//!
//! When the folder is missing the archive `cifar-10-binary.tar.gz` is downloaded (mirrors, a
//! progress bar, `.part` then rename, MD5 checked) and unpacked: only the expected regular
//! files are taken, each written to a temporary name and renamed; a member that is a link or
//! whose path leaves the folder makes the archive refused. torchvision's own download is the
//! Python version (`cifar-10-batches-py/`, pickled arrays); it is not read, since reading a
//! pickle safely means not running it, and the message says which files to place instead.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::Kind;
use crate::data::download::{download, md5_hex};
use crate::data::{DataError, Dataset, FileSpec, ImageShape, InMemory, Mirrors};
use crate::data::{DatasetSection, Split};

/// 3×32×32, planar.
pub const CIFAR_SHAPE: ImageShape = ImageShape::new(3, 32, 32);
const RECORD: usize = 1 + CIFAR_SHAPE.len();
const PER_FILE: usize = 10_000;
/// The folder inside the archive and under the root.
pub const CIFAR_DIR: &str = "cifar-10-batches-bin";
const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
const TEST_FILES: [&str; 1] = ["test_batch.bin"];
/// Also taken from the archive: the class names.
const META_FILE: &str = "batches.meta.txt";

/// The archive as published (`.gz` is appended by the downloader).
pub const CIFAR_ARCHIVE: FileSpec = FileSpec {
    name: "cifar-10-binary.tar",
    md5: "c32a1d4ab5d03f1284b67883e8d87530",
};
pub const CIFAR_MIRRORS: &[&str] = &["https://www.cs.toronto.edu/~kriz/"];

fn split_files(split: Split) -> &'static [&'static str] {
    match split {
        Split::Train => &TRAIN_FILES,
        Split::Test => &TEST_FILES,
    }
}

/// `dataset.kind = "cifar10"`: 50,000 training or 10,000 test images, 3 × 32 × 32.
pub struct Cifar10Kind;

pub static CIFAR10_KIND: Cifar10Kind = Cifar10Kind;

impl Kind for Cifar10Kind {
    fn shape(&self, _d: &DatasetSection) -> ImageShape {
        CIFAR_SHAPE
    }
    fn len(&self, d: &DatasetSection) -> u64 {
        (split_files(d.split).len() * PER_FILE) as u64
    }
    fn downloads(&self) -> bool {
        true
    }
    fn open(
        &self,
        d: &DatasetSection,
        _seed: u64,
        mirrors: &Mirrors,
    ) -> Result<Arc<dyn Dataset>, DataError> {
        Ok(Arc::new(read(Path::new(&d.root), d.split, mirrors)?))
    }
    /// torchvision's CIFAR10 reads the Python version (`cifar-10-batches-py/`, the same images
    /// in the same order); where only the binary version lies, the child reads the bytes.
    fn pytorch_twin(&self, d: &DatasetSection) -> Option<serde_json::Value> {
        let python = Path::new(&d.root).join("cifar-10-batches-py");
        python.is_dir().then(|| {
            serde_json::json!({
                "kind": "cifar10",
                "root": d.root,
                "train": d.split == Split::Train,
            })
        })
    }
}

/// CIFAR-10 read into memory: images planar, labels 0–9.
fn read(root: &Path, split: Split, mirrors: &Mirrors) -> Result<InMemory, DataError> {
    let dir = root.join(CIFAR_DIR);
    let files = split_files(split);
    if files.iter().any(|f| !dir.join(f).is_file()) {
        fetch_archive(root, mirrors)?;
    }
    let n = files.len() * PER_FILE;
    let mut images = crate::data::with_large_pages(n * CIFAR_SHAPE.len());
    let mut labels = Vec::with_capacity(n);
    for name in files {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(|source| DataError::Io {
            path: path.clone(),
            source,
        })?;
        if bytes.len() != PER_FILE * RECORD {
            return Err(DataError::Mismatch(format!(
                "{}: expected {} bytes ({PER_FILE} records of {RECORD}), found {}; the \
                 file is truncated or not CIFAR-10's binary version: delete the folder \
                 and run again to download it afresh",
                path.display(),
                PER_FILE * RECORD,
                bytes.len()
            )));
        }
        for (k, record) in bytes.chunks_exact(RECORD).enumerate() {
            if record[0] > 9 {
                return Err(DataError::Mismatch(format!(
                    "{}: record {k} has label {}, outside 0–9",
                    path.display(),
                    record[0]
                )));
            }
            labels.push(record[0]);
            images.extend_from_slice(&record[1..]);
        }
    }
    Ok(InMemory::new(
        images,
        labels,
        CIFAR_SHAPE,
        10,
        format!("CIFAR-10 {}", split.word()),
    ))
}

/// What to place by hand, for the messages.
fn placement_hint(root: &Path) -> String {
    let mut hint = format!(
        "place cifar-10-binary.tar.gz (the binary version, MD5 {md5}) in {root}, or its \
         unpacked folder {dir} holding {train} and {test}",
        md5 = CIFAR_ARCHIVE.md5,
        root = root.display(),
        dir = root.join(CIFAR_DIR).display(),
        train = TRAIN_FILES.join(", "),
        test = TEST_FILES[0],
    );
    let py = root.join("cifar-10-batches-py");
    if py.is_dir() {
        hint.push_str(&format!(
            " ({} is torchvision's Python version, pickled arrays, which loaderlab does not \
             read: it needs the binary version)",
            py.display()
        ));
    }
    hint
}

/// The archive in the root (verified, downloaded if allowed), then unpacked.
fn fetch_archive(root: &Path, mirrors: &Mirrors) -> Result<(), DataError> {
    let archive = root.join(format!("{}.gz", CIFAR_ARCHIVE.name));
    let hint = placement_hint(root);
    if archive.is_file() {
        let found = md5_hex(&archive)?;
        if found != CIFAR_ARCHIVE.md5 {
            return Err(DataError::Checksum {
                path: archive,
                expected: CIFAR_ARCHIVE.md5.into(),
                found,
            });
        }
    } else {
        if !mirrors.download {
            return Err(DataError::Missing {
                path: root.join(CIFAR_DIR),
                hint,
            });
        }
        std::fs::create_dir_all(root).map_err(|source| DataError::Io {
            path: root.to_path_buf(),
            source,
        })?;
        let bases = mirrors.bases_or(CIFAR_MIRRORS);
        download(&CIFAR_ARCHIVE, &archive, &bases, mirrors.quiet, hint)?;
    }
    unpack(&archive, &root.join(CIFAR_DIR))
}

/// Take the expected regular files of `cifar-10-batches-bin/` from the archive into `dir`.
pub fn unpack(archive: &Path, dir: &Path) -> Result<(), DataError> {
    let bad = |reason: String| DataError::Mismatch(format!("{}: {reason}", archive.display()));
    let file = std::fs::File::open(archive).map_err(|source| DataError::Io {
        path: archive.to_path_buf(),
        source,
    })?;
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    std::fs::create_dir_all(dir).map_err(|source| DataError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let wanted: Vec<&str> = TRAIN_FILES
        .iter()
        .chain(&TEST_FILES)
        .chain(&[META_FILE])
        .copied()
        .collect();
    let mut taken = Vec::new();
    let entries = tar
        .entries()
        .map_err(|e| bad(format!("not a tar.gz archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(format!("unreadable member: {e}")))?;
        let path: PathBuf = entry
            .path()
            .map_err(|e| bad(format!("member with an unreadable name: {e}")))?
            .into_owned();
        let shown = path.display().to_string();
        if path
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(bad(format!(
                "member {shown:?} leaves the archive's folder; refusing to unpack"
            )));
        }
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            return Err(bad(format!(
                "member {shown:?} is a link; refusing to unpack"
            )));
        }
        let mut parts = path.components().filter(|c| *c != Component::CurDir);
        let (Some(top), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let name = name.as_os_str().to_string_lossy().into_owned();
        if top.as_os_str() != CIFAR_DIR || !kind.is_file() || !wanted.contains(&name.as_str()) {
            continue;
        }
        let dest = dir.join(&name);
        let part = dir.join(format!("{name}.part"));
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| bad(format!("member {shown:?} is truncated: {e}")))?;
        let write = |p: &Path| std::fs::write(p, &bytes);
        write(&part)
            .and_then(|_| std::fs::rename(&part, &dest))
            .map_err(|source| DataError::Io {
                path: dest.clone(),
                source,
            })?;
        taken.push(name);
    }
    let missing: Vec<&str> = wanted
        .iter()
        .filter(|w| **w != META_FILE && !taken.iter().any(|t| t == *w))
        .copied()
        .collect();
    if !missing.is_empty() {
        return Err(bad(format!(
            "the archive lacks {CIFAR_DIR}/{}",
            missing.join(", ")
        )));
    }
    Ok(())
}
