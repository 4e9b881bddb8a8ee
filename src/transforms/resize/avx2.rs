//! The AVX2 row kernels of the horizontal pass, reachable only with the [`Avx2`] token: three
//! taps over a 32-byte row by byte shuffles, and up to eight taps per output by 8-lane loads.
//! Each gives exactly the scalar arithmetic's bytes.

use super::filter::{Coefficients, Lanes32, PRECISION_BITS, clip8};
use crate::simd::Avx2;

/// [`hpass3_avx2`] for the holder of the token.
#[cfg(target_arch = "x86_64")]
pub(super) fn hpass3(_: Avx2, row: &[u8; 32], l: &Lanes32, out: &mut [u8; 32]) {
    // SAFETY: the token exists only where AVX2 was detected.
    unsafe { hpass3_avx2(row, l, out) }
}

/// [`hpass8_avx2`] for the holder of the token.
#[cfg(target_arch = "x86_64")]
pub(super) fn hpass8(_: Avx2, row: &[i32], f: &Coefficients, out: &mut [u8]) {
    // SAFETY: the token exists only where AVX2 was detected.
    unsafe { hpass8_avx2(row, f, out) }
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
pub(super) fn hpass3_avx2(row: &[u8; 32], l: &Lanes32, out: &mut [u8; 32]) {
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
pub(super) fn widen(row: &[u8], wide: &mut Vec<i32>) {
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
pub(super) fn hpass8_avx2(row: &[i32], f: &Coefficients, out: &mut [u8]) {
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
