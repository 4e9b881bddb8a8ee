//! FashionMNIST and MNIST from `<root>/FashionMNIST/raw/` and `<root>/MNIST/raw/`,
//! torchvision's layout, so an existing torchvision download (raw or `.gz`) is used as it is.
//! Both are the same IDX files under other names and checksums ([`IdxFamily`]). Missing files
//! are downloaded from the configured mirrors, MD5-checked against the published sums, and
//! renamed into place only when complete and verified.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::Kind;
use crate::data::download::{download, md5_hex};
use crate::data::{DataError, Dataset, FileSpec, ImageShape, InMemory, Mirrors, read_idx};
use crate::data::{DatasetSection, Split};

const IMAGE_SIDE: usize = 28;

/// A dataset published as four IDX files: its name, torchvision's folder for it, the files and
/// the mirrors that serve them.
#[derive(Debug, Clone, Copy)]
pub struct IdxFamily {
    /// Also the folder under the root: `<root>/<name>/raw/`.
    pub name: &'static str,
    /// (images, labels) of the training split, then of the test split.
    pub train: [FileSpec; 2],
    pub test: [FileSpec; 2],
    /// Tried in order when `dataset.mirrors` is empty.
    pub mirrors: &'static [&'static str],
}

pub const FASHION_MNIST: IdxFamily = IdxFamily {
    name: "FashionMNIST",
    train: [
        FileSpec {
            name: "train-images-idx3-ubyte",
            md5: "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        },
        FileSpec {
            name: "train-labels-idx1-ubyte",
            md5: "25c81989df183df01b3e8a0aad5dffbe",
        },
    ],
    test: [
        FileSpec {
            name: "t10k-images-idx3-ubyte",
            md5: "bef4ecab320f06d8554ea6380940ec79",
        },
        FileSpec {
            name: "t10k-labels-idx1-ubyte",
            md5: "bb300cfdad3c16e7a12a480ee83fd310",
        },
    ],
    mirrors: &[
        // torchvision's mirror, then the dataset authors' repository.
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
    ],
};

pub const MNIST: IdxFamily = IdxFamily {
    name: "MNIST",
    train: [
        FileSpec {
            name: "train-images-idx3-ubyte",
            md5: "f68b3c2dcbeaaa9fbdd348bbdeb94873",
        },
        FileSpec {
            name: "train-labels-idx1-ubyte",
            md5: "d53e105ee54ea40749a09fcbcd1e9432",
        },
    ],
    test: [
        FileSpec {
            name: "t10k-images-idx3-ubyte",
            md5: "9fb629c4189551a2d022fa330f9573f3",
        },
        FileSpec {
            name: "t10k-labels-idx1-ubyte",
            md5: "ec29112dd5afa0611ce80d1b7f02629c",
        },
    ],
    mirrors: &[
        // torchvision's mirrors, in its order.
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "http://yann.lecun.com/exdb/mnist/",
    ],
};

impl IdxFamily {
    /// The (images, labels) files of a split.
    pub fn files(&self, split: Split) -> [FileSpec; 2] {
        match split {
            Split::Train => self.train,
            Split::Test => self.test,
        }
    }

    /// `<root>/<name>/raw`, where torchvision keeps the files.
    pub fn raw_dir(&self, root: &Path) -> PathBuf {
        root.join(self.name).join("raw")
    }
}

/// FashionMNIST or MNIST, read into memory.
fn read(
    family: IdxFamily,
    root: &Path,
    split: Split,
    mirrors: &Mirrors,
) -> Result<InMemory, DataError> {
    let paths = ensure_files(root, &family, &family.files(split), mirrors)?;
    let images = read_idx(&paths[0])?;
    let labels = read_idx(&paths[1])?;
    let n = fashion_mnist_len(split) as usize;
    if images.dims != [n, IMAGE_SIDE, IMAGE_SIDE] {
        return Err(DataError::BadIdx {
            path: paths[0].clone(),
            reason: format!(
                "expected dimensions {n}×{IMAGE_SIDE}×{IMAGE_SIDE} for {} {split:?}, found {:?}",
                family.name, images.dims
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
    Ok(InMemory::new(
        images.data,
        labels.data,
        ImageShape::GREY_28,
        10,
        format!("{} {}", family.name, split.word()),
    ))
}

/// FashionMNIST's and MNIST's split sizes.
pub fn fashion_mnist_len(split: Split) -> u64 {
    match split {
        Split::Train => 60_000,
        Split::Test => 10_000,
    }
}

/// `dataset.kind = "fashion_mnist"` or `"mnist"`: a family of IDX files, 28 × 28 grey.
pub struct IdxKind {
    family: IdxFamily,
    /// The child's word for torchvision's class.
    torchvision: &'static str,
}

pub static FASHION_MNIST_KIND: IdxKind = IdxKind {
    family: FASHION_MNIST,
    torchvision: "fashion_mnist",
};

pub static MNIST_KIND: IdxKind = IdxKind {
    family: MNIST,
    torchvision: "mnist",
};

impl Kind for IdxKind {
    fn shape(&self, _d: &DatasetSection) -> ImageShape {
        ImageShape::GREY_28
    }
    fn len(&self, d: &DatasetSection) -> u64 {
        fashion_mnist_len(d.split)
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
        Ok(Arc::new(read(
            self.family,
            Path::new(&d.root),
            d.split,
            mirrors,
        )?))
    }
    /// torchvision's MNIST classes want all four files uncompressed in `<root>/<name>/raw/`;
    /// where loaderlab holds only what it read (one split, or gzipped), the child reads the
    /// same pixels as raw bytes instead.
    fn pytorch_twin(&self, d: &DatasetSection) -> Option<serde_json::Value> {
        let raw = self.family.raw_dir(Path::new(&d.root));
        let all =
            (self.family.train.iter().chain(&self.family.test)).all(|f| raw.join(f.name).is_file());
        all.then(|| {
            serde_json::json!({
                "kind": self.torchvision,
                "root": d.root,
                "train": d.split == Split::Train,
            })
        })
    }
}

/// Make sure each file is present in `<root>/<family>/raw/` and return its path: the
/// uncompressed file if present, else the verified `.gz`, downloading it if allowed (from
/// `mirrors.bases`, or the family's own mirrors when that is empty).
pub fn ensure_files(
    root: &Path,
    family: &IdxFamily,
    files: &[FileSpec],
    mirrors: &Mirrors,
) -> Result<Vec<PathBuf>, DataError> {
    let dir = family.raw_dir(root);
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
            "place {name}.gz (from any {family} mirror, MD5 {md5}) or the uncompressed \
             {name} in {dir}; this split needs {all}",
            family = family.name,
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
        download(
            spec,
            &gz,
            &mirrors.bases_or(family.mirrors),
            mirrors.quiet,
            hint,
        )?;
        out.push(gz);
    }
    Ok(out)
}
