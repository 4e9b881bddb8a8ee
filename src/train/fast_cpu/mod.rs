//! Fast CPU layers, as candle custom ops with hand-written backward passes.
//!
//! candle's generic CPU paths for convolution backward, pooling and strided copies dominate a
//! step on these shapes (hundreds of ms at batch 256). Here activations stay channels-last
//! (NHWC) through the network, a 3×3 convolution is im2col + one `gemm` call (the crate candle
//! itself uses), convolution, ReLU and 2×2 max pooling are one op, and the im2col buffer of the
//! forward pass is kept for the backward pass. Weights keep PyTorch's layouts (OIHW, and Linear's (out, in)
//! over a C×H×W flatten), so the same parameters give the same numbers as the candle path; the
//! gradient fixture checks it. Work is split over the threads of the current rayon pool (the
//! condition's compute pool in a run).
//!
//! For every other network (the ResNets, CNNs whose sides a pooling does not halve) two ops
//! take the place of candle's inside its graph, activations NCHW: [`Conv2dNchw`], any kernel,
//! stride and padding, and [`BatchNormNchw`], training mode with float64 sums.
//!
//! This file is the infrastructure both families share: the scratch pool, the split of work
//! over the pool's threads (rayon's `par_chunks_mut`: every thread gets its own disjoint
//! slice, by construction), the one checked `gemm` call, and access to candle's CPU storage.
//! No raw pointer crosses a thread.

mod nchw;
mod nhwc;

pub use nchw::{BatchNormNchw, BatchStats, Conv2dNchw};
pub use nhwc::ConvReluPool;

use std::sync::Mutex;

use candle_core::{CpuStorage, Layout, Result, Storage, Tensor, bail};
use gemm::Parallelism;
use rayon::prelude::*;

/// Large internal buffers (im2col columns, full-resolution activations and their gradients),
/// reused from step to step: allocating and zeroing tens of MB per step costs more than the
/// arithmetic on them. Contents are stale on `take`; every user overwrites what it reads.
static SCRATCH: Mutex<Vec<Vec<f32>>> = Mutex::new(Vec::new());

fn take(len: usize) -> Vec<f32> {
    let mut pool = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    let mut v = match pool.iter().position(|b| b.capacity() >= len) {
        Some(i) => pool.swap_remove(i),
        None => pool.pop().unwrap_or_default(),
    };
    drop(pool);
    v.resize(len, 0.0);
    v.truncate(len);
    v
}

fn give(v: Vec<f32>) {
    let mut pool = SCRATCH.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < 8 {
        pool.push(v);
    }
}

/// The threads of the current rayon pool: the condition's [`super::ComputePool`] in a run.
fn threads() -> usize {
    rayon::current_num_threads().max(1)
}

/// Items per part when `items` are split over the pool's threads: one contiguous group each.
fn items_per_part(items: usize) -> usize {
    items.div_ceil(threads().min(items.max(1))).max(1)
}

/// Run `f(first_item, chunk)` over `out` split into contiguous groups of whole items, one group
/// per thread.
fn par_items<F>(out: &mut [f32], item_len: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    let item_len = item_len.max(1);
    let per = items_per_part(out.len() / item_len);
    if per * item_len >= out.len() {
        f(0, out);
        return;
    }
    out.par_chunks_mut(per * item_len)
        .enumerate()
        .for_each(|(k, chunk)| f(k * per, chunk));
}

/// `dst (m×n, row-major) [+]= lhs (m×k) · rhs (k×n)`, operands given by row and column strides,
/// on the threads of the current rayon pool.
#[allow(clippy::too_many_arguments)]
fn matmul(
    m: usize,
    n: usize,
    k: usize,
    dst: &mut [f32],
    accumulate: bool,
    lhs: &[f32],
    lhs_strides: (usize, usize),
    rhs: &[f32],
    rhs_strides: (usize, usize),
) {
    let t = threads();
    let parallelism = if t > 1 {
        Parallelism::Rayon(t)
    } else {
        Parallelism::None
    };
    gemm_strided(
        (m, n, k),
        dst,
        accumulate,
        (lhs, lhs_strides),
        (rhs, rhs_strides),
        parallelism,
    );
}

/// `dst (m×n, row-major) [+]= lhs (m×k) · rhs (k×n)` with the given parallelism; each operand
/// with its (row, column) strides. The only call into `gemm`'s raw-pointer interface: the
/// asserts derive every address it touches from the slices it was given.
fn gemm_strided(
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    accumulate: bool,
    (lhs, (lhs_rs, lhs_cs)): (&[f32], (usize, usize)),
    (rhs, (rhs_rs, rhs_cs)): (&[f32], (usize, usize)),
    parallelism: Parallelism,
) {
    assert!(dst.len() >= m * n);
    assert!(m == 0 || k == 0 || lhs.len() > (m - 1) * lhs_rs + (k - 1) * lhs_cs);
    assert!(n == 0 || k == 0 || rhs.len() > (k - 1) * rhs_rs + (n - 1) * rhs_cs);
    // SAFETY: the asserts above keep every access inside the three slices.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            lhs.as_ptr(),
            lhs_cs as isize,
            lhs_rs as isize,
            rhs.as_ptr(),
            rhs_cs as isize,
            rhs_rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// The f32 data of a contiguous CPU tensor, passed to `f`.
fn with_slice<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    let t = t.contiguous()?;
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => match layout.contiguous_offsets() {
            Some((a, b)) => Ok(f(&cpu.as_slice::<f32>()?[a..b])),
            None => bail!("fast CPU layers: a tensor is not contiguous after contiguous()"),
        },
        _ => bail!("fast CPU layers need CPU tensors"),
    }
}

/// `dst (m×n) [+]= lhs (m×k) · rhs (k×n)` on the calling thread (the callers split by image).
fn gemm_serial(
    dims: (usize, usize, usize),
    dst: &mut [f32],
    accumulate: bool,
    lhs: &[f32],
    lhs_strides: (usize, usize),
    rhs: &[f32],
    rhs_strides: (usize, usize),
) {
    gemm_strided(
        dims,
        dst,
        accumulate,
        (lhs, lhs_strides),
        (rhs, rhs_strides),
        Parallelism::None,
    );
}

fn slice<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => bail!("{what} must be contiguous"),
    }
}
