//! RandomResizedCrop: torchvision's parameter sampling and Pillow's bilinear resize.
//!
//! The resize reproduces Pillow's `ImagingResample` for 8-bit images exactly: separable
//! passes (horizontal, then vertical), triangle filter with support scaled when downsampling,
//! coefficients normalised per output pixel, converted to 22-bit fixed point, rounded and
//! clipped to 8 bits after each pass, in Pillow's pass order (see [`vertical_first`]).

use rand::Rng;

use crate::simd::{Avx2, Isa, Portable};

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

const PRECISION_BITS: u32 = 32 - 8 - 2;

/// The fixed-point filter of one axis: per output, (first input, taps) and `ksize` coefficients.
#[derive(Debug, Default, Clone)]
struct Coefficients {
    ksize: usize,
    bounds: Vec<(usize, usize)>,
    coeffs: Vec<i32>,
    /// The same three-tap filter laid out for a 32-lane row (see [`Lanes32`]), when it fits.
    lanes: Option<Box<Lanes32>>,
    /// For filters of at most 8 taps: each output's coefficients padded with zeros to 8, so
    /// one 8-lane load covers every tap (see [`hpass8_avx2`]); empty otherwise.
    wide: Vec<i32>,
}

/// A three-tap filter of at most 32 outputs over at most 29 inputs, as 32 lanes: for tap `t`
/// and output `x`, the input index `xmin + t` and its coefficient (0 for unused taps and lanes).
/// A row of input then fits one 32-byte register and each tap is one byte shuffle.
#[derive(Debug, Clone)]
struct Lanes32 {
    index: [[u8; 32]; 3],
    coeff: [[i32; 32]; 3],
}

impl Lanes32 {
    fn new(in_size: usize, c: &Coefficients) -> Option<Box<Lanes32>> {
        if c.ksize != 3 || c.bounds.len() > 32 || in_size + 3 > 32 {
            return None;
        }
        let mut l = Lanes32 {
            index: [[31; 32]; 3], // byte 31 of the padded row is always 0
            coeff: [[0; 32]; 3],
        };
        for (x, &(xmin, n)) in c.bounds.iter().enumerate() {
            for t in 0..n {
                l.index[t][x] = (xmin + t) as u8;
                l.coeff[t][x] = c.coeffs[x * 3 + t];
            }
        }
        Some(Box::new(l))
    }
}

/// Reusable buffers, and the filters already computed (crop sizes repeat: at most one filter
/// per (input size, output size) pair).
#[derive(Debug, Default)]
pub struct ResizeScratch {
    /// Filters by (input size, output size); the last one used is checked first.
    filters: Vec<((usize, usize), Coefficients)>,
    weights: Vec<f64>,
    row: Vec<u8>,
    /// A crop row widened to i32, with 8 zeros after it (for [`hpass8_avx2`]).
    wide_row: Vec<i32>,
    temp: Vec<u8>,
    acc: Vec<i32>,
}

impl ResizeScratch {
    /// The filter for (in_size, out_size), taken out of the cache; give it back with `keep`.
    /// A linear search: a RandomResizedCrop of a 28-pixel image has a few dozen size pairs,
    /// and hashing the key cost more than the search.
    fn filter(&mut self, in_size: usize, out_size: usize) -> Coefficients {
        let key = (in_size, out_size);
        match self.filters.iter().rposition(|(k, _)| *k == key) {
            Some(i) => self.filters.swap_remove(i).1,
            None => {
                let mut c = Coefficients::default();
                c.ksize = precompute(
                    in_size,
                    out_size,
                    &mut c.bounds,
                    &mut c.coeffs,
                    &mut self.weights,
                );
                c.lanes = Lanes32::new(in_size, &c);
                if c.ksize <= 8 {
                    c.wide = c
                        .coeffs
                        .chunks_exact(c.ksize)
                        .flat_map(|k| (0..8).map(|t| k.get(t).copied().unwrap_or(0)))
                        .collect();
                }
                c
            }
        }
    }

    fn keep(&mut self, in_size: usize, out_size: usize, c: Coefficients) {
        self.filters.push(((in_size, out_size), c));
    }
}

/// Pillow's `precompute_coeffs` + `normalize_coeffs_8bpc` for the box [0, in_size).
/// Returns the kernel size; fills `bounds` with (first input, count) per output.
fn precompute(
    in_size: usize,
    out_size: usize,
    bounds: &mut Vec<(usize, usize)>,
    coeffs: &mut Vec<i32>,
    k: &mut Vec<f64>,
) -> usize {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = filterscale; // the triangle filter's support is 1
    let ksize = support.ceil() as usize * 2 + 1;
    bounds.clear();
    coeffs.clear();
    coeffs.resize(out_size * ksize, 0);
    k.clear();
    k.resize(ksize, 0.0);
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize - xmin;
        let mut ww = 0.0;
        for (x, kx) in k.iter_mut().enumerate().take(xmax) {
            let t = ((x + xmin) as f64 - center + 0.5) * ss;
            let w = if t.abs() < 1.0 { 1.0 - t.abs() } else { 0.0 };
            *kx = w;
            ww += w;
        }
        for x in 0..xmax {
            let w = if ww != 0.0 { k[x] / ww } else { k[x] };
            let scaled = w * (1u32 << PRECISION_BITS) as f64;
            coeffs[xx * ksize + x] = if w < 0.0 {
                (-0.5 + scaled) as i32
            } else {
                (0.5 + scaled) as i32
            };
        }
        bounds.push((xmin, xmax));
    }
    ksize
}

/// Pillow's `clip8`: the 8-bit value of a fixed-point accumulator, saturated.
#[inline]
fn clip8(v: i32) -> u8 {
    (v >> PRECISION_BITS).clamp(0, 255) as u8
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

/// [`hpass3_avx2`] for the holder of the token.
#[cfg(target_arch = "x86_64")]
fn hpass3(_: Avx2, row: &[u8; 32], l: &Lanes32, out: &mut [u8; 32]) {
    // SAFETY: the token exists only where AVX2 was detected.
    unsafe { hpass3_avx2(row, l, out) }
}

/// [`hpass8_avx2`] for the holder of the token.
#[cfg(target_arch = "x86_64")]
fn hpass8(_: Avx2, row: &[i32], f: &Coefficients, out: &mut [u8]) {
    // SAFETY: the token exists only where AVX2 was detected.
    unsafe { hpass8_avx2(row, f, out) }
}

/// Pillow's pass order (Resample.c since Pillow 12): when the height shrinks by more than twice
/// what the width shrinks, the vertical pass runs first. The 8-bit rounding between the passes
/// makes the order visible in the pixels.
fn vertical_first(in_w: usize, in_h: usize, out_w: usize, out_h: usize) -> bool {
    let dh = in_h as i64 - out_h as i64;
    let dw = in_w as i64 - out_w as i64;
    dh > 0 && dh > dw * 2
}

/// [`crop_resize`] with the vertical pass first ([`vertical_first`]): each output row is a
/// weighted sum of crop rows (full crop width), then filtered horizontally.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn crop_resize_vertical_first<I: Isa>(
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
    let fh = s.filter(in_w, out_w);
    let fv = s.filter(in_h, out_h);
    s.temp.clear();
    s.temp.resize(in_w * out_h, 0);
    s.acc.clear();
    s.acc.resize(in_w, 0);
    for yy in 0..out_h {
        let (ymin, n) = fv.bounds[yy];
        let k = &fv.coeffs[yy * fv.ksize..][..n];
        s.acc.fill(1 << (PRECISION_BITS - 1));
        for (t, &c) in k.iter().enumerate() {
            let row = &src[(b.top + ymin + t) * src_w + b.left..][..in_w];
            for (a, &p) in s.acc.iter_mut().zip(row) {
                *a += p as i32 * c;
            }
        }
        for (o, &a) in s.temp[yy * in_w..][..in_w].iter_mut().zip(&s.acc) {
            *o = clip8(a);
        }
    }
    for yy in 0..out_h {
        let row = &s.temp[yy * in_w..][..in_w];
        let out = &mut dst[yy * out_w..][..out_w];
        #[cfg(target_arch = "x86_64")]
        if let Some(avx2) = isa.avx2().filter(|_| !fh.wide.is_empty()) {
            widen(row, &mut s.wide_row);
            hpass8(avx2, &s.wide_row, &fh, out);
            continue;
        }
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
    s.keep(in_w, out_w, fh);
    s.keep(in_h, out_h, fv);
}

/// One row of the horizontal three-tap pass on 32 lanes: `row` is the crop row padded with
/// zeros to 32 bytes, `out` receives 32 bytes (lanes past the output width are 0).
///
/// Exactly the scalar arithmetic: each tap's pixels are gathered with byte shuffles (within
/// 16-byte halves, so from both halves, then blended), widened to i32, multiplied by the i32
/// coefficients and summed with the rounding bias; `>> 22` then the two saturating packs
/// (i32 → i16 → u8) are Pillow's `clip8`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn hpass3_avx2(row: &[u8; 32], l: &Lanes32, out: &mut [u8; 32]) {
    use std::arch::x86_64::*;
    // SAFETY: (the whole body) unaligned loads and stores of exactly 32 bytes / 8 i32 from arrays
    // of that size; the rest are register operations available with AVX2.
    unsafe {
        let r = _mm256_loadu_si256(row.as_ptr() as *const __m256i);
        let lo = _mm256_permute2x128_si256::<0x00>(r, r);
        let hi = _mm256_permute2x128_si256::<0x11>(r, r);
        let fifteen = _mm256_set1_epi8(15);
        let mut acc = [_mm256_set1_epi32(1 << (PRECISION_BITS - 1)); 4];
        for t in 0..3 {
            let ix = _mm256_loadu_si256(l.index[t].as_ptr() as *const __m256i);
            let from_hi = _mm256_cmpgt_epi8(ix, fifteen);
            let g = _mm256_blendv_epi8(
                _mm256_shuffle_epi8(lo, ix),
                _mm256_shuffle_epi8(hi, ix),
                from_hi,
            );
            let g_lo = _mm256_castsi256_si128(g);
            let g_hi = _mm256_extracti128_si256::<1>(g);
            let px = [
                _mm256_cvtepu8_epi32(g_lo),
                _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(g_lo)),
                _mm256_cvtepu8_epi32(g_hi),
                _mm256_cvtepu8_epi32(_mm_srli_si128::<8>(g_hi)),
            ];
            for q in 0..4 {
                let k = _mm256_loadu_si256(l.coeff[t][q * 8..].as_ptr() as *const __m256i);
                acc[q] = _mm256_add_epi32(acc[q], _mm256_mullo_epi32(px[q], k));
            }
        }
        let v: [__m256i; 4] = [
            _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(acc[0]),
            _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(acc[1]),
            _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(acc[2]),
            _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(acc[3]),
        ];
        // The packs work within 128-bit halves: a final permute restores lane order.
        let w01 = _mm256_packs_epi32(v[0], v[1]);
        let w23 = _mm256_packs_epi32(v[2], v[3]);
        let bytes = _mm256_packus_epi16(w01, w23);
        let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, ordered);
    }
}

/// `row` as i32 into `wide`, followed by 8 zeros (the taps an 8-lane load reads past it).
#[inline(always)]
fn widen(row: &[u8], wide: &mut Vec<i32>) {
    wide.clear();
    wide.extend(row.iter().map(|&p| p as i32));
    wide.extend([0; 8]);
}

/// One row of a horizontal pass of at most 8 taps (every downsampling by less than 3.5×, and
/// upsampling rows too wide for [`hpass3_avx2`]), eight outputs at a time: each output's taps
/// are one unaligned 8-lane load of the widened row times its zero-padded coefficients, and a
/// tree of horizontal adds sums the eight products of eight outputs into one register.
///
/// Exactly the scalar arithmetic: the same i32 products and bias summed in another order
/// (integer addition is associative and nothing overflows: 255 × 2²² × the taps' sum ≈ 2³⁰),
/// then `>> 22` and Pillow's clip to 0–255. `row` is [`widen`]ed (8 zeros past its end, so a
/// load at any `xmin` stays inside it; the padded coefficients there are 0).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn hpass8_avx2(row: &[i32], f: &Coefficients, out: &mut [u8]) {
    use std::arch::x86_64::*;
    let n = out.len();
    let full = n / 8 * 8;
    for x0 in (0..full).step_by(8) {
        let mut p = [_mm256_setzero_si256(); 8];
        for (j, pj) in p.iter_mut().enumerate() {
            let (xmin, _) = f.bounds[x0 + j];
            let taps = &row[xmin..xmin + 8];
            let k = &f.wide[(x0 + j) * 8..][..8];
            // SAFETY: unaligned loads of exactly 8 i32 from slices of 8 (checked above).
            *pj = unsafe {
                _mm256_mullo_epi32(
                    _mm256_loadu_si256(taps.as_ptr() as *const __m256i),
                    _mm256_loadu_si256(k.as_ptr() as *const __m256i),
                )
            };
        }
        let h01 = _mm256_hadd_epi32(p[0], p[1]);
        let h23 = _mm256_hadd_epi32(p[2], p[3]);
        let h45 = _mm256_hadd_epi32(p[4], p[5]);
        let h67 = _mm256_hadd_epi32(p[6], p[7]);
        // Per 128-bit half: outputs 0–3 (4–7) summed over their low (high) four taps.
        let q0 = _mm256_hadd_epi32(h01, h23);
        let q1 = _mm256_hadd_epi32(h45, h67);
        let sum = _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(q0, q1),
            _mm256_permute2x128_si256::<0x31>(q0, q1),
        );
        let v = _mm256_srai_epi32::<{ PRECISION_BITS as i32 }>(_mm256_add_epi32(
            sum,
            _mm256_set1_epi32(1 << (PRECISION_BITS - 1)),
        ));
        let v = _mm256_min_epi32(
            _mm256_max_epi32(v, _mm256_setzero_si256()),
            _mm256_set1_epi32(255),
        );
        let words = _mm256_packs_epi32(v, v);
        let bytes = _mm256_packus_epi16(words, words);
        let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        let dst = &mut out[x0..x0 + 8];
        // SAFETY: a store of exactly 8 bytes into a slice of 8.
        unsafe {
            _mm_storel_epi64(
                dst.as_mut_ptr() as *mut __m128i,
                _mm256_castsi256_si128(ordered),
            )
        };
    }
    for (x, o) in out.iter_mut().enumerate().skip(full) {
        let (xmin, taps) = f.bounds[x];
        let k = &f.coeffs[x * f.ksize..][..taps];
        let acc = row[xmin..xmin + taps]
            .iter()
            .zip(k)
            .fold(1i32 << (PRECISION_BITS - 1), |acc, (&p, &c)| acc + p * c);
        *o = clip8(acc);
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
    if need_h && need_v && vertical_first(in_w, in_h, out_w, out_h) {
        return crop_resize_vertical_first(isa, src, src_w, b, out_w, out_h, dst, s);
    }
    let fh = s.filter(in_w, out_w);
    let fv = s.filter(in_h, out_h);
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
        #[cfg(target_arch = "x86_64")]
        if let Some(avx2) = isa.avx2().filter(|_| need_h && !fh.wide.is_empty()) {
            widen(row, &mut s.wide_row);
            hpass8(avx2, &s.wide_row, &fh, out);
            continue;
        }
        if need_h {
            s.row[..in_w].copy_from_slice(row);
            let padded = &s.row;
            if fh.ksize == 3 {
                // Upsampling (every crop of a RandomResizedCrop to a larger side): three taps.
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
                for ((o, &(xmin, _)), k) in out
                    .iter_mut()
                    .zip(&fh.bounds)
                    .zip(fh.coeffs.chunks(fh.ksize))
                {
                    let acc = padded[xmin..xmin + fh.ksize]
                        .iter()
                        .zip(k)
                        .fold(1i32 << (PRECISION_BITS - 1), |acc, (&p, &c)| {
                            acc + p as i32 * c
                        });
                    *o = clip8(acc);
                }
            }
        } else {
            out.copy_from_slice(row);
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
        for yy in 0..out_h {
            let (ymin, n) = fv.bounds[yy];
            let k = &fv.coeffs[yy * fv.ksize..][..n];
            s.acc.fill(1 << (PRECISION_BITS - 1));
            for (t, &c) in k.iter().enumerate() {
                let src = &s.temp[(ymin + t) * temp_w..][..out_w];
                for (a, &p) in s.acc.iter_mut().zip(src) {
                    *a += p as i32 * c;
                }
            }
            for (d, &a) in dst[yy * out_w..][..out_w].iter_mut().zip(&s.acc) {
                *d = clip8(a);
            }
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
