//! A batch and the memory its images live in.

use crate::shape::ImageShape;

/// Where batch images live when not in an ordinary `Vec`: page-locked (pinned) host memory a
/// CUDA device can copy from asynchronously. The loader knows nothing about CUDA; a `cuda`
/// build passes an implementation to [`Loader::with_memory`].
pub trait HostMemory: Send + Sync {
    /// A block of `len` floats, zeroed. Called once per reusable batch buffer.
    fn alloc(&self, len: usize) -> Result<Box<dyn HostBlock>, String>;
}

/// One block from a [`HostMemory`].
pub trait HostBlock: Send + std::any::Any {
    fn as_slice(&self) -> &[f32];
    /// Waits for any device copy still reading the block before handing it out.
    fn as_mut_slice(&mut self) -> &mut [f32];
    fn as_any(&self) -> &dyn std::any::Any;
}

#[derive(Default)]
pub(super) enum Images {
    #[default]
    Empty,
    Heap(Vec<f32>),
    Block(Box<dyn HostBlock>),
}

impl Images {
    /// Make room for `len` floats, allocating only when the size changes.
    pub(super) fn ensure(
        &mut self,
        len: usize,
        memory: Option<&dyn HostMemory>,
    ) -> Result<(), String> {
        let have = match self {
            Images::Empty => None,
            Images::Heap(v) => Some(v.len()),
            Images::Block(b) => Some(b.as_slice().len()),
        };
        if have != Some(len) {
            *self = match memory {
                Some(m) => Images::Block(m.alloc(len)?),
                None => Images::Heap(vec![0.0; len]),
            };
        }
        Ok(())
    }

    pub(super) fn as_slice(&self) -> &[f32] {
        match self {
            Images::Empty => &[],
            Images::Heap(v) => v,
            Images::Block(b) => b.as_slice(),
        }
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [f32] {
        match self {
            Images::Empty => &mut [],
            Images::Heap(v) => v,
            Images::Block(b) => b.as_mut_slice(),
        }
    }
}

/// One batch: images as NCHW float32, labels, and a fingerprint of both.
#[derive(Default)]
pub struct Batch {
    /// Global batch number, counting across epochs from 0.
    pub index: u64,
    pub epoch: u64,
    /// Number of samples (smaller than batch_size only for a last partial batch).
    pub len: usize,
    /// Shape of each image (C×H×W floats).
    pub shape: ImageShape,
    pub(super) images: Images,
    pub(super) labels: Vec<u32>,
    pub fingerprint: u64,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("index", &self.index)
            .field("epoch", &self.epoch)
            .field("len", &self.len)
            .field("shape", &self.shape)
            .field("pinned", &matches!(self.images, Images::Block(_)))
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

impl Batch {
    pub fn images(&self) -> &[f32] {
        &self.images.as_slice()[..self.len * self.shape.len()]
    }
    /// The images, to write through (a consumer that owns the batch, e.g. a tensor handed
    /// the buffer without a copy).
    pub fn images_mut(&mut self) -> &mut [f32] {
        let n = self.len * self.shape.len();
        &mut self.images.as_mut_slice()[..n]
    }
    pub fn labels(&self) -> &[u32] {
        &self.labels[..self.len]
    }
    /// The whole reusable image buffer (room for a full batch) when it came from a
    /// [`HostMemory`]; `None` for ordinary memory.
    pub fn host_block(&self) -> Option<&dyn HostBlock> {
        match &self.images {
            Images::Block(b) => Some(b.as_ref()),
            _ => None,
        }
    }
}
