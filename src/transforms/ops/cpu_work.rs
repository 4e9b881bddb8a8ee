//! `cpu_work`: not a torchvision op. It burns a declared amount of the worker's own CPU time per
//! image, to ask "what if my augmentation cost this much?" and to plant a known loader cost.

use serde::{Deserialize, Serialize};

use super::{Op, PixelOp, Reaching, Stage, TorchvisionCall};
use crate::hash::SplitMix64;
use crate::shape::ImageShape;
use crate::transforms::{Scratch, burn_cpu};

/// Burns `us` µs of the worker's own CPU time per image (spinning on the thread's CPU clock,
/// never sleeping). It changes no pixel and may stand anywhere in the chain.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CpuWorkSpec {
    /// Microseconds of CPU time per image.
    pub us: f64,
}

impl Op for CpuWorkSpec {
    fn torchvision(&self) -> Option<TorchvisionCall> {
        // The child's own: a busy loop on the worker's CPU clock (torchvision has none).
        Some(TorchvisionCall::new("CpuWork").arg("us", self.us))
    }
    fn name(&self) -> &'static str {
        "cpu_work"
    }

    fn stage(&self) -> Stage {
        Stage::Anywhere
    }

    fn check(&self, _: Reaching, bad: &mut dyn FnMut(&'static str, String)) {
        if !(self.us.is_finite() && (0.0..=1e7).contains(&self.us)) {
            bad(
                "us",
                format!(
                    "expected microseconds of CPU time per image, 0 to 1e7, found {}",
                    self.us
                ),
            );
        }
    }

    fn compile(&self) -> Option<Box<dyn PixelOp>> {
        Some(Box::new(CpuWork {
            ns: (self.us * 1e3).round() as u64,
        }))
    }
}

/// Burn this many ns of the thread's CPU time; the image is untouched.
#[derive(Debug, Clone)]
struct CpuWork {
    ns: u64,
}

impl PixelOp for CpuWork {
    fn apply(&self, shape: ImageShape, _: &mut SplitMix64, _: &mut Scratch) -> ImageShape {
        burn_cpu(self.ns);
        shape
    }

    fn span(&self) -> tracing::Span {
        tracing::info_span!("cpu_work")
    }
}
