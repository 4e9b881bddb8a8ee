//! Datasets of encoded images (JPEG, PNG) of any size, decoded as they are read: an image
//! folder's files, a WebDataset's shard members. What they share is written once here — the
//! shape (the channels of `dataset.mode`, the size per image), decoding only a leading crop's
//! region, `on_error`, the decoded cache and the storage hints — and each kind says only where
//! its members' bytes lie and what they are called ([`Members`]).

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::data::decode::decode_region;
use crate::data::{ColorMode, DataError, Dataset, ImageShape, OnError, Read, Region, StorageHints};

/// Where a dataset's encoded images lie: what [`EncodedImages`] asks of a kind.
pub trait Members: Send + Sync + 'static {
    fn len(&self) -> usize;
    fn label(&self, index: usize) -> u8;
    fn classes(&self) -> usize;
    /// Member `index`'s encoded bytes (the error names the file).
    fn bytes(&self, index: usize) -> Result<Cow<'_, [u8]>, DataError>;
    /// The error for member `index`, which the decoder refuses for `reason`.
    fn undecodable(&self, index: usize, reason: String) -> DataError;
    /// The error when no member decodes (`on_error = "skip"`).
    fn none_decodes(&self) -> DataError;
    /// For reports.
    fn describe(&self) -> String;
    /// See [`StorageHints::files`].
    fn files(&self) -> Vec<PathBuf>;
    /// See [`StorageHints::stored_len`].
    fn stored_len(&self, index: usize) -> Option<u64>;
    /// See [`StorageHints::storage_unit`].
    fn storage_unit(&self, _index: usize) -> Option<u32> {
        None
    }
    /// See [`StorageHints::epoch_order`].
    fn epoch_order(&self, _shuffle: bool, _seed: u64, _epoch: u64, _order: &mut Vec<u32>) -> bool {
        false
    }
}

/// A dataset of the encoded images `M` names.
pub struct EncodedImages<M> {
    members: M,
    mode: ColorMode,
    on_error: OnError,
    skipped: AtomicU64,
    /// Every image decoded once, with its shape (`cache = "decoded"`).
    decoded: Option<Vec<(ImageShape, Vec<u8>)>>,
}

impl<M: Members> EncodedImages<M> {
    /// The images of `members`, decoded to `mode`; `decode_all` decodes every one now and
    /// keeps the pixels (a failure then is an error now, or with `"skip"` the next image).
    pub fn new(
        members: M,
        mode: ColorMode,
        on_error: OnError,
        decode_all: bool,
    ) -> Result<Self, DataError> {
        let mut images = EncodedImages {
            members,
            mode,
            on_error,
            skipped: AtomicU64::new(0),
            decoded: None,
        };
        if decode_all {
            let mut all = Vec::with_capacity(images.members.len());
            for i in 0..images.members.len() {
                let mut pixels = Vec::new();
                let shape = images.read_or_skip(i, &mut pixels, &|_| None)?.shape;
                all.push((shape, pixels));
            }
            images.decoded = Some(all);
        }
        Ok(images)
    }

    pub fn members(&self) -> &M {
        &self.members
    }

    /// Decode (the `region` of) image `index`; with `on_error = "skip"` a failure reads the
    /// next image instead (wrapping around), counted in `skipped`.
    fn read_or_skip(
        &self,
        index: usize,
        out: &mut Vec<u8>,
        region: Region,
    ) -> Result<Read, DataError> {
        let len = self.members.len();
        let mut first_error = None;
        for k in 0..len {
            let i = (index + k) % len;
            let read = self.members.bytes(i).and_then(|bytes| {
                decode_region(&bytes, self.mode, region, out)
                    .map_err(|reason| self.members.undecodable(i, reason))
            });
            match read {
                Ok(r) => {
                    if k > 0 {
                        self.skipped.fetch_add(1, Ordering::Relaxed);
                    }
                    return Ok(r);
                }
                Err(e) if self.on_error == OnError::Skip => {
                    first_error.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(first_error.unwrap_or_else(|| self.members.none_decodes()))
    }
}

impl<M: Members> Dataset for EncodedImages<M> {
    fn len(&self) -> usize {
        self.members.len()
    }
    fn label(&self, index: usize) -> u8 {
        self.members.label(index)
    }
    fn shape(&self) -> ImageShape {
        crate::data::varying_shape(self.mode)
    }
    /// The infallible read: readers use [`Dataset::read_image`]; this form panics with the
    /// reason an image does not decode.
    fn image_into(&self, index: usize, buf: &mut [u8]) {
        let mut v = Vec::new();
        match self.read_image(index, &mut v) {
            Ok(shape) => buf[..shape.len()].copy_from_slice(&v),
            Err(e) => panic!("{e}"),
        }
    }
    fn read_image(&self, index: usize, buf: &mut Vec<u8>) -> Result<ImageShape, DataError> {
        self.read_region(index, buf, &|_| None).map(|r| r.shape)
    }
    fn read_region(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
        region: Region,
    ) -> Result<Read, DataError> {
        match &self.decoded {
            // Decoded pixels are cached whole: a region saves nothing.
            Some(all) => {
                let (shape, pixels) = &all[index];
                buf.clear();
                buf.extend_from_slice(pixels);
                Ok(Read {
                    shape: *shape,
                    region: None,
                })
            }
            None => self.read_or_skip(index, buf, region),
        }
    }
    fn classes(&self) -> usize {
        self.members.classes()
    }
    fn describe(&self) -> String {
        self.members.describe()
    }
    fn storage(&self) -> &dyn StorageHints {
        self
    }
}

impl<M: Members> StorageHints for EncodedImages<M> {
    fn decodes(&self) -> bool {
        self.decoded.is_none()
    }
    fn files(&self) -> Vec<PathBuf> {
        self.members.files()
    }
    fn stored_len(&self, index: usize) -> Option<u64> {
        self.members.stored_len(index)
    }
    fn storage_unit(&self, index: usize) -> Option<u32> {
        self.members.storage_unit(index)
    }
    fn encoded(&self, index: usize) -> Option<Vec<u8>> {
        self.members.bytes(index).ok().map(Cow::into_owned)
    }
    fn skipped(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }
    fn epoch_order(&self, shuffle: bool, seed: u64, epoch: u64, order: &mut Vec<u32>) -> bool {
        self.members.epoch_order(shuffle, seed, epoch, order)
    }
}
