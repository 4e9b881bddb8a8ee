//! CenterCrop and RandomCrop (with torchvision's padding modes).

use serde::{Deserialize, Serialize};

use super::{Op, PixelOp, Reaching, Size, TorchvisionCall};
use crate::hash::SplitMix64;
use crate::shape::{ImageShape, Padding};
use crate::transforms::{OpParams, PadMode, Scratch, center_crop_geometry, crop, pad};

/// What a random_crop drew: the crop's corner in the padded image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RandomCropDrawn {
    pub top: usize,
    pub left: usize,
}

/// torchvision `CenterCrop(size)`; an image smaller than the crop is padded with 0 first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CenterCropSpec {
    pub size: Size,
}

impl Default for CenterCropSpec {
    fn default() -> Self {
        CenterCropSpec {
            size: Size::Side(224),
        }
    }
}

impl Op for CenterCropSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(TorchvisionCall::new("CenterCrop").arg("size", self.size))
    }
    fn name(&self) -> &'static str {
        "center_crop"
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        self.size.check(bad);
    }

    fn output(&self, input: ImageShape) -> ImageShape {
        self.size.of(input)
    }

    fn sets_size(&self) -> bool {
        true
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        Some(Box::new(CenterCrop {
            size: self.size.fixed(),
        }))
    }
}

#[derive(Debug, Clone)]
struct CenterCrop {
    size: (usize, usize),
}

impl PixelOp for CenterCrop {
    fn apply(&self, shape: ImageShape, _: &mut SplitMix64, s: &mut Scratch) -> ImageShape {
        let (padding, top, left) = center_crop_geometry(shape, self.size.0, self.size.1);
        let padded = pad_into(&mut s.a, &mut s.b, shape, padding, PadMode::Constant, 0);
        let out = crop_into(&s.a, &mut s.b, padded, top, left, self.size);
        std::mem::swap(&mut s.a, &mut s.b);
        out
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("center_crop")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaddingMode {
    Constant,
    Edge,
    Reflect,
    Symmetric,
}

/// A list of numbers, or one number read as a list of one (torchvision's `padding = 4`).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(u64),
        Many(Vec<u64>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(v) => vec![v],
        OneOrMany::Many(v) => v,
    })
}

/// torchvision `RandomCrop(size, padding, pad_if_needed, fill, padding_mode)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomCropSpec {
    pub size: Size,
    /// Pixels added before cropping: one number (every side), `[left/right, top/bottom]` or
    /// `[left, top, right, bottom]`; empty or 0: none.
    #[serde(deserialize_with = "one_or_many")]
    pub padding: Vec<u64>,
    /// Pad an image smaller than the crop (after `padding`) up to its size.
    pub pad_if_needed: bool,
    /// Value of constant padding (0–255, every channel).
    pub fill: u8,
    pub padding_mode: PaddingMode,
}

impl Default for RandomCropSpec {
    fn default() -> Self {
        RandomCropSpec {
            size: Size::Side(32),
            padding: Vec::new(),
            pad_if_needed: false,
            fill: 0,
            padding_mode: PaddingMode::Constant,
        }
    }
}

impl Op for RandomCropSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(
            TorchvisionCall::new("RandomCrop")
                .arg("size", self.size)
                .arg(
                    "padding",
                    (!self.padding.is_empty()).then_some(&self.padding),
                )
                .arg("pad_if_needed", self.pad_if_needed)
                .arg("fill", self.fill)
                .arg("padding_mode", self.padding_mode),
        )
    }
    fn name(&self) -> &'static str {
        "random_crop"
    }

    fn check(&self, reaching: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        self.size.check(bad);
        let (th, tw) = self.size.fixed();
        let p = Padding::from_values(&self.padding);
        let input = reaching.shape;
        let (h, w) = (
            input.height + p.top + p.bottom,
            input.width + p.left + p.right,
        );
        if !self.pad_if_needed && !input.is_empty() && (th > h || tw > w) {
            bad(
                "size",
                format!(
                    "the crop ({th}×{tw}) is larger than the image it gets ({h}×{w} after \
                     padding); set pad_if_needed = true or a smaller size"
                ),
            );
        }
        if !matches!(self.padding.len(), 0 | 1 | 2 | 4) {
            bad(
                "padding",
                format!(
                    "expected one number, [left/right, top/bottom] or [left, top, right, \
                     bottom], found {} values",
                    self.padding.len()
                ),
            );
        }
    }

    fn output(&self, input: ImageShape) -> ImageShape {
        self.size.of(input)
    }

    fn sets_size(&self) -> bool {
        true
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        Some(Box::new(RandomCrop {
            size: self.size.fixed(),
            padding: Padding::from_values(&self.padding),
            pad_if_needed: self.pad_if_needed,
            fill: self.fill,
            mode: match self.padding_mode {
                PaddingMode::Constant => PadMode::Constant,
                PaddingMode::Edge => PadMode::Edge,
                PaddingMode::Reflect => PadMode::Reflect,
                PaddingMode::Symmetric => PadMode::Symmetric,
            },
        }))
    }
}

#[derive(Debug, Clone)]
struct RandomCrop {
    size: (usize, usize),
    padding: Padding,
    pad_if_needed: bool,
    fill: u8,
    mode: PadMode,
}

impl PixelOp for RandomCrop {
    fn apply(&self, shape: ImageShape, rng: &mut SplitMix64, s: &mut Scratch) -> ImageShape {
        let (a, b) = (&mut s.a, &mut s.b);
        let mut padded = pad_into(a, b, shape, self.padding, self.mode, self.fill);
        if self.pad_if_needed {
            // torchvision pads both sides by the whole shortfall.
            let grow_w = self.size.1.saturating_sub(padded.width);
            let grow_h = self.size.0.saturating_sub(padded.height);
            let more = Padding {
                left: grow_w,
                right: grow_w,
                top: grow_h,
                bottom: grow_h,
            };
            padded = pad_into(a, b, padded, more, self.mode, self.fill);
        }
        let (th, tw) = self.size;
        let (top, left) = if padded.height == th && padded.width == tw {
            (0, 0)
        } else {
            let top = rand::Rng::random_range(rng, 0..=padded.height - th);
            let left = rand::Rng::random_range(rng, 0..=padded.width - tw);
            (top, left)
        };
        s.params
            .ops
            .push(OpParams::RandomCrop(RandomCropDrawn { top, left }));
        let out = crop_into(&s.a, &mut s.b, padded, top, left, self.size);
        std::mem::swap(&mut s.a, &mut s.b);
        out
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("random_crop")
    }
}

/// Pad `a` in place (through `b`); returns the padded shape. No padding: no copy.
fn pad_into(
    a: &mut Vec<u8>,
    b: &mut Vec<u8>,
    shape: ImageShape,
    padding: Padding,
    mode: PadMode,
    fill: u8,
) -> ImageShape {
    if padding.is_zero() {
        return shape;
    }
    let out = padding.apply_to(shape);
    b.resize(out.len(), 0);
    pad(a, shape, padding, mode, fill, b);
    std::mem::swap(a, b);
    out
}

/// The `size` window at (top, left) of `a` into `b`.
fn crop_into(
    a: &[u8],
    b: &mut Vec<u8>,
    shape: ImageShape,
    top: usize,
    left: usize,
    (height, width): (usize, usize),
) -> ImageShape {
    let out = shape.with_size(height, width);
    b.resize(out.len(), 0);
    crop(a, shape, top, left, height, width, b);
    out
}
