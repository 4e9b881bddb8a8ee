//! The `[dataset]` section: which dataset, where it lies, how it is stored and read. Its
//! types live beside the kinds they name and the readers they configure; the experiment's schema
//! ([`crate::config::Settings`]) holds it and re-exports them.

use serde::{Deserialize, Serialize};

use super::DatasetKind;

/// PIL's `convert(mode)` applied to every decoded image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColorMode {
    Rgb,
    L,
}

/// What an image folder keeps in memory: nothing (read and decode each sample, as
/// torchvision does), the files' bytes (decode each sample), or the decoded pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheMode {
    None,
    Encoded,
    Decoded,
}

/// The page cache under the dataset's files at each timed window's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PageCache {
    /// Untouched: whatever the page cache holds (after the first epoch, usually everything
    /// that fits).
    AsIs,
    /// Every file read once before each timed window, so the page cache holds the dataset
    /// (as far as memory allows; the measured residency says how far).
    Warm,
    /// Every file of the dataset dropped from it (`posix_fadvise(DONTNEED)`) before each
    /// timed window: reads cost what the disk costs.
    Cold,
}

/// What a corrupt or unreadable image does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Stop the run with a message naming the file and the decoder's reason.
    Fail,
    /// Serve the next readable image in its place, and count it.
    Skip,
}

/// How the synthetic dataset stores its images: as pixels, or pre-encoded in memory, so that
/// decoding is part of every sample's cost as with files of photographs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    Raw,
    Jpeg,
    Png,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    Train,
    Test,
}

impl Split {
    /// The word the file takes, for descriptions.
    pub fn word(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "test",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatasetSection {
    pub kind: DatasetKind,
    /// Folder holding `FashionMNIST/raw/` or `MNIST/raw/` (torchvision's layout, so its
    /// downloads are reused).
    pub root: String,
    pub split: Split,
    /// Fetch missing files from `mirrors`; when false a missing file is an error.
    pub download: bool,
    /// Base URLs tried in order; each must serve the dataset's four `*-ubyte.gz` files. Empty:
    /// the dataset's own mirrors (torchvision's).
    pub mirrors: Vec<String>,
    /// Number of images of the synthetic dataset.
    pub synthetic_size: u64,
    /// Number of classes of the synthetic dataset.
    pub synthetic_classes: u64,
    /// Image size `[height, width]` of the synthetic dataset (real datasets bring their own).
    pub size: [u64; 2],
    /// Channels of the synthetic dataset: 1 (grey) or 3 (RGB).
    pub channels: u64,
    /// Synthetic images stored raw or pre-encoded (decoded per sample in the loader).
    pub encoding: Encoding,
    /// JPEG quality of pre-encoded synthetic images (1–100; Pillow's default 75).
    pub quality: u64,
    /// Image folder: PIL's `convert` mode of every image.
    pub mode: ColorMode,
    /// Image folder: what stays in memory between samples.
    pub cache: CacheMode,
    /// Image folder: a corrupt or unreadable image stops the run, or is skipped and counted.
    pub on_error: OnError,
    /// Decode only the region a leading `random_resized_crop` keeps (baseline JPEG; no output
    /// pixel changes); false decodes every image whole, as torchvision does.
    pub roi_decode: bool,
    /// Image folder read per sample: the page cache under its files at each timed window's
    /// start: "as_is", "warm" (every file read first) or "cold" (every file dropped first).
    pub page_cache: PageCache,
    /// Image folder: emulated remote storage in front of every read (off by default).
    pub storage: StorageSection,
    /// WebDataset: the tar shards, each a path or a brace pattern
    /// ("train-{000000..000009}.tar"), relative to `root`.
    pub shards: Vec<String>,
    /// WebDataset: samples in the seeded shuffle buffer (with `loader.shuffle`; 0 or 1: the
    /// shards' order only).
    pub shuffle_buffer: u64,
    /// Image folder: a JSON file listing the samples in place of the folder's walk —
    /// `{"classes": [names…], "samples": [[path, label], …]}`, a torchvision `ImageFolder`'s or
    /// `DatasetFolder`'s own `classes` and `samples` (paths absolute or relative to `root`).
    /// Empty: the folder is walked as torchvision walks it.
    pub samples: String,
}

/// `[dataset.storage]`: every read waits `latency_ms`, then its bytes over `bandwidth_mb_s`
/// shared by all readers, at most `max_in_flight` requests at once; 0 turns each off.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSection {
    pub latency_ms: f64,
    /// 1 MB = 10⁶ bytes.
    pub bandwidth_mb_s: f64,
    pub max_in_flight: u64,
}

impl StorageSection {
    /// Whether any emulation is asked for.
    pub fn emulated(&self) -> bool {
        self.latency_ms > 0.0 || self.bandwidth_mb_s > 0.0 || self.max_in_flight > 0
    }
}

impl Default for DatasetSection {
    fn default() -> Self {
        DatasetSection {
            kind: DatasetKind::FashionMnist,
            root: "data".into(),
            split: Split::Train,
            download: true,
            mirrors: Vec::new(),
            synthetic_size: 60_000,
            synthetic_classes: 10,
            size: [28, 28],
            channels: 1,
            encoding: Encoding::Raw,
            quality: 75,
            mode: ColorMode::Rgb,
            cache: CacheMode::None,
            on_error: OnError::Fail,
            roi_decode: true,
            page_cache: PageCache::AsIs,
            storage: StorageSection::default(),
            shards: Vec::new(),
            shuffle_buffer: 1000,
            samples: String::new(),
        }
    }
}
