//! RandomRotation: Pillow's `Image.rotate(angle, NEAREST, expand=False, fillcolor=fill)`.
//!
//! Pillow builds the inverse affine matrix with coefficients rounded to 15 decimals, then maps
//! each output pixel centre to the source. Where the four corners' source coordinates fit 16.16
//! fixed point (`check_fixed` in Pillow's `Geometry.c`: every one under 32,768 px), it steps in
//! 32-bit fixed point (`affine_fixed`); otherwise, or for a matrix with no shear terms, it steps
//! in doubles. Both are reproduced here step for step, so the pixels are identical at any size.
//!
//! The one unchecked read (the AVX2 gather) rests on a [`Run`]: a stretch of a row that the code
//! has proved maps inside the source, built only where the row's fixed-point coordinates cannot
//! wrap. Every other read is bounds-checked.

use crate::simd::Avx2;

/// Rotate `src` (`w`×`h`) counter-clockwise by `angle` degrees about its centre into `dst`.
/// `src` may extend past the image: 3 bytes of slack let runs be gathered 4 bytes at a time.
pub fn rotate_nearest(src: &[u8], w: usize, h: usize, angle: f64, fill: u8, dst: &mut [u8]) {
    let n = w * h;
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
    let (a0, a1, a3, a4) = (fix(m[0]), fix(m[1]), fix(m[3]), fix(m[4]));
    let a2 = fix(m[2] + m[0] * 0.5 + m[1] * 0.5);
    let a5 = fix(m[5] + m[3] * 0.5 + m[4] * 0.5);
    // The gather reads 4 bytes at 32-bit indices: it needs 3 bytes of slack after the image
    // and every index below i32::MAX.
    let gather =
        Avx2::detect().filter(|_| src.len() >= w * h + 3 && w * h + 3 <= i32::MAX as usize);
    let src_image = &src[..w * h];
    for (y, row) in dst.chunks_exact_mut(w).enumerate() {
        // The row's coordinates before wrapping: Pillow's `a2 += a1` per row, exactly.
        let x0 = a2 as i64 + y as i64 * a1 as i64;
        let y0 = a5 as i64 + y as i64 * a4 as i64;
        let line = FixedLine {
            x0,
            y0,
            dx: a0 as i64,
            dy: a3 as i64,
        };
        match line.run(w, h) {
            Some(Found::Run(run)) => {
                row[..run.lo].fill(fill);
                row[run.hi..].fill(fill);
                let out = &mut row[run.lo..run.hi];
                match gather {
                    #[cfg(target_arch = "x86_64")]
                    Some(avx2) => run_avx2(avx2, src, w, h, &run, out),
                    _ => run_scalar(src_image, w, &run, out),
                }
            }
            Some(Found::Outside) => row.fill(fill),
            // The row's 32-bit coordinates wrap (possible only within rounding of ±32,768 px):
            // Pillow's arithmetic pixel by pixel, every read checked.
            None => {
                let (mut xx, mut yy) = (x0 as i32, y0 as i32);
                for out in row.iter_mut() {
                    let (xin, yin) = (xx >> 16, yy >> 16);
                    *out = if (0..w as i64).contains(&(xin as i64))
                        && (0..h as i64).contains(&(yin as i64))
                    {
                        src_image[yin as usize * w + xin as usize]
                    } else {
                        fill
                    };
                    xx = xx.wrapping_add(a0);
                    yy = yy.wrapping_add(a3);
                }
            }
        }
    }
}

/// One output row's source coordinates in 16.16 fixed point, exact (64-bit):
/// pixel `x` reads `(x0 + x·dx, y0 + x·dy) >> 16`.
struct FixedLine {
    x0: i64,
    y0: i64,
    dx: i64,
    dy: i64,
}

/// What a row holds: one run of pixels inside the source, or none at all.
enum Found {
    Run(Run),
    Outside,
}

/// Pixels `lo..hi` of a row, every one of which maps inside the `w`×`h` source. Built only by
/// [`FixedLine::run`], which proves it; the gather relies on nothing else.
struct Run {
    lo: usize,
    hi: usize,
    /// 16.16 source coordinates of pixel `lo` (fit i32: checked when built).
    xx: i32,
    yy: i32,
    dx: i32,
    dy: i32,
}

impl FixedLine {
    fn at(&self, x: usize) -> (i64, i64) {
        (self.x0 + x as i64 * self.dx, self.y0 + x as i64 * self.dy)
    }

    /// The run of pixels that map inside a `w`×`h` source, or `None` when the row's
    /// coordinates leave i32 somewhere (Pillow's sums wrap there, and the run argument fails).
    ///
    /// Why one run suffices: without wrapping, each coordinate is affine in x, so
    /// `0 ≤ coord >> 16 < size` holds on one interval of x; two intervals meet in one.
    fn run(&self, w: usize, h: usize) -> Option<Found> {
        let fits = |v: i64| i32::try_from(v).is_ok();
        let (first, last) = (self.at(0), self.at(w - 1));
        if ![first.0, first.1, last.0, last.1].into_iter().all(fits) {
            return None;
        }
        let inside = |x: usize| {
            let (xx, yy) = self.at(x);
            (0..w as i64).contains(&(xx >> 16)) && (0..h as i64).contains(&(yy >> 16))
        };
        let Some(lo) = (0..w).find(|&x| inside(x)) else {
            return Some(Found::Outside);
        };
        let hi = (lo..w).rev().find(|&x| inside(x)).map_or(lo, |x| x) + 1;
        let (xx, yy) = self.at(lo);
        Some(Found::Run(Run {
            lo,
            hi,
            xx: xx as i32,
            yy: yy as i32,
            dx: self.dx as i32,
            dy: self.dy as i32,
        }))
    }
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

/// A run gathered eight pixels at a time.
#[cfg(target_arch = "x86_64")]
fn run_avx2(avx2: Avx2, src: &[u8], w: usize, h: usize, run: &Run, out: &mut [u8]) {
    let _ = avx2;
    // The gather's premises beyond the run: 32-bit indices, and 3 bytes after the image for
    // the last pixel's 4-byte read.
    assert!(src.len() >= w * h + 3 && w * h + 3 <= i32::MAX as usize);
    assert_eq!(out.len(), run.hi - run.lo);
    // SAFETY: the `Avx2` token exists only where AVX2 was detected; every pixel of `run` maps
    // inside the source (`Run` is built only by `FixedLine::run`, which proves it); the asserts
    // above give the slack and the index width.
    unsafe { gather_run(src, w, run, out) }
}

/// `out[i] = src[(yy_i >> 16) * w + (xx_i >> 16)]` with `xx_i = run.xx + i·run.dx` (likewise
/// `yy`), the eight source bytes fetched with one AVX2 gather of 32-bit words.
///
/// # Safety
/// AVX2 must be available; every pixel of `out` must map inside the `w`-wide source, whose
/// pixel indices fit i32; `src` must extend at least 3 bytes past the image.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn gather_run(src: &[u8], w: usize, run: &Run, out: &mut [u8]) {
    use std::arch::x86_64::*;
    let (a0, a3) = (run.dx, run.dy);
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
    let (mut x0, mut y0) = (run.xx, run.yy);
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
