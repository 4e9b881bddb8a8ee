//! Datasets: where the 8-bit images and their labels come from. Each kind (`dataset.kind`)
//! lives in [`kinds`], in a file of its own, registered there once.
//!
//! Invariant: a dataset is immutable once opened and `image_into(i)` always yields the same
//! pixels for the same `i`, from any thread, so every loader condition sees the same data.
//! Pixels are planar (CHW, [`crate::shape`]), every image of a dataset has its `shape()`.

mod decode;
mod download;
mod encoded;
mod idx;
pub mod kinds;
mod memory;
pub mod page_cache;
pub mod storage;

use std::path::PathBuf;
use std::sync::Arc;

pub use crate::shape::ImageShape;
pub use crate::transforms::CropBox;
pub use decode::{EXTENSIONS, decode, decode_region, encode};
pub use download::{FileSpec, Mirrors};
pub use idx::{IdxArray, read_idx, write_idx};
pub use kinds::{
    CIFAR_ARCHIVE, CIFAR_DIR, CIFAR_SHAPE, CacheMode, ColorMode, DatasetKind, DatasetSection,
    EncodedSynthetic, Encoding, FASHION_MNIST, IdxFamily, ImageFolder, Kind, MNIST, OnError,
    PageCache, Split, StorageSection, Storing, Synthetic, ensure_files, unpack_cifar, webdataset,
};
pub use memory::InMemory;

/// The part of an image a sample keeps, given the image's shape: the crop of a leading
/// RandomResizedCrop (`None`: the whole image). See [`Dataset::read_region`].
pub type Region<'a> = &'a dyn Fn(ImageShape) -> Option<CropBox>;

/// What a read left in the buffer: the image's shape and, when only a region of it was read
/// ([`Dataset::read_region`]), that region; the buffer then holds just its pixels (planar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    pub shape: ImageShape,
    pub region: Option<CropBox>,
}

/// A labelled set of 8-bit images of one shape: what every dataset must answer. How its images
/// are stored and read (files, encoded bytes, shards, its own epoch order, emulated storage) is
/// the optional [`StorageHints`] it hands out through [`Dataset::storage`].
pub trait Dataset: Send + Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn label(&self, index: usize) -> u8;
    /// The shape of every image; height and width are 0 when they vary from image to image
    /// (an image folder's), and then only [`Dataset::read_image`] reads them.
    fn shape(&self) -> ImageShape;
    /// Copy image `index` (planar, `shape().len()` bytes) into `buf`.
    fn image_into(&self, index: usize, buf: &mut [u8]);
    /// Image `index` into `buf` (planar, resized to fit) and its shape: the loader's read,
    /// which may decode a file and may fail (the error names the file).
    fn read_image(&self, index: usize, buf: &mut Vec<u8>) -> Result<ImageShape, DataError> {
        let shape = self.shape();
        buf.resize(shape.len(), 0);
        self.image_into(index, buf);
        Ok(shape)
    }
    /// [`Dataset::read_image`] for a sample that keeps only `region(shape)` of its image: a
    /// dataset that decodes may then decode only that region (a JPEG's rows past it are not
    /// entropy-decoded, its other blocks not transformed) and leave just the region's pixels
    /// in `buf`, identical to the same crop of a full read. By default the whole image.
    fn read_region(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
        _region: Region,
    ) -> Result<Read, DataError> {
        let shape = self.read_image(index, buf)?;
        Ok(Read {
            shape,
            region: None,
        })
    }
    fn classes(&self) -> usize;
    /// A short description for reports, e.g. "FashionMNIST train (60000 images)".
    fn describe(&self) -> String;
    /// How its images are stored and read; by default as a dataset held in memory once opened.
    fn storage(&self) -> &dyn StorageHints {
        &NoHints
    }
}

/// How a dataset's images are stored and read: hints for the loader (prefetch, the epoch
/// order, emulated storage's requests), for the page cache and for `bench`. Every answer has a
/// default that fits a dataset held in memory.
pub trait StorageHints: Send + Sync {
    /// Whether reading an image decodes it (image files, encoded synthetic images).
    fn decodes(&self) -> bool {
        false
    }
    /// The files the loader reads during a run (an image folder read per sample); empty for
    /// a dataset held in memory once opened.
    fn files(&self) -> Vec<PathBuf> {
        Vec::new()
    }
    /// The bytes a read of image `index` fetches from storage (its encoded file), when known.
    fn stored_len(&self, _index: usize) -> Option<u64> {
        None
    }
    /// The stored object image `index` is streamed from, when images are stored together and
    /// read in one request (a WebDataset shard); None when each image is its own request.
    fn storage_unit(&self, _index: usize) -> Option<u32> {
        None
    }
    /// Ask emulated storage (`[dataset.storage]`) for image `index` on this reader: when its
    /// bytes will have arrived (the caller sleeps until then before decoding it). None, at
    /// once, where there is no emulated storage.
    fn request(&self, _index: u32) -> Option<std::time::Instant> {
        None
    }
    /// The order in which epoch `epoch` visits the images, when the dataset sets its own
    /// (WebDataset: shard by shard through a shuffle buffer); false leaves it to the loader's
    /// seeded permutation.
    fn epoch_order(&self, _shuffle: bool, _seed: u64, _epoch: u64, _order: &mut Vec<u32>) -> bool {
        false
    }
    /// The encoded file of image `index` (JPEG, PNG, …) when the dataset decodes, for
    /// measuring another decoder on the same bytes.
    fn encoded(&self, _index: usize) -> Option<Vec<u8>> {
        None
    }
    /// Unreadable images served as another image so far (`on_error = "skip"`).
    fn skipped(&self) -> u64 {
        0
    }
    /// A hint that image `index` will be read soon.
    fn prefetch(&self, _index: usize) {}
}

/// The hints of a dataset that has none to give: every default.
pub struct NoHints;

impl StorageHints for NoHints {}

/// A dataset seen through one change ([`Adapt`]) of how it is read or stored: every other
/// answer is the inner dataset's. The forwarding is written once, here, so an adaptation says
/// only what it changes.
pub struct Adapted<A: Adapt> {
    pub inner: Arc<dyn Dataset>,
    pub adapt: A,
}

/// What an [`Adapted`] dataset changes; each default is the inner dataset's own answer.
pub trait Adapt: Send + Sync + Sized + 'static {
    fn read_region(
        &self,
        inner: &dyn Dataset,
        index: usize,
        buf: &mut Vec<u8>,
        region: Region,
    ) -> Result<Read, DataError> {
        inner.read_region(index, buf, region)
    }
    /// Emulated storage's request for an image (see [`StorageHints::request`]).
    fn request(&self, inner: &Adapted<Self>, index: u32) -> Option<std::time::Instant> {
        inner.inner.storage().request(index)
    }
    fn describe(&self, inner: &dyn Dataset) -> String {
        inner.describe()
    }
}

impl<A: Adapt> Dataset for Adapted<A> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn label(&self, index: usize) -> u8 {
        self.inner.label(index)
    }
    fn shape(&self) -> ImageShape {
        self.inner.shape()
    }
    fn image_into(&self, index: usize, buf: &mut [u8]) {
        self.inner.image_into(index, buf)
    }
    fn read_image(&self, index: usize, buf: &mut Vec<u8>) -> Result<ImageShape, DataError> {
        self.inner.read_image(index, buf)
    }
    fn read_region(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
        region: Region,
    ) -> Result<Read, DataError> {
        self.adapt.read_region(&*self.inner, index, buf, region)
    }
    fn classes(&self) -> usize {
        self.inner.classes()
    }
    fn describe(&self) -> String {
        self.adapt.describe(&*self.inner)
    }
    fn storage(&self) -> &dyn StorageHints {
        self
    }
}

impl<A: Adapt> StorageHints for Adapted<A> {
    fn decodes(&self) -> bool {
        self.inner.storage().decodes()
    }
    fn files(&self) -> Vec<PathBuf> {
        self.inner.storage().files()
    }
    fn stored_len(&self, index: usize) -> Option<u64> {
        self.inner.storage().stored_len(index)
    }
    fn storage_unit(&self, index: usize) -> Option<u32> {
        self.inner.storage().storage_unit(index)
    }
    fn request(&self, index: u32) -> Option<std::time::Instant> {
        self.adapt.request(self, index)
    }
    fn epoch_order(&self, shuffle: bool, seed: u64, epoch: u64, order: &mut Vec<u32>) -> bool {
        self.inner
            .storage()
            .epoch_order(shuffle, seed, epoch, order)
    }
    fn encoded(&self, index: usize) -> Option<Vec<u8>> {
        self.inner.storage().encoded(index)
    }
    fn skipped(&self) -> u64 {
        self.inner.storage().skipped()
    }
    fn prefetch(&self, index: usize) {
        self.inner.storage().prefetch(index)
    }
}

/// The one-line way to try an experiment without its dataset, given with every "dataset not
/// available" message.
pub const TRY_SYNTHETIC: &str = "To try the experiment on generated data instead, add \
`--set dataset.kind=synthetic` to the command.";

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
         there by hand ({hint}). {TRY_SYNTHETIC}",
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

/// Open the dataset the settings name, downloading its files if allowed, behind its emulated
/// storage when `[dataset.storage]` asks for one.
pub fn open(d: &DatasetSection, seed: u64, quiet: bool) -> Result<Arc<dyn Dataset>, DataError> {
    Ok(stored(open_local(d, seed, quiet)?, &d.storage))
}

/// `dataset` behind emulated storage of its own when `storage` asks for any; as it is
/// otherwise.
pub fn stored(dataset: Arc<dyn Dataset>, storage: &StorageSection) -> Arc<dyn Dataset> {
    if storage.emulated() {
        Arc::new(Adapted {
            inner: dataset,
            adapt: storage::Stored(storage::Storage::new(storage)),
        })
    } else {
        dataset
    }
}

/// As [`open`], without the emulated storage (`[dataset.storage]` is not read).
pub fn open_local(
    d: &DatasetSection,
    seed: u64,
    quiet: bool,
) -> Result<Arc<dyn Dataset>, DataError> {
    let mirrors = Mirrors {
        bases: d.mirrors.clone(),
        download: d.download,
        quiet,
    };
    let dataset = d.kind.spec().open(d, seed, &mirrors)?;
    Ok(if d.roi_decode {
        dataset
    } else {
        Arc::new(Adapted {
            inner: dataset,
            adapt: WholeImages,
        })
    })
}

/// A dataset read whole even where a region would do (`dataset.roi_decode = false`): every
/// image is decoded in full, as torchvision decodes it.
pub struct WholeImages;

impl Adapt for WholeImages {
    fn read_region(
        &self,
        inner: &dyn Dataset,
        index: usize,
        buf: &mut Vec<u8>,
        _region: Region,
    ) -> Result<Read, DataError> {
        let shape = inner.read_image(index, buf)?;
        Ok(Read {
            shape,
            region: None,
        })
    }
}

/// The shape of a dataset whose images differ in size (a folder's, a shard's): its channels,
/// 0 × 0 until an op fixes the size.
pub(crate) fn varying_shape(mode: ColorMode) -> ImageShape {
    let channels = match mode {
        ColorMode::Rgb => 3,
        ColorMode::L => 1,
    };
    ImageShape::new(channels, 0, 0)
}

/// Ask the CPU to bring `bytes` into cache ahead of a read: a hint, a no-op off x86-64.
#[inline]
pub fn prefetch_bytes(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        // One prefetch per 64-byte line the slice touches, the partial first and last included.
        let start = bytes.as_ptr() as usize;
        let mut line = start & !63;
        while line < start + bytes.len() {
            // SAFETY: a prefetch never faults and changes no memory, whatever the address.
            unsafe {
                std::arch::x86_64::_mm_prefetch(line as *const i8, std::arch::x86_64::_MM_HINT_T0)
            };
            line += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

/// An empty `Vec` with room for `len` bytes whose pages Linux is asked to back with 2 MiB
/// pages (transparent huge pages, `madvise` mode). A loader reads a dataset of tens of MB at
/// random; with 4 KiB pages nearly every image read is also a TLB miss and a page walk
/// (measured: ≈ 4–5 % of the loader's time on synthetic data of FashionMNIST's size).
/// Advice only: where huge pages are off or unavailable the memory is ordinary.
pub(crate) fn with_large_pages(len: usize) -> Vec<u8> {
    let v = Vec::with_capacity(len);
    #[cfg(target_os = "linux")]
    if len >= 4 << 20 {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let start = v.as_ptr() as usize;
        let (from, to) = (start.next_multiple_of(page), (start + len) / page * page);
        if to > from {
            // SAFETY: whole pages inside this allocation; the advice changes no contents,
            // and a failure (huge pages disabled) leaves ordinary pages, which is fine.
            unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE) };
        }
    }
    v
}
