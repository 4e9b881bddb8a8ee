//! This run's step beside the same step in the user's framework (`[report] framework_step_ms`):
//! a trainer much slower than the framework understates the job's ceiling.

use serde::{Deserialize, Serialize};

use super::ConditionSummary;

/// This run's step on the device beside the same step in the user's framework.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FrameworkStep {
    /// The baseline's median device time per step, ms.
    pub ours_ms: f64,
    /// `[report] framework_step_ms`.
    pub framework_ms: f64,
    /// ours / framework: above [`FRAMEWORK_BOUND`] the trainer is framework-bound.
    pub ratio: f64,
}

/// How much slower than the framework's our step may be and still stand for it.
pub const FRAMEWORK_BOUND: f64 = 1.2;

impl FrameworkStep {
    /// Beside the baseline's device time, for a real network (a stand-in's step is the
    /// user's by construction) when the framework's step is known.
    pub(super) fn of(
        framework_ms: f64,
        base: Option<&ConditionSummary>,
        stand_in: bool,
    ) -> Option<Self> {
        let ours_ms = base?.device_median_ms;
        (framework_ms > 0.0 && ours_ms.is_finite() && ours_ms > 0.0 && !stand_in).then(|| {
            FrameworkStep {
                ours_ms,
                framework_ms,
                ratio: ours_ms / framework_ms,
            }
        })
    }

    pub fn bound(&self) -> bool {
        self.ratio > FRAMEWORK_BOUND
    }
}
