//! The pytorch engine's line protocol, typed on both sides: what loaderlab sends (the condition
//! as the child builds it, [`ConditionSpec`], then one [`Request`] per line) and what the child
//! says, one JSON object per line, typed by [`Reply`] (`deny_unknown_fields`: a field added on
//! one side only is an error, not a silent default), with the replies that carry measurements
//! turned into our own records (a steps.csv row, stage totals). The child's dataclasses
//! (`protocol.py`) match these types field for field; a test runs the real child and parses
//! what it printed.
//!
//! What the Rust side decides travels in the condition rather than being restated in Python:
//! the stand-in's queue depth and host buffer, the headroom run's constants, the emulated
//! storage's parameters, the fingerprint's sample.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::loader::StageTotals;
use crate::plan::PlannedRun;
use crate::results::{HeadroomRecord, StepRecord};

/// The line protocol's version; the child says its own in [`Reply::Ready`].
pub const PROTOCOL: u32 = 1;

/// The condition as the child builds it: the dataset over the same bytes as the native engine
/// reads (each kind says how: `data::kinds`), each transform as its torchvision call (the class
/// and every argument, decided here: the child only calls), the loader settings one to one, the
/// step.
#[derive(Debug, Serialize)]
pub struct ConditionSpec {
    pub seed: u64,
    pub ranks: usize,
    /// How the child opens the dataset (a kind's own description, or the user's Dataset).
    pub dataset: serde_json::Value,
    /// The declared dataset's emulated storage, in front of each image read (none for the
    /// user's own Dataset, which reads as it reads).
    pub storage: Option<crate::config::StorageSection>,
    pub user: UserCode,
    pub transforms: Vec<TransformCall>,
    pub loader: LoaderSpec,
    pub step: StepSpec,
    pub headroom: HeadroomSpec,
    /// The batch fingerprint reads this many image values, evenly spaced, and every label.
    pub fingerprint_sample: usize,
    /// A wait for one batch longer than this ends the run as stalled (`[pytorch] stall_s`).
    pub stall_s: f64,
}

/// One transform as the child builds it: loaderlab's op name (its stage clock's name) and its
/// torchvision twin.
#[derive(Debug, Serialize)]
pub struct TransformCall {
    pub op: &'static str,
    #[serde(flatten)]
    pub twin: crate::transforms::ops::TorchvisionCall,
}

/// The user's own code the DataLoader takes, as absolute `file.py:function` references.
#[derive(Debug, Default, Serialize)]
pub struct UserCode {
    pub collate_fn: Option<String>,
    pub worker_init_fn: Option<String>,
}

/// `[loader]` as torch's DataLoader takes it.
#[derive(Debug, Serialize)]
pub struct LoaderSpec {
    pub batch_size: u64,
    pub workers: u64,
    pub prefetch_factor: u64,
    pub persistent_workers: bool,
    pub pin_memory: bool,
    pub shuffle: bool,
    pub drop_last: bool,
}

/// What runs each step.
#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepSpec {
    /// A network of loaderlab's (its layer list) trained with the experiment's optimizer.
    Network {
        layers: serde_json::Value,
        optimizer: crate::config::OptimizerSection,
        threads: usize,
    },
    /// The stand-in: `host_ms` of CPU time on `host_threads` threads (each reading through
    /// `host_buffer` bytes), then `step_ms` on the emulated device (0: none), whose host waits
    /// when `queue_depth` steps wait behind the running one.
    StandIn {
        step_ms: f64,
        host_ms: f64,
        host_threads: u64,
        host_buffer: usize,
        queue_depth: usize,
    },
}

/// The headroom run's constants (`runner::headroom`'s).
#[derive(Debug, Serialize)]
pub struct HeadroomSpec {
    pub batches: u64,
    pub segments: u64,
    pub warmup: u64,
}

/// One command to the child, after the condition.
#[derive(Debug, Serialize)]
#[serde(tag = "cmd", rename_all = "snake_case")]
pub enum Request {
    /// A timed run: a new DataLoader, `warmup` untimed steps, `timed` timed ones.
    Run {
        warmup: u64,
        timed: u64,
    },
    /// The profiled run, its Chrome trace written to `trace`.
    Profile {
        warmup: u64,
        steps: u64,
        trace: PathBuf,
    },
    /// A headroom run of `steps` steps.
    Headroom {
        steps: u64,
    },
    Quit,
}

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
pub struct StepReply {
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
    /// Its steps.csv row; a fingerprint that is not hex is the child's error (said).
    pub fn row(self, planned: &PlannedRun) -> Result<StepRecord, String> {
        let Ok(fingerprint) = u64::from_str_radix(&self.fingerprint, 16) else {
            return Err(format!(
                "step {}'s fingerprint {:?} is not hex",
                self.step, self.fingerprint
            ));
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
            ..StepRecord::unmeasured(planned, self.step)
        })
    }
}

/// The profiled run's figures: its workers' start-up and the stage clocks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfiledReply {
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
    pub fn totals(self) -> (f64, Option<StageTotals>) {
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
pub enum Reply {
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

    /// A reply with a field the enum does not know is refused, not read with a silent default
    /// (the real child's replies are parsed by `tests/pytorch_engine.rs`, which runs it).
    #[test]
    fn an_unknown_field_is_an_error() {
        let extra = r#"{"kind": "started", "startup_ms": 1.0, "workers": 2}"#;
        assert!(serde_json::from_str::<Reply>(extra).is_err());
        let missing = r#"{"kind": "started"}"#;
        assert!(serde_json::from_str::<Reply>(missing).is_err());
        // Each kind of reply the enum reads is one the child's protocol module says.
        let protocol = super::super::PACKAGE
            .iter()
            .find(|(name, _)| *name == "protocol.py")
            .map(|(_, text)| *text)
            .unwrap();
        for kind in [
            "ready", "prepared", "started", "step", "done", "error", "headroom", "profiled",
        ] {
            assert!(
                protocol.contains(&format!("kind: str = \"{kind}\"")),
                "the child never says {kind}"
            );
        }
    }
}
