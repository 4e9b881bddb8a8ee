//! RandomResizedCrop: torchvision's parameter sampling and Pillow's bilinear resize.
//!
//! The resize reproduces Pillow's `ImagingResample` for 8-bit images exactly: separable
//! passes (horizontal, then vertical), triangle filter with support scaled when downsampling,
//! coefficients normalised per output pixel, converted to 22-bit fixed point, rounded and
//! clipped to 8 bits after each pass, in Pillow's pass order (see [`vertical_first`]).

use rand::Rng;

use crate::simd::{Avx2, Isa, Portable};

mod avx2;
mod filter;

use avx2::{hpass3, hpass8, widen};
pub use filter::ResizeScratch;
use filter::{Coefficients, PRECISION_BITS, clip8};

/// A crop box in pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CropBox {
    pub top: usize,
    pub left: usize,
    pub height: usize,
    pub width: usize,
}

impl CropBox {
    /// The whole image.
    pub fn whole(shape: crate::shape::ImageShape) -> CropBox {
        CropBox {
            top: 0,
            left: 0,
            height: shape.height,
            width: shape.width,
        }
    }
}

/// torchvision's `RandomResizedCrop.get_params` for a `width`×`height` image.
pub fn sample_crop<R: Rng>(
    rng: &mut R,
    width: usize,
    height: usize,
    scale: [f64; 2],
    ratio: [f64; 2],
) -> CropBox {
    let area = (width * height) as f64;
    let log_ratio = [ratio[0].ln(), ratio[1].ln()];
    for _ in 0..10 {
        let target_area = area * uniform(rng, scale[0], scale[1]);
        let aspect = uniform(rng, log_ratio[0], log_ratio[1]).exp();
        // Python's round(): half to even.
        let w = (target_area * aspect).sqrt().round_ties_even() as i64;
        let h = (target_area / aspect).sqrt().round_ties_even() as i64;
        if 0 < w && w as usize <= width && 0 < h && h as usize <= height {
            let (w, h) = (w as usize, h as usize);
            let top = rng.random_range(0..=height - h);
            let left = rng.random_range(0..=width - w);
            return CropBox {
                top,
                left,
                height: h,
                width: w,
            };
        }
    }
    // Fallback: the central crop with the ratio clamped.
    let in_ratio = width as f64 / height as f64;
    let (w, h) = if in_ratio < ratio[0] {
        (
            width,
            ((width as f64) / ratio[0]).round_ties_even() as usize,
        )
    } else if in_ratio > ratio[1] {
        (
            ((height as f64) * ratio[1]).round_ties_even() as usize,
            height,
        )
    } else {
        (width, height)
    };
    CropBox {
        top: (height - h) / 2,
        left: (width - w) / 2,
        height: h,
        width: w,
    }
}

/// A uniform draw in [low, high), as `torch.empty(1).uniform_(low, high)`.
pub fn uniform<R: Rng>(rng: &mut R, low: f64, high: f64) -> f64 {
    low + (high - low) * rng.random::<f64>()
}

/// Crop `src` (`src_w` wide) to `b` and resize to `out_w`×`out_h` into `dst`, exactly as
/// `Image.crop((left, top, left + width, top + height)).resize((out_w, out_h), BILINEAR)`.
///
/// The same integer code is compiled twice, for baseline x86-64 and for AVX2 (chosen at run
/// time): the vertical pass's 32-bit multiplies vectorise only with AVX2's `vpmulld`.
pub fn crop_resize(
    src: &[u8],
    src_w: usize,
    b: CropBox,
    out_w: usize,
    out_h: usize,
    dst: &mut [u8],
    s: &mut ResizeScratch,
) {
    match Avx2::detect() {
        #[cfg(target_arch = "x86_64")]
        Some(avx2) => {
            // SAFETY: the token exists only where AVX2 was detected.
            unsafe { crop_resize_avx2(avx2, src, src_w, b, out_w, out_h, dst, s) }
        }
        _ => crop_resize_impl(Portable, src, src_w, b, out_w, out_h, dst, s),
    }
}

/// [`crop_resize_impl`] compiled with AVX2 enabled throughout.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
fn crop_resize_avx2(
    avx2: Avx2,
    src: &[u8],
    src_w: usize,
    b: CropBox,
    out_w: usize,
    out_h: usize,
    dst: &mut [u8],
    s: &mut ResizeScratch,
) {
    crop_resize_impl(avx2, src, src_w, b, out_w, out_h, dst, s)
}

/// Pillow's pass order (Resample.c since Pillow 12): when the height shrinks by more than twice
/// what the width shrinks, the vertical pass runs first. The 8-bit rounding between the passes
/// makes the order visible in the pixels.
fn vertical_first(in_w: usize, in_h: usize, out_w: usize, out_h: usize) -> bool {
    let dh = in_h as i64 - out_h as i64;
    let dw = in_w as i64 - out_w as i64;
    dh > 0 && dh > dw * 2
}

/// [`crop_resize`] with the vertical pass first ([`vertical_first`]), over the crop's filters
/// `fh` (in_w → out_w) and `fv` (in_h → out_h): each output row is a weighted sum of crop rows
/// (full crop width), then filtered horizontally. `dst` holds `out_h` rows of `out_w`.
#[inline(always)]
fn vertical_then_horizontal<I: Isa>(
    isa: I,
    (src, src_w, b): (&[u8], usize, CropBox),
    (fh, fv): (&Coefficients, &Coefficients),
    dst: &mut [u8],
    s: &mut ResizeScratch,
) {
    let in_w = b.width;
    let (out_w, out_h) = (fh.bounds.len(), fv.bounds.len());
    s.temp.clear();
    s.temp.resize(in_w * out_h, 0);
    s.acc.clear();
    s.acc.resize(in_w, 0);
    let first_row = b.top * src_w + b.left;
    for (yy, out) in s.temp.chunks_exact_mut(in_w).enumerate() {
        vpass_row(src, first_row, src_w, fv, yy, &mut s.acc, out);
    }
    for (row, out) in s.temp.chunks_exact(in_w).zip(dst.chunks_exact_mut(out_w)) {
        hpass_row(isa, row, fh, &mut s.wide_row, out);
    }
}

/// Whether the horizontal pass of `fh` takes AVX2 over the widened row ([`hpass8`]).
#[inline(always)]
fn wide_pass<I: Isa>(isa: I, fh: &Coefficients) -> bool {
    #[cfg(target_arch = "x86_64")]
    return isa.avx2().is_some() && !fh.wide.is_empty();
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, fh);
        false
    }
}

/// One row of the horizontal pass, any number of taps: AVX2 over the widened row where the
/// filter has its wide form ([`wide_pass`]), else the portable weighted sum of each output's
/// `n` taps from `xmin`. Shared by both pass orders.
#[inline(always)]
fn hpass_row<I: Isa>(
    isa: I,
    row: &[u8],
    fh: &Coefficients,
    wide_row: &mut Vec<i32>,
    out: &mut [u8],
) {
    #[cfg(target_arch = "x86_64")]
    if let Some(avx2) = isa.avx2().filter(|_| !fh.wide.is_empty()) {
        widen(row, wide_row);
        hpass8(avx2, wide_row, fh, out);
        return;
    }
    let _ = (isa, &wide_row);
    for ((o, &(xmin, n)), k) in out
        .iter_mut()
        .zip(&fh.bounds)
        .zip(fh.coeffs.chunks(fh.ksize))
    {
        let acc = row[xmin..xmin + n]
            .iter()
            .zip(k)
            .fold(1i32 << (PRECISION_BITS - 1), |acc, (&p, &c)| {
                acc + p as i32 * c
            });
        *o = clip8(acc);
    }
}

/// Output row `yy` of the vertical pass by `fv`, any number of taps: the weighted sum of its
/// input rows of `out.len()` pixels — input row `y` starts at `first_row + y * stride` in
/// `rows` — rounded into `out` (`acc`: one i32 per pixel). Shared by both pass orders.
#[inline(always)]
fn vpass_row(
    rows: &[u8],
    first_row: usize,
    stride: usize,
    fv: &Coefficients,
    yy: usize,
    acc: &mut [i32],
    out: &mut [u8],
) {
    let (ymin, n) = fv.bounds[yy];
    let k = &fv.coeffs[yy * fv.ksize..][..n];
    let width = out.len();
    acc.fill(1 << (PRECISION_BITS - 1));
    for (t, &c) in k.iter().enumerate() {
        let row = &rows[first_row + (ymin + t) * stride..][..width];
        for (a, &p) in acc.iter_mut().zip(row) {
            *a += p as i32 * c;
        }
    }
    for (o, &a) in out.iter_mut().zip(acc.iter()) {
        *o = clip8(a);
    }
}

/// The crop-and-resize kernel, compiled twice ([`Portable`], and [`Avx2`] inside
/// [`crop_resize_avx2`]). One long function on
/// purpose: it is the seed chain's hot loop (≈ 350k images/s on one core), and the horizontal
/// pass, the filter-cache lookups and the fused vertical pass share their row buffers and
/// bounds in locals that splitting would turn into arguments and re-checks per row.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn crop_resize_impl<I: Isa>(
    isa: I,
    src: &[u8],
    src_w: usize,
    b: CropBox,
    out_w: usize,
    out_h: usize,
    dst: &mut [u8],
    s: &mut ResizeScratch,
) {
    let (in_w, in_h) = (b.width, b.height);
    if in_w == out_w && in_h == out_h {
        for y in 0..out_h {
            let row = &src[(b.top + y) * src_w + b.left..][..in_w];
            dst[y * out_w..][..out_w].copy_from_slice(row);
        }
        return;
    }
    let need_h = in_w != out_w;
    let need_v = in_h != out_h;
    let fh = s.filter(in_w, out_w);
    let fv = s.filter(in_h, out_h);
    if need_h && need_v && vertical_first(in_w, in_h, out_w, out_h) {
        vertical_then_horizontal(isa, (src, src_w, b), (&fh, &fv), dst, s);
        s.keep(in_w, out_w, fh);
        s.keep(in_h, out_h, fv);
        return;
    }
    // Horizontal pass over every crop row (in_h rows of out_w), or a plain copy. The row is
    // copied with zero padding so every output reads `ksize` taps (unused taps weigh 0).
    let temp_w = if need_h { out_w } else { in_w };
    s.temp.clear();
    s.temp.resize(temp_w * in_h, 0);
    s.row.clear();
    s.row.resize(in_w + fh.ksize, 0);
    #[cfg(target_arch = "x86_64")]
    let lanes = isa
        .avx2()
        .filter(|_| need_h)
        .and_then(|avx2| Some((avx2, fh.lanes.as_deref()?)));
    for y in 0..in_h {
        let row = &src[(b.top + y) * src_w + b.left..][..in_w];
        let out = &mut s.temp[y * temp_w..][..temp_w];
        #[cfg(target_arch = "x86_64")]
        if let Some((avx2, l)) = lanes {
            let mut padded = [0u8; 32];
            padded[..in_w].copy_from_slice(row);
            let mut lanes_out = [0u8; 32];
            hpass3(avx2, &padded, l, &mut lanes_out);
            out.copy_from_slice(&lanes_out[..temp_w]);
            continue;
        }
        if !need_h {
            out.copy_from_slice(row);
        } else if fh.ksize == 3 && !wide_pass(isa, &fh) {
            // Upsampling (every crop of a RandomResizedCrop to a larger side): three taps.
            s.row[..in_w].copy_from_slice(row);
            let padded = &s.row;
            for ((o, &(xmin, _)), k) in out
                .iter_mut()
                .zip(&fh.bounds)
                .zip(fh.coeffs.chunks_exact(3))
            {
                let p = &padded[xmin..xmin + 3];
                let acc = (1i32 << (PRECISION_BITS - 1))
                    + p[0] as i32 * k[0]
                    + p[1] as i32 * k[1]
                    + p[2] as i32 * k[2];
                *o = clip8(acc);
            }
        } else {
            hpass_row(isa, row, &fh, &mut s.wide_row, out);
        }
    }
    s.keep(in_w, out_w, fh);
    if !need_v {
        dst[..out_w * out_h].copy_from_slice(&s.temp[..out_w * out_h]);
        s.keep(in_h, out_h, fv);
        return;
    }
    // Vertical pass, a row at a time so the inner loop runs along contiguous memory.
    if fv.ksize == 3 {
        // Upsampling: three taps, one fused loop (vectorised by the compiler). The temp rows
        // are padded so a tap past the last row reads zeros (its coefficient is 0 anyway).
        s.temp.resize(temp_w * (in_h + 2), 0);
        for yy in 0..out_h {
            let (ymin, _) = fv.bounds[yy];
            let k = &fv.coeffs[yy * 3..][..3];
            let (c0, c1, c2) = (k[0], k[1], k[2]);
            let r0 = &s.temp[ymin * temp_w..][..out_w];
            let r1 = &s.temp[(ymin + 1) * temp_w..][..out_w];
            let r2 = &s.temp[(ymin + 2) * temp_w..][..out_w];
            let d = &mut dst[yy * out_w..][..out_w];
            for x in 0..out_w {
                let acc = (1i32 << (PRECISION_BITS - 1))
                    + r0[x] as i32 * c0
                    + r1[x] as i32 * c1
                    + r2[x] as i32 * c2;
                d[x] = clip8(acc);
            }
        }
    } else {
        s.acc.clear();
        s.acc.resize(out_w, 0);
        for (yy, out) in dst[..out_w * out_h].chunks_exact_mut(out_w).enumerate() {
            vpass_row(&s.temp, 0, temp_w, &fv, yy, &mut s.acc, out);
        }
    }
    s.keep(in_h, out_h, fv);
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn crops_stay_inside_and_respect_scale() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for _ in 0..2000 {
            let b = sample_crop(&mut rng, 28, 28, [0.75, 1.0], [0.75, 4.0 / 3.0]);
            assert!(b.top + b.height <= 28 && b.left + b.width <= 28, "{b:?}");
            let area = (b.height * b.width) as f64 / 784.0;
            assert!(area > 0.6 && area <= 1.0, "{b:?}");
        }
    }

    #[test]
    fn fallback_is_the_central_crop() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        // No area in [2, 3] × the image fits: every attempt fails.
        let b = sample_crop(&mut rng, 28, 20, [2.0, 3.0], [1.0, 1.0]);
        assert_eq!(
            b,
            CropBox {
                top: 0,
                left: 4,
                height: 20,
                width: 20
            }
        );
    }

    #[test]
    fn vector_paths_equal_the_portable_one() {
        // Every crop size a 28-pixel RandomResizedCrop can draw, to 28 (upsampling, the AVX2
        // lanes) and to 20 (downsampling, wider filters), on noise.
        let src: Vec<u8> = (0..784u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        let (mut fast, mut portable) = (ResizeScratch::default(), ResizeScratch::default());
        let (mut a, mut b) = (vec![0u8; 784], vec![0u8; 784]);
        let mut checked = 0;
        for height in 1..=28 {
            for width in 1..=28 {
                for out in [28, 20] {
                    let bx = CropBox {
                        top: (28 - height) / 3,
                        left: (28 - width) / 2,
                        height,
                        width,
                    };
                    crop_resize(&src, 28, bx, out, out, &mut a, &mut fast);
                    crop_resize_impl(Portable, &src, 28, bx, out, out, &mut b, &mut portable);
                    assert_eq!(a[..out * out], b[..out * out], "{bx:?} -> {out}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 28 * 28 * 2);
    }

    #[test]
    fn wide_rows_equal_the_portable_path() {
        // Crops of a 240×180 noise image to 64×64 and 61×45 (a tail of outputs past the last
        // group of 8): up- and downsampling up to 4× (1 to 9 taps), both pass orders.
        let (w, h) = (240, 180);
        let src: Vec<u8> = (0..(w * h) as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let (mut fast, mut portable) = (ResizeScratch::default(), ResizeScratch::default());
        let (mut a, mut b) = (vec![0u8; 64 * 64], vec![0u8; 64 * 64]);
        let mut vertical_first_seen = false;
        for height in (9..=h).step_by(19) {
            for width in (7..=w).step_by(23) {
                for (ow, oh) in [(64, 64), (61, 45)] {
                    let bx = CropBox {
                        top: (h - height) / 3,
                        left: (w - width) / 2,
                        height,
                        width,
                    };
                    vertical_first_seen |= vertical_first(width, height, ow, oh);
                    crop_resize(&src, w, bx, ow, oh, &mut a, &mut fast);
                    crop_resize_impl(Portable, &src, w, bx, ow, oh, &mut b, &mut portable);
                    assert_eq!(a[..ow * oh], b[..ow * oh], "{bx:?} -> {ow}×{oh}");
                }
            }
        }
        assert!(vertical_first_seen);
    }

    #[test]
    fn identity_size_copies_the_crop() {
        let src: Vec<u8> = (0..=255).cycle().take(784).collect();
        let mut dst = vec![0u8; 100];
        let mut s = ResizeScratch::default();
        crop_resize(
            &src,
            28,
            CropBox {
                top: 3,
                left: 5,
                height: 10,
                width: 10,
            },
            10,
            10,
            &mut dst,
            &mut s,
        );
        assert_eq!(dst[0], src[3 * 28 + 5]);
        assert_eq!(dst[99], src[12 * 28 + 14]);
    }

    #[test]
    fn constant_image_stays_constant() {
        let src = vec![77u8; 784];
        let mut dst = vec![0u8; 784];
        let mut s = ResizeScratch::default();
        crop_resize(
            &src,
            28,
            CropBox {
                top: 2,
                left: 1,
                height: 23,
                width: 25,
            },
            28,
            28,
            &mut dst,
            &mut s,
        );
        assert!(dst.iter().all(|&v| v == 77));
    }
}
