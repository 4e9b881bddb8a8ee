//! One fused multi-tensor optimizer kernel per step on CUDA (`kernels/optim.cu`), in place of
//! candle's path (about ten elementwise kernels and as many allocations per parameter).
//!
//! The kernel updates parameters, moments and momentum buffers in place, through device
//! pointers taken from the tensors' storage. That is sound because of what [`Fused::step`]
//! checks before every launch — every tensor is f32, contiguous, on this device, of the
//! parameter's length, and no buffer the kernel writes is also one it reads as another tensor
//! — and because every use of a device buffer is ordered by the device's one stream (see
//! `cuda::new_device`): candle's earlier kernels that produce the gradients run before the
//! update, and a gradient freed after the call is freed in stream order, after the kernel.
//!
//! On first use on a device the kernel is checked against candle's path (`Optimizer` without
//! it) on a few small tensors for every rule; any difference beyond float rounding disables it
//! for the process with a one-line notice, so a wrong kernel never touches a run.

use std::sync::Arc;

use candle_core::cuda::cudarc::driver::{
    CudaFunction, CudaStream, DevicePtr, DeviceRepr, LaunchConfig, PushKernelArg,
};
use candle_core::{DType, Device, Result, Storage, Tensor};

use super::super::fused::{
    AdamArgs, CHUNK, MAX_TENSORS, Rule, SgdArgs, TensorList, check_buffers, check_disjoint,
};
use super::{OncePerDevice, cuda_err, load_kernels};
use crate::config::{OptimizerKind, OptimizerSection};

/// The fused kernel's check: the largest relative difference from candle's path after two
/// steps of `settings` on parameters of `sizes` on `device`.
pub type Agreement = fn(&Device, &OptimizerSection, &[usize], &Fused) -> Result<f64>;

/// What a CUDA error from this file names as the part that failed.
const PART: &str = "fused optimizer";

/// The kernels (`kernels/optim.cu`), built to PTX with the crate.
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/optim.ptx"));
const THREADS: u32 = 256;

// SAFETY: plain old data with optim.cu's layout (`#[repr(C)]`, size tested in fused.rs),
// passed to the kernel by value.
unsafe impl DeviceRepr for TensorList {}
// SAFETY: as for TensorList.
unsafe impl DeviceRepr for AdamArgs {}
// SAFETY: as for TensorList.
unsafe impl DeviceRepr for SgdArgs {}

/// One parameter's update: its tensor, gradient and state buffers (zeroed before the first).
pub struct Update<'a> {
    pub p: &'a Tensor,
    pub g: &'a Tensor,
    pub m: Option<&'a Tensor>,
    pub v: Option<&'a Tensor>,
}

/// The fused kernels, loaded on one device.
#[derive(Clone)]
pub struct Fused {
    adam: CudaFunction,
    sgd: CudaFunction,
    stream: Arc<CudaStream>,
    device: Device,
}

/// Per CUDA device: the checked kernels, or None when they failed to load or their check.
static CHECKED: OncePerDevice<Option<Arc<Fused>>> = OncePerDevice::new();

impl Fused {
    /// The device's fused kernels, loaded and checked on first use by `agreement` (the
    /// largest relative difference from candle's path after two steps of the settings on
    /// parameters of the sizes given: `Optimizer::agreement`, passed in so this file needs no
    /// optimizer of its own); None off CUDA, or when they failed to load or their check (said
    /// once, on stderr).
    pub fn for_device(device: &Device, agreement: Agreement) -> Option<Arc<Fused>> {
        let Device::Cuda(dev) = device else {
            return None;
        };
        CHECKED.get(dev, || {
            Fused::load(device)
                .and_then(|f| f.check(agreement).map(|()| f))
                .map_err(|e| {
                    eprintln!(
                        "note: the fused optimizer kernel is not used on this device ({}); \
                         candle's path updates the weights instead",
                        e.to_string().lines().next().unwrap_or_default()
                    )
                })
                .ok()
                .map(Arc::new)
        })
    }

    fn load(device: &Device) -> Result<Fused> {
        let Device::Cuda(dev) = device else {
            return Err(cuda_err(PART, "not a CUDA device"));
        };
        let [adam, sgd] = load_kernels(dev, PTX, ["fused_adam", "fused_sgd"], PART)?;
        Ok(Fused {
            adam,
            sgd,
            stream: dev.cuda_stream(),
            device: device.clone(),
        })
    }

    /// Queue one update of every parameter in `updates` by `rule`.
    pub fn step(&self, updates: &[Update], rule: Rule) -> Result<()> {
        for group in updates.chunks(MAX_TENSORS) {
            // Gradients that are views are copied first; the copies outlive the launch.
            let grads: Vec<Tensor> = group
                .iter()
                .map(|u| u.g.contiguous())
                .collect::<Result<_>>()?;
            let mut list = TensorList::empty();
            list.count = group.len() as u32;
            let mut blocks = 0u64;
            for (i, (u, g)) in group.iter().zip(&grads).enumerate() {
                let n = u.p.elem_count();
                list.p[i] = self.pointer(u.p, n, "parameter")?;
                list.g[i] = self.pointer(g, n, "gradient")?;
                list.m[i] = u.m.map_or(Ok(0), |m| self.pointer(m, n, "first buffer"))?;
                list.v[i] = u.v.map_or(Ok(0), |v| self.pointer(v, n, "second moment"))?;
                list.n[i] = n as u64;
                list.first_block[i] = blocks as u32;
                blocks += (n as u64).div_ceil(CHUNK);
                list.first_block[i + 1] = u32::try_from(blocks).map_err(|e| cuda_err(PART, e))?;
            }
            check_disjoint(&list).map_err(|e| cuda_err(PART, e))?;
            check_buffers(&list, rule).map_err(|e| cuda_err(PART, e))?;
            if blocks == 0 {
                continue;
            }
            let cfg = LaunchConfig {
                grid_dim: (blocks as u32, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let launched = match &rule {
                Rule::Adam(a) => {
                    let mut b = self.stream.launch_builder(&self.adam);
                    b.arg(&list).arg(a);
                    // SAFETY: (TensorList, AdamArgs) by value, as fused_adam takes them; every
                    // pointer addresses `n[i]` f32 of a live tensor of this device (checked by
                    // `pointer`), the written ones (p, m, v) overlap nothing (`check_disjoint`),
                    // and m and v are present (`check_buffers`); the stream orders the launch
                    // after the kernels that wrote the gradients.
                    unsafe { b.launch(cfg) }
                }
                Rule::Sgd(a) => {
                    let mut b = self.stream.launch_builder(&self.sgd);
                    b.arg(&list).arg(a);
                    // SAFETY: as for Adam: (TensorList, SgdArgs) by value; m is present
                    // whenever momentum is used (`check_buffers`), v is never read.
                    unsafe { b.launch(cfg) }
                }
            };
            launched.map_err(|e| cuda_err(PART, e))?;
        }
        Ok(())
    }

    /// The device address of `t`'s first element, after checking that it is `n` contiguous
    /// f32 on this device. The tensor (which the caller holds) keeps the memory alive.
    fn pointer(&self, t: &Tensor, n: usize, what: &str) -> Result<u64> {
        let (storage, layout) = t.storage_and_layout();
        let Storage::Cuda(cs) = &*storage else {
            return Err(cuda_err(
                PART,
                format!("the {what} is not on a CUDA device"),
            ));
        };
        if !t.device().same_device(&self.device)
            || t.dtype() != DType::F32
            || !layout.is_contiguous()
            || t.elem_count() != n
        {
            return Err(cuda_err(
                PART,
                format!(
                    "the {what} is not {n} contiguous f32 on this device ({:?}, {} elements)",
                    t.dtype(),
                    t.elem_count()
                ),
            ));
        }
        let slice = cs.as_cuda_slice::<f32>()?;
        if layout.start_offset() + n > slice.len() {
            return Err(cuda_err(PART, format!("the {what} runs past its buffer")));
        }
        let (base, _sync) = slice.device_ptr(&self.stream);
        Ok(base + 4 * layout.start_offset() as u64)
    }
}

impl Fused {
    /// Two steps of every rule on small tensors (one spans several chunks, one is empty of
    /// remainder), against candle's path on the same device: parameters and buffers must agree
    /// within a few units of f32 rounding.
    fn check(&self, agreement: Agreement) -> Result<()> {
        let sizes = [1usize, 3 * CHUNK as usize + 17, 300];
        let rules = [
            ("adam", OptimizerKind::Adam, 0.01, 0.0, false),
            ("adamw", OptimizerKind::Adamw, 0.01, 0.0, false),
            ("sgd", OptimizerKind::Sgd, 0.0, 0.0, false),
            (
                "sgd with nesterov momentum",
                OptimizerKind::Sgd,
                0.01,
                0.9,
                true,
            ),
        ];
        for (name, kind, weight_decay, momentum, nesterov) in rules {
            let settings = OptimizerSection {
                kind,
                lr: 0.01,
                weight_decay,
                momentum,
                nesterov,
                ..OptimizerSection::default()
            };
            let worst = agreement(&self.device, &settings, &sizes, self)?;
            if worst.is_nan() || worst > 4e-6 {
                return Err(cuda_err(
                    PART,
                    format!("{name}: differs from candle's path by {worst:e} (relative)"),
                ));
            }
        }
        Ok(())
    }
}
