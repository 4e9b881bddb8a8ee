//! What the pytorch engine's child says: one JSON object per line, typed by [`Reply`]
//! (`deny_unknown_fields`: a field added on one side only is an error, not a silent default),
//! and the replies that carry measurements as our own records (a steps.csv row, stage totals).

use serde::Deserialize;

use super::super::RunError;
use super::super::timed::row_of;
use crate::loader::StageTotals;
use crate::plan::PlannedRun;
use crate::results::{HeadroomRecord, StepRecord};

/// The line protocol's version; the child says its own in [`Reply::Ready`].
pub(super) const PROTOCOL: u32 = 1;

/// One stage of the child's stage clocks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StageClockReply {
    name: String,
    count: u64,
    ns: u64,
}

/// One timed step as the child measured it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StepReply {
    step: usize,
    batch_wait_ms: f64,
    h2d_ms: f64,
    compute_ms: f64,
    step_ms: f64,
    device_ms: Option<f64>,
    /// A network's loss (none for the stand-in).
    loss: Option<f64>,
    fingerprint: String,
    epoch: u64,
    /// The rank that took the step and its wait at the barrier after it (a node of several
    /// ranks; absent with one).
    #[serde(default)]
    rank: usize,
    #[serde(default)]
    sync_ms: f64,
}

impl StepReply {
    /// Its steps.csv row; a fingerprint that is not hex is the child's error.
    pub(super) fn row(self, planned: &PlannedRun) -> Result<StepRecord, RunError> {
        let Ok(fingerprint) = u64::from_str_radix(&self.fingerprint, 16) else {
            return Err(RunError::Engine {
                condition: planned.condition.clone(),
                message: format!(
                    "step {}'s fingerprint {:?} is not hex",
                    self.step, self.fingerprint
                ),
            });
        };
        Ok(StepRecord {
            batch_wait_ms: self.batch_wait_ms,
            h2d_ms: self.h2d_ms,
            compute_ms: self.compute_ms,
            step_ms: self.step_ms,
            loss: self.loss.unwrap_or(f64::NAN),
            fingerprint,
            epoch: self.epoch,
            device_ms: self.device_ms.unwrap_or(f64::NAN),
            rank: self.rank,
            sync_ms: self.sync_ms,
            ..row_of(planned, self.step)
        })
    }
}

/// The profiled run's figures: its workers' start-up and the stage clocks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ProfiledReply {
    startup_ms: f64,
    /// At 0 workers: the warm-up's batches built on the child's main thread, outside the
    /// profiler, and their total build time (0 and 0 with workers).
    build_ns: u64,
    batches: u64,
    /// The stage clocks' wall time over the items and the collate, and the CPU time of
    /// the process that built them over the same spans: the rest was asleep (a Dataset
    /// that waits for storage or the network).
    #[serde(default)]
    clocked_ns: u64,
    #[serde(default)]
    clocked_cpu_ns: u64,
    /// Per image: `read_decode` (the item's fetch less its ops), each op; per batch the
    /// collate, last.
    #[serde(default)]
    stages: Vec<StageClockReply>,
    /// With workers: batches timed from a worker's ready batch to the loop holding it.
    #[serde(default)]
    handoff_batches: u64,
    #[serde(default)]
    handoff_ns: u64,
}

impl ProfiledReply {
    /// The start-up, and the stage clocks as the native engine's stage totals (none where no
    /// batch was timed).
    pub(super) fn totals(self) -> (f64, Option<StageTotals>) {
        let Self {
            startup_ms,
            build_ns,
            batches,
            clocked_ns,
            clocked_cpu_ns,
            stages,
            handoff_batches,
            handoff_ns,
        } = self;
        let totals = (batches > 0).then(|| StageTotals {
            batches,
            build_ns,
            // Every image and batch was timed; the collate, per batch, is last.
            sample_every: 1,
            stages: stages.iter().map(|s| s.name.clone()).collect(),
            count: stages.iter().map(|s| s.count).collect(),
            ns: stages.iter().map(|s| s.ns).collect(),
            // The clocked build split into time on the CPU and the rest (the
            // runnable-but-waiting share is not known here: 0).
            split_batches: if clocked_ns > 0 { batches } else { 0 },
            split_wall_ns: clocked_ns,
            split_cpu_ns: clocked_cpu_ns,
            handoff_batches,
            handoff_ns,
            ..StageTotals::default()
        });
        (startup_ms, totals)
    }
}

/// One line from the child.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(super) enum Reply {
    Ready {
        protocol: u32,
        torch: String,
        torchvision: String,
        python: String,
    },
    Prepared {
        len: u64,
    },
    Started {
        startup_ms: f64,
    },
    Step(StepReply),
    Done {
        elapsed_s: f64,
        images: u64,
        process_cpu_s: f64,
        workers_cpu_s: f64,
        training_cpu_s: f64,
        peak_rss_mib: f64,
        interrupted: bool,
    },
    Profiled(ProfiledReply),
    /// The child's headroom run, in the results' own record.
    Headroom(HeadroomRecord),
    Error {
        #[serde(rename = "where")]
        at: String,
        message: String,
        traceback: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::engine::pytorch::DRIVER;

    /// Every reply the driver can send is one the enum reads (the driver's own field names):
    /// a field added on one side only fails here.
    #[test]
    fn the_drivers_replies_parse() {
        for line in [
            r#"{"kind": "ready", "protocol": 1, "torch": "2.5", "torchvision": "0.20", "python": "3.11.7"}"#,
            r#"{"kind": "prepared", "len": 60000}"#,
            r#"{"kind": "started", "startup_ms": 12.5}"#,
            r#"{"kind": "step", "step": 0, "batch_wait_ms": 1.0, "h2d_ms": 0.1, "compute_ms": 0.01, "step_ms": 1.11, "fingerprint": "00ff00ff00ff00ff", "epoch": 0, "device_ms": null, "loss": null}"#,
            r#"{"kind": "done", "elapsed_s": 1.0, "images": 256, "process_cpu_s": 1.0, "workers_cpu_s": 0.5, "training_cpu_s": 0.5, "peak_rss_mib": 300.0, "interrupted": false}"#,
            r#"{"kind": "error", "where": "dataset fashion_mnist", "message": "RuntimeError: x", "traceback": "..."}"#,
            r#"{"kind": "profiled", "startup_ms": 80.5, "build_ns": 3000000000, "batches": 40, "clocked_ns": 200, "clocked_cpu_ns": 100, "stages": [{"name": "resize", "count": 10, "ns": 5000}], "handoff_batches": 3, "handoff_ns": 900}"#,
            r#"{"kind": "headroom", "batches": 4, "steps": 10, "images": 640, "elapsed_s": 0.1, "step_ms": [0.01], "segments": [[3, 192, 0.03]]}"#,
        ] {
            serde_json::from_str::<Reply>(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        let extra = r#"{"kind": "started", "startup_ms": 1.0, "workers": 2}"#;
        assert!(serde_json::from_str::<Reply>(extra).is_err());
        // Each kind the driver says is one the enum has.
        for kind in [
            "ready", "prepared", "started", "step", "done", "error", "headroom", "profiled",
        ] {
            assert!(
                DRIVER.contains(&format!("\"kind\": \"{kind}\"")),
                "the driver never says {kind}"
            );
        }
    }
}
