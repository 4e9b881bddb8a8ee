//! Max pooling on CUDA (`kernels/pool.cu`): one forward kernel that keeps each output's
//! argmax, one backward kernel that gathers the gradient through it — in place of candle's
//! path ([`crate::train::max_pool_2x2`], [`crate::train::max_pool_3x3_s2`]: two or nine
//! reductions forward and about ten ops backward per pooling).
//!
//! On first use on a device both kernels are checked against candle's path (values and input
//! gradient, for 2×2 and 3×3/2 on odd and even sides); a mismatch disables them for the process
//! with a one-line notice.

use std::sync::{Mutex, PoisonError};

use super::{OncePerDevice, cuda_err};

use candle_core::cuda::cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::CudaStorage;
use candle_core::{CpuStorage, CustomOp1, Device, Layout, Result, Shape, Tensor, Var};

/// What a CUDA error from this file names as the part that failed.
const PART: &str = "max pooling kernel";

/// The kernels (`kernels/pool.cu`), built to PTX with the crate.
const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/pool.ptx"));
const MODULE: &str = "loaderlab_pool";
const THREADS: u32 = 256;

/// The pooling window: k×k, stride 2, padding `pad` (2×2 with 0, or ResNet's 3×3 with 1).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub k: i32,
    pub pad: i32,
}

const STRIDE: i32 = 2;

impl Window {
    fn out(self, side: usize) -> usize {
        ((side as i32 + 2 * self.pad - self.k) / STRIDE + 1).max(0) as usize
    }
}

/// Whether the kernels passed their check, per device.
static CHECKED: OncePerDevice<bool> = OncePerDevice::new();

/// Max pooling of `x` (N, C, H, W) through the kernels when `x` is on a CUDA device whose
/// kernels passed their check; None otherwise (the caller takes candle's path).
pub fn max_pool(x: &Tensor, window: Window) -> Result<Option<Tensor>> {
    let Device::Cuda(dev) = x.device() else {
        return Ok(None);
    };
    let ok = CHECKED.get(dev, || {
        check(x.device())
            .map_err(|e| {
                eprintln!(
                    "note: the max pooling kernels are not used on this device ({}); candle's \
                     path pools instead",
                    e.to_string().lines().next().unwrap_or_default()
                )
            })
            .is_ok()
    });
    if !ok {
        return Ok(None);
    }
    x.contiguous()?
        .apply_op1(MaxPool {
            window,
            argmax: Mutex::new(None),
        })
        .map(Some)
}

/// The forward op; its argmax stays with it (in the autograd graph) for the backward.
struct MaxPool {
    window: Window,
    argmax: Mutex<Option<(CudaSlice<u32>, Shape)>>,
}

/// Launch one of the two kernels over `total` elements.
#[allow(clippy::too_many_arguments)]
fn launch(
    dev: &candle_core::CudaDevice,
    name: &str,
    input: &CudaView<'_, f32>,
    arg_in: Option<&CudaSlice<u32>>,
    out: &mut CudaSlice<f32>,
    arg_out: Option<&mut CudaSlice<u32>>,
    dims: (u64, i32, i32, i32, i32),
    window: Window,
    total: u64,
) -> Result<()> {
    let func = dev.get_or_load_custom_func(name, MODULE, PTX)?;
    let blocks = total.div_ceil(THREADS as u64).clamp(1, 65_535) as u32;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let (planes, h, w, oh, ow) = dims;
    let stream = dev.cuda_stream();
    let mut b = stream.launch_builder(&func);
    b.arg(input);
    if let Some(a) = arg_in {
        b.arg(a);
    }
    b.arg(out);
    if let Some(a) = arg_out {
        b.arg(a);
    }
    b.arg(&planes)
        .arg(&h)
        .arg(&w)
        .arg(&oh)
        .arg(&ow)
        .arg(&window.k)
        .arg(&STRIDE)
        .arg(&window.pad);
    // SAFETY: the arguments are the kernel's, in order — forward (x, y, arg, dims…), backward
    // (gy, arg, gx, dims…) — and the callers size every buffer from the same dims: x and gx
    // hold planes·h·w floats, y, gy and arg planes·oh·ow; the kernels index nothing else.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_err(PART, e))?;
    Ok(())
}

impl CustomOp1 for MaxPool {
    fn name(&self) -> &'static str {
        "loaderlab-max-pool"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        Err(cuda_err(PART, "the pooling kernels run on CUDA only"))
    }

    fn cuda_fwd(&self, storage: &CudaStorage, layout: &Layout) -> Result<(CudaStorage, Shape)> {
        let (n, c, h, w) = layout.shape().dims4()?;
        if !layout.is_contiguous() {
            return Err(cuda_err(PART, "the input is not contiguous"));
        }
        let (oh, ow) = (self.window.out(h), self.window.out(w));
        let planes = (n * c) as u64;
        let total = planes * (oh * ow) as u64;
        let dev = &storage.device;
        let x = storage.as_cuda_slice::<f32>()?;
        let x = x.slice(layout.start_offset()..layout.start_offset() + n * c * h * w);
        // SAFETY: the forward kernel writes every output and argmax element (one per thread
        // index below `total`, which is their length).
        let mut y = unsafe { dev.alloc::<f32>(total as usize) }?;
        // SAFETY: as for `y`.
        let mut arg = unsafe { dev.alloc::<u32>(total as usize) }?;
        let dims = (planes, h as i32, w as i32, oh as i32, ow as i32);
        launch(
            dev,
            "max_pool_fwd",
            &x,
            None,
            &mut y,
            Some(&mut arg),
            dims,
            self.window,
            total,
        )?;
        *self.argmax.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((arg, layout.shape().clone()));
        let shape = Shape::from((n, c, oh, ow));
        Ok((CudaStorage::wrap_cuda_slice(y, dev.clone()), shape))
    }

    fn bwd(&self, _arg: &Tensor, _res: &Tensor, grad_res: &Tensor) -> Result<Option<Tensor>> {
        let guard = self.argmax.lock().unwrap_or_else(PoisonError::into_inner);
        let Some((argmax, input)) = guard.as_ref() else {
            return Err(cuda_err(PART, "backward before forward"));
        };
        let back = MaxPoolBack {
            window: self.window,
            argmax,
            input: input.clone(),
        };
        grad_res.contiguous()?.apply_op1_no_bwd(&back).map(Some)
    }
}

/// The backward op: the input's gradient from the output's, through the forward's argmax.
struct MaxPoolBack<'a> {
    window: Window,
    argmax: &'a CudaSlice<u32>,
    input: Shape,
}

impl CustomOp1 for MaxPoolBack<'_> {
    fn name(&self) -> &'static str {
        "loaderlab-max-pool-backward"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        Err(cuda_err(PART, "the pooling kernels run on CUDA only"))
    }

    fn cuda_fwd(&self, storage: &CudaStorage, layout: &Layout) -> Result<(CudaStorage, Shape)> {
        let (n, c, h, w) = self.input.dims4()?;
        let (oh, ow) = (self.window.out(h), self.window.out(w));
        if layout.dims() != [n, c, oh, ow] || !layout.is_contiguous() {
            return Err(cuda_err(
                PART,
                format!(
                    "the output gradient is {:?}, not ({n}, {c}, {oh}, {ow}) contiguous",
                    layout.dims()
                ),
            ));
        }
        let planes = (n * c) as u64;
        if self.argmax.len() as u64 != planes * (oh * ow) as u64 {
            return Err(cuda_err(PART, "the argmax does not match the gradient"));
        }
        let dev = &storage.device;
        let gy = storage.as_cuda_slice::<f32>()?;
        let gy = gy.slice(layout.start_offset()..layout.start_offset() + n * c * oh * ow);
        let total = planes * (h * w) as u64;
        // SAFETY: the backward kernel writes every input-gradient element.
        let mut gx = unsafe { dev.alloc::<f32>(total as usize) }?;
        let dims = (planes, h as i32, w as i32, oh as i32, ow as i32);
        launch(
            dev,
            "max_pool_bwd",
            &gy,
            Some(self.argmax),
            &mut gx,
            None,
            dims,
            self.window,
            total,
        )?;
        Ok((
            CudaStorage::wrap_cuda_slice(gx, dev.clone()),
            self.input.clone(),
        ))
    }
}

/// The kernels against candle's path on `device`: values and input gradients for both
/// windows on even and odd sides, to the last bit (a maximum is a copy, a gathered gradient a
/// sum of at most a few copies).
fn check(device: &Device) -> Result<()> {
    use super::super::pooling::{max_pool_2x2, max_pool_3x3_s2};
    for (window, reference) in [
        (
            Window { k: 2, pad: 0 },
            max_pool_2x2 as fn(&Tensor) -> Result<Tensor>,
        ),
        (Window { k: 3, pad: 1 }, max_pool_3x3_s2),
    ] {
        for (h, w) in [(8usize, 8usize), (7, 9)] {
            let n = 2 * 3 * h * w;
            // Distinct values (7919 is prime to n), > 0 as after a ReLU (the 3×3 reference
            // pads with zeros).
            let v: Vec<f32> = (0..n).map(|i| ((i * 7919) % n + 1) as f32 * 0.01).collect();
            let x = Var::from_vec(v, (2, 3, h, w), device)?;
            let ours = x.as_tensor().contiguous()?.apply_op1(MaxPool {
                window,
                argmax: Mutex::new(None),
            })?;
            let theirs = reference(x.as_tensor())?;
            let weights =
                Tensor::arange(0f32, ours.elem_count() as f32, device)?.reshape(ours.shape())?;
            let g_ours = (&ours * &weights)?.sum_all()?.backward()?;
            let g_theirs = (&theirs * &weights)?.sum_all()?.backward()?;
            let same = |a: &Tensor, b: &Tensor| -> Result<bool> {
                Ok(a.flatten_all()?.to_vec1::<f32>()? == b.flatten_all()?.to_vec1::<f32>()?)
            };
            let (Some(ga), Some(gb)) = (g_ours.get(x.as_tensor()), g_theirs.get(x.as_tensor()))
            else {
                return Err(cuda_err(PART, "no input gradient"));
            };
            if !same(&ours, &theirs)? || !same(ga, gb)? {
                return Err(cuda_err(
                    PART,
                    format!(
                        "{}×{} pooling of a {h}×{w} plane differs from candle's path",
                        window.k, window.k
                    ),
                ));
            }
        }
    }
    Ok(())
}
