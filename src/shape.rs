//! The shape of an 8-bit image as it flows through the pipeline: channels × height × width.
//!
//! Invariant: pixels are stored planar (CHW), one full plane per channel, row-major inside a
//! plane. Every pixel op of the pipeline then works one plane at a time with the same integer
//! arithmetic Pillow applies to each band of an L or RGB image, and `to_tensor` writes torch's
//! CHW layout with no transpose. Datasets that decode interleaved pixels (HWC) split them once.
//! Grey from colour is Pillow's `convert("L")` ([`luma`]), for decoders and transforms alike.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ImageShape {
    pub channels: usize,
    pub height: usize,
    pub width: usize,
}

impl ImageShape {
    pub const fn new(channels: usize, height: usize, width: usize) -> Self {
        ImageShape {
            channels,
            height,
            width,
        }
    }

    /// FashionMNIST's and MNIST's 28×28 grey images.
    pub const GREY_28: ImageShape = ImageShape::new(1, 28, 28);

    /// Pixels of one plane.
    pub const fn plane(&self) -> usize {
        self.height * self.width
    }

    /// Bytes (or floats) of the whole image.
    pub const fn len(&self) -> usize {
        self.channels * self.height * self.width
    }

    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same image size with another channel count.
    pub const fn with_channels(self, channels: usize) -> Self {
        ImageShape { channels, ..self }
    }

    /// Another size, the same channels.
    pub const fn with_size(self, height: usize, width: usize) -> Self {
        ImageShape {
            height,
            width,
            ..self
        }
    }
}

impl std::fmt::Display for ImageShape {
    /// "3×32×32" (channels × height × width, torch's order).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}×{}×{}", self.channels, self.height, self.width)
    }
}

/// Padding in pixels: left, top, right, bottom.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Padding {
    pub left: usize,
    pub top: usize,
    pub right: usize,
    pub bottom: usize,
}

impl Padding {
    /// torchvision's forms: one value for every side, two for (left/right, top/bottom), four
    /// for (left, top, right, bottom).
    pub fn from_values(v: &[u64]) -> Padding {
        let v: Vec<usize> = v.iter().map(|&x| x as usize).collect();
        match v.as_slice() {
            [] => Padding::default(),
            [a] => Padding {
                left: *a,
                top: *a,
                right: *a,
                bottom: *a,
            },
            [lr, tb] => Padding {
                left: *lr,
                top: *tb,
                right: *lr,
                bottom: *tb,
            },
            // Three values are refused at validate time; read as (left, top, right).
            [l, t, r] => Padding {
                left: *l,
                top: *t,
                right: *r,
                bottom: 0,
            },
            [l, t, r, b, ..] => Padding {
                left: *l,
                top: *t,
                right: *r,
                bottom: *b,
            },
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == Padding::default()
    }

    /// The padded shape.
    pub fn apply_to(&self, shape: ImageShape) -> ImageShape {
        shape.with_size(
            shape.height + self.top + self.bottom,
            shape.width + self.left + self.right,
        )
    }
}

/// Pillow's `rgb2l`: `(R·19595 + G·38470 + B·7471 + 0x8000) >> 16`.
pub fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((r as u32 * 19595 + g as u32 * 38470 + b as u32 * 7471 + 0x8000) >> 16) as u8
}
