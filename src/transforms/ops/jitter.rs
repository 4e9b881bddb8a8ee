//! ColorJitter: brightness, contrast, saturation and hue factors drawn per sample, applied in
//! a random order, with Pillow's `ImageEnhance` arithmetic ([`crate::transforms::brightness`]
//! and its neighbours).

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

use super::{Op, PixelOp, Reaching, TorchvisionCall};
use crate::hash::SplitMix64;
use crate::shape::ImageShape;
use crate::transforms::{OpParams, Scratch, brightness, contrast, hue, saturation, uniform};

/// What a color_jitter drew: the factors (absent: that adjustment is off) and the order they
/// were applied in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JitterDrawn {
    pub order: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub brightness: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub contrast: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub saturation: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hue: Option<f64>,
}

/// torchvision `ColorJitter(brightness, contrast, saturation, hue)`: each factor drawn from
/// [max(0, 1 − v), 1 + v] (hue from [−v, v]), applied in a random order; 0 disables one.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ColorJitterSpec {
    pub brightness: f64,
    pub contrast: f64,
    pub saturation: f64,
    /// At most 0.5.
    pub hue: f64,
}

/// ColorJitter's four adjustments, in torchvision's numbering (its `fn_idx`).
const JITTER_NAMES: [&str; 4] = ["brightness", "contrast", "saturation", "hue"];

impl Op for ColorJitterSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(
            TorchvisionCall::new("ColorJitter")
                .arg("brightness", self.brightness)
                .arg("contrast", self.contrast)
                .arg("saturation", self.saturation)
                .arg("hue", self.hue),
        )
    }
    fn name(&self) -> &'static str {
        "color_jitter"
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        for (key, v) in [
            ("brightness", self.brightness),
            ("contrast", self.contrast),
            ("saturation", self.saturation),
        ] {
            if !v.is_finite() || v < 0.0 {
                bad(key, format!("expected a value ≥ 0, found {v}"));
            }
        }
        if !(0.0..=0.5).contains(&self.hue) {
            bad(
                "hue",
                format!(
                    "expected 0 to 0.5 (the shift is drawn from [-hue, hue]), found {}",
                    self.hue
                ),
            );
        }
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        // torchvision's _check_input: a factor v gives [max(0, 1 - v), 1 + v], hue h gives
        // [-h, h]; a range that is only its centre turns the adjustment off.
        let around_one = |v: f64| (v > 0.0).then(|| [(1.0 - v).max(0.0), 1.0 + v]);
        Some(Box::new(ColorJitter {
            ranges: [
                around_one(self.brightness),
                around_one(self.contrast),
                around_one(self.saturation),
                (self.hue > 0.0).then_some([-self.hue, self.hue]),
            ],
        }))
    }
}

/// Factor ranges per adjustment (None: off), in [`JITTER_NAMES`] order.
#[derive(Debug, Clone)]
struct ColorJitter {
    ranges: [Option<[f64; 2]>; 4],
}

impl PixelOp for ColorJitter {
    /// torchvision's order of draws: `fn_idx = randperm(4)`, then each enabled factor in the
    /// order brightness, contrast, saturation, hue; the adjustments applied in `fn_idx` order.
    fn apply(&self, shape: ImageShape, rng: &mut SplitMix64, s: &mut Scratch) -> ImageShape {
        let (image, grey) = (&mut s.a, &mut s.grey);
        let mut order = [0usize, 1, 2, 3];
        order.shuffle(rng);
        let factors: Vec<Option<f64>> = self
            .ranges
            .iter()
            .map(|r| r.map(|[lo, hi]| uniform(rng, lo, hi)))
            .collect();
        for &k in &order {
            let Some(f) = factors[k] else { continue };
            match k {
                0 => brightness(&mut image[..shape.len()], f),
                1 => contrast(image, shape, f, grey),
                2 => saturation(image, shape, f, grey),
                _ => hue(image, shape, f),
            }
        }
        s.params.ops.push(OpParams::ColorJitter(JitterDrawn {
            order: order
                .iter()
                .filter(|&&k| factors[k].is_some())
                .map(|&k| JITTER_NAMES[k].to_string())
                .collect(),
            brightness: factors[0],
            contrast: factors[1],
            saturation: factors[2],
            hue: factors[3],
        }));
        shape
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("color_jitter")
    }
}
