//! RandomRotation: an angle drawn from [-degrees, degrees], Pillow's nearest-neighbour
//! rotation ([`crate::transforms::rotate_nearest`]).

use serde::{Deserialize, Serialize};

use super::{Op, PixelOp, Reaching, TorchvisionCall};
use crate::hash::SplitMix64;
use crate::shape::ImageShape;
use crate::transforms::{OpParams, Scratch, rotate_nearest, uniform};

/// What a random_rotation drew: the angle in degrees.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RotationDrawn {
    pub angle: f64,
}

/// torchvision `RandomRotation(degrees)`: angle uniform in [-degrees, degrees], nearest
/// neighbour, same size, about the centre.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RandomRotationSpec {
    pub degrees: f64,
    /// Grey level (0–255) of the corners uncovered by the rotation.
    pub fill: u8,
}

impl Default for RandomRotationSpec {
    fn default() -> Self {
        RandomRotationSpec {
            degrees: 15.0,
            fill: 0,
        }
    }
}

impl Op for RandomRotationSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(
            TorchvisionCall::new("RandomRotation")
                .arg("degrees", self.degrees)
                .arg("interpolation", "nearest")
                .arg("fill", self.fill),
        )
    }
    fn name(&self) -> &'static str {
        "random_rotation"
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        if !(0.0..=180.0).contains(&self.degrees) {
            bad(
                "degrees",
                format!(
                    "expected 0 to 180 (the angle is drawn from [-degrees, degrees]), found {}",
                    self.degrees
                ),
            );
        }
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        Some(Box::new(Rotate {
            degrees: self.degrees,
            fill: self.fill,
        }))
    }
}

#[derive(Debug, Clone)]
struct Rotate {
    degrees: f64,
    fill: u8,
}

impl PixelOp for Rotate {
    fn apply(&self, shape: ImageShape, rng: &mut SplitMix64, s: &mut Scratch) -> ImageShape {
        let angle = uniform(rng, -self.degrees, self.degrees);
        let (w, h, plane) = (shape.width, shape.height, shape.plane());
        s.b.resize(shape.len(), 0);
        // Slack after the image lets the rotation gather 4 bytes at a time.
        s.a.resize(shape.len() + 3, 0);
        for c in 0..shape.channels {
            let dst = &mut s.b[c * plane..][..plane];
            rotate_nearest(&s.a[c * plane..], w, h, angle, self.fill, dst);
        }
        s.params
            .ops
            .push(OpParams::RandomRotation(RotationDrawn { angle }));
        std::mem::swap(&mut s.a, &mut s.b);
        shape
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("random_rotation")
    }
}
