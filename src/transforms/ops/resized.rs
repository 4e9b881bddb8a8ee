//! RandomResizedCrop and Resize: torchvision's parameters, Pillow's bilinear resize
//! ([`crate::transforms::crop_resize`]).

use serde::{Deserialize, Serialize};

use super::{Op, PixelOp, Reaching, Size, TorchvisionCall};
use crate::hash::SplitMix64;
use crate::shape::ImageShape;
use crate::transforms::{CropBox, OpParams, ResizeScratch, SampleParams, Scratch};
use crate::transforms::{crop_resize, sample_crop};

/// torchvision `RandomResizedCrop(size, scale, ratio)`, bilinear resize.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomResizedCropSpec {
    /// Output size in pixels: a square side or `[height, width]`.
    pub size: Size,
    /// Range of the crop's area as a fraction of the image.
    pub scale: [f64; 2],
    /// Range of the crop's aspect ratio (width / height), sampled log-uniformly.
    pub ratio: [f64; 2],
}

impl Default for RandomResizedCropSpec {
    fn default() -> Self {
        RandomResizedCropSpec {
            size: Size::Side(28),
            scale: [0.08, 1.0],
            ratio: [3.0 / 4.0, 4.0 / 3.0],
        }
    }
}

impl Op for RandomResizedCropSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(
            TorchvisionCall::new("RandomResizedCrop")
                .arg("size", self.size)
                .arg("scale", self.scale)
                .arg("ratio", self.ratio)
                .arg("interpolation", "bilinear"),
        )
    }
    fn name(&self) -> &'static str {
        "random_resized_crop"
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        self.size.check(bad);
        let [lo, hi] = self.scale;
        if !(lo > 0.0 && hi <= 1.0 && lo <= hi) {
            bad(
                "scale",
                format!(
                    "expected 0 < low ≤ high ≤ 1 (fractions of the image area), found [{lo}, {hi}]"
                ),
            );
        }
        let [lo, hi] = self.ratio;
        if !(lo > 0.0 && lo <= hi) {
            bad(
                "ratio",
                format!("expected 0 < low ≤ high (aspect ratios), found [{lo}, {hi}]"),
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
        Some(Box::new(ResizedCrop {
            size: self.size.fixed(),
            scale: self.scale,
            ratio: self.ratio,
        }))
    }

    fn in_pillow_chain(&self) -> bool {
        true
    }
}

/// A compiled RandomResizedCrop.
#[derive(Debug, Clone)]
pub struct ResizedCrop {
    size: (usize, usize),
    scale: [f64; 2],
    ratio: [f64; 2],
}

impl ResizedCrop {
    /// The box this sample's draws give for an image of `shape`, recorded in `params`.
    pub(crate) fn draw(
        &self,
        rng: &mut SplitMix64,
        shape: ImageShape,
        params: &mut SampleParams,
    ) -> CropBox {
        let cb = self.draw_box(rng, shape);
        params.ops.push(OpParams::RandomResizedCrop(cb));
        cb
    }

    /// The box alone (no record): what a reader decodes when this op comes first.
    pub(crate) fn draw_box(&self, rng: &mut SplitMix64, shape: ImageShape) -> CropBox {
        sample_crop(rng, shape.width, shape.height, self.scale, self.ratio)
    }

    /// The op on `src`, only the crop `region` of an `input`-shaped image: it draws its box as
    /// on the whole image (the same random numbers; the box is `region`) and resizes `src`
    /// whole into `s.a`.
    pub(crate) fn apply_region(
        &self,
        src: &[u8],
        input: ImageShape,
        region: CropBox,
        rng: &mut SplitMix64,
        s: &mut Scratch,
    ) -> ImageShape {
        let cb = self.draw(rng, input, &mut s.params);
        assert_eq!(
            cb, region,
            "the region read is not the crop this sample draws"
        );
        let cropped = input.with_size(cb.height, cb.width);
        resize_planes(
            src,
            cropped,
            CropBox::whole(cropped),
            self.size,
            &mut s.a,
            &mut s.resize,
        )
    }
}

impl PixelOp for ResizedCrop {
    fn apply(&self, shape: ImageShape, rng: &mut SplitMix64, s: &mut Scratch) -> ImageShape {
        let cb = self.draw(rng, shape, &mut s.params);
        let out = resize_planes(&s.a, shape, cb, self.size, &mut s.b, &mut s.resize);
        std::mem::swap(&mut s.a, &mut s.b);
        out
    }

    fn as_resized_crop(&self) -> Option<&ResizedCrop> {
        Some(self)
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("random_resized_crop")
    }
}

/// torchvision `Resize(size, max_size)`, bilinear with Pillow's antialiasing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResizeSpec {
    /// One number: the shorter side, the aspect ratio kept; `[height, width]`: exactly that.
    pub size: Size,
    /// With one number: the longer side's limit (0: none), as torchvision's `max_size`.
    pub max_size: u64,
}

impl Default for ResizeSpec {
    fn default() -> Self {
        ResizeSpec {
            size: Size::Side(256),
            max_size: 0,
        }
    }
}

impl Op for ResizeSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(
            TorchvisionCall::new("Resize")
                .arg("size", self.size)
                .arg("interpolation", "bilinear")
                .arg("max_size", (self.max_size > 0).then_some(self.max_size)),
        )
    }
    fn name(&self) -> &'static str {
        "resize"
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        self.size.check(bad);
        if self.max_size > 0 {
            match self.size {
                Size::Pair(_) => bad(
                    "max_size",
                    "max_size applies only when size is one number (the shorter side)".into(),
                ),
                Size::Side(s) if self.max_size <= s => bad(
                    "max_size",
                    format!("expected more than size ({s}), found {}", self.max_size),
                ),
                _ => {}
            }
        }
    }

    fn output(&self, input: ImageShape) -> ImageShape {
        let (h, w) = resize_output(input.height, input.width, self.size, self.max_size);
        input.with_size(h, w)
    }

    fn sets_size(&self) -> bool {
        matches!(self.size, Size::Pair(_))
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        Some(Box::new(Resize {
            size: self.size,
            max_size: self.max_size,
        }))
    }
}

/// A compiled Resize.
#[derive(Debug, Clone)]
struct Resize {
    size: Size,
    max_size: u64,
}

impl PixelOp for Resize {
    fn apply(&self, shape: ImageShape, _: &mut SplitMix64, s: &mut Scratch) -> ImageShape {
        let to = resize_output(shape.height, shape.width, self.size, self.max_size);
        let out = resize_planes(
            &s.a,
            shape,
            CropBox::whole(shape),
            to,
            &mut s.b,
            &mut s.resize,
        );
        std::mem::swap(&mut s.a, &mut s.b);
        out
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("resize")
    }
}

/// torchvision's `Resize` output (height, width) for a `height`×`width` image: one number is
/// the shorter side (the longer one scaled and truncated, as `int(size * long / short)`),
/// capped by `max_size` (0: no cap) on the longer side.
pub fn resize_output(height: usize, width: usize, size: Size, max_size: u64) -> (usize, usize) {
    let Size::Side(side) = size else {
        return size.fixed();
    };
    if height == 0 || width == 0 {
        // An image of unknown size (an image folder's): the output's size is unknown too.
        return (0, 0);
    }
    let (short, long) = (height.min(width), height.max(width));
    let mut new_short = side as usize;
    let mut new_long = (side as f64 * long as f64 / short.max(1) as f64) as usize;
    if max_size > 0 && new_long > max_size as usize {
        new_short = (max_size as f64 * new_short as f64 / new_long as f64) as usize;
        new_long = max_size as usize;
    }
    if width <= height {
        (new_long, new_short)
    } else {
        (new_short, new_long)
    }
}

/// Crop `cb` of every plane of `src` and resize it to `size` (height, width) into `dst`.
fn resize_planes(
    src: &[u8],
    shape: ImageShape,
    cb: CropBox,
    (oh, ow): (usize, usize),
    dst: &mut Vec<u8>,
    resize: &mut ResizeScratch,
) -> ImageShape {
    let out = shape.with_size(oh, ow);
    dst.resize(out.len(), 0);
    for c in 0..shape.channels {
        let plane = &mut dst[c * out.plane()..][..out.plane()];
        crop_resize(
            &src[c * shape.plane()..],
            shape.width,
            cb,
            ow,
            oh,
            plane,
            resize,
        );
    }
    out
}
