//! Grayscale and RandomGrayscale: PIL's `convert("L")` (ITU-R 601-2 luma), repeated to the
//! channel count asked for.

use serde::{Deserialize, Serialize};

use super::{Op, PixelOp, Reaching, TorchvisionCall, check_probability, coin};
use crate::hash::SplitMix64;
use crate::shape::ImageShape;
use crate::transforms::{OpParams, Scratch, grey_plane};

/// What a random_grayscale drew: whether it applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GreyDrawn {
    pub applied: bool,
}

/// torchvision `Grayscale(num_output_channels)`: PIL's `convert("L")`, repeated to 3
/// channels when asked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrayscaleSpec {
    pub num_output_channels: u64,
}

impl Default for GrayscaleSpec {
    fn default() -> Self {
        GrayscaleSpec {
            num_output_channels: 1,
        }
    }
}

impl Op for GrayscaleSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(TorchvisionCall::new("Grayscale").arg("num_output_channels", self.num_output_channels))
    }
    fn name(&self) -> &'static str {
        "grayscale"
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        if !matches!(self.num_output_channels, 1 | 3) {
            bad(
                "num_output_channels",
                format!("expected 1 or 3, found {}", self.num_output_channels),
            );
        }
    }

    fn output(&self, input: ImageShape) -> ImageShape {
        input.with_channels(self.num_output_channels as usize)
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        Some(Box::new(Grayscale {
            channels: self.num_output_channels as usize,
        }))
    }
}

#[derive(Debug, Clone)]
struct Grayscale {
    channels: usize,
}

impl PixelOp for Grayscale {
    fn apply(&self, shape: ImageShape, _: &mut SplitMix64, s: &mut Scratch) -> ImageShape {
        to_grey(s, shape, self.channels)
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("grayscale")
    }
}

/// torchvision `RandomGrayscale(p)`: grey with probability `p`, the channel count kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomGrayscaleSpec {
    pub p: f64,
}

impl Default for RandomGrayscaleSpec {
    fn default() -> Self {
        RandomGrayscaleSpec { p: 0.1 }
    }
}

impl Op for RandomGrayscaleSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(TorchvisionCall::new("RandomGrayscale").arg("p", self.p))
    }
    fn name(&self) -> &'static str {
        "random_grayscale"
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        check_probability(self.p, bad);
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        Some(Box::new(RandomGrayscale { p: self.p }))
    }
}

#[derive(Debug, Clone)]
struct RandomGrayscale {
    p: f64,
}

impl PixelOp for RandomGrayscale {
    fn apply(&self, shape: ImageShape, rng: &mut SplitMix64, s: &mut Scratch) -> ImageShape {
        let applied = coin(rng, self.p);
        s.params
            .ops
            .push(OpParams::RandomGrayscale(GreyDrawn { applied }));
        if !applied {
            return shape;
        }
        to_grey(s, shape, shape.channels)
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("random_grayscale")
    }
}

/// `convert("L")` of `s.a`, repeated to `channels` planes, into `s.a`.
fn to_grey(s: &mut Scratch, shape: ImageShape, channels: usize) -> ImageShape {
    let out = shape.with_channels(channels);
    s.grey.resize(shape.plane(), 0);
    grey_plane(&s.a, shape, &mut s.grey);
    s.b.clear();
    for _ in 0..channels {
        s.b.extend_from_slice(&s.grey);
    }
    std::mem::swap(&mut s.a, &mut s.b);
    out
}
