//! RandomRotation: Pillow's `Image.rotate(angle, NEAREST, expand=False, fillcolor=fill)`.
//!
//! Pillow builds the inverse affine matrix with coefficients rounded to 15 decimals, then maps
//! each output pixel centre to the source. Where the four corners' source coordinates fit 16.16
//! fixed point (`check_fixed` in Pillow's `Geometry.c`: every one under 32,768 px), it steps in
//! 32-bit fixed point (`affine_fixed`); otherwise, or for a matrix with no shear terms, it steps
//! in doubles. Both are reproduced here step for step, so the pixels are identical at any size.
//!
//! The one unchecked read (the AVX2 gather) rests on values that only their checks build: a
//! [`NoWrap`] (no fixed-point coordinate of the image leaves i32, checked at the corners), the
//! [`Run`]s it finds (the stretch of a row that maps inside the source) and a [`Gather`] (AVX2,
//! slack after the image, 32-bit indices). Every other read is bounds-checked.

use crate::simd::Avx2;

/// Rotate `src` (`w`×`h`) counter-clockwise by `angle` degrees about its centre into `dst`.
/// `src` may extend past the image: 3 bytes of slack let runs be gathered 4 bytes at a time.
pub fn rotate_nearest(src: &[u8], w: usize, h: usize, angle: f64, fill: u8, dst: &mut [u8]) {
    let n = w * h;
    if n == 0 {
        return;
    }
    let (src_image, dst) = (&src[..n], &mut dst[..n]);
    let angle = angle.rem_euclid(360.0);
    if angle == 0.0 {
        dst.copy_from_slice(src_image);
        return;
    }
    if angle == 180.0 {
        for (d, s) in dst.iter_mut().zip(src_image.iter().rev()) {
            *d = *s;
        }
        return;
    }
    if w == h && (angle == 90.0 || angle == 270.0) {
        // Pillow transposes square images for quarter turns.
        for y in 0..h {
            for x in 0..w {
                dst[y * w + x] = if angle == 90.0 {
                    src_image[x * w + (w - 1 - y)]
                } else {
                    src_image[(h - 1 - x) * w + y]
                };
            }
        }
        return;
    }
    let m = inverse_matrix(w, h, angle);
    if (m[1] == 0.0 && m[3] == 0.0) || !corners_fit_fixed(&m, w, h) {
        rotate_float(src_image, w, h, &m, fill, dst);
    } else {
        rotate_fixed(src, w, h, &m, fill, dst);
    }
}

/// The inverse affine matrix Pillow's `rotate` hands to `transform` (output pixel → source).
fn inverse_matrix(w: usize, h: usize, angle: f64) -> [f64; 6] {
    let (cx, cy) = (w as f64 / 2.0, h as f64 / 2.0);
    let rad = -angle.to_radians();
    let (c, s) = (round15(rad.cos()), round15(rad.sin()));
    let mut m = [c, s, 0.0, round15(-rad.sin()), c, 0.0];
    // matrix[2], matrix[5] = transform(-center) ; then += center
    let (tx, ty) = (
        m[0] * -cx + m[1] * -cy + m[2],
        m[3] * -cx + m[4] * -cy + m[5],
    );
    m[2] = tx + cx;
    m[5] = ty + cy;
    m
}

/// Pillow's `check_fixed` at the four corners of the output: every source coordinate under
/// 32,768 in magnitude, so that 16.16 fixed point can hold it.
fn corners_fit_fixed(m: &[f64; 6], w: usize, h: usize) -> bool {
    let (w, h) = (w as f64, h as f64);
    [(0.0, 0.0), (w, h), (0.0, h), (w, 0.0)]
        .iter()
        .all(|&(x, y)| {
            (x * m[0] + y * m[1] + m[2]).abs() < 32768.0
                && (x * m[3] + y * m[4] + m[5]).abs() < 32768.0
        })
}

/// Pillow's floating-point path (`ImagingTransformAffine` past `check_fixed`, and
/// `ImagingScaleAffine`, which gives the same pixels): the same sums in the same order, every
/// read checked. Taken only for images too large for fixed point, so speed is secondary.
fn rotate_float(src: &[u8], w: usize, h: usize, m: &[f64; 6], fill: u8, dst: &mut [u8]) {
    // Pillow's COORD: negative → -1, else truncation; a double past i64 saturates, and any
    // value past the image is outside either way.
    let coord = |v: f64| if v < 0.0 { -1 } else { v as i64 };
    let mut xo = m[2] + m[1] * 0.5 + m[0] * 0.5;
    let mut yo = m[5] + m[4] * 0.5 + m[3] * 0.5;
    for row in dst.chunks_exact_mut(w) {
        let (mut xx, mut yy) = (xo, yo);
        for out in row.iter_mut() {
            let (xin, yin) = (coord(xx), coord(yy));
            *out = if (0..w as i64).contains(&xin) && (0..h as i64).contains(&yin) {
                src[yin as usize * w + xin as usize]
            } else {
                fill
            };
            xx += m[0];
            yy += m[3];
        }
        xo += m[1];
        yo += m[4];
    }
}

/// Pillow's `affine_fixed`: 16.16 coordinates advanced with 32-bit wrapping additions.
fn rotate_fixed(src: &[u8], w: usize, h: usize, m: &[f64; 6], fill: u8, dst: &mut [u8]) {
    let fix = |v: f64| (v * 65536.0 + 0.5).floor() as i32;
    let a = Fixed {
        a0: fix(m[0]),
        a1: fix(m[1]),
        a2: fix(m[2] + m[0] * 0.5 + m[1] * 0.5),
        a3: fix(m[3]),
        a4: fix(m[4]),
        a5: fix(m[5] + m[3] * 0.5 + m[4] * 0.5),
    };
    let src_image = &src[..w * h];
    let Some(exact) = NoWrap::check(a, w, h) else {
        // Some 32-bit coordinate wraps (possible only within rounding of ±32,768 px):
        // Pillow's arithmetic pixel by pixel, every read checked.
        return rotate_fixed_checked(src_image, w, h, a, fill, dst);
    };
    let gather = Gather::new(src, w, h);
    for (y, row) in dst.chunks_exact_mut(w).enumerate() {
        let Some(run) = exact.run(y, w, h) else {
            row.fill(fill);
            continue;
        };
        row[..run.lo].fill(fill);
        row[run.hi..].fill(fill);
        let out = &mut row[run.lo..run.hi];
        match gather {
            #[cfg(target_arch = "x86_64")]
            Some(g) => g.run(src, w, &run, out),
            _ => run_scalar(src_image, w, &run, out),
        }
    }
}

/// The six 16.16 coefficients: pixel (x, y) reads source
/// `((a2 + y·a1 + x·a0) >> 16, (a5 + y·a4 + x·a3) >> 16)`.
#[derive(Debug, Clone, Copy)]
struct Fixed {
    a0: i32,
    a1: i32,
    a2: i32,
    a3: i32,
    a4: i32,
    a5: i32,
}

/// Pillow's loop as it is, wrapping sums included, for an image whose coordinates wrap.
fn rotate_fixed_checked(src: &[u8], w: usize, h: usize, a: Fixed, fill: u8, dst: &mut [u8]) {
    let (mut a2, mut a5) = (a.a2, a.a5);
    for row in dst.chunks_exact_mut(w) {
        let (mut xx, mut yy) = (a2, a5);
        for out in row.iter_mut() {
            let (xin, yin) = ((xx >> 16) as i64, (yy >> 16) as i64);
            *out = if (0..w as i64).contains(&xin) && (0..h as i64).contains(&yin) {
                src[yin as usize * w + xin as usize]
            } else {
                fill
            };
            xx = xx.wrapping_add(a.a0);
            yy = yy.wrapping_add(a.a3);
        }
        a2 = a2.wrapping_add(a.a1);
        a5 = a5.wrapping_add(a.a4);
    }
}

/// Proof that no pixel centre's 16.16 coordinates leave i32 in this image, so that Pillow's
/// wrapping sums are exact (a wrapping sum equals the exact one whenever the exact one fits).
/// Built only by [`NoWrap::check`].
struct NoWrap(Fixed);

impl NoWrap {
    /// Each coordinate is affine in (x, y), so its extremes over the image lie at the corner
    /// pixels: checked there, exactly, in 64 bits.
    fn check(a: Fixed, w: usize, h: usize) -> Option<NoWrap> {
        let (x1, y1) = ((w - 1) as i64, (h - 1) as i64);
        let fits = |c: i64, dy: i32, dx: i32| {
            [(0, 0), (x1, 0), (0, y1), (x1, y1)]
                .iter()
                .all(|&(x, y)| i32::try_from(c + y * dy as i64 + x * dx as i64).is_ok())
        };
        (fits(a.a2 as i64, a.a1, a.a0) && fits(a.a5 as i64, a.a4, a.a3)).then_some(NoWrap(a))
    }

    /// Row `y`'s run of pixels that map inside the `w`×`h` source, if any.
    ///
    /// Why one run suffices: with no wrapping, each coordinate is affine in x, so
    /// `0 ≤ coord >> 16 < size` holds on one interval of x; two intervals meet in one.
    #[inline]
    fn run(&self, y: usize, w: usize, h: usize) -> Option<Run> {
        let a = self.0;
        // Exact: no sum of this image leaves i32 (`check`).
        let xx0 = a.a2.wrapping_add(a.a1.wrapping_mul(y as i32));
        let yy0 = a.a5.wrapping_add(a.a4.wrapping_mul(y as i32));
        let at = |x: usize| {
            (
                xx0.wrapping_add(a.a0.wrapping_mul(x as i32)),
                yy0.wrapping_add(a.a3.wrapping_mul(x as i32)),
            )
        };
        let inside = |x: usize| {
            let (xx, yy) = at(x);
            ((xx >> 16) as u32 as usize) < w && ((yy >> 16) as u32 as usize) < h
        };
        let lo = (0..w).find(|&x| inside(x))?;
        let hi = (lo..w).rev().find(|&x| inside(x)).map_or(lo, |x| x) + 1;
        let (xx, yy) = at(lo);
        Some(Run {
            lo,
            hi,
            xx,
            yy,
            dx: a.a0,
            dy: a.a3,
        })
    }
}

/// Pixels `lo..hi` of a row, every one of which maps inside the `w`×`h` source. Built only by
/// [`NoWrap::run`], which proves it; the gather relies on nothing else.
struct Run {
    lo: usize,
    hi: usize,
    /// 16.16 source coordinates of pixel `lo`.
    xx: i32,
    yy: i32,
    dx: i32,
    dy: i32,
}

/// A run pixel by pixel.
fn run_scalar(src: &[u8], w: usize, run: &Run, out: &mut [u8]) {
    let (mut xx, mut yy) = (run.xx, run.yy);
    for o in out {
        *o = src[(yy >> 16) as usize * w + (xx >> 16) as usize];
        xx = xx.wrapping_add(run.dx);
        yy = yy.wrapping_add(run.dy);
    }
}

/// Proof that runs of this image may be gathered: AVX2 is present (the token), 3 bytes of
/// slack follow the image for the last pixel's 4-byte read, and every pixel index fits the
/// gather's 32-bit lanes. Built only by [`Gather::new`].
#[derive(Clone, Copy)]
struct Gather(#[allow(dead_code)] Avx2);

impl Gather {
    fn new(src: &[u8], w: usize, h: usize) -> Option<Gather> {
        let fits = src.len() >= w * h + 3 && w * h + 3 <= i32::MAX as usize;
        Avx2::detect().filter(|_| fits).map(Gather)
    }

    /// A run gathered eight pixels at a time.
    #[cfg(target_arch = "x86_64")]
    #[inline]
    fn run(self, src: &[u8], w: usize, run: &Run, out: &mut [u8]) {
        // SAFETY: `Gather` proves AVX2, the slack and the index width for this image; every
        // pixel of `run` maps inside it (`Run` is built only by `NoWrap::run`, which proves it),
        // and `out` is the run's slice of the row.
        unsafe { gather_run(src, w, (run.xx, run.yy), (run.dx, run.dy), out) }
    }
}

/// `out[i] = src[(yy_i >> 16) * w + (xx_i >> 16)]` with `xx_i = xx + i·a0`, `yy_i = yy + i·a3`,
/// the eight source bytes fetched with one AVX2 gather of 32-bit words. (The coordinates come
/// as scalars, not as a `&Run`: read from one struct, the compiler kept them as a vector pair
/// and the loop ran 30 % slower.)
///
/// # Safety
/// AVX2 must be available; every pixel of `out` must map inside the `w`-wide source, whose
/// pixel indices fit i32; `src` must extend at least 3 bytes past the image.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gather_run(
    src: &[u8],
    w: usize,
    (xx, yy): (i32, i32),
    (a0, a3): (i32, i32),
    out: &mut [u8],
) {
    use std::arch::x86_64::*;
    let n = out.len();
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let (dx, dy) = (
        _mm256_mullo_epi32(lanes, _mm256_set1_epi32(a0)),
        _mm256_mullo_epi32(lanes, _mm256_set1_epi32(a3)),
    );
    let width = _mm256_set1_epi32(w as i32);
    // The low byte of each 32-bit lane to the first four bytes of each 128-bit half.
    let low_bytes = _mm256_setr_epi8(
        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, //
        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
    );
    let (mut x0, mut y0) = (xx, yy);
    let mut i = 0;
    while i + 8 <= n {
        let xv = _mm256_add_epi32(_mm256_set1_epi32(x0), dx);
        let yv = _mm256_add_epi32(_mm256_set1_epi32(y0), dy);
        let index = _mm256_add_epi32(
            _mm256_mullo_epi32(_mm256_srai_epi32::<16>(yv), width),
            _mm256_srai_epi32::<16>(xv),
        );
        // SAFETY: every index is a pixel inside the source and 3 bytes follow the last one.
        let words = unsafe { _mm256_i32gather_epi32::<1>(src.as_ptr() as *const i32, index) };
        let b = _mm256_shuffle_epi8(words, low_bytes);
        let eight = _mm_unpacklo_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256::<1>(b));
        // SAFETY: i + 8 <= out.len().
        unsafe { _mm_storel_epi64(out.as_mut_ptr().add(i) as *mut __m128i, eight) };
        x0 = x0.wrapping_add(a0.wrapping_mul(8));
        y0 = y0.wrapping_add(a3.wrapping_mul(8));
        i += 8;
    }
    // The last few pixels one by one (a masked gather measured slower here).
    for o in &mut out[i..] {
        *o = src[(y0 >> 16) as usize * w + (x0 >> 16) as usize];
        x0 = x0.wrapping_add(a0);
        y0 = y0.wrapping_add(a3);
    }
}

/// Python's `round(v, 15)`: the nearest multiple of 1e-15 (ties to even), as the nearest
/// double, without going through a decimal string.
///
/// `p = v·1e15` is rounded, but `fma` recovers its exact error, so the rounding decision is
/// made on the exact product; the result `r / 1e15` is one correctly rounded division of two
/// exact doubles, i.e. the same double Python parses from the decimal digits.
pub fn round15(v: f64) -> f64 {
    let p = v * 1e15;
    if !p.is_finite() || p.abs() >= 4.5e15 {
        return v; // already coarser than 1e-15 steps
    }
    let err = v.mul_add(1e15, -p); // v·1e15 = p + err exactly
    let floor = p.floor();
    let frac = p - floor; // exact
    let diff = (frac - 0.5) + err; // sign of (exact fraction − ½)
    let up = if diff > 0.0 {
        true
    } else if diff < 0.0 {
        false
    } else {
        floor % 2.0 != 0.0
    };
    (if up { floor + 1.0 } else { floor }) / 1e15
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathered_runs_equal_the_scalar_loop() {
        // With 3 bytes of slack the AVX2 path runs (where the CPU has it); without, the
        // scalar loop. Both must give the same pixels for every angle and size.
        for (w, h) in [(28, 28), (20, 28), (9, 5)] {
            let src: Vec<u8> = (0..w * h + 3).map(|i| (i * 37 % 251) as u8).collect();
            let (mut a, mut b) = (vec![0u8; w * h], vec![0u8; w * h]);
            for tenth in -1800..=1800 {
                let angle = tenth as f64 / 10.0 + 0.013;
                rotate_nearest(&src, w, h, angle, 7, &mut a);
                rotate_nearest(&src[..w * h], w, h, angle, 7, &mut b);
                assert_eq!(a, b, "{w}x{h} at {angle}");
            }
        }
    }

    #[test]
    fn zero_and_half_turn() {
        let src: Vec<u8> = (0..16).collect();
        let mut dst = vec![0u8; 16];
        rotate_nearest(&src, 4, 4, 0.0, 0, &mut dst);
        assert_eq!(dst, src);
        rotate_nearest(&src, 4, 4, 180.0, 0, &mut dst);
        assert_eq!(dst, (0..16).rev().collect::<Vec<u8>>());
    }

    #[test]
    fn quarter_turn_is_counter_clockwise() {
        // A bright pixel right of centre ends up above it.
        let mut src = vec![0u8; 28 * 28];
        src[14 * 28 + 24] = 255;
        let mut dst = vec![0u8; 28 * 28];
        rotate_nearest(&src, 28, 28, 90.0, 0, &mut dst);
        let at = dst.iter().position(|&v| v == 255).unwrap();
        let (x, y) = (at % 28, at / 28);
        assert!(y < 10 && (13..=15).contains(&x), "({x}, {y})");
    }

    #[test]
    fn round15_matches_the_decimal_route() {
        let mut x = 0.123_456_789f64;
        for i in 0..200_000 {
            x = (x * 9_301.0 + 49_297.0 + i as f64).sin();
            let reference: f64 = format!("{x:.15}").parse().unwrap();
            assert_eq!(round15(x), reference, "{x:e}");
        }
        for v in [0.0, -0.0, 1.0, -1.0, 0.5e-15, 1.5e-15, 2.5e-15, -2.5e-15] {
            let reference: f64 = format!("{v:.15}").parse().unwrap();
            assert_eq!(round15(v), reference, "{v:e}");
        }
    }

    #[test]
    fn corners_get_the_fill() {
        let src = vec![100u8; 28 * 28];
        let mut dst = vec![0u8; 28 * 28];
        rotate_nearest(&src, 28, 28, 45.0, 7, &mut dst);
        assert_eq!(dst[0], 7);
        assert_eq!(dst[14 * 28 + 14], 100);
    }
}
