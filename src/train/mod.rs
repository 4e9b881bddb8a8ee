//! Training: the model, the optimizer, the device, and one step.
//!
//! The runner only sees [`DeviceStep`]: `reset` to the common initial state, `upload` a batch,
//! `step` on it, `synchronize`. Behind it either a network's training step ([`Trainer`]; a
//! faster CPU implementation of the layers slots in behind that) or the stand-in step: the
//! host's declared CPU time ([`HostWork`]), then the declared device time ([`StandIn`], an
//! emulated device), the user's own step replayed.

mod clock;
#[cfg(feature = "cuda")]
mod cuda;
mod device;
mod fast_cpu;
// The fused optimizer's host side: launched only in a CUDA build, tested in every build.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod fused;
mod host;
mod marks;
mod model;
mod optim;
mod pool;
mod pooling;
mod stand_in;

pub use clock::DeviceClock;
#[cfg(feature = "cuda")]
pub use cuda::CudaStandIn;
pub use device::{
    Chosen, CoreBudget, DeviceError, WorkerCap, asleep_share, cores, cuda_devices, select,
    synchronize,
};
pub use host::{HOST_BUFFER, HostWork};
pub use marks::StepMarks;
pub use model::{InitialWeights, Layers, Model, ModelInput, RunningStats, fast_cpu_fits};
pub use optim::Optimizer;
pub use pool::ComputePool;
pub use pooling::{max_pool_2x2, max_pool_3x3_s2};
pub use stand_in::{DeviceBatch, QUEUE_DEPTH, StandIn};

use std::sync::Arc;

use candle_core::{Device, Result, Tensor};

use crate::loader::{Batch, HostMemory};

use crate::config::OptimizerSection;

/// A model and its optimizer, restartable from the same initial state.
pub struct Trainer {
    init: InitialWeights,
    settings: OptimizerSection,
    device: Device,
    layers: Layers,
    model: Model,
    optimizer: Optimizer,
    /// Page-locked staging for the labels of batches that came through pinned buffers.
    #[cfg(feature = "cuda")]
    labels: Option<cuda::LabelRing>,
}

impl Trainer {
    /// The fast hand-written layers on the CPU where the network allows, candle's elsewhere.
    pub fn new(init: InitialWeights, opt: &OptimizerSection, device: Device) -> Result<Self> {
        let layers = Layers::best_for(&device, &init.net);
        Self::with_layers(init, opt, device, layers)
    }

    pub fn with_layers(
        init: InitialWeights,
        opt: &OptimizerSection,
        device: Device,
        layers: Layers,
    ) -> Result<Self> {
        let model = Model::new(&init, &device, layers)?;
        let optimizer = Optimizer::new(model.vars(), opt);
        Ok(Trainer {
            init,
            settings: opt.clone(),
            #[cfg(feature = "cuda")]
            labels: cuda::LabelRing::for_device(&device),
            device,
            layers,
            model,
            optimizer,
        })
    }

    /// Back to the initial weights, running statistics and a fresh optimizer state (zero
    /// moments, step 0).
    pub fn reset(&mut self) -> Result<()> {
        self.model = Model::new(&self.init, &self.device, self.layers)?;
        self.optimizer = Optimizer::new(self.model.vars(), &self.settings);
        Ok(())
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn model(&self) -> &Model {
        &self.model
    }

    /// A batch on this trainer's device. On CUDA, when the images come through a page-locked
    /// buffer, the labels do too (a small ring of pinned staging buffers), so neither copy
    /// waits for the device.
    pub fn to_device(&self, batch: &Batch) -> Result<(Tensor, Tensor)> {
        let (x, pinned) = images_to_device(batch, &self.device)?;
        #[cfg(feature = "cuda")]
        if let (true, Some(ring)) = (pinned, &self.labels) {
            return Ok((x, ring.upload(batch.labels(), &self.device)?));
        }
        let _ = pinned;
        Ok((
            x,
            Tensor::from_slice(batch.labels(), batch.len, &self.device)?,
        ))
    }

    /// What updates the weights (candle's ops, or the fused CUDA kernel).
    pub fn optimizer_path(&self) -> &'static str {
        self.optimizer.path()
    }

    /// Forward, cross-entropy loss, backward and one optimizer step. Returns the loss tensor
    /// (read it after timing: on CUDA reading it waits for the device).
    pub fn step(&mut self, images: &Tensor, labels: &Tensor) -> Result<Tensor> {
        let logits = self.model.forward(images)?;
        let loss = candle_nn::loss::cross_entropy(&logits, labels)?;
        self.optimizer.backward_step(&loss)?;
        Ok(loss)
    }
}

/// What runs each step: a network's training step, or the stand-in's declared host time then
/// its declared device time.
pub enum DeviceStep {
    Model(Box<Trainer>),
    /// The stand-in on the CPU: its host side, then its emulated device (none when the step is
    /// all host, `model.step_ms = 0`: synchronous, as a CPU job's step is).
    StandIn(HostWork, Option<StandIn>),
    /// The stand-in's host side, then its kernel on a CUDA device.
    #[cfg(feature = "cuda")]
    CudaStandIn(Box<cuda::CudaStandIn>, HostWork),
}

/// A batch on the device, as the step takes it.
pub enum OnDevice {
    /// Images N×C×H×W and labels.
    Tensors(Tensor, Tensor),
    StandIn(DeviceBatch),
    /// Nothing copied: the stand-in's step is all host.
    Host,
}

/// A step's loss, read after timing (on CUDA reading it waits for the device); the stand-in
/// step has none.
pub struct Loss(Option<Tensor>);

impl Loss {
    /// The loss as a number; NaN for the stand-in step.
    pub fn read(&self) -> Result<f64> {
        self.0
            .as_ref()
            .map_or(Ok(f64::NAN), |l| Ok(l.to_scalar::<f32>()? as f64))
    }
}

impl DeviceStep {
    /// Back to the common initial state: the network's initial weights and a fresh
    /// optimizer; for the stand-in, an idle device.
    pub fn reset(&mut self) -> Result<()> {
        match self {
            DeviceStep::Model(t) => t.reset(),
            DeviceStep::StandIn(_, s) => s.as_ref().map_or(Ok(()), StandIn::synchronize),
            #[cfg(feature = "cuda")]
            DeviceStep::CudaStandIn(s, _) => synchronize(s.device()),
        }
    }

    /// The batch copied to the device (on CUDA from a pinned buffer only queued).
    pub fn upload(&self, batch: &Batch) -> Result<OnDevice> {
        match self {
            DeviceStep::Model(t) => {
                let (x, y) = t.to_device(batch)?;
                Ok(OnDevice::Tensors(x, y))
            }
            DeviceStep::StandIn(_, Some(_)) => Ok(OnDevice::StandIn(DeviceBatch::upload(batch))),
            DeviceStep::StandIn(_, None) => Ok(OnDevice::Host),
            #[cfg(feature = "cuda")]
            DeviceStep::CudaStandIn(s, _) => {
                let (x, y) = to_device(batch, s.device())?;
                Ok(OnDevice::Tensors(x, y))
            }
        }
    }

    /// One step on an uploaded batch; a network's CPU step runs on `pool`.
    pub fn step(&mut self, on: &OnDevice, pool: Option<&ComputePool>) -> Result<Loss> {
        match (self, on) {
            (DeviceStep::Model(t), OnDevice::Tensors(x, y)) => {
                let loss = match pool {
                    Some(pool) => pool.install(|| t.step(x, y)),
                    None => t.step(x, y),
                }?;
                Ok(Loss(Some(loss)))
            }
            (DeviceStep::StandIn(host, Some(s)), OnDevice::StandIn(b)) => {
                host.spend();
                s.enqueue(b)?;
                Ok(Loss(None))
            }
            (DeviceStep::StandIn(host, None), OnDevice::Host) => {
                host.spend();
                Ok(Loss(None))
            }
            #[cfg(feature = "cuda")]
            (DeviceStep::CudaStandIn(s, host), OnDevice::Tensors(x, _)) => {
                host.spend();
                s.step(x)?;
                Ok(Loss(None))
            }
            _ => Err(candle_core::Error::Msg(
                "a batch uploaded for another kind of step".into(),
            )),
        }
    }

    /// Wait until the device has finished every step enqueued.
    pub fn synchronize(&self) -> Result<()> {
        match self {
            DeviceStep::Model(t) => synchronize(t.device()),
            DeviceStep::StandIn(_, s) => s.as_ref().map_or(Ok(()), StandIn::synchronize),
            #[cfg(feature = "cuda")]
            DeviceStep::CudaStandIn(s, _) => synchronize(s.device()),
        }
    }

    /// Per-step device marks where the device keeps its own clock (none for a stand-in that
    /// is all host: its step is the host's, timed by the host's clock as a CPU step is).
    pub fn clock(&self) -> DeviceClock {
        match self {
            DeviceStep::Model(t) => DeviceClock::for_device(t.device()),
            DeviceStep::StandIn(_, Some(s)) => DeviceClock::Emulated(s.clock()),
            DeviceStep::StandIn(_, None) => DeviceClock::Host,
            #[cfg(feature = "cuda")]
            DeviceStep::CudaStandIn(s, _) => DeviceClock::for_device(s.device()),
        }
    }
}

/// Page-locked host memory for the loader's batch buffers: on a CUDA device when
/// `loader.pin_memory` is on, else `None` (ordinary memory; pinning means nothing on the CPU).
pub fn pinned_memory(device: &Device, pin_memory: bool) -> Option<Arc<dyn HostMemory>> {
    if !pin_memory {
        return None;
    }
    #[cfg(feature = "cuda")]
    if let Some(p) = cuda::Pinned::for_device(device) {
        return Some(Arc::new(p));
    }
    let _ = device;
    None
}

/// TF32 for f32 matrix products on CUDA (`device.tf32`); nothing to do on the CPU.
pub fn set_tf32(on: bool) {
    #[cfg(feature = "cuda")]
    cuda::set_tf32(on);
    let _ = on;
}

/// A batch as (images N×C×H×W, labels) on `device`. From a pinned buffer on CUDA this only
/// queues an asynchronous copy; otherwise candle copies (synchronously on the CPU).
pub fn to_device(batch: &Batch, device: &Device) -> Result<(Tensor, Tensor)> {
    let (x, _) = images_to_device(batch, device)?;
    let y = Tensor::from_slice(batch.labels(), batch.len, device)?;
    Ok((x, y))
}

/// The images on `device`, and whether they came through a page-locked buffer.
fn images_to_device(batch: &Batch, device: &Device) -> Result<(Tensor, bool)> {
    let shape = batch.shape;
    #[cfg(feature = "cuda")]
    if let Some(x) = cuda::images_to_device(batch, device)? {
        return Ok((x, true));
    }
    let x = Tensor::from_slice(
        batch.images(),
        (batch.len, shape.channels, shape.height, shape.width),
        device,
    )?;
    Ok((x, false))
}

/// Keep freed training buffers in the process instead of returning them to the OS.
///
/// glibc serves large allocations (im2col buffers, activations, gradients: up to ~30 MB at
/// batch 256) with fresh `mmap`s and unmaps them on free, so every step paid page faults on
/// tens of megabytes: measured here, 139 ms → 72 ms per CPU step at batch 256 once they are
/// reused. Affects only this process's allocator.
///
/// # Safety
/// glibc documents `mallopt` as MT-Unsafe: call this before the process starts any thread
/// (the first statement of `main`).
pub unsafe fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: the caller guarantees no other thread exists yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}
