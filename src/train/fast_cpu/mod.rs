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

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Storage, Tensor, bail};
use gemm::Parallelism;

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

/// Run `f(first_item, chunk)` over `out` split into contiguous groups of whole items, one group
/// per thread.
fn par_items<F>(out: &mut [f32], item_len: usize, f: F)
where
    F: Fn(usize, &mut [f32]) + Sync,
{
    let items = out.len() / item_len.max(1);
    let t = threads().min(items.max(1));
    if t <= 1 {
        f(0, out);
        return;
    }
    let per = items.div_ceil(t);
    rayon::scope(|s| {
        for (k, chunk) in out.chunks_mut(per * item_len).enumerate() {
            let f = &f;
            s.spawn(move |_| f(k * per, chunk));
        }
    });
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
/// with its (row, column) strides.
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
        Storage::Cpu(cpu) => {
            let data = cpu.as_slice::<f32>()?;
            let (a, b) = layout.contiguous_offsets().expect("made contiguous above");
            Ok(f(&data[a..b]))
        }
        _ => bail!("fast CPU layers need CPU tensors"),
    }
}

fn slice<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => bail!("{what} must be contiguous"),
    }
}

/// Geometry of one ks×ks (3 or 5), stride 1, padding ks/2 convolution over NHWC input.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    n: usize,
    h: usize,
    w: usize,
    ci: usize,
    co: usize,
    ks: usize,
}

impl Geometry {
    fn k(&self) -> usize {
        self.ks * self.ks * self.ci
    }

    fn pad(&self) -> usize {
        self.ks / 2
    }
    fn m(&self) -> usize {
        self.n * self.h * self.w
    }
}

/// Rows (n, y, x) of ks×ks neighbourhoods, columns (ky, kx, c), zero outside the image.
///
/// Each image is first copied into a zero-bordered (h+2p)×(w+2p) buffer, so that every row of
/// `cols` is ks contiguous runs of ks·c values, without bounds checks.
fn im2col(x: &[f32], g: Geometry, cols: &mut [f32]) {
    let (h, w, c, k, ks, p) = (g.h, g.w, g.ci, g.k(), g.ks, g.pad());
    let (ph, pw) = (h + 2 * p, w + 2 * p);
    par_items(cols, h * w * k, |first, chunk| {
        let mut padded = vec![0.0f32; ph * pw * c];
        for (i, image_cols) in chunk.chunks_mut(h * w * k).enumerate() {
            let img = &x[(first + i) * h * w * c..][..h * w * c];
            for y in 0..h {
                padded[((y + p) * pw + p) * c..][..w * c]
                    .copy_from_slice(&img[y * w * c..][..w * c]);
            }
            for y in 0..h {
                for x0 in 0..w {
                    let row = &mut image_cols[(y * w + x0) * k..][..k];
                    for ky in 0..ks {
                        let src = &padded[((y + ky) * pw + x0) * c..][..ks * c];
                        row[ky * ks * c..][..ks * c].copy_from_slice(src);
                    }
                }
            }
        }
    });
}

/// The adjoint of [`im2col`]: scatter-add column gradients back to the NHWC input.
fn col2im(cols: &[f32], g: Geometry, gx: &mut [f32]) {
    let (h, w, c, k, ks, p) = (g.h, g.w, g.ci, g.k(), g.ks, g.pad());
    par_items(gx, h * w * c, |first, chunk| {
        chunk.fill(0.0);
        for (i, image) in chunk.chunks_mut(h * w * c).enumerate() {
            let img = first + i;
            for y in 0..h {
                for x0 in 0..w {
                    let row = &cols[((img * h + y) * w + x0) * k..][..k];
                    for ky in 0..ks {
                        for kx in 0..ks {
                            let (sy, sx) = (y + ky, x0 + kx);
                            if sy >= p && sy < h + p && sx >= p && sx < w + p {
                                let dst = &mut image[((sy - p) * w + sx - p) * c..][..c];
                                for (d, s) in dst.iter_mut().zip(&row[(ky * ks + kx) * c..][..c]) {
                                    *d += s;
                                }
                            }
                        }
                    }
                }
            }
        }
    });
}

/// OIHW weights as a (O, ks·ks·I) matrix with columns in im2col's (ky, kx, c) order.
fn weight_matrix(w: &[f32], g: Geometry) -> Vec<f32> {
    let (ci, k, taps) = (g.ci, g.k(), g.ks * g.ks);
    let mut out = vec![0.0; g.co * k];
    for o in 0..g.co {
        for c in 0..ci {
            for t in 0..taps {
                out[o * k + t * ci + c] = w[(o * ci + c) * taps + t];
            }
        }
    }
    out
}

/// The inverse of [`weight_matrix`].
fn weight_oihw(m: &[f32], g: Geometry) -> Vec<f32> {
    let (ci, k, taps) = (g.ci, g.k(), g.ks * g.ks);
    let mut out = vec![0.0; g.co * k];
    for o in 0..g.co {
        for c in 0..ci {
            for t in 0..taps {
                out[(o * ci + c) * taps + t] = m[o * k + t * ci + c];
            }
        }
    }
    out
}

/// `gyᵀ (co×m) · cols (m×k)`: the reduction runs over all m = N·H·W positions, which gemm does
/// not split across threads for so few outputs, so each thread reduces its share of rows and
/// the partial sums are added.
fn weight_gradient(gy: &[f32], cols: &[f32], m: usize, k: usize, co: usize) -> Vec<f32> {
    let t = threads().min(m.max(1));
    let per = m.div_ceil(t);
    let mut partials = vec![0.0f32; t * co * k];
    let single = {
        let parallelism_free = |part: usize, out: &mut [f32]| {
            let start = part * per;
            let rows = per.min(m.saturating_sub(start));
            if rows == 0 {
                out.fill(0.0);
                return;
            }
            // SAFETY: row range [start, start + rows) lies inside both operands.
            unsafe {
                gemm::gemm(
                    co,
                    k,
                    rows,
                    out.as_mut_ptr(),
                    1,
                    k as isize,
                    false,
                    gy[start * co..].as_ptr(),
                    co as isize,
                    1,
                    cols[start * k..].as_ptr(),
                    1,
                    k as isize,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    Parallelism::None,
                );
            }
        };
        if t <= 1 {
            parallelism_free(0, &mut partials);
            true
        } else {
            rayon::scope(|s| {
                for (part, out) in partials.chunks_mut(co * k).enumerate() {
                    let f = &parallelism_free;
                    s.spawn(move |_| f(part, out));
                }
            });
            false
        }
    };
    if single {
        return partials;
    }
    let (first, rest) = partials.split_at_mut(co * k);
    for other in rest.chunks(co * k) {
        for (a, b) in first.iter_mut().zip(other) {
            *a += b;
        }
    }
    partials.truncate(co * k);
    partials
}

/// Window position of a pooled output whose ReLU was zero (no gradient flows back).
const NO_MAX: u8 = u8::MAX;

/// What a forward pass keeps for its backward pass.
struct Saved {
    /// im2col of the input, (N·H·W) × (9·Ci).
    cols: Vec<f32>,
    /// For each pooled output, the window position (0–3, row-major) of its maximum.
    argmax: Vec<u8>,
}

/// One plain-CNN block, fused: Conv2d(3×3 or 5×5, stride 1, same padding, bias) → ReLU →
/// MaxPool2d(2),
/// NHWC in and out, OIHW weights. Fusing keeps the full-resolution activation and its gradient
/// out of candle's graph: only the pooled output and the window positions of the maxima are kept.
#[derive(Default)]
pub struct ConvReluPool {
    saved: Mutex<Option<Saved>>,
}

fn geometry(x: &Shape, w: &Shape) -> Result<Geometry> {
    let (n, h, wd, ci) = x.dims4()?;
    let (co, wci, kh, kw) = w.dims4()?;
    if wci != ci || kh != kw || !matches!(kh, 3 | 5) || h % 2 != 0 || wd % 2 != 0 {
        bail!("conv-relu-pool: input {x:?} does not fit weights {w:?} (kernel 3 or 5, even sides)");
    }
    Ok(Geometry {
        n,
        h,
        w: wd,
        ci,
        co,
        ks: kh,
    })
}

/// The block's forward pass: the pooled output and what the backward pass needs.
fn forward(x: &[f32], w: &[f32], b: &[f32], g: Geometry) -> (Vec<f32>, Saved) {
    let (m, k, co) = (g.m(), g.k(), g.co);
    let mut cols = take(m * k);
    im2col(x, g, &mut cols);
    let wm = weight_matrix(w, g);
    let mut y = take(m * co);
    par_items(&mut y, co, |_, chunk| {
        for row in chunk.chunks_mut(co) {
            row.copy_from_slice(b);
        }
    });
    // y (m×co) += cols (m×k) · wmᵀ (k×co)
    matmul(m, co, k, &mut y, true, &cols, (k, 1), &wm, (1, k));
    let (h, wd, oh, ow) = (g.h, g.w, g.h / 2, g.w / 2);
    let mut pooled = vec![0.0f32; g.n * oh * ow * co];
    let mut argmax = vec![NO_MAX; g.n * oh * ow * co];
    let per_image = oh * ow * co;
    let t = threads().min(g.n.max(1));
    let images_per = g.n.div_ceil(t.max(1)).max(1);
    rayon::scope(|s| {
        for (part, (out, arg)) in pooled
            .chunks_mut(images_per * per_image)
            .zip(argmax.chunks_mut(images_per * per_image))
            .enumerate()
        {
            let y = &y;
            s.spawn(move |_| {
                let first = part * images_per;
                for (i, (out, arg)) in out
                    .chunks_mut(per_image)
                    .zip(arg.chunks_mut(per_image))
                    .enumerate()
                {
                    let img = &y[(first + i) * h * wd * co..][..h * wd * co];
                    for oy in 0..oh {
                        for ox in 0..ow {
                            let o = (oy * ow + ox) * co;
                            for (p, (dy, dx)) in
                                [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate()
                            {
                                let src = &img[((2 * oy + dy) * wd + 2 * ox + dx) * co..][..co];
                                for ch in 0..co {
                                    // Strictly greater: the first maximum wins, as in PyTorch;
                                    // starting from 0 applies the ReLU.
                                    if src[ch] > out[o + ch] {
                                        out[o + ch] = src[ch];
                                        arg[o + ch] = p as u8;
                                    }
                                }
                            }
                        }
                    }
                }
            });
        }
    });
    give(y);
    (pooled, Saved { cols, argmax })
}

impl CustomOp3 for ConvReluPool {
    fn name(&self) -> &'static str {
        "conv-relu-maxpool2-nhwc"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let g = geometry(l1.shape(), l2.shape())?;
        let (x, w, b) = (
            slice(s1, l1, "input")?,
            slice(s2, l2, "weight")?,
            slice(s3, l3, "bias")?,
        );
        let (pooled, saved) = forward(x, w, b, g);
        if let Ok(mut slot) = self.saved.lock() {
            *slot = Some(saved);
        }
        Ok((
            CpuStorage::F32(pooled),
            Shape::from((g.n, g.h / 2, g.w / 2, g.co)),
        ))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        gpool: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = geometry(x.shape(), w.shape())?;
        let (m, k, co) = (g.m(), g.k(), g.co);
        let saved = match self.saved.lock().ok().and_then(|mut s| s.take()) {
            Some(s) => s,
            // A second backward through the same graph: recompute.
            None => with_slice(x, |xs| {
                with_slice(w, |ws| with_slice(b, |bs| forward(xs, ws, bs, g).1))
            })???,
        };
        let wm = with_slice(w, |ws| weight_matrix(ws, g))?;
        let (h, wd, oh, ow) = (g.h, g.w, g.h / 2, g.w / 2);
        let (gx, gw, gb) = with_slice(gpool, |gp| {
            // The gradient at the convolution's output: each pooled gradient goes to its maximum.
            let mut gconv = take(m * co);
            let mut gb = vec![0.0f32; co];
            par_items(&mut gconv, h * wd * co, |first, chunk| {
                chunk.fill(0.0);
                for (i, gimg) in chunk.chunks_mut(h * wd * co).enumerate() {
                    let base = (first + i) * oh * ow * co;
                    for oy in 0..oh {
                        for ox in 0..ow {
                            for ch in 0..co {
                                let o = base + (oy * ow + ox) * co + ch;
                                let p = saved.argmax[o];
                                if p != NO_MAX {
                                    let (dy, dx) = ((p / 2) as usize, (p % 2) as usize);
                                    gimg[((2 * oy + dy) * wd + 2 * ox + dx) * co + ch] = gp[o];
                                }
                            }
                        }
                    }
                }
            });
            for (o, (&p, &v)) in saved.argmax.iter().zip(gp).enumerate() {
                if p != NO_MAX {
                    gb[o % co] += v;
                }
            }
            let gwm = weight_gradient(&gconv, &saved.cols, m, k, co);
            // The columns are no longer needed: their buffer takes the column gradient.
            let mut gcols = saved.cols;
            let gx = x.track_op().then(|| {
                // gcols (m×k) = gconv (m×co) · wm (co×k), then scattered back.
                matmul(m, k, co, &mut gcols, false, &gconv, (co, 1), &wm, (k, 1));
                let mut gx = vec![0.0f32; g.n * h * wd * g.ci];
                col2im(&gcols, g, &mut gx);
                gx
            });
            give(gcols);
            give(gconv);
            (gx, weight_oihw(&gwm, g), gb)
        })?;
        let gx = gx
            .map(|v| Tensor::from_vec(v, x.shape(), x.device()))
            .transpose()?;
        Ok((
            gx,
            Some(Tensor::from_vec(gw, w.shape(), w.device())?),
            Some(Tensor::from_vec(gb, co, w.device())?),
        ))
    }
}

/// Geometry of a convolution over NCHW input with any kernel, stride and padding.
#[derive(Debug, Clone, Copy)]
struct ConvShape {
    n: usize,
    ci: usize,
    h: usize,
    w: usize,
    co: usize,
    kh: usize,
    kw: usize,
    stride: usize,
    pad: usize,
    oh: usize,
    ow: usize,
}

impl ConvShape {
    fn new(x: &Shape, w: &Shape, stride: usize, pad: usize) -> Result<ConvShape> {
        let (n, ci, h, wd) = x.dims4()?;
        let (co, wci, kh, kw) = w.dims4()?;
        if wci != ci || stride == 0 || h + 2 * pad < kh || wd + 2 * pad < kw {
            bail!("conv2d: input {x:?}, weight {w:?}, stride {stride}, padding {pad}");
        }
        let (oh, ow) = (
            (h + 2 * pad - kh) / stride + 1,
            (wd + 2 * pad - kw) / stride + 1,
        );
        Ok(ConvShape {
            n,
            ci,
            h,
            w: wd,
            co,
            kh,
            kw,
            stride,
            pad,
            oh,
            ow,
        })
    }

    /// Rows of an image's column matrix: (c, ky, kx), OIHW's order.
    fn k(&self) -> usize {
        self.ci * self.kh * self.kw
    }

    /// Columns: output positions.
    fn p(&self) -> usize {
        self.oh * self.ow
    }

    /// The input column of output column `o` for tap `kx`, if inside the image.
    fn source(&self, o: usize, k: usize, size: usize) -> Option<usize> {
        (o * self.stride + k)
            .checked_sub(self.pad)
            .filter(|&s| s < size)
    }
}

/// One image's columns, (c·kh·kw) × (oh·ow), zero where a tap falls in the padding.
fn im2col_nchw(img: &[f32], s: ConvShape, cols: &mut [f32]) {
    let p = s.p();
    for c in 0..s.ci {
        let plane = &img[c * s.h * s.w..][..s.h * s.w];
        for ky in 0..s.kh {
            for kx in 0..s.kw {
                let row = &mut cols[((c * s.kh + ky) * s.kw + kx) * p..][..p];
                for oy in 0..s.oh {
                    let out = &mut row[oy * s.ow..][..s.ow];
                    let Some(iy) = s.source(oy, ky, s.h) else {
                        out.fill(0.0);
                        continue;
                    };
                    let line = &plane[iy * s.w..][..s.w];
                    if s.stride == 1 && s.pad <= kx && kx - s.pad + s.ow <= s.w {
                        out.copy_from_slice(&line[kx - s.pad..][..s.ow]);
                        continue;
                    }
                    for (ox, v) in out.iter_mut().enumerate() {
                        *v = s.source(ox, kx, s.w).map_or(0.0, |ix| line[ix]);
                    }
                }
            }
        }
    }
}

/// The adjoint of [`im2col_nchw`]: add one image's column gradients into its input gradient.
fn col2im_nchw(cols: &[f32], s: ConvShape, img: &mut [f32]) {
    let p = s.p();
    for c in 0..s.ci {
        let plane = &mut img[c * s.h * s.w..][..s.h * s.w];
        for ky in 0..s.kh {
            for kx in 0..s.kw {
                let row = &cols[((c * s.kh + ky) * s.kw + kx) * p..][..p];
                for oy in 0..s.oh {
                    let Some(iy) = s.source(oy, ky, s.h) else {
                        continue;
                    };
                    let line = &mut plane[iy * s.w..][..s.w];
                    for (ox, v) in row[oy * s.ow..][..s.ow].iter().enumerate() {
                        if let Some(ix) = s.source(ox, kx, s.w) {
                            line[ix] += v;
                        }
                    }
                }
            }
        }
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

/// Run `f(part, first_image, images)` over the batch split into one run of images per thread.
fn par_images(n: usize, f: impl Fn(usize, std::ops::Range<usize>) + Sync) -> usize {
    let t = threads().min(n.max(1));
    let per = n.div_ceil(t.max(1)).max(1);
    let parts = n.div_ceil(per).max(1);
    if parts <= 1 {
        f(0, 0..n);
    } else {
        rayon::scope(|scope| {
            for part in 0..parts {
                let f = &f;
                scope.spawn(move |_| f(part, part * per..((part + 1) * per).min(n)));
            }
        });
    }
    parts
}

/// Conv2d without bias over NCHW input (any channels, kernel, stride and padding), as
/// PyTorch's: per image, im2col and one gemm, images split over the pool's threads. The
/// backward pass recomputes each image's columns instead of keeping them (a ResNet's would
/// take hundreds of MB per step). candle's CPU convolution backward runs a transposed
/// convolution with a generic kernel: a ResNet-18 step (batch 64, 32×32, one thread) took
/// 17.6 s with candle's convolution and 7.4 s with this op.
pub struct Conv2dNchw {
    pub stride: usize,
    pub padding: usize,
}

/// A per-thread slot that threads write through; each part touches only its own.
struct Parts<T>(Vec<Mutex<T>>);

impl<T: Default> Parts<T> {
    fn new(n: usize) -> Self {
        Parts((0..n).map(|_| Mutex::new(T::default())).collect())
    }
}

impl candle_core::CustomOp2 for Conv2dNchw {
    fn name(&self) -> &'static str {
        "conv2d-nchw-cpu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let s = ConvShape::new(l1.shape(), l2.shape(), self.stride, self.padding)?;
        let (x, w) = (slice(s1, l1, "input")?, slice(s2, l2, "weight")?);
        let (k, p, image, out_image) = (s.k(), s.p(), s.ci * s.h * s.w, s.co * s.p());
        let mut y = vec![0.0f32; s.n * out_image];
        let y_ptr = SendPtr(y.as_mut_ptr());
        par_images(s.n, |_, images| {
            // Every element is written by im2col before it is read.
            let mut cols = take(k * p);
            for i in images {
                im2col_nchw(&x[i * image..][..image], s, &mut cols);
                // SAFETY: each image's output range is written by the one part that owns it.
                let out =
                    unsafe { std::slice::from_raw_parts_mut(y_ptr.at(i * out_image), out_image) };
                gemm_serial((s.co, p, k), out, false, w, (k, 1), &cols, (p, 1));
            }
            give(cols);
        });
        Ok((CpuStorage::F32(y), Shape::from((s.n, s.co, s.oh, s.ow))))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        gy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let s = ConvShape::new(x.shape(), w.shape(), self.stride, self.padding)?;
        let (k, p, image, out_image) = (s.k(), s.p(), s.ci * s.h * s.w, s.co * s.p());
        let want_gx = x.track_op();
        let (gx, gw) = with_slice(x, |xs| {
            with_slice(w, |ws| {
                with_slice(gy, |gys| {
                    let mut gx = vec![0.0f32; if want_gx { s.n * image } else { 0 }];
                    let gx_ptr = SendPtr(gx.as_mut_ptr());
                    let partial: Parts<Vec<f32>> = Parts::new(threads().min(s.n.max(1)));
                    let parts = par_images(s.n, |part, images| {
                        // Every element is written (im2col, then the gemm) before it is read.
                        let mut cols = take(k * p);
                        let mut gw = vec![0.0f32; s.co * k];
                        for (j, i) in images.enumerate() {
                            let g = &gys[i * out_image..][..out_image];
                            im2col_nchw(&xs[i * image..][..image], s, &mut cols);
                            // gw (co×k) += gy_i (co×p) · cols_iᵀ (p×k)
                            gemm_serial((s.co, k, p), &mut gw, j > 0, g, (p, 1), &cols, (1, p));
                            if want_gx {
                                // cols ← wᵀ (k×co) · gy_i (co×p), scattered into gx_i.
                                gemm_serial((k, p, s.co), &mut cols, false, ws, (1, k), g, (p, 1));
                                // SAFETY: image i's gradient is written by this part only.
                                let gxi = unsafe {
                                    std::slice::from_raw_parts_mut(gx_ptr.at(i * image), image)
                                };
                                col2im_nchw(&cols, s, gxi);
                            }
                        }
                        give(cols);
                        *partial.0[part].lock().unwrap_or_else(|e| e.into_inner()) = gw;
                    });
                    let mut sums = partial
                        .0
                        .into_iter()
                        .take(parts)
                        .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()));
                    let mut gw = sums.next().unwrap_or_else(|| vec![0.0; s.co * k]);
                    for other in sums {
                        for (a, b) in gw.iter_mut().zip(&other) {
                            *a += b;
                        }
                    }
                    (gx, gw)
                })
            })
        })???;
        let gx = want_gx
            .then(|| Tensor::from_vec(gx, x.shape(), x.device()))
            .transpose()?;
        Ok((gx, Some(Tensor::from_vec(gw, w.shape(), w.device())?)))
    }
}

/// A raw pointer that threads may share when each writes a disjoint range.
#[derive(Clone, Copy)]
struct SendPtr(*mut f32);

// SAFETY: used only to write disjoint ranges from the parts of one `par_images` call.
unsafe impl Send for SendPtr {}
// SAFETY: as for Send: no two threads touch the same element.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: callers stay inside the buffer the pointer came from.
        unsafe { self.0.add(offset) }
    }
}

/// Per-channel statistics of a training-mode BatchNorm's batch: mean and biased variance.
#[derive(Debug, Clone, Default)]
pub struct BatchStats {
    pub mean: Vec<f64>,
    pub var: Vec<f64>,
}

/// Training-mode BatchNorm2d over NCHW input (x, γ, β), as one op: per channel, the mean and
/// the biased variance (two passes, summed in float64: float32 sums over a stem's 32,768
/// values drift, see `batch_norm` in model.rs), then y = (x − mean)·γ/√(var + eps) + β; the
/// backward pass is the closed form PyTorch uses. Channels are split over the pool's threads.
/// The batch's statistics are left in `stats` for the running ones.
pub struct BatchNormNchw {
    pub eps: f64,
    pub stats: std::sync::Arc<Mutex<BatchStats>>,
}

/// Run `f(channel)` for every channel, channels split over the pool's threads.
fn par_channels(c: usize, f: impl Fn(usize) + Sync) {
    par_images(c, |_, channels| channels.for_each(&f));
}

impl BatchNormNchw {
    fn dims(x: &Shape) -> Result<(usize, usize, usize)> {
        let (n, c, h, w) = x.dims4()?;
        Ok((n, c, h * w))
    }
}

impl candle_core::CustomOp3 for BatchNormNchw {
    fn name(&self) -> &'static str {
        "batch-norm-nchw-cpu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (n, c, hw) = Self::dims(l1.shape())?;
        let (x, gamma, beta) = (
            slice(s1, l1, "input")?,
            slice(s2, l2, "weight")?,
            slice(s3, l3, "bias")?,
        );
        let count = (n * hw) as f64;
        let mut y = vec![0.0f32; x.len()];
        let y_ptr = SendPtr(y.as_mut_ptr());
        let stats = Parts::<(f64, f64)>::new(c);
        par_channels(c, |ch| {
            let planes = || (0..n).map(|i| &x[(i * c + ch) * hw..][..hw]);
            let mean = planes().flatten().map(|&v| v as f64).sum::<f64>() / count;
            let var = planes()
                .flatten()
                .map(|&v| (v as f64 - mean).powi(2))
                .sum::<f64>()
                / count;
            let scale = gamma[ch] as f64 / (var + self.eps).sqrt();
            let shift = beta[ch] as f64 - mean * scale;
            for i in 0..n {
                // SAFETY: channel ch's planes are written by this thread only.
                let out =
                    unsafe { std::slice::from_raw_parts_mut(y_ptr.at((i * c + ch) * hw), hw) };
                for (o, &v) in out.iter_mut().zip(&x[(i * c + ch) * hw..][..hw]) {
                    *o = (v as f64 * scale + shift) as f32;
                }
            }
            *stats.0[ch].lock().unwrap_or_else(|e| e.into_inner()) = (mean, var);
        });
        let (mean, var) = stats
            .0
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .unzip();
        *self.stats.lock().unwrap_or_else(|e| e.into_inner()) = BatchStats { mean, var };
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        gamma: &Tensor,
        _beta: &Tensor,
        _res: &Tensor,
        gy: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (n, c, hw) = Self::dims(x.shape())?;
        let count = (n * hw) as f64;
        let BatchStats { mean, var } = self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if mean.len() != c {
            bail!("batch norm backward without its forward statistics");
        }
        let (gx, gg, gb) = with_slice(x, |xs| {
            with_slice(gamma, |gs| {
                with_slice(gy, |gys| {
                    let mut gx = vec![0.0f32; xs.len()];
                    let gx_ptr = SendPtr(gx.as_mut_ptr());
                    let sums = Parts::<(f64, f64)>::new(c);
                    par_channels(c, |ch| {
                        let invstd = 1.0 / (var[ch] + self.eps).sqrt();
                        let (mut dbeta, mut dgamma) = (0.0f64, 0.0f64);
                        for i in 0..n {
                            let at = (i * c + ch) * hw;
                            for (&g, &v) in gys[at..][..hw].iter().zip(&xs[at..][..hw]) {
                                dbeta += g as f64;
                                dgamma += g as f64 * (v as f64 - mean[ch]) * invstd;
                            }
                        }
                        // dx = γ·invstd·(gy − dβ/count − x̂·dγ/count)
                        let k = gs[ch] as f64 * invstd;
                        let (mb, mg) = (dbeta / count, dgamma / count);
                        for i in 0..n {
                            let at = (i * c + ch) * hw;
                            // SAFETY: channel ch's planes are written by this thread only.
                            let out = unsafe { std::slice::from_raw_parts_mut(gx_ptr.at(at), hw) };
                            for ((o, &g), &v) in
                                out.iter_mut().zip(&gys[at..][..hw]).zip(&xs[at..][..hw])
                            {
                                let xhat = (v as f64 - mean[ch]) * invstd;
                                *o = (k * (g as f64 - mb - xhat * mg)) as f32;
                            }
                        }
                        *sums.0[ch].lock().unwrap_or_else(|e| e.into_inner()) = (dgamma, dbeta);
                    });
                    let (gg, gb): (Vec<f32>, Vec<f32>) = sums
                        .0
                        .into_iter()
                        .map(|m| {
                            let (g, b) = m.into_inner().unwrap_or_else(|e| e.into_inner());
                            (g as f32, b as f32)
                        })
                        .unzip();
                    (gx, gg, gb)
                })
            })
        })???;
        let dev = x.device();
        Ok((
            Some(Tensor::from_vec(gx, x.shape(), dev)?),
            Some(Tensor::from_vec(gg, c, dev)?),
            Some(Tensor::from_vec(gb, c, dev)?),
        ))
    }
}
