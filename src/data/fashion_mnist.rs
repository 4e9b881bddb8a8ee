//! FashionMNIST from `<root>/FashionMNIST/raw/`, torchvision's layout, so an existing
//! torchvision download (raw or `.gz`) is used as it is. Missing files are downloaded from the
//! configured mirrors, MD5-checked against the published sums, and renamed into place only
//! when complete and verified.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use md5::{Digest, Md5};

use super::{DataError, Dataset, IMAGE_PIXELS, IMAGE_SIDE, read_idx};
use crate::config::{Split, fashion_mnist_len};

/// One of the four published files.
#[derive(Debug, Clone, Copy)]
pub struct FileSpec {
    /// Name without `.gz`, e.g. `train-images-idx3-ubyte`.
    pub name: &'static str,
    /// MD5 of the `.gz` file as published.
    pub md5: &'static str,
}

const TRAIN_IMAGES: FileSpec = FileSpec {
    name: "train-images-idx3-ubyte",
    md5: "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
};
const TRAIN_LABELS: FileSpec = FileSpec {
    name: "train-labels-idx1-ubyte",
    md5: "25c81989df183df01b3e8a0aad5dffbe",
};
const TEST_IMAGES: FileSpec = FileSpec {
    name: "t10k-images-idx3-ubyte",
    md5: "bef4ecab320f06d8554ea6380940ec79",
};
const TEST_LABELS: FileSpec = FileSpec {
    name: "t10k-labels-idx1-ubyte",
    md5: "bb300cfdad3c16e7a12a480ee83fd310",
};

/// The (images, labels) files of a split.
pub fn files_for(split: Split) -> [FileSpec; 2] {
    match split {
        Split::Train => [TRAIN_IMAGES, TRAIN_LABELS],
        Split::Test => [TEST_IMAGES, TEST_LABELS],
    }
}

/// Where and whether to download.
#[derive(Debug, Clone)]
pub struct Mirrors {
    pub bases: Vec<String>,
    pub download: bool,
    pub quiet: bool,
}

pub struct FashionMnist {
    images: Vec<u8>,
    labels: Vec<u8>,
    split: Split,
}

fn raw_dir(root: &Path) -> PathBuf {
    root.join("FashionMNIST").join("raw")
}

impl FashionMnist {
    pub fn open(root: &Path, split: Split, mirrors: &Mirrors) -> Result<Self, DataError> {
        let [images_spec, labels_spec] = files_for(split);
        let paths = ensure_files(root, &[images_spec, labels_spec], mirrors)?;
        let images = read_idx(&paths[0])?;
        let labels = read_idx(&paths[1])?;
        let n = fashion_mnist_len(split) as usize;
        if images.dims != [n, IMAGE_SIDE, IMAGE_SIDE] {
            return Err(DataError::BadIdx {
                path: paths[0].clone(),
                reason: format!(
                    "expected dimensions {n}×{IMAGE_SIDE}×{IMAGE_SIDE} for FashionMNIST {split:?}, found {:?}",
                    images.dims
                ),
            });
        }
        if labels.dims != [n] {
            return Err(DataError::BadIdx {
                path: paths[1].clone(),
                reason: format!("expected {n} labels, found dimensions {:?}", labels.dims),
            });
        }
        if let Some(bad) = labels.data.iter().find(|&&l| l > 9) {
            return Err(DataError::BadIdx {
                path: paths[1].clone(),
                reason: format!("label {bad} is outside 0–9"),
            });
        }
        Ok(FashionMnist {
            images: images.data,
            labels: labels.data,
            split,
        })
    }
}

impl Dataset for FashionMnist {
    fn len(&self) -> usize {
        self.labels.len()
    }
    fn label(&self, index: usize) -> u8 {
        self.labels[index]
    }
    fn image_into(&self, index: usize, buf: &mut [u8]) {
        buf[..IMAGE_PIXELS]
            .copy_from_slice(&self.images[index * IMAGE_PIXELS..(index + 1) * IMAGE_PIXELS]);
    }
    fn prefetch(&self, index: usize) {
        super::prefetch_bytes(&self.images[index * IMAGE_PIXELS..(index + 1) * IMAGE_PIXELS]);
    }
    fn classes(&self) -> usize {
        10
    }
    fn describe(&self) -> String {
        let split = match self.split {
            Split::Train => "train",
            Split::Test => "test",
        };
        format!("FashionMNIST {split} ({} images)", self.len())
    }
}

fn md5_hex(path: &Path) -> Result<String, DataError> {
    let mut file = std::fs::File::open(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut hasher = Md5::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// Make sure each file is present in `<root>/FashionMNIST/raw/` and return its path: the
/// uncompressed file if present, else the verified `.gz`, downloading it if allowed.
pub fn ensure_files(
    root: &Path,
    files: &[FileSpec],
    mirrors: &Mirrors,
) -> Result<Vec<PathBuf>, DataError> {
    let dir = raw_dir(root);
    let mut out = Vec::new();
    for spec in files {
        let plain = dir.join(spec.name);
        let gz = dir.join(format!("{}.gz", spec.name));
        if plain.is_file() {
            out.push(plain);
            continue;
        }
        if gz.is_file() {
            let found = md5_hex(&gz)?;
            if found != spec.md5 {
                return Err(DataError::Checksum {
                    path: gz,
                    expected: spec.md5.into(),
                    found,
                });
            }
            out.push(gz);
            continue;
        }
        let all: Vec<String> = files
            .iter()
            .map(|f| format!("{}.gz (MD5 {})", f.name, f.md5))
            .collect();
        let hint = format!(
            "place {name}.gz (from any FashionMNIST mirror, MD5 {md5}) or the uncompressed \
             {name} in {dir}; this split needs {all}",
            name = spec.name,
            dir = dir.display(),
            md5 = spec.md5,
            all = all.join(" and ")
        );
        if !mirrors.download {
            return Err(DataError::Missing { path: gz, hint });
        }
        std::fs::create_dir_all(&dir).map_err(|source| DataError::Io {
            path: dir.clone(),
            source,
        })?;
        download(spec, &gz, mirrors, hint)?;
        out.push(gz);
    }
    Ok(out)
}

fn download(
    spec: &FileSpec,
    dest: &Path,
    mirrors: &Mirrors,
    hint: String,
) -> Result<(), DataError> {
    let file_name = format!("{}.gz", spec.name);
    let part = dest.with_extension("gz.part");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(Duration::from_secs(15)))
        .timeout_recv_body(Some(Duration::from_secs(120)))
        .build()
        .into();
    let mut tried = Vec::new();
    for base in &mirrors.bases {
        let url = if base.ends_with('/') {
            format!("{base}{file_name}")
        } else {
            format!("{base}/{file_name}")
        };
        match fetch(&agent, &url, &part, mirrors.quiet) {
            Ok(()) => {}
            Err(reason) => {
                let _ = std::fs::remove_file(&part);
                tried.push(format!("  {url}: {reason}"));
                continue;
            }
        }
        let found = md5_hex(&part)?;
        if found != spec.md5 {
            let _ = std::fs::remove_file(&part);
            tried.push(format!(
                "  {url}: checksum mismatch (MD5 {found}, expected {})",
                spec.md5
            ));
            continue;
        }
        std::fs::rename(&part, dest).map_err(|source| DataError::Io {
            path: dest.to_path_buf(),
            source,
        })?;
        return Ok(());
    }
    Err(DataError::Download {
        file: file_name,
        tried: if tried.is_empty() {
            "  (no mirrors configured in dataset.mirrors)".into()
        } else {
            tried.join("\n")
        },
        hint: format!(
            "To continue without network access, {hint}. {}",
            super::TRY_SYNTHETIC
        ),
    })
}

/// Stream one URL into `part`, with a progress bar on stderr.
fn fetch(agent: &ureq::Agent, url: &str, part: &Path, quiet: bool) -> Result<(), String> {
    let mut response = agent.get(url).call().map_err(|e| e.to_string())?;
    let total = response.body().content_length();
    let mut reader = response.body_mut().as_reader();
    let mut file =
        std::fs::File::create(part).map_err(|e| format!("cannot write {}: {e}", part.display()))?;
    let bar = if quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let bar = indicatif::ProgressBar::new(total.unwrap_or(0));
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(format!("downloading {url}"));
        bar
    };
    let mut buf = vec![0u8; 1 << 16];
    let mut received: u64 = 0;
    loop {
        let n = reader.read(&mut buf).map_err(|e| match total {
            Some(total) => {
                format!("truncated: connection lost after {received} of {total} bytes ({e})")
            }
            None => format!("connection lost after {received} bytes: {e}"),
        })?;
        if n == 0 {
            break;
        }
        file.write_all(&buf[..n])
            .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
        received += n as u64;
        bar.set_position(received);
    }
    bar.finish_and_clear();
    if let Some(total) = total.filter(|t| *t != received) {
        return Err(format!("truncated: received {received} of {total} bytes"));
    }
    file.sync_all()
        .map_err(|e| format!("cannot write {}: {e}", part.display()))?;
    Ok(())
}
