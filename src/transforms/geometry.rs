//! Flips, padding and crops on planar images, as torchvision does them to PIL images: flips
//! are Pillow's `transpose`, constant padding pastes the image onto a filled canvas, and the
//! edge / reflect / symmetric modes are numpy's `np.pad` (torchvision's PIL path uses it).
//! All of them move whole pixels, so every channel plane is treated alike.

use crate::shape::{ImageShape, Padding};

/// Mirror each row (`FLIP_LEFT_RIGHT`) of every plane.
pub fn flip_horizontal(src: &[u8], shape: ImageShape, dst: &mut [u8]) {
    let w = shape.width;
    for (row, out) in src[..shape.len()]
        .chunks_exact(w)
        .zip(dst[..shape.len()].chunks_exact_mut(w))
    {
        for (o, v) in out.iter_mut().zip(row.iter().rev()) {
            *o = *v;
        }
    }
}

/// Reverse the row order (`FLIP_TOP_BOTTOM`) of every plane.
pub fn flip_vertical(src: &[u8], shape: ImageShape, dst: &mut [u8]) {
    let (w, h) = (shape.width, shape.height);
    for c in 0..shape.channels {
        let plane = &src[c * shape.plane()..][..shape.plane()];
        let out = &mut dst[c * shape.plane()..][..shape.plane()];
        for y in 0..h {
            out[y * w..][..w].copy_from_slice(&plane[(h - 1 - y) * w..][..w]);
        }
    }
}

/// torchvision's `padding_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// The `fill` value.
    Constant,
    /// The last pixel repeated.
    Edge,
    /// Mirrored without repeating the edge pixel: `3 2 | 1 2 3 | 2 1`.
    Reflect,
    /// Mirrored with the edge pixel repeated: `2 1 | 1 2 3 | 3 2`.
    Symmetric,
}

/// numpy's index for position `i` (may be outside `0..n`) of an axis of length `n`.
fn source_index(i: isize, n: usize, mode: PadMode) -> usize {
    let n = n as isize;
    let at = match mode {
        PadMode::Constant | PadMode::Edge => i.clamp(0, n - 1),
        PadMode::Reflect if n == 1 => 0,
        PadMode::Reflect => {
            let period = 2 * (n - 1);
            let k = i.rem_euclid(period);
            if k < n { k } else { period - k }
        }
        PadMode::Symmetric => {
            let period = 2 * n;
            let k = i.rem_euclid(period);
            if k < n { k } else { period - 1 - k }
        }
    };
    at as usize
}

/// Pad every plane of `src` into `dst` (shape `pad.apply_to(shape)`).
pub fn pad(src: &[u8], shape: ImageShape, pad: Padding, mode: PadMode, fill: u8, dst: &mut [u8]) {
    let out = pad.apply_to(shape);
    let (w, h) = (shape.width, shape.height);
    let columns: Vec<usize> = (0..out.width)
        .map(|x| source_index(x as isize - pad.left as isize, w, mode))
        .collect();
    for c in 0..shape.channels {
        let plane = &src[c * shape.plane()..][..shape.plane()];
        let dst = &mut dst[c * out.plane()..][..out.plane()];
        for y in 0..out.height {
            let row = &mut dst[y * out.width..][..out.width];
            let sy = y as isize - pad.top as isize;
            let inside_y = (0..h as isize).contains(&sy);
            if mode == PadMode::Constant {
                row.fill(fill);
                if inside_y {
                    row[pad.left..pad.left + w].copy_from_slice(&plane[sy as usize * w..][..w]);
                }
                continue;
            }
            let src_row = &plane[source_index(sy, h, mode) * w..][..w];
            for (o, &x) in row.iter_mut().zip(&columns) {
                *o = src_row[x];
            }
        }
    }
}

/// Copy the `height`×`width` window at (`top`, `left`) of every plane (`Image.crop` inside the
/// image).
pub fn crop(
    src: &[u8],
    shape: ImageShape,
    top: usize,
    left: usize,
    height: usize,
    width: usize,
    dst: &mut [u8],
) {
    let out = shape.with_size(height, width);
    for c in 0..shape.channels {
        let plane = &src[c * shape.plane()..][..shape.plane()];
        let dst = &mut dst[c * out.plane()..][..out.plane()];
        for y in 0..height {
            dst[y * width..][..width]
                .copy_from_slice(&plane[(top + y) * shape.width + left..][..width]);
        }
    }
}

/// torchvision's `center_crop` geometry for a `height`×`width` crop: the zero padding that
/// makes the image large enough (when it is smaller), then the crop's top-left corner in the
/// padded image.
pub fn center_crop_geometry(
    shape: ImageShape,
    height: usize,
    width: usize,
) -> (Padding, usize, usize) {
    let (w, h) = (shape.width, shape.height);
    let mut padding = Padding::default();
    if width > w || height > h {
        let grow = |want: usize, have: usize| want.saturating_sub(have);
        padding = Padding {
            left: grow(width, w) / 2,
            top: grow(height, h) / 2,
            right: grow(width, w).div_ceil(2),
            bottom: grow(height, h).div_ceil(2),
        };
    }
    let padded = padding.apply_to(shape);
    // int(round((h - ch) / 2.0)): Python rounds half to even.
    let corner = |have: usize, want: usize| ((have - want) as f64 / 2.0).round_ties_even() as usize;
    (
        padding,
        corner(padded.height, height),
        corner(padded.width, width),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_padding_modes_on_one_row() {
        let shape = ImageShape::new(1, 1, 3);
        let src = [1u8, 2, 3];
        let p = Padding {
            left: 4,
            right: 4,
            ..Padding::default()
        };
        let mut out = [0u8; 11];
        let mut with = |mode| {
            pad(&src, shape, p, mode, 9, &mut out);
            out
        };
        // np.pad([1, 2, 3], 4, mode) for each mode.
        assert_eq!(with(PadMode::Constant), [9, 9, 9, 9, 1, 2, 3, 9, 9, 9, 9]);
        assert_eq!(with(PadMode::Edge), [1, 1, 1, 1, 1, 2, 3, 3, 3, 3, 3]);
        assert_eq!(with(PadMode::Reflect), [1, 2, 3, 2, 1, 2, 3, 2, 1, 2, 3]);
        assert_eq!(with(PadMode::Symmetric), [3, 3, 2, 1, 1, 2, 3, 3, 2, 1, 1]);
    }
}
