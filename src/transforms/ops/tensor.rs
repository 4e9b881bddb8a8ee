//! ToTensor and Normalize: the two ops on the tensor, which the pipeline applies as it writes
//! each image into the batch ([`crate::transforms::Pipeline::apply_staged`]).

use serde::{Deserialize, Serialize};

use super::{Op, PixelOp, Reaching, Stage, TorchvisionCall};

/// torchvision `ToTensor`: CHW float32 in [0, 1].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToTensorSpec {}

impl Op for ToTensorSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(TorchvisionCall::new("ToTensor"))
    }
    fn name(&self) -> &'static str {
        "to_tensor"
    }

    fn stage(&self) -> Stage {
        Stage::ToTensor
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        None
    }

    fn in_pillow_chain(&self) -> bool {
        true
    }
}

/// torchvision `Normalize(mean, std)`: both required, one value per channel of the data.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NormalizeSpec {
    pub mean: Vec<f64>,
    pub std: Vec<f64>,
}

impl NormalizeSpec {
    /// (mean, std) for each of `channels` channels. One pair per channel (checked at validate
    /// time); a single pair applies to every channel, as a one-element torch tensor broadcasts.
    pub fn per_channel(&self, channels: usize) -> Vec<(f32, f32)> {
        (0..channels)
            .map(|c| {
                let at = |v: &[f64], d: f64| v.get(c).or(v.first()).copied().unwrap_or(d);
                (at(&self.mean, 0.0) as f32, at(&self.std, 1.0) as f32)
            })
            .collect()
    }
}

impl Op for NormalizeSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        Some(
            TorchvisionCall::new("Normalize")
                .arg("mean", &self.mean)
                .arg("std", &self.std),
        )
    }
    fn name(&self) -> &'static str {
        "normalize"
    }

    fn stage(&self) -> Stage {
        Stage::Tensor
    }

    fn check(&self, reaching: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        if !reaching.after_tensor {
            bad(
                "op",
                "normalize works on tensors and must come after to_tensor".into(),
            );
        }
        let c = reaching.shape.channels;
        let channels = format!("{c} channel{}", if c == 1 { "" } else { "s" });
        for (key, values) in [("mean", &self.mean), ("std", &self.std)] {
            if values.is_empty() {
                let example = vec![if key == "mean" { "0.5" } else { "0.25" }; c].join(", ");
                bad(
                    key,
                    format!(
                        "missing: normalize needs `{key}`, one value per channel of the data \
                         ({channels}), e.g. {key} = [{example}]"
                    ),
                );
            } else if values.len() != c {
                bad(
                    key,
                    format!(
                        "expected one value per channel of the data ({channels}), found {}",
                        values.len()
                    ),
                );
            }
        }
        if self.std.iter().any(|v| !v.is_finite() || *v <= 0.0) {
            bad("std", "expected finite values > 0".into());
        }
        if self.mean.iter().any(|v| !v.is_finite()) {
            bad("mean", "expected finite values".into());
        }
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        None
    }

    fn in_pillow_chain(&self) -> bool {
        true
    }
}
