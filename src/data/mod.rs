//! Datasets: where the 8-bit images and their labels come from.
//!
//! Invariant: a dataset is immutable once opened and `image_into(i)` always yields the same
//! pixels for the same `i`, from any thread, so every loader condition sees the same data.

mod fashion_mnist;
mod idx;
mod synthetic;

use std::path::PathBuf;
use std::sync::Arc;

pub use fashion_mnist::{FashionMnist, FileSpec, Mirrors, ensure_files, files_for};
pub use idx::{IdxArray, read_idx, write_idx};
pub use synthetic::Synthetic;

use crate::config::{DatasetKind, Settings};

/// Side of the square grey-level images both datasets provide.
pub const IMAGE_SIDE: usize = 28;
pub const IMAGE_PIXELS: usize = IMAGE_SIDE * IMAGE_SIDE;

/// A labelled set of 28×28 grey-level images.
pub trait Dataset: Send + Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn label(&self, index: usize) -> u8;
    /// Copy image `index` (row-major, IMAGE_PIXELS bytes) into `buf`.
    fn image_into(&self, index: usize, buf: &mut [u8]);
    fn classes(&self) -> usize;
    /// A short description for reports, e.g. "FashionMNIST train (60000 images)".
    fn describe(&self) -> String;
}

#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("cannot read {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not a valid IDX file: {reason}", path.display())]
    BadIdx { path: PathBuf, reason: String },
    #[error(
        "{}: checksum mismatch: MD5 {found}, expected {expected}; the file is corrupt or \
         incomplete: delete it and run again to download it afresh",
        path.display()
    )]
    Checksum {
        path: PathBuf,
        expected: String,
        found: String,
    },
    #[error(
        "{} is missing and dataset.download = false; set download = true or place the file \
         there by hand ({hint})",
        path.display()
    )]
    Missing { path: PathBuf, hint: String },
    #[error("could not download {file}:\n{tried}\n{hint}")]
    Download {
        file: String,
        tried: String,
        hint: String,
    },
    #[error("{0}")]
    Mismatch(String),
}

/// Open the dataset the settings name, downloading FashionMNIST files if allowed.
pub fn open(settings: &Settings, quiet: bool) -> Result<Arc<dyn Dataset>, DataError> {
    let d = &settings.dataset;
    Ok(match d.kind {
        DatasetKind::FashionMnist => {
            let mirrors = Mirrors {
                bases: d.mirrors.clone(),
                download: d.download,
                quiet,
            };
            Arc::new(FashionMnist::open(
                std::path::Path::new(&d.root),
                d.split,
                &mirrors,
            )?)
        }
        DatasetKind::Synthetic => Arc::new(Synthetic::new(
            d.synthetic_size as usize,
            d.synthetic_classes as usize,
            settings.experiment.seed,
        )),
    })
}
