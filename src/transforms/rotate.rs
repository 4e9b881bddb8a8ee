//! RandomRotation: Pillow's `Image.rotate(angle, NEAREST, expand=False, fillcolor=fill)`.
//!
//! Pillow builds the inverse affine matrix with coefficients rounded to 15 decimals, then maps
//! each output pixel centre in 16.16 fixed point (its `affine_fixed` path, taken for any image
//! this small); reproducing those steps gives identical pixels.

/// Rotate `src` (`w`×`h`) counter-clockwise by `angle` degrees about its centre into `dst`.
pub fn rotate_nearest(src: &[u8], w: usize, h: usize, angle: f64, fill: u8, dst: &mut [u8]) {
    let angle = angle.rem_euclid(360.0);
    if angle == 0.0 {
        dst[..w * h].copy_from_slice(&src[..w * h]);
        return;
    }
    if angle == 180.0 {
        for (i, d) in dst[..w * h].iter_mut().enumerate() {
            *d = src[w * h - 1 - i];
        }
        return;
    }
    if w == h && (angle == 90.0 || angle == 270.0) {
        // Pillow transposes square images for quarter turns.
        for y in 0..h {
            for x in 0..w {
                dst[y * w + x] = if angle == 90.0 {
                    src[x * w + (w - 1 - y)]
                } else {
                    src[(h - 1 - x) * w + y]
                };
            }
        }
        return;
    }
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
    let fix = |v: f64| (v * 65536.0 + 0.5).floor() as i32;
    let (a0, a1, a3, a4) = (fix(m[0]), fix(m[1]), fix(m[3]), fix(m[4]));
    let mut a2 = fix(m[2] + m[0] * 0.5 + m[1] * 0.5);
    let mut a5 = fix(m[5] + m[3] * 0.5 + m[4] * 0.5);
    let inside =
        |xx: i32, yy: i32| ((xx >> 16) as u32 as usize) < w && ((yy >> 16) as u32 as usize) < h;
    // Runs are gathered 8 pixels at a time where the CPU has AVX2 and the caller left the 3
    // bytes of slack after the image that 4-byte gathers read.
    #[cfg(target_arch = "x86_64")]
    let gather = src.len() >= w * h + 3 && std::arch::is_x86_feature_detected!("avx2");
    #[cfg(not(target_arch = "x86_64"))]
    let gather = false;
    for y in 0..h {
        let row = &mut dst[y * w..][..w];
        // Source coordinates are affine in x, so the pixels that land inside the source form
        // one run: find its ends, fill around it, copy inside it without per-pixel checks.
        let at = |x: usize| {
            (
                a2.wrapping_add(a0.wrapping_mul(x as i32)),
                a5.wrapping_add(a3.wrapping_mul(x as i32)),
            )
        };
        let first = (0..w).find(|&x| {
            let (xx, yy) = at(x);
            inside(xx, yy)
        });
        match first {
            None => row.fill(fill),
            Some(lo) => {
                let hi = (lo..w)
                    .rev()
                    .find(|&x| {
                        let (xx, yy) = at(x);
                        inside(xx, yy)
                    })
                    .map_or(lo, |x| x + 1);
                row[..lo].fill(fill);
                row[hi..].fill(fill);
                let (mut xx, mut yy) = at(lo);
                // Pixels lo..hi all map inside the source: each source coordinate is affine
                // (exact integer arithmetic) in x, so `inside` holds on one interval of x,
                // whose ends `lo` and `hi - 1` were both checked above.
                #[cfg(target_arch = "x86_64")]
                if gather {
                    // SAFETY: AVX2 is present, the run maps inside, and the slack is there.
                    unsafe { run_avx2(src, w, xx, yy, a0, a3, &mut row[lo..hi]) };
                }
                if !gather {
                    let src = &src[..w * h];
                    for out in &mut row[lo..hi] {
                        let i = (yy >> 16) as usize * w + (xx >> 16) as usize;
                        debug_assert!(i < src.len());
                        // SAFETY: inside the source (above).
                        *out = unsafe { *src.get_unchecked(i) };
                        xx = xx.wrapping_add(a0);
                        yy = yy.wrapping_add(a3);
                    }
                }
            }
        }
        a2 = a2.wrapping_add(a1);
        a5 = a5.wrapping_add(a4);
    }
}

/// One run of inside pixels, eight at a time: `out[i] = src[(yy_i >> 16) * w + (xx_i >> 16)]`
/// with `xx_i = xx + i·a0`, `yy_i = yy + i·a3` (wrapping, as the scalar loop), the eight
/// source bytes fetched with one AVX2 gather of 32-bit words.
///
/// # Safety
/// AVX2 must be available; every pixel of `out` must map inside the `w`-wide source, and `src`
/// must extend at least 3 bytes past the source image (each gather reads 4 bytes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn run_avx2(src: &[u8], w: usize, xx: i32, yy: i32, a0: i32, a3: i32, out: &mut [u8]) {
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
