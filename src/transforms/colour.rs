//! Colour ops with Pillow's arithmetic, as torchvision applies them to PIL images:
//! `convert("L")` (ITU-R 601-2 luma in 16-bit fixed point), the `ImageEnhance` blends behind
//! `adjust_brightness` / `adjust_contrast` / `adjust_saturation` (`Image.blend` in single
//! precision, truncated), and `adjust_hue` (Pillow's RGB → HSV, a wrapping shift of the hue
//! byte, HSV → RGB). Images are planar: RGB is three planes.

use crate::shape::ImageShape;
pub use crate::shape::luma;

/// The grey plane of an image: itself when grey, else the luma of its three planes.
pub fn grey_plane(src: &[u8], shape: ImageShape, dst: &mut [u8]) {
    let n = shape.plane();
    if shape.channels == 1 {
        dst[..n].copy_from_slice(&src[..n]);
        return;
    }
    let (r, rest) = src.split_at(n);
    let (g, b) = rest.split_at(n);
    for (((o, &r), &g), &b) in dst[..n].iter_mut().zip(r).zip(g).zip(&b[..n]) {
        *o = luma(r, g, b);
    }
}

/// `Image.blend(a, b, alpha)` for one byte: `a + alpha·(b − a)` in single precision,
/// truncated, clipped when extrapolating (alpha outside [0, 1]).
#[inline]
fn blend_byte(a: u8, b: u8, alpha: f32) -> u8 {
    let v = a as i32 as f32 + alpha * (b as i32 - a as i32) as f32;
    if v <= 0.0 {
        0
    } else if v >= 255.0 {
        255
    } else {
        v as u8
    }
}

/// `Image.blend(degenerate, image, factor)` in place on `image`, `degenerate` given per byte
/// by `deg(i)`. Pillow copies an input outright at alpha 0 and 1.
fn blend_into(image: &mut [u8], factor: f64, deg: impl Fn(usize) -> u8) {
    let alpha = factor as f32;
    if alpha == 1.0 {
        return;
    }
    for (i, v) in image.iter_mut().enumerate() {
        *v = if alpha == 0.0 {
            deg(i)
        } else {
            blend_byte(deg(i), *v, alpha)
        };
    }
}

/// `ImageEnhance.Brightness(img).enhance(factor)`: a blend with black.
pub fn brightness(image: &mut [u8], factor: f64) {
    blend_into(image, factor, |_| 0);
}

/// `ImageEnhance.Contrast(img).enhance(factor)`: a blend with a flat image at the mean of the
/// grey image, rounded (`int(mean + 0.5)`).
pub fn contrast(image: &mut [u8], shape: ImageShape, factor: f64, grey: &mut Vec<u8>) {
    grey.resize(shape.plane(), 0);
    grey_plane(image, shape, grey);
    let sum: u64 = grey.iter().map(|&v| v as u64).sum();
    let mean = (sum as f64 / shape.plane().max(1) as f64 + 0.5) as i64 as u8;
    blend_into(&mut image[..shape.len()], factor, |_| mean);
}

/// `ImageEnhance.Color(img).enhance(factor)`: a blend with the image's grey version (a no-op
/// on grey images, as in Pillow).
pub fn saturation(image: &mut [u8], shape: ImageShape, factor: f64, grey: &mut Vec<u8>) {
    if shape.channels == 1 {
        return;
    }
    grey.resize(shape.plane(), 0);
    grey_plane(image, shape, grey);
    let n = shape.plane();
    blend_into(&mut image[..shape.len()], factor, |i| grey[i % n]);
}

/// Pillow's `rgb2hsv_row` (Convert.c), float and double exactly where its C code has them.
fn rgb_to_hsv(r: u8, g: u8, b: u8) -> (u8, u8, u8) {
    let maxc = r.max(g).max(b);
    let minc = r.min(g).min(b);
    if maxc == minc {
        return (0, 0, maxc);
    }
    let cr = (maxc - minc) as f32;
    let s = cr / maxc as f32;
    let rc = (maxc - r) as f32 / cr;
    let gc = (maxc - g) as f32 / cr;
    let bc = (maxc - b) as f32 / cr;
    let h: f32 = if r == maxc {
        bc - gc
    } else if g == maxc {
        (2.0 + rc as f64 - bc as f64) as f32
    } else {
        (4.0 + gc as f64 - rc as f64) as f32
    };
    let h = ((h as f64 / 6.0 + 1.0) % 1.0) as f32;
    let clip8 = |v: f64| (v as i32).clamp(0, 255) as u8;
    (clip8(h as f64 * 255.0), clip8(s as f64 * 255.0), maxc)
}

/// Pillow's `hsv2rgb` (Convert.c).
fn hsv_to_rgb(h: u8, s: u8, v: u8) -> (u8, u8, u8) {
    if s == 0 {
        return (v, v, v);
    }
    let hf = h as f32 as f64 * 6.0 / 255.0;
    let i = hf.floor() as i32;
    let f = (hf - i as f32 as f64) as f32;
    let fs = (s as f32 as f64 / 255.0) as f32;
    let vf = v as f32 as f64;
    let clip8 = |x: f64| (x.round() as i32).clamp(0, 255) as u8;
    let p = clip8(vf * (1.0 - fs as f64));
    let q = clip8(vf * (1.0 - fs as f64 * f as f64));
    let t = clip8(vf * (1.0 - fs as f64 * (1.0 - f as f64)));
    match i % 6 {
        0 => (v, t, p),
        1 => (q, v, p),
        2 => (p, v, t),
        3 => (p, q, v),
        4 => (t, p, v),
        _ => (v, p, q),
    }
}

/// torchvision's `adjust_hue` on a PIL image: to HSV, `h += int8(factor·255)` wrapping, back
/// to RGB. Grey images are returned as they are.
pub fn hue(image: &mut [u8], shape: ImageShape, factor: f64) {
    if shape.channels != 3 {
        return;
    }
    // np.int8(factor * 255): truncation toward zero, then the byte's bits.
    let shift = (factor * 255.0) as i8 as u8;
    let n = shape.plane();
    let (r, rest) = image[..shape.len()].split_at_mut(n);
    let (g, b) = rest.split_at_mut(n);
    for ((r, g), b) in r.iter_mut().zip(g.iter_mut()).zip(b.iter_mut()) {
        let (h, s, v) = rgb_to_hsv(*r, *g, *b);
        (*r, *g, *b) = hsv_to_rgb(h.wrapping_add(shift), s, v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luma_of_primaries_and_grey() {
        assert_eq!(luma(255, 255, 255), 255);
        assert_eq!(luma(0, 0, 0), 0);
        // Pillow: Image.new("RGB", (1, 1), (255, 0, 0)).convert("L").getpixel((0, 0)) == 76
        assert_eq!(luma(255, 0, 0), 76);
        assert_eq!(luma(0, 255, 0), 150);
        assert_eq!(luma(0, 0, 255), 29);
    }

    #[test]
    fn hsv_round_trip_keeps_greys() {
        for v in [0u8, 1, 77, 255] {
            assert_eq!(hsv_to_rgb(rgb_to_hsv(v, v, v).0, 0, v), (v, v, v));
        }
    }
}
