//! The NCHW ops that take the place of candle's inside its graph for every network the fused
//! NHWC block does not fit (the ResNets, odd-sided CNNs): [`Conv2dNchw`] and [`BatchNormNchw`].
//! Work is split by image or by plane with rayon's `par_chunks_mut`, so each thread writes only
//! the slice it was handed.

use std::sync::Mutex;

use candle_core::{CpuStorage, Layout, Result, Shape, Tensor, bail};
use rayon::prelude::*;

use super::{gemm_serial, give, items_per_part, slice, take, with_slice};

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
        let per = items_per_part(s.n);
        y.par_chunks_mut(per * out_image)
            .enumerate()
            .for_each(|(part, outputs)| {
                // Every element is written by im2col before it is read.
                let mut cols = take(k * p);
                for (j, out) in outputs.chunks_exact_mut(out_image).enumerate() {
                    let i = part * per + j;
                    im2col_nchw(&x[i * image..][..image], s, &mut cols);
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
                    let per = items_per_part(s.n);
                    let parts = s.n.div_ceil(per).max(1);
                    // Each part's images, and their input gradients when wanted.
                    let gx_parts: Vec<(usize, Option<&mut [f32]>)> = if want_gx {
                        gx.chunks_mut(per * image).map(Some).enumerate().collect()
                    } else {
                        (0..parts).map(|part| (part, None)).collect()
                    };
                    let partial: Vec<Vec<f32>> = gx_parts
                        .into_par_iter()
                        .map(|(part, mut gx_part)| {
                            // Every element is written (im2col, then the gemm) before it is read.
                            let mut cols = take(k * p);
                            let mut gw = vec![0.0f32; s.co * k];
                            let images = part * per..((part + 1) * per).min(s.n);
                            for (j, i) in images.enumerate() {
                                let g = &gys[i * out_image..][..out_image];
                                im2col_nchw(&xs[i * image..][..image], s, &mut cols);
                                // gw (co×k) += gy_i (co×p) · cols_iᵀ (p×k)
                                gemm_serial((s.co, k, p), &mut gw, j > 0, g, (p, 1), &cols, (1, p));
                                if let Some(gx_part) = gx_part.as_deref_mut() {
                                    // cols ← wᵀ (k×co) · gy_i (co×p), scattered into gx_i.
                                    gemm_serial(
                                        (k, p, s.co),
                                        &mut cols,
                                        false,
                                        ws,
                                        (1, k),
                                        g,
                                        (p, 1),
                                    );
                                    col2im_nchw(&cols, s, &mut gx_part[j * image..][..image]);
                                }
                            }
                            give(cols);
                            gw
                        })
                        .collect();
                    let mut sums = partial.into_iter();
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

/// `f(channel)` for every channel, channels split over the pool's threads, results in order.
fn per_channel<T: Send>(c: usize, f: impl Fn(usize) -> T + Sync) -> Vec<T> {
    (0..c)
        .into_par_iter()
        .with_min_len(items_per_part(c))
        .map(&f)
        .collect()
}

/// `f(plane, out)` for every (image, channel) plane of `out` (NCHW, planes of `hw`: plane
/// `i·C + ch`), each plane handed to one thread.
fn per_plane(out: &mut [f32], hw: usize, f: impl Fn(usize, &mut [f32]) + Sync) {
    let planes = out.len() / hw.max(1);
    out.par_chunks_mut(hw.max(1))
        .with_min_len(items_per_part(planes))
        .enumerate()
        .for_each(|(plane, out)| f(plane, out));
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
        let moments = per_channel(c, |ch| {
            let planes = || (0..n).map(|i| &x[(i * c + ch) * hw..][..hw]);
            let mean = planes().flatten().map(|&v| v as f64).sum::<f64>() / count;
            let var = planes()
                .flatten()
                .map(|&v| (v as f64 - mean).powi(2))
                .sum::<f64>()
                / count;
            (mean, var)
        });
        let affine: Vec<(f64, f64)> = moments
            .iter()
            .zip(gamma.iter().zip(beta))
            .map(|(&(mean, var), (&g, &b))| {
                let scale = g as f64 / (var + self.eps).sqrt();
                (scale, b as f64 - mean * scale)
            })
            .collect();
        let mut y = vec![0.0f32; x.len()];
        per_plane(&mut y, hw, |plane, out| {
            let (scale, shift) = affine[plane % c];
            for (o, &v) in out.iter_mut().zip(&x[plane * hw..][..hw]) {
                *o = (v as f64 * scale + shift) as f32;
            }
        });
        let (mean, var) = moments.into_iter().unzip();
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
                    // Per channel: dβ = Σ gy, dγ = Σ gy·x̂.
                    let sums = per_channel(c, |ch| {
                        let invstd = 1.0 / (var[ch] + self.eps).sqrt();
                        let (mut dbeta, mut dgamma) = (0.0f64, 0.0f64);
                        for i in 0..n {
                            let at = (i * c + ch) * hw;
                            for (&g, &v) in gys[at..][..hw].iter().zip(&xs[at..][..hw]) {
                                dbeta += g as f64;
                                dgamma += g as f64 * (v as f64 - mean[ch]) * invstd;
                            }
                        }
                        (dgamma, dbeta)
                    });
                    // dx = γ·invstd·(gy − dβ/count − x̂·dγ/count), plane by plane.
                    let mut gx = vec![0.0f32; xs.len()];
                    per_plane(&mut gx, hw, |plane, out| {
                        let ch = plane % c;
                        let invstd = 1.0 / (var[ch] + self.eps).sqrt();
                        let k = gs[ch] as f64 * invstd;
                        let (dgamma, dbeta) = sums[ch];
                        let (mb, mg) = (dbeta / count, dgamma / count);
                        let at = plane * hw;
                        for ((o, &g), &v) in
                            out.iter_mut().zip(&gys[at..][..hw]).zip(&xs[at..][..hw])
                        {
                            let xhat = (v as f64 - mean[ch]) * invstd;
                            *o = (k * (g as f64 - mb - xhat * mg)) as f32;
                        }
                    });
                    let (gg, gb): (Vec<f32>, Vec<f32>) =
                        sums.iter().map(|&(g, b)| (g as f32, b as f32)).unzip();
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
