//! The plain CNN's fused block on NHWC activations: Conv2d (3×3 or 5×5, same padding, bias) →
//! ReLU → MaxPool2d(2) as one op, im2col + one gemm, the forward pass's columns kept for the
//! backward pass — and kept only for the graph that made them ([`ConvReluPool`]).

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Layout, Result, Shape, Storage, Tensor, bail};
use gemm::Parallelism;
use rayon::prelude::*;

use super::{gemm_strided, give, matmul, par_items, slice, take, threads, with_slice};

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
    let part_product = |part: usize, out: &mut [f32]| {
        let start = part * per;
        let rows = per.min(m.saturating_sub(start));
        if rows == 0 {
            out.fill(0.0);
            return;
        }
        // out (co×k) = gy[start..start+rows]ᵀ (co×rows) · cols[start..start+rows] (rows×k)
        gemm_strided(
            (co, k, rows),
            out,
            false,
            (&gy[start * co..][..rows * co], (1, co)),
            (&cols[start * k..][..rows * k], (k, 1)),
            Parallelism::None,
        );
    };
    if t <= 1 {
        part_product(0, &mut partials);
        return partials;
    }
    partials
        .par_chunks_mut(co * k)
        .enumerate()
        .for_each(|(part, out)| part_product(part, out));
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
    /// The forward pass's output buffer (its address), which names the graph node: the
    /// backward pass receives that output and may use only the state saved with it.
    output: usize,
    /// im2col of the input, (N·H·W) × (9·Ci).
    cols: Vec<f32>,
    /// For each pooled output, the window position (0–3, row-major) of its maximum.
    argmax: Vec<u8>,
}

/// One plain-CNN block, fused: Conv2d(3×3 or 5×5, stride 1, same padding, bias) → ReLU →
/// MaxPool2d(2), NHWC in and out, OIHW weights. Fusing keeps the full-resolution activation and
/// its gradient out of candle's graph: only the pooled output and the window positions of the
/// maxima are kept.
///
/// The saved state belongs to one forward pass. The model makes a new op per forward pass, so
/// each graph node holds its own; an op applied twice keeps only the second pass's state, and
/// a backward pass through the first then fails with an error instead of using the other
/// pass's columns (wrong gradients). A second backward through the same node recomputes.
#[derive(Default)]
pub struct ConvReluPool {
    saved: Mutex<Option<Saved>>,
}

/// The address of a CPU tensor's first element: the identity of the buffer a forward pass
/// returned (candle moves the returned vector into the result tensor without copying it).
fn buffer_address(t: &Tensor) -> Result<usize> {
    let (storage, layout) = t.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => Ok(cpu.as_slice::<f32>()?[layout.start_offset()..].as_ptr() as usize),
        _ => bail!("fast CPU layers need CPU tensors"),
    }
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
    let output = pooled.as_ptr() as usize;
    (
        pooled,
        Saved {
            output,
            cols,
            argmax,
        },
    )
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
        *self.saved.lock().unwrap_or_else(|e| e.into_inner()) = Some(saved);
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
        res: &Tensor,
        gpool: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let g = geometry(x.shape(), w.shape())?;
        let (m, k, co) = (g.m(), g.k(), g.co);
        let output = buffer_address(res)?;
        let kept = self.saved.lock().unwrap_or_else(|e| e.into_inner()).take();
        let saved = match kept {
            Some(s) if s.output == output => s,
            Some(_) => bail!(
                "conv-relu-pool: backward through a forward pass whose saved state a later \
                 forward pass of the same op replaced (apply the op once per forward pass)"
            ),
            // A second backward through the same node: recompute.
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use candle_core::{CustomOp3, Device, Tensor, Var};

    use super::ConvReluPool;

    /// A 2-image, 4×4, 2-channel NHWC batch (`shift` varies it), 3 filters of 3×3, biases.
    fn operands(shift: f32) -> (Var, Var, Var) {
        let cpu = &Device::Cpu;
        let x: Vec<f32> = (0..64)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 5.0 + shift)
            .collect();
        let w: Vec<f32> = (0..54).map(|i| ((i * 5 % 11) as f32 - 5.0) / 9.0).collect();
        (
            Var::from_tensor(&Tensor::from_vec(x, (2, 4, 4, 2), cpu).unwrap()).unwrap(),
            Var::from_tensor(&Tensor::from_vec(w, (3, 2, 3, 3), cpu).unwrap()).unwrap(),
            Var::from_tensor(&Tensor::new(&[0.1f32, -0.2, 0.3], cpu).unwrap()).unwrap(),
        )
    }

    /// The weight gradient of `sum(op(x, w, b) · ramp)` through a fresh op.
    fn fresh_weight_gradient(x: &Var, w: &Var, b: &Var) -> Vec<f32> {
        let y = x.apply_op3(w, b, ConvReluPool::default()).unwrap();
        let grads = weighted(&y).backward().unwrap();
        grads
            .get(w)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    }

    fn weighted(y: &Tensor) -> Tensor {
        let ramp = Tensor::arange(0f32, y.elem_count() as f32, y.device())
            .unwrap()
            .reshape(y.shape())
            .unwrap();
        (y * ramp).unwrap().sum_all().unwrap()
    }

    #[test]
    fn a_backward_pass_uses_only_the_state_of_its_own_forward_pass() {
        let (x1, w, b) = operands(0.0);
        let (x2, _, _) = operands(0.7);
        let shared: Arc<Box<dyn CustomOp3 + Send + Sync>> =
            Arc::new(Box::new(ConvReluPool::default()));
        let y1 = x1.apply_op3_arc(&w, &b, shared.clone()).unwrap();
        let y2 = x2.apply_op3_arc(&w, &b, shared).unwrap();
        // The first graph's state was replaced by the second forward pass: an error, not the
        // second pass's columns.
        let err = weighted(&y1).backward().unwrap_err().to_string();
        assert!(err.contains("later forward pass"), "{err}");
        // The second graph still has its own state, and gives the gradient a fresh op gives.
        let grads = weighted(&y2).backward().unwrap();
        let got: Vec<f32> = grads
            .get(&w)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(got, fresh_weight_gradient(&x2, &w, &b));
    }

    #[test]
    fn one_op_per_forward_pass_keeps_both_graphs_right() {
        // What the model does: two forward passes before either backward pass.
        let (x1, w, b) = operands(0.0);
        let (x2, _, _) = operands(0.7);
        let y1 = x1.apply_op3(&w, &b, ConvReluPool::default()).unwrap();
        let y2 = x2.apply_op3(&w, &b, ConvReluPool::default()).unwrap();
        let g1 = weighted(&y1).backward().unwrap();
        let g2 = weighted(&y2).backward().unwrap();
        let flat = |g: &candle_core::backprop::GradStore| -> Vec<f32> {
            g.get(&w).unwrap().flatten_all().unwrap().to_vec1().unwrap()
        };
        assert_eq!(flat(&g1), fresh_weight_gradient(&x1, &w, &b));
        assert_eq!(flat(&g2), fresh_weight_gradient(&x2, &w, &b));
        assert_ne!(flat(&g1), flat(&g2));
    }
}
