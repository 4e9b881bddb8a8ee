//! The CUDA side of a step (only in a `cuda` build): page-locked batch buffers the loader fills,
//! asynchronous host-to-device copies from them, and CUDA events that time each step's device
//! work on the device's own clock.
//!
//! Streams: the device is created with its own stream (`CudaDevice::new_with_stream`), not
//! CUDA's per-thread default stream, and every copy, kernel and event of a run goes to that one
//! stream from the training thread. Loader workers never touch the stream; they only write into
//! pinned blocks, and a block's own event (recorded by cudarc after each copy from it) makes a
//! worker wait until the copy that last read the block has finished.

use std::sync::Arc;

use candle_core::cuda::cudarc::driver::sys::CUevent_flags;
use candle_core::cuda::cudarc::driver::{CudaContext, CudaEvent, CudaStream, PinnedHostSlice};
use candle_core::op::BackpropOp;
use candle_core::{CudaDevice, CudaStorage, Device, Result, Storage, Tensor};

use super::marks::StepMarks;
use crate::loader::{Batch, HostBlock, HostMemory};

pub(super) mod conv;
pub(super) mod optim;
pub(super) mod pool;
mod stand_in;

pub use stand_in::CudaStandIn;

/// A CUDA driver error or a failed check of one of loaderlab's CUDA parts, as candle's error,
/// named by the part (each file's `PART`): the one error helper of the CUDA room.
pub(super) fn cuda_err(part: &str, e: impl std::fmt::Debug) -> candle_core::Error {
    candle_core::Error::Msg(format!("{part}: {e:?}"))
}

/// Load one of loaderlab's own PTX modules (built with the crate by `build.rs`) on `dev`'s
/// context and take the kernels `names` from it: the one PTX loader of the CUDA room (max
/// pooling goes through candle's per-device module cache instead, which loads on first use).
pub(super) fn load_kernels<const N: usize>(
    dev: &CudaDevice,
    ptx: &'static str,
    names: [&str; N],
    part: &str,
) -> Result<[candle_core::cuda::cudarc::driver::CudaFunction; N]> {
    let module = dev
        .cuda_stream()
        .context()
        .load_module(candle_core::cuda::cudarc::nvrtc::Ptx::from_src(ptx))
        .map_err(|e| cuda_err(part, e))?;
    let mut out = Vec::with_capacity(N);
    for name in names {
        out.push(module.load_function(name).map_err(|e| cuda_err(part, e))?);
    }
    out.try_into().map_err(|_| cuda_err(part, "kernel count"))
}

/// What a CUDA error from this file names as the part that failed.
const PART: &str = "CUDA";

/// A CUDA device on a stream of its own, without cudarc's per-buffer event tracking.
///
/// A device with its own stream puts cudarc in multi-stream mode, where every use of every
/// buffer records or waits on CUDA events (about 15 driver calls per candle op). They guard
/// buffers used on several streams; here there is one: candle queues every kernel, copy,
/// allocation and free of this device on the stream it was created with (its cuBLAS and cuRAND
/// handles are bound to that stream too), and loaderlab's own kernels and copies use it as
/// well. Pinned host buffers keep their own events (cudarc records those whatever the setting),
/// which is what stops a worker refilling a buffer that a copy still reads.
pub fn new_device(ordinal: usize) -> Result<Device> {
    let device = CudaDevice::new_with_stream(ordinal)?;
    // SAFETY: every device buffer is allocated, used and freed on the device's one stream
    // (above), so stream order alone orders every use; no tensor exists yet on this device.
    unsafe { device.disable_event_tracking() };
    Ok(Device::Cuda(device))
}

/// "(NVIDIA H200, compute 9.0, 141 GiB)" for the results.
pub fn describe(device: &Device) -> Option<String> {
    let ctx = Arc::clone(cuda_device(device)?.cuda_stream().context());
    let name = ctx.name().ok()?;
    let (major, minor) = ctx.compute_capability().ok()?;
    let gib = ctx.total_mem().ok()? as f64 / (1u64 << 30) as f64;
    Some(format!("({name}, compute {major}.{minor}, {gib:.0} GiB)"))
}

/// TF32 for f32 matrix products and cuDNN's convolutions: off unless `device.tf32 = true`.
pub fn set_tf32(on: bool) {
    candle_core::cuda::set_gemm_reduced_precision_f32(on);
    conv::set_tf32(on);
}

fn cuda_device(device: &Device) -> Option<&CudaDevice> {
    match device {
        Device::Cuda(d) => Some(d),
        _ => None,
    }
}

/// Page-locked host memory from the device's context (cacheable, not write-combined: workers
/// also read it back for the batch fingerprint).
pub struct Pinned {
    context: Arc<CudaContext>,
}

impl Pinned {
    pub fn for_device(device: &Device) -> Option<Pinned> {
        cuda_device(device).map(|d| Pinned {
            context: Arc::clone(d.cuda_stream().context()),
        })
    }
}

struct PinnedBlock(PinnedHostSlice<f32>);

impl HostBlock for PinnedBlock {
    fn as_slice(&self) -> &[f32] {
        self.0
            .as_slice()
            .expect("CUDA: waiting for a pinned batch buffer failed")
    }
    fn as_mut_slice(&mut self) -> &mut [f32] {
        self.0
            .as_mut_slice()
            .expect("CUDA: waiting for a pinned batch buffer failed")
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl HostMemory for Pinned {
    fn alloc(&self, len: usize) -> std::result::Result<Box<dyn HostBlock>, String> {
        // SAFETY: the memory is zeroed below before anyone reads it.
        let mut slice = unsafe { self.context.alloc_pinned_with_flags::<f32>(len, 0) }
            .map_err(|e| format!("cudaHostAlloc of {len} floats failed: {e:?}"))?;
        slice
            .as_mut_slice()
            .map_err(|e| format!("{e:?}"))?
            .fill(0.0);
        Ok(Box::new(PinnedBlock(slice)))
    }
}

/// Images to the device: an asynchronous copy from a full pinned batch buffer (the call returns
/// once the copy is queued), else candle's ordinary copy. Labels (1 KiB) use the ordinary copy.
pub fn images_to_device(batch: &Batch, device: &Device) -> Result<Option<Tensor>> {
    let (Some(dev), Some(block)) = (cuda_device(device), batch.host_block()) else {
        return Ok(None);
    };
    let Some(pinned) = block.as_any().downcast_ref::<PinnedBlock>() else {
        return Ok(None);
    };
    let shape = batch.shape;
    let per_image = shape.len();
    if per_image == 0 || pinned.0.len() % per_image != 0 || pinned.0.len() < batch.len * per_image {
        return Ok(None);
    }
    // Always the whole block through the pinned path, which records the block's event, so no
    // worker refills the block while this asynchronous copy still reads it; a last, short
    // batch is then narrowed to its images on the device. (Copying only its slice would go
    // through a plain `&[f32]`, for which no event is recorded: a data race.)
    let capacity = pinned.0.len() / per_image;
    let stream = dev.cuda_stream();
    // SAFETY: every element is written by the copy queued next on the same stream.
    let mut dst = unsafe { stream.alloc::<f32>(pinned.0.len()) }.map_err(|e| cuda_err(PART, e))?;
    stream
        .memcpy_htod(&pinned.0, &mut dst)
        .map_err(|e| cuda_err(PART, e))?;
    let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(dst, dev.clone()));
    let block = Tensor::from_storage(
        storage,
        (capacity, shape.channels, shape.height, shape.width),
        BackpropOp::none(),
        false,
    );
    Ok(Some(if batch.len == capacity {
        block
    } else {
        block.narrow(0, 0, batch.len)?
    }))
}

/// Labels to the device from page-locked memory, like the images: each batch's labels are
/// copied into the next of [`LABEL_RING`] pinned staging buffers and queued as an asynchronous
/// copy. A buffer is reused [`LABEL_RING`] batches later, and its event (recorded by cudarc
/// after each copy from it) makes the refill wait for that copy — long done by then.
pub struct LabelRing {
    context: Arc<CudaContext>,
    ring: std::sync::Mutex<(Vec<PinnedHostSlice<u32>>, usize)>,
}

pub const LABEL_RING: usize = 4;

impl LabelRing {
    pub fn for_device(device: &Device) -> Option<LabelRing> {
        cuda_device(device).map(|d| LabelRing {
            context: Arc::clone(d.cuda_stream().context()),
            ring: std::sync::Mutex::new((Vec::new(), 0)),
        })
    }

    pub fn upload(&self, labels: &[u32], device: &Device) -> Result<Tensor> {
        let dev = cuda_device(device).ok_or_else(|| cuda_err(PART, "not a CUDA device"))?;
        let n = labels.len();
        let mut guard = self
            .ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (ring, next) = &mut *guard;
        let slot = *next;
        *next = (slot + 1) % LABEL_RING;
        if ring.len() <= slot || ring[slot].len() != n {
            // SAFETY: every element is written just below before the copy reads it.
            let fresh = unsafe { self.context.alloc_pinned_with_flags::<u32>(n.max(1), 0) }
                .map_err(|e| cuda_err(PART, e))?;
            if ring.len() <= slot {
                ring.push(fresh);
            } else {
                ring[slot] = fresh;
            }
        }
        let staging = &mut ring[slot];
        staging.as_mut_slice().map_err(|e| cuda_err(PART, e))?[..n].copy_from_slice(labels);
        let stream = dev.cuda_stream();
        // SAFETY: every element is written by the copy queued next on the same stream.
        let mut dst =
            unsafe { stream.alloc::<u32>(staging.len()) }.map_err(|e| cuda_err(PART, e))?;
        stream
            .memcpy_htod(&*staging, &mut dst)
            .map_err(|e| cuda_err(PART, e))?;
        let storage = Storage::Cuda(CudaStorage::wrap_cuda_slice(dst, dev.clone()));
        let t = Tensor::from_storage(storage, staging.len(), BackpropOp::none(), false);
        if n == staging.len() {
            Ok(t)
        } else {
            t.narrow(0, 0, n)
        }
    }
}

/// What a check found on each CUDA device, computed once per device and process: the first
/// caller runs it (holding the lock, so no other thread runs it meanwhile), later callers get
/// the remembered outcome.
pub struct OncePerDevice<T>(std::sync::Mutex<Vec<(candle_core::cuda_backend::DeviceId, T)>>);

impl<T: Clone> OncePerDevice<T> {
    pub const fn new() -> Self {
        OncePerDevice(std::sync::Mutex::new(Vec::new()))
    }

    pub fn get(&self, device: &CudaDevice, first: impl FnOnce() -> T) -> T {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, t)) = seen.iter().find(|(id, _)| *id == device.id()) {
            return t.clone();
        }
        let t = first();
        seen.push((device.id(), t.clone()));
        t
    }
}

/// Keep freed device memory in the device's default memory pool: with the pool's release
/// threshold at 0 (CUDA's default) every synchronisation may hand freed memory back to the
/// driver, and the next step maps it again. Returns what was set, for the results.
pub fn keep_pool_memory(device: &Device) -> Result<Option<String>> {
    use candle_core::cuda::cudarc::driver::{result, sys};
    let Some(dev) = cuda_device(device) else {
        return Ok(None);
    };
    let ctx = dev.cuda_stream().context().clone();
    ctx.bind_to_thread().map_err(|e| cuda_err(PART, e))?;
    let mut threshold: u64 = u64::MAX;
    // SAFETY: the CUdevice comes from the live context bound above; the release threshold
    // attribute takes a cuuint64_t, which `threshold` is, alive for the call.
    unsafe {
        let pool =
            result::device::get_default_mem_pool(ctx.cu_device()).map_err(|e| cuda_err(PART, e))?;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .map_err(|e| cuda_err(PART, e))?;
    }
    Ok(Some(
        "default memory pool: release threshold set to the maximum (freed memory stays in the \
         pool between steps)"
            .into(),
    ))
}

/// CUDA events on the device's stream: an anchor, then three per step (before the copy, before
/// the step's kernels, after them). Read after the device is synchronised.
pub struct EventClock {
    stream: Arc<CudaStream>,
    anchor: Option<CudaEvent>,
    marks: Vec<CudaEvent>,
}

impl EventClock {
    pub fn for_device(device: &Device) -> Option<EventClock> {
        cuda_device(device).map(|d| EventClock {
            stream: d.cuda_stream(),
            anchor: None,
            marks: Vec::with_capacity(3 * 128),
        })
    }

    fn record(&self) -> Result<CudaEvent> {
        self.stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| cuda_err(PART, e))
    }

    /// Start of a window; call with the stream idle (after a synchronise), so the anchor's
    /// device time is the host time of this call.
    pub fn anchor(&mut self) -> Result<()> {
        self.marks.clear();
        let anchor = self.record()?;
        anchor.synchronize().map_err(|e| cuda_err(PART, e))?;
        self.anchor = Some(anchor);
        Ok(())
    }

    pub fn mark(&mut self) -> Result<()> {
        let e = self.record()?;
        self.marks.push(e);
        Ok(())
    }

    /// Each step's (copy start, compute start, end), ms after the anchor on the device clock.
    pub fn read(&mut self) -> Result<Vec<StepMarks>> {
        let Some(anchor) = &self.anchor else {
            return Ok(Vec::new());
        };
        let mut out = Vec::with_capacity(self.marks.len() / 3);
        for m in self.marks.chunks_exact(3) {
            let at = |e: &CudaEvent| {
                anchor
                    .elapsed_ms(e)
                    .map(f64::from)
                    .map_err(|e| cuda_err(PART, e))
            };
            out.push(StepMarks {
                copy_start_ms: at(&m[0])?,
                compute_start_ms: at(&m[1])?,
                end_ms: at(&m[2])?,
            });
        }
        self.marks.clear();
        Ok(out)
    }
}
