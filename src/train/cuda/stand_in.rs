//! The stand-in step on CUDA (`model.kind = "stand_in"` with `device.kind = "cuda"`): one
//! kernel per step that reads every element of the batch on the device (a checksum, so the
//! copy before it cannot be skipped) and then keeps each of its blocks busy on the device's
//! own clock (`%globaltimer`) until `step_ms` has passed since the block started. The batch
//! travels as for a network: pinned buffers, an asynchronous copy on the device's stream, CUDA
//! events around the step.
//!
//! The kernel is built to PTX with the crate (`build.rs`) and checked once on first use
//! against the host — its checksum of known floats and its duration on CUDA events.
//! A kernel that fails the check refuses the run: a wrong stand-in must never measure anything.

use candle_core::cuda::cudarc::driver::sys::CUevent_flags;
use candle_core::cuda::cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};
use candle_core::{CudaDevice, Device, Result, Storage, Tensor};

use super::{cuda_err, load_kernels};

/// What a CUDA error from this file names as the part that failed.
const PART: &str = "CUDA stand-in step";

/// The kernel (`kernels/stand_in.cu`), built to PTX with the crate.
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/stand_in.ptx"));

/// Threads per block, and at most this many blocks (a grid every GPU holds at once, so all
/// blocks start together and the kernel lasts about `ns`).
const THREADS: u32 = 256;
const MAX_BLOCKS: u64 = 128;

/// The stand-in step's kernel on one device.
pub struct CudaStandIn {
    /// The device as candle names it (for copies, events and synchronising) …
    on: Device,
    /// … and as CUDA does (its stream).
    device: CudaDevice,
    func: CudaFunction,
    checksum: CudaSlice<u32>,
    ns: u64,
}

impl CudaStandIn {
    /// Load (from the PTX built with the crate) and check the kernel on `device` for steps of
    /// `step_ms`.
    pub fn new(device: &Device, step_ms: f64) -> Result<CudaStandIn> {
        let Device::Cuda(dev) = device else {
            return Err(cuda_err(PART, "not a CUDA device"));
        };
        let stream = dev.cuda_stream();
        let [func] = load_kernels(dev, PTX, ["stand_in_step"], PART)?;
        let checksum = stream
            .alloc_zeros::<u32>(1)
            .map_err(|e| cuda_err(PART, e))?;
        let mut s = CudaStandIn {
            on: device.clone(),
            device: dev.clone(),
            func,
            checksum,
            ns: (step_ms * 1e6).round() as u64,
        };
        s.check()?;
        Ok(s)
    }

    /// The device the step runs on.
    pub fn device(&self) -> &Device {
        &self.on
    }

    /// Queue one step: read `n` floats of `data`, then hold the device for `ns`.
    fn launch(&mut self, data: &CudaSlice<f32>, n: u64, ns: u64) -> Result<()> {
        if n > data.len() as u64 {
            return Err(cuda_err(
                PART,
                format!("{n} elements asked of a buffer of {}", data.len()),
            ));
        }
        let stream = self.device.cuda_stream();
        let blocks = n.div_ceil(THREADS as u64).clamp(1, MAX_BLOCKS) as u32;
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = stream.launch_builder(&self.func);
        b.arg(data).arg(&n).arg(&ns).arg(&mut self.checksum);
        // SAFETY: the arguments match the kernel's signature (const float*, u64, u64, u32*) in
        // order; it reads `n` floats of `data`, which holds at least `n` (checked above), and
        // atomically adds to the one u32 of `checksum`.
        unsafe { b.launch(cfg) }.map_err(|e| cuda_err(PART, e))?;
        Ok(())
    }

    /// One step on a batch's images on this device.
    pub fn step(&mut self, images: &Tensor) -> Result<()> {
        let (storage, layout) = images.storage_and_layout();
        let Storage::Cuda(cs) = &*storage else {
            return Err(cuda_err(PART, "the batch is not on the CUDA device"));
        };
        if layout.start_offset() != 0 || !layout.is_contiguous() {
            return Err(cuda_err(PART, "the batch is not one contiguous buffer"));
        }
        let slice = cs.as_cuda_slice::<f32>()?;
        // A narrowed last batch reads its own images: the first `elem_count` floats.
        let (n, ns) = (images.elem_count() as u64, self.ns);
        self.launch(slice, n, ns)
    }

    /// 4,096 known floats for 2 ms: the checksum must be the host's and the events around the
    /// kernel 1.8–50 ms apart.
    fn check(&mut self) -> Result<()> {
        let host: Vec<f32> = (0..4096).map(|i| i as f32 * 0.5 - 7.0).collect();
        let want = host.iter().fold(0u32, |s, v| s.wrapping_add(v.to_bits()));
        let stream = self.device.cuda_stream();
        let data = stream.clone_htod(&host).map_err(|e| cuda_err(PART, e))?;
        stream
            .memset_zeros(&mut self.checksum)
            .map_err(|e| cuda_err(PART, e))?;
        let event = || {
            stream
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| cuda_err(PART, e))
        };
        let start = event()?;
        self.launch(&data, host.len() as u64, 2_000_000)?;
        let end = event()?;
        end.synchronize().map_err(|e| cuda_err(PART, e))?;
        let ms = start.elapsed_ms(&end).map_err(|e| cuda_err(PART, e))?;
        let got = stream
            .clone_dtoh(&self.checksum)
            .map_err(|e| cuda_err(PART, e))?;
        if got.first() != Some(&want) || !(1.8..50.0).contains(&ms) {
            return Err(cuda_err(
                PART,
                format!(
                    "the kernel failed its check (checksum {got:?}, the host's {want}; 2 ms took \
                 {ms:.3} ms on CUDA events): not used"
                ),
            ));
        }
        Ok(())
    }
}
