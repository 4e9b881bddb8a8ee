//! Convolutions on CUDA through cuDNN: forward, backward-data and backward-filter (cudarc's
//! cuDNN wrappers; `libcudnn.so.9` is opened at run time like cuBLAS, e.g. from the
//! nvidia-cudnn wheel), in place of candle's path — im2col + cuBLAS forward, a naive
//! one-thread-per-element `conv_transpose2d` for the input gradient.
//!
//! Per device and shape the descriptors and the algorithms (cuDNN's heuristics, no
//! benchmarking) are chosen once and kept, with one growing workspace per device. TF32 only
//! with `device.tf32` (the descriptors' math type is `CUDNN_FMA_MATH` otherwise). The input
//! gradient is not computed for an input that tracks no gradient — the batch, at the first
//! convolution.
//!
//! cuDNN handles are not `Send`: every handle, descriptor and workspace lives in the thread
//! that uses it (a thread-local table per device), which is the training thread of a run or a
//! rank. Without libcudnn, or when the first use's check against candle's path fails,
//! convolutions take candle's path after one notice naming why.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::cuda::cudarc::driver::{CudaSlice, CudaView};
use candle_core::cuda_backend::{CudaStorage, DeviceId};

use super::OncePerDevice;
use candle_core::{CpuStorage, CudaDevice, CustomOp2, Device, Layout, Result, Shape, Tensor, Var};
use cudarc::cudnn::{
    ConvBackwardData, ConvBackwardFilter, ConvDescriptor, ConvForward, Cudnn, FilterDescriptor,
    TensorDescriptor, sys,
};

fn cudnn_err(e: impl std::fmt::Debug) -> candle_core::Error {
    candle_core::Error::Msg(format!("cuDNN convolution: {e:?}"))
}

/// TF32 in cuDNN's convolutions (`device.tf32`), set with candle's matmul flag.
static TF32: AtomicBool = AtomicBool::new(false);

pub fn set_tf32(on: bool) {
    TF32.store(on, Ordering::Relaxed);
}

/// One convolution's geometry: input (n, c, h, w), filter (k, c, r, s), padding, stride, TF32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    x: [usize; 4],
    w: [usize; 4],
    padding: usize,
    stride: usize,
    tf32: bool,
}

impl Key {
    fn y(&self) -> [usize; 4] {
        let out = |side: usize, k: usize| (side + 2 * self.padding - k) / self.stride + 1;
        [
            self.x[0],
            self.w[0],
            out(self.x[2], self.w[2]),
            out(self.x[3], self.w[3]),
        ]
    }
}

/// Descriptors and algorithms of one [`Key`].
struct Plan {
    x: TensorDescriptor<f32>,
    w: FilterDescriptor<f32>,
    y: TensorDescriptor<f32>,
    conv: ConvDescriptor<f32>,
    forward: sys::cudnnConvolutionFwdAlgo_t,
    backward_data: sys::cudnnConvolutionBwdDataAlgo_t,
    backward_filter: sys::cudnnConvolutionBwdFilterAlgo_t,
    workspace: usize,
}

/// One device's cuDNN state in this thread.
struct PerDevice {
    cudnn: Arc<Cudnn>,
    plans: HashMap<Key, Plan>,
    workspace: Option<CudaSlice<u8>>,
}

thread_local! {
    static STATE: RefCell<HashMap<DeviceId, PerDevice>> = RefCell::new(HashMap::new());
}

fn dims(d: [usize; 4]) -> [i32; 4] {
    d.map(|v| v as i32)
}

fn plan(cudnn: &Arc<Cudnn>, key: Key) -> std::result::Result<Plan, cudarc::cudnn::CudnnError> {
    let nchw = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
    let x = cudnn.create_4d_tensor::<f32>(nchw, dims(key.x))?;
    let w = cudnn.create_4d_filter::<f32>(nchw, dims(key.w))?;
    let y = cudnn.create_4d_tensor::<f32>(nchw, dims(key.y()))?;
    let (p, s) = (key.padding as i32, key.stride as i32);
    let mut conv = cudnn.create_conv2d::<f32>(
        [p, p],
        [s, s],
        [1, 1],
        sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
    )?;
    conv.set_math_type(if key.tf32 {
        sys::cudnnMathType_t::CUDNN_DEFAULT_MATH
    } else {
        sys::cudnnMathType_t::CUDNN_FMA_MATH
    })?;
    let f = ConvForward {
        conv: &conv,
        x: &x,
        w: &w,
        y: &y,
    };
    let d = ConvBackwardData {
        conv: &conv,
        dx: &x,
        w: &w,
        dy: &y,
    };
    let b = ConvBackwardFilter {
        conv: &conv,
        x: &x,
        dw: &w,
        dy: &y,
    };
    let (forward, backward_data, backward_filter) = (
        f.pick_algorithm()?,
        d.pick_algorithm()?,
        b.pick_algorithm()?,
    );
    let workspace = f
        .get_workspace_size(forward)?
        .max(d.get_workspace_size(backward_data)?)
        .max(b.get_workspace_size(backward_filter)?);
    Ok(Plan {
        x,
        w,
        y,
        conv,
        forward,
        backward_data,
        backward_filter,
        workspace,
    })
}

/// Run `f` with the plan of `key` on `dev` and a workspace of the plan's size.
fn with_plan<T>(
    dev: &CudaDevice,
    key: Key,
    f: impl FnOnce(&Plan, Option<&mut CudaSlice<u8>>) -> Result<T>,
) -> Result<T> {
    STATE.with(|state| {
        let mut state = state.borrow_mut();
        let per = match state.entry(dev.id()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(PerDevice {
                cudnn: Cudnn::new(dev.cuda_stream()).map_err(cudnn_err)?,
                plans: HashMap::new(),
                workspace: None,
            }),
        };
        if !per.plans.contains_key(&key) {
            let p = plan(&per.cudnn, key).map_err(cudnn_err)?;
            per.plans.insert(key, p);
        }
        let plan = &per.plans[&key];
        if plan.workspace > per.workspace.as_ref().map_or(0, |w| w.len()) {
            // The old one is freed in stream order, after the work that used it.
            // SAFETY: a workspace is scratch: cuDNN writes before it reads.
            per.workspace = Some(unsafe { dev.alloc::<u8>(plan.workspace) }?);
        }
        let workspace = per.workspace.as_mut().filter(|_| plan.workspace > 0);
        f(plan, workspace)
    })
}

/// An operand of a convolution: a contiguous f32 view and its dims.
type Operand<'a> = (CudaView<'a, f32>, [usize; 4]);

/// Both operands of a convolution (or of one of its backward ops).
fn views<'a>(
    a: &'a CudaStorage,
    al: &Layout,
    b: &'a CudaStorage,
    bl: &Layout,
) -> Result<(Operand<'a>, Operand<'a>)> {
    let view = |s: &'a CudaStorage, l: &Layout| -> Result<Operand<'a>> {
        if !l.is_contiguous() {
            return Err(cudnn_err("an operand is not contiguous"));
        }
        let (n, c, h, w) = l.shape().dims4()?;
        let start = l.start_offset();
        let slice = s.as_cuda_slice::<f32>()?;
        if start + n * c * h * w > slice.len() {
            return Err(cudnn_err("an operand runs past its buffer"));
        }
        Ok((slice.slice(start..start + n * c * h * w), [n, c, h, w]))
    };
    Ok((view(a, al)?, view(b, bl)?))
}

/// The convolution: `x.apply_op2(w, Conv)`; its backward runs the two ops below.
struct Conv {
    padding: usize,
    stride: usize,
}

impl CustomOp2 for Conv {
    fn name(&self) -> &'static str {
        "loaderlab-cudnn-conv2d"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        Err(cudnn_err("cuDNN runs on CUDA only"))
    }

    fn cuda_fwd(
        &self,
        xs: &CudaStorage,
        xl: &Layout,
        ws: &CudaStorage,
        wl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let ((x, xd), (w, wd)) = views(xs, xl, ws, wl)?;
        let key = self.key(xd, wd)?;
        let dev = &xs.device;
        let yd = key.y();
        // SAFETY: the forward convolution writes every element of y (beta = 0).
        let mut y = unsafe { dev.alloc::<f32>(yd.iter().product()) }?;
        with_plan(dev, key, |p, workspace| {
            let op = ConvForward {
                conv: &p.conv,
                x: &p.x,
                w: &p.w,
                y: &p.y,
            };
            // SAFETY: x, w and y are contiguous f32 of exactly the descriptors' dims (views()
            // and the allocation above, from the same key), on the stream of the handle.
            unsafe { op.launch(p.forward, workspace, (1.0, 0.0), &x, &w, &mut y) }
                .map_err(cudnn_err)
        })?;
        Ok((
            CudaStorage::wrap_cuda_slice(y, dev.clone()),
            Shape::from(&yd),
        ))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        // The batch tracks no gradient: the first convolution's input gradient is not needed.
        let gx = if x.track_op() {
            let data = Backward {
                conv: self,
                gradient: Gradient::Data,
                out: x.shape().clone(),
            };
            Some(grad.apply_op2_no_bwd(w, &data)?)
        } else {
            None
        };
        let filter = Backward {
            conv: self,
            gradient: Gradient::Filter,
            out: w.shape().clone(),
        };
        let gw = x.apply_op2_no_bwd(&grad, &filter)?;
        Ok((gx, Some(gw)))
    }
}

impl Conv {
    fn key(&self, x: [usize; 4], w: [usize; 4]) -> Result<Key> {
        if x[1] != w[1] || x[2] + 2 * self.padding < w[2] || x[3] + 2 * self.padding < w[3] {
            return Err(cudnn_err(format!("input {x:?} does not fit filter {w:?}")));
        }
        Ok(Key {
            x,
            w,
            padding: self.padding,
            stride: self.stride,
            tf32: TF32.load(Ordering::Relaxed),
        })
    }
}

fn four(s: &Shape) -> Result<[usize; 4]> {
    let (a, b, c, d) = s.dims4()?;
    Ok([a, b, c, d])
}

/// Which gradient a backward op computes.
#[derive(Clone, Copy)]
enum Gradient {
    /// dx from (dy, w).
    Data,
    /// dw from (x, dy).
    Filter,
}

/// One of the convolution's two backward ops; `out` is the gradient's shape (x's or w's).
struct Backward<'a> {
    conv: &'a Conv,
    gradient: Gradient,
    out: Shape,
}

impl CustomOp2 for Backward<'_> {
    fn name(&self) -> &'static str {
        match self.gradient {
            Gradient::Data => "loaderlab-cudnn-conv2d-backward-data",
            Gradient::Filter => "loaderlab-cudnn-conv2d-backward-filter",
        }
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        Err(cudnn_err("cuDNN runs on CUDA only"))
    }

    /// Data: (dy, w) → dx; Filter: (x, dy) → dw.
    fn cuda_fwd(
        &self,
        s1: &CudaStorage,
        l1: &Layout,
        s2: &CudaStorage,
        l2: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let ((a, ad), (b, bd)) = views(s1, l1, s2, l2)?;
        let out = four(&self.out)?;
        let (key, dyd) = match self.gradient {
            Gradient::Data => (self.conv.key(out, bd)?, ad),
            Gradient::Filter => (self.conv.key(ad, out)?, bd),
        };
        if key.y() != dyd {
            return Err(cudnn_err(format!(
                "gradient {dyd:?}, expected {:?}",
                key.y()
            )));
        }
        let dev = &s1.device;
        // SAFETY: both backward convolutions write every element of their output (beta = 0).
        let mut grad = unsafe { dev.alloc::<f32>(self.out.elem_count()) }?;
        with_plan(dev, key, |p, workspace| {
            match self.gradient {
                Gradient::Data => {
                    let op = ConvBackwardData {
                        conv: &p.conv,
                        dx: &p.x,
                        w: &p.w,
                        dy: &p.y,
                    };
                    // SAFETY: dx (grad), w (b) and dy (a) are contiguous f32 of the
                    // descriptors' dims (views(), the dims checked above, the allocation).
                    unsafe { op.launch(p.backward_data, workspace, (1.0, 0.0), &mut grad, &b, &a) }
                }
                Gradient::Filter => {
                    let op = ConvBackwardFilter {
                        conv: &p.conv,
                        x: &p.x,
                        dw: &p.w,
                        dy: &p.y,
                    };
                    // SAFETY: x (a), dw (grad) and dy (b) are contiguous f32 of the
                    // descriptors' dims (views(), the dims checked above, the allocation).
                    unsafe {
                        op.launch(p.backward_filter, workspace, (1.0, 0.0), &a, &mut grad, &b)
                    }
                }
            }
            .map_err(cudnn_err)
        })?;
        Ok((
            CudaStorage::wrap_cuda_slice(grad, dev.clone()),
            self.out.clone(),
        ))
    }
}

/// Whether cuDNN loaded and passed its check, per device.
static CHECKED: OncePerDevice<bool> = OncePerDevice::new();

/// `x` (N, C, H, W) convolved with `w` (K, C, R, S) through cuDNN when `x` is on a CUDA device
/// where cuDNN loaded and passed its check; None otherwise (the caller takes candle's path).
pub fn conv2d(x: &Tensor, w: &Tensor, padding: usize, stride: usize) -> Result<Option<Tensor>> {
    let Device::Cuda(dev) = x.device() else {
        return Ok(None);
    };
    let ok = CHECKED.get(dev, || {
        usable(x.device())
            .map_err(|why| {
                eprintln!("note: convolutions take candle's path on this device, not cuDNN: {why}")
            })
            .is_ok()
    });
    if !ok {
        return Ok(None);
    }
    x.contiguous()?
        .apply_op2(&w.contiguous()?, Conv { padding, stride })
        .map(Some)
}

/// libcudnn found, loaded and agreeing with candle's path; else why not, in a line.
fn usable(device: &Device) -> std::result::Result<(), String> {
    // As for the driver: a missing library or symbol panics under dynamic loading.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    // SAFETY: a trial dlopen by name, closed again; no other thread loads cuDNN meanwhile
    // (this runs inside CHECKED, under its lock).
    let present = std::panic::catch_unwind(|| unsafe { cudarc::cudnn::sys::is_culib_present() });
    let checked = match present {
        Ok(true) => std::panic::catch_unwind(|| check(device).map_err(|e| e.to_string())),
        Ok(false) | Err(_) => Ok(Err("libcudnn.so.9 not found (put the nvidia-cudnn \
                                      wheel's lib folder on LD_LIBRARY_PATH)"
            .to_string())),
    };
    std::panic::set_hook(hook);
    match checked {
        Ok(r) => r.map_err(|e| e.lines().next().unwrap_or_default().to_string()),
        Err(panic) => Err(format!(
            "loading cuDNN failed: {}",
            crate::loader::panic_message(&panic)
        )),
    }
}

/// Forward values and both gradients against candle's convolution on `device` for the shapes
/// the networks use (3×3 stride 1 and 2, the 7×7/2 stem, a 1×1/2 shortcut, 5×5), TF32 off:
/// within 1e-4 of each tensor's largest magnitude.
fn check(device: &Device) -> Result<()> {
    let was = TF32.swap(false, Ordering::Relaxed);
    let result = (|| {
        for (x, w, padding, stride) in [
            ([2, 3, 9, 9], [4, 3, 3, 3], 1, 1),
            ([2, 4, 8, 8], [5, 4, 3, 3], 1, 2),
            ([2, 3, 16, 16], [4, 3, 7, 7], 3, 2),
            ([2, 4, 8, 8], [6, 4, 1, 1], 0, 2),
            ([2, 3, 10, 10], [4, 3, 5, 5], 2, 1),
        ] {
            let ramp = |d: [usize; 4], seed: f32| -> Result<Var> {
                let n: usize = d.iter().product();
                let v: Vec<f32> = (0..n)
                    .map(|i| ((i as f32 * 0.618 + seed).fract() - 0.5) * 0.5)
                    .collect();
                Var::from_vec(v, d.to_vec(), device)
            };
            let (xv, wv) = (ramp(x, 0.1)?, ramp(w, 0.7)?);
            let ours = conv_unchecked(xv.as_tensor(), wv.as_tensor(), padding, stride)?;
            let theirs = xv
                .as_tensor()
                .conv2d(wv.as_tensor(), padding, stride, 1, 1)?;
            let weights = Tensor::arange(0f32, ours.elem_count() as f32, device)?
                .reshape(ours.shape())?
                .affine(0.01, 0.0)?;
            let g_ours = (&ours * &weights)?.sum_all()?.backward()?;
            let g_theirs = (&theirs * &weights)?.sum_all()?.backward()?;
            let what = format!("{x:?} * {w:?}, padding {padding}, stride {stride}");
            close(&format!("forward of {what}"), &ours, &theirs)?;
            for (name, v) in [("input", &xv), ("filter", &wv)] {
                let (Some(a), Some(b)) = (g_ours.get(v.as_tensor()), g_theirs.get(v.as_tensor()))
                else {
                    return Err(cudnn_err(format!("no {name} gradient for {what}")));
                };
                close(&format!("{name} gradient of {what}"), a, b)?;
            }
        }
        Ok(())
    })();
    TF32.store(was, Ordering::Relaxed);
    result
}

/// The op without the availability check (for the check itself).
fn conv_unchecked(x: &Tensor, w: &Tensor, padding: usize, stride: usize) -> Result<Tensor> {
    x.contiguous()?
        .apply_op2(&w.contiguous()?, Conv { padding, stride })
}

fn close(what: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    let a = a.flatten_all()?.to_vec1::<f32>()?;
    let b = b.flatten_all()?.to_vec1::<f32>()?;
    let scale = b.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs() / scale)
        .fold(
            0f32,
            |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
        );
    if a.len() != b.len() || worst > 1e-4 {
        return Err(cudnn_err(format!(
            "{what} differs from candle's path by {worst:e} of its scale"
        )));
    }
    Ok(())
}
