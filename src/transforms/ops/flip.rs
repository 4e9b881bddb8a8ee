//! RandomHorizontalFlip and RandomVerticalFlip: a coin with probability `p`, then a mirror.

use serde::{Deserialize, Serialize};

use super::{Op, PixelOp, Reaching, TorchvisionCall, check_probability, coin};
use crate::hash::SplitMix64;
use crate::shape::ImageShape;
use crate::transforms::{OpParams, Scratch, flip_horizontal, flip_vertical};

/// What a random flip drew: whether it flipped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlipDrawn {
    pub flipped: bool,
}

/// torchvision `RandomHorizontalFlip(p)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomHorizontalFlipSpec {
    /// Probability of flipping.
    pub p: f64,
}

/// torchvision `RandomVerticalFlip(p)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomVerticalFlipSpec {
    /// Probability of flipping.
    pub p: f64,
}

impl Default for RandomHorizontalFlipSpec {
    fn default() -> Self {
        RandomHorizontalFlipSpec { p: 0.5 }
    }
}

impl Default for RandomVerticalFlipSpec {
    fn default() -> Self {
        RandomVerticalFlipSpec { p: 0.5 }
    }
}

impl Op for RandomHorizontalFlipSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(TorchvisionCall::new("RandomHorizontalFlip").arg("p", self.p))
    }
    fn name(&self) -> &'static str {
        "random_horizontal_flip"
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        check_probability(self.p, bad);
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        Some(Box::new(Flip {
            p: self.p,
            vertical: false,
        }))
    }

    fn in_pillow_chain(&self) -> bool {
        true
    }
}

impl Op for RandomVerticalFlipSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(TorchvisionCall::new("RandomVerticalFlip").arg("p", self.p))
    }
    fn name(&self) -> &'static str {
        "random_vertical_flip"
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        check_probability(self.p, bad);
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        Some(Box::new(Flip {
            p: self.p,
            vertical: true,
        }))
    }
}

#[derive(Debug, Clone)]
struct Flip {
    p: f64,
    vertical: bool,
}

impl PixelOp for Flip {
    fn apply(&self, shape: ImageShape, rng: &mut SplitMix64, s: &mut Scratch) -> ImageShape {
        let flipped = coin(rng, self.p);
        s.params.ops.push(if self.vertical {
            OpParams::RandomVerticalFlip(FlipDrawn { flipped })
        } else {
            OpParams::RandomHorizontalFlip(FlipDrawn { flipped })
        });
        if !flipped {
            return shape;
        }
        s.b.resize(shape.len(), 0);
        if self.vertical {
            flip_vertical(&s.a, shape, &mut s.b);
        } else {
            flip_horizontal(&s.a, shape, &mut s.b);
        }
        std::mem::swap(&mut s.a, &mut s.b);
        shape
    }

    fn span(&self) -> tracing::Span {
        if self.vertical {
            tracing::info_span!("random_vertical_flip")
        } else {
            tracing::info_span!("random_horizontal_flip")
        }
    }
}
