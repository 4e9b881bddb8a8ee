//! The judgements a report states, made here from the figures and carried with the thresholds
//! they were made against (criterion's `ComparisonData`), so result.json and `verify` hold them
//! too and the report only renders them.

use serde::{Deserialize, Serialize};

/// Where the loader stands, from the share of step time spent waiting for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoaderVerdict {
    /// At least `bottleneck_wait_share` of step time waiting.
    Bottleneck,
    /// At least `partial_wait_share`.
    PartialBottleneck,
    /// Below that.
    KeptUp,
}

pub use crate::results::InputBound;

/// The thresholds of every judgement.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    pub bottleneck_wait_share: f64,
    pub partial_wait_share: f64,
    /// `[report] highly_input_bound`: the wait share from which a run is highly input-bound.
    pub highly_input_bound: f64,
    /// `[report] moderately_input_bound`.
    pub moderately_input_bound: f64,
    /// Stalls remain when the batch-wait p95 exceeds this multiple of its median …
    pub stall_p95_over_median: f64,
    /// … and this many ms.
    pub stall_p95_min_ms: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            bottleneck_wait_share: 0.5,
            partial_wait_share: 0.1,
            highly_input_bound: DEFAULT_HIGHLY_INPUT_BOUND,
            moderately_input_bound: DEFAULT_MODERATELY_INPUT_BOUND,
            stall_p95_over_median: 5.0,
            stall_p95_min_ms: 1.0,
        }
    }
}

/// TensorFlow Profiler's thresholds: 20 % and 5 % of step time waiting for input.
pub const DEFAULT_HIGHLY_INPUT_BOUND: f64 = 0.20;
pub const DEFAULT_MODERATELY_INPUT_BOUND: f64 = 0.05;

/// Which share a condition was judged on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClassifiedBy {
    /// The share of step time the training thread waited for a batch: the measure on a
    /// synchronous device (the CPU), where the step cannot run while the host waits.
    #[default]
    Waiting,
    /// The share of the timed window the device sat idle: the measure on an asynchronous
    /// device (CUDA, the stand-in's), where the host's waiting overlaps device work.
    DeviceIdle,
}

impl ClassifiedBy {
    /// What the share is, after a percentage: "31 % of step time waiting for a batch".
    pub fn what(self) -> &'static str {
        match self {
            ClassifiedBy::Waiting => "of step time waiting for a batch",
            ClassifiedBy::DeviceIdle => "of the timed window with the device idle",
        }
    }

    /// The share's name in a table heading or a sentence.
    pub fn name(self) -> &'static str {
        match self {
            ClassifiedBy::Waiting => "waiting share",
            ClassifiedBy::DeviceIdle => "device idle share",
        }
    }
}

/// One condition's judgement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Judgement {
    pub loader: LoaderVerdict,
    pub input_bound: InputBound,
    /// The share both verdicts were made on …
    #[serde(default)]
    pub share: f64,
    /// … and which one it is.
    #[serde(default)]
    pub classified_by: ClassifiedBy,
    /// A few batches still kept the training thread waiting far longer than the median one.
    pub stalls: bool,
    pub thresholds: Thresholds,
}

impl Thresholds {
    /// The defaults with the input-bound thresholds the experiment's `[report]` sets.
    pub fn from_report(r: &crate::config::ReportSection) -> Thresholds {
        Thresholds {
            highly_input_bound: r.highly_input_bound,
            moderately_input_bound: r.moderately_input_bound,
            ..Thresholds::default()
        }
    }

    pub fn input_bound(&self, wait_share: f64) -> InputBound {
        if wait_share >= self.highly_input_bound {
            InputBound::Highly
        } else if wait_share >= self.moderately_input_bound {
            InputBound::Moderately
        } else {
            InputBound::Not
        }
    }

    /// The verdicts on `share` (a waiting or a device-idle share, as `by` says); stalls from
    /// the batch-wait percentiles.
    pub fn judge(
        &self,
        share: f64,
        by: ClassifiedBy,
        wait_p50_ms: f64,
        wait_p95_ms: f64,
    ) -> Judgement {
        let loader = if share >= self.bottleneck_wait_share {
            LoaderVerdict::Bottleneck
        } else if share >= self.partial_wait_share {
            LoaderVerdict::PartialBottleneck
        } else {
            LoaderVerdict::KeptUp
        };
        // A median of zero would make any p95 a stall: compare against at least 1 µs.
        let stalls = wait_p95_ms > self.stall_p95_over_median * wait_p50_ms.max(1e-3)
            && wait_p95_ms > self.stall_p95_min_ms;
        Judgement {
            loader,
            input_bound: self.input_bound(share),
            share,
            classified_by: by,
            stalls,
            thresholds: *self,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Thresholds {
        fn judge_waiting(&self, share: f64, p50: f64, p95: f64) -> Judgement {
            self.judge(share, ClassifiedBy::Waiting, p50, p95)
        }
    }

    #[test]
    fn the_wait_share_decides_against_the_thresholds() {
        let t = Thresholds::default();
        assert_eq!(
            t.judge_waiting(0.5, 1.0, 1.0).loader,
            LoaderVerdict::Bottleneck
        );
        assert_eq!(
            t.judge_waiting(0.1, 1.0, 1.0).loader,
            LoaderVerdict::PartialBottleneck
        );
        assert_eq!(
            t.judge_waiting(0.099, 1.0, 1.0).loader,
            LoaderVerdict::KeptUp
        );
        assert!(t.judge_waiting(0.0, 0.1, 2.0).stalls);
        assert!(!t.judge_waiting(0.0, 0.1, 0.9).stalls, "under the ms floor");
        assert!(
            !t.judge_waiting(0.0, 1.0, 4.0).stalls,
            "under five times the median"
        );
    }

    #[test]
    fn input_bound_classes_follow_tensorflows_thresholds() {
        let t = Thresholds::default();
        assert_eq!(t.input_bound(0.20), InputBound::Highly);
        assert_eq!(t.input_bound(0.1999), InputBound::Moderately);
        assert_eq!(t.input_bound(0.05), InputBound::Moderately);
        assert_eq!(t.input_bound(0.0499), InputBound::Not);
        let strict = Thresholds {
            highly_input_bound: 0.5,
            moderately_input_bound: 0.3,
            ..t
        };
        assert_eq!(strict.input_bound(0.4), InputBound::Moderately);
        assert_eq!(strict.input_bound(0.2), InputBound::Not);
    }
}
