//! From measurement to advice: the ceiling each condition would reach if data were free (its
//! headroom run), the bound the waiting share puts on any loader speed-up, and the worker
//! count the stage costs predict, checked against the conditions the matrix holds.
//!
//! Invariant: every figure comes from the results folder (run.json's headroom records, the
//! profiled traces, the step rows), so `report` and `verify` recompute it.

use serde::{Deserialize, Serialize};

use super::profile::ProfileSummary;
use super::{ConditionSummary, InputBound, median};
use crate::config::Settings;
use crate::plan::PlanCondition;
use crate::results::{ComputeDevice, ConditionMeta, HeadroomRecord, RunMeta};
use crate::spans;
use crate::train::{WorkerCap, asleep_share};

/// The throughput if data were free, from a condition's headroom run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Headroom {
    /// Images over elapsed time: the median of the headroom run's segments (each timed to the
    /// device being idle).
    pub img_per_s: f64,
    /// Elapsed time per step, ms (the median segment's): the step without any waiting.
    pub step_ms: f64,
    /// Median host time of its steps, ms (enqueue time on CUDA).
    pub step_median_ms: f64,
    /// The condition's measured median img/s over the ceiling.
    pub share_of_ceiling: f64,
}

impl Headroom {
    pub fn from_record(r: &HeadroomRecord, measured_img_per_s: f64) -> Option<Headroom> {
        let (img_per_s, step_ms) = r.ceiling()?;
        Some(Headroom {
            img_per_s,
            step_ms,
            step_median_ms: median(&r.step_ms),
            share_of_ceiling: measured_img_per_s / img_per_s,
        })
    }
}

/// 1 / (1 − waiting share): the most any change to the loader can speed a condition up, since
/// at best it removes all the waiting (loadtune's bound).
pub fn wait_bound(wait_share: f64) -> f64 {
    if wait_share.is_finite() && wait_share < 1.0 {
        1.0 / (1.0 - wait_share.max(0.0))
    } else {
        f64::INFINITY
    }
}

/// A measured neighbour of the prediction: a condition differing only in its worker count.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PredictionCheck {
    pub condition: String,
    pub workers: u64,
    /// The share its class was judged on: waiting, or device idle on an asynchronous device
    /// (the condition's `judgement.classified_by`).
    pub wait_share: f64,
    pub input_bound: InputBound,
}

/// Workers needed ≈ loader time per batch ÷ step time without waiting.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerPrediction {
    /// The condition whose costs it uses: of those sharing the baseline's settings but for
    /// the worker count, the one with the fewest workers (its batch building competes least).
    pub from: String,
    /// One batch's loader work on one thread, ms: its profiled run's build time on the stage
    /// clocks.
    pub loader_ms_per_batch: f64,
    /// Its headroom run's elapsed time per step, ms.
    pub step_ms: f64,
    /// loader_ms_per_batch / step_ms.
    pub workers_exact: f64,
    /// 0 when loading on the training thread would wait under the `moderately` threshold
    /// (about workers_exact / (1 + workers_exact) of the step), else ⌈workers_exact⌉, within
    /// `cap`.
    pub workers: u64,
    /// The most workers worth running per rank (`cap_rule.workers()`): more than this compete
    /// with training or with each other for the cores.
    pub cap: u64,
    /// The rule and the inputs `cap` came from (the one rule `tune`'s bounds use too).
    #[serde(default)]
    pub cap_rule: WorkerCap,
    /// The prediction was cut to `cap`.
    pub capped: bool,
    /// Every condition that differs from `from` only in the worker count, by worker count.
    pub measured: Vec<PredictionCheck>,
    /// The share of the loader's time it waited for storage (asleep), which lets the cap pass
    /// the cores (0 without emulated storage).
    #[serde(default)]
    pub storage_share: f64,
    /// The share of the build's wall time its thread spent off the CPU (asleep: storage, a
    /// disk read), from the scheduler's statistics; the cap is stretched by the larger of this
    /// (above 5 %, below which it is noise) and `storage_share`.
    #[serde(default)]
    pub off_cpu_share: f64,
    /// Whether the measurements bear it out: the nearest count at or above the prediction is
    /// not input-bound and the nearest below it is (or, when none was measured below, the
    /// predicted count itself is not). None without those measurements.
    pub confirmed: Option<bool>,
    /// The step runs on the stand-in's queue, so a batch built on the training thread overlaps
    /// the previous step (see [`workers_wanted`]).
    #[serde(default)]
    pub queued: bool,
    /// From a watched job: the stage clocks of its whole run, and its step between batches.
    #[serde(default)]
    pub watched: bool,
}

/// Two conditions' settings are equal but for `loader.workers`.
pub fn same_but_workers(a: &Settings, b: &Settings) -> bool {
    let mut b = b.clone();
    b.loader.workers = a.loader.workers;
    *a == b
}

/// The prediction for the baseline's pipeline, when its headroom run and a profiled
/// `build_batch` are at hand.
pub fn predict(
    plan: &[PlanCondition],
    summaries: &[ConditionSummary],
    profiles: &[ProfileSummary],
    meta: &RunMeta,
    baseline: &str,
) -> Option<WorkerPrediction> {
    let base = plan.iter().find(|c| c.name == baseline)?;
    let family: Vec<&PlanCondition> = plan
        .iter()
        .filter(|c| same_but_workers(&base.config, &c.config))
        .collect();
    // A watched job's step between batches is its step with data free (no headroom run).
    let watched = |name: &str| {
        meta.condition(name)
            .is_some_and(|c| matches!(c.engine, crate::results::EngineRecord::Watched { .. }))
    };
    let from = family
        .iter()
        .filter(|c| {
            summaries
                .iter()
                .any(|s| s.condition == c.name && (s.headroom.is_some() || watched(&c.name)))
        })
        .min_by_key(|c| c.config.loader.workers)?;
    let summary = summaries.iter().find(|s| s.condition == from.name)?;
    let step_ms = match &summary.headroom {
        Some(h) => h.step_ms,
        None => summary.compute_median_ms,
    };
    // The build timed by the stage clocks; folders without them: the build_batch span.
    let profile = profiles.iter().find(|p| p.condition == from.name)?;
    let loader_ms_per_batch = if profile.build_ms.is_finite() {
        profile.build_ms
    } else {
        profile
            .rows
            .iter()
            .find(|r| r.span == spans::BUILD_BATCH)?
            .mean_ms
    };
    if !(step_ms > 0.0 && loader_ms_per_batch.is_finite()) {
        return None;
    }
    let moderately = summary.judgement.thresholds.moderately_input_bound;
    let cm = meta.condition(&from.name)?;
    let queued = cm.compute_device == ComputeDevice::Emulated;
    let host_ms = cm.host.map_or(0.0, |h| h.ms);
    let (workers_exact, wanted) =
        workers_wanted(loader_ms_per_batch, step_ms, moderately, queued, host_ms);
    // The share of the loader's time spent waiting for (emulated) storage: asleep, holding no
    // core, so that many more workers fit the cores.
    let storage_share = profile
        .stages
        .iter()
        .find(|s| s.stage == spans::STORAGE)
        .map_or(0.0, |s| s.share.clamp(0.0, 1.0));
    let off_cpu_share = profile.build_split.map_or(0.0, |b| b.off_cpu);
    let cap_rule = worker_cap(
        meta.environment.cores,
        from.config.distributed.ranks,
        cm,
        asleep_share(storage_share, off_cpu_share),
    );
    let cap = cap_rule.workers();
    let workers = wanted.min(cap);
    let mut measured: Vec<PredictionCheck> = family
        .iter()
        .filter_map(|c| {
            let s = summaries.iter().find(|s| s.condition == c.name)?;
            Some(PredictionCheck {
                condition: c.name.clone(),
                workers: c.config.loader.workers,
                wait_share: s.judgement.share,
                input_bound: s.judgement.input_bound,
            })
        })
        .collect();
    measured.sort_by_key(|m| m.workers);
    let confirmed = confirmation(&measured, workers);
    Some(WorkerPrediction {
        from: from.name.clone(),
        loader_ms_per_batch,
        step_ms,
        workers_exact,
        workers,
        cap,
        cap_rule,
        capped: workers < wanted,
        measured,
        confirmed,
        storage_share,
        off_cpu_share,
        queued,
        watched: watched(&from.name),
    })
}

impl WorkerPrediction {
    /// [`asleep_share`] of this prediction.
    pub fn asleep(&self) -> f64 {
        asleep_share(self.storage_share, self.off_cpu_share)
    }
}

/// The worker cap of a condition that ran as `cm` says, on a node of `cores` cores with
/// `ranks` ranks, its loader asleep `asleep` of its time: the step keeps the cores of its
/// threads ([`ConditionMeta::step_threads`]: a CPU step's compute threads, a stand-in's host
/// side's; none for a step that only enqueues on a device).
pub fn worker_cap(cores: usize, ranks: u64, cm: &ConditionMeta, asleep: f64) -> WorkerCap {
    WorkerCap {
        cores,
        ranks,
        step_threads: cm.step_threads(),
        asleep_share: asleep,
    }
}

/// Workers ≈ loader time per batch ÷ step time without waiting: the exact ratio, and the count
/// wanted. At 0 workers the training thread loads each batch itself. On a synchronous step it
/// then waits about exact / (1 + exact) of the step; on the stand-in's queue (`queued`) it
/// builds the next batch while the device runs the last, after its own host side of `host_ms`
/// per step, and the device idles for the part of host + build beyond the step,
/// 1 − step / (host + build) of it (1 − 1 / exact with no host side). Under the `moderately`
/// threshold, none are needed; else the ratio rounded up.
pub fn workers_wanted(
    loader_ms_per_batch: f64,
    step_ms: f64,
    moderately: f64,
    queued: bool,
    host_ms: f64,
) -> (f64, u64) {
    let workers_exact = loader_ms_per_batch / step_ms;
    let inline_wait_share = if queued {
        (1.0 - step_ms / (host_ms.max(0.0) + loader_ms_per_batch)).max(0.0)
    } else {
        workers_exact / (1.0 + workers_exact)
    };
    let wanted = if inline_wait_share < moderately {
        0
    } else {
        (workers_exact.ceil() as u64).max(1)
    };
    (workers_exact, wanted)
}

/// Whether the measurements (sorted by workers) bear out `workers`: the nearest count at or
/// above it is not input-bound and the nearest below it is; with nothing measured below, the
/// count itself keeps up. None without those measurements.
fn confirmation(measured: &[PredictionCheck], workers: u64) -> Option<bool> {
    let below = measured.iter().rev().find(|m| m.workers < workers);
    let at_or_above = measured.iter().find(|m| m.workers >= workers);
    match (below, at_or_above) {
        (Some(b), Some(a)) => {
            Some(a.input_bound == InputBound::Not && b.input_bound != InputBound::Not)
        }
        (None, Some(a)) if a.workers == workers => Some(a.input_bound == InputBound::Not),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core of the prediction, with planted costs (tests/advice.rs checks it on measured
    /// ones, which depend on this machine's speed).
    #[test]
    fn the_prediction_is_the_loader_time_over_the_step_rounded_up() {
        // 30 ms of loading per batch, a 20 ms step: 1.5 -> 2 workers.
        assert_eq!(workers_wanted(30.0, 20.0, 0.05, false, 0.0), (1.5, 2));
        // Exactly one step's worth: 1.
        assert_eq!(workers_wanted(20.0, 20.0, 0.05, false, 0.0).1, 1);
        // 0.5 ms on a 20 ms step waits 2.4 % inline, under the 5 % threshold: none needed.
        assert_eq!(workers_wanted(0.5, 20.0, 0.05, false, 0.0).1, 0);
        // The same at a 1 % threshold: one.
        assert_eq!(workers_wanted(0.5, 20.0, 0.01, false, 0.0).1, 1);
        // On the stand-in's queue a build shorter than the step hides behind it: none needed;
        // 30 ms on a 20 ms step leaves the device idle a third of the time: two.
        assert_eq!(workers_wanted(12.0, 20.0, 0.05, true, 0.0).1, 0);
        assert_eq!(workers_wanted(30.0, 20.0, 0.05, true, 0.0), (1.5, 2));
        // With 15 ms of host work per step the same 12 ms build no longer hides: host and
        // build take 27 ms of a 20 ms step, the device idles 26 % of it: one worker.
        assert_eq!(workers_wanted(12.0, 20.0, 0.05, true, 15.0).1, 1);
        let check = |workers, input_bound| PredictionCheck {
            condition: format!("workers={workers}"),
            workers,
            wait_share: 0.0,
            input_bound,
        };
        let m = [
            check(0, InputBound::Highly),
            check(1, InputBound::Moderately),
            check(2, InputBound::Not),
        ];
        assert_eq!(confirmation(&m, 2), Some(true));
        assert_eq!(confirmation(&m, 1), Some(false), "1 is still input-bound");
        assert_eq!(confirmation(&m, 3), None, "nothing measured at or above 3");
        assert_eq!(
            confirmation(&m[2..], 2),
            Some(true),
            "only the count itself"
        );
    }

    #[test]
    fn sleep_off_the_cpu_stretches_the_cores_beyond_noise() {
        assert_eq!(asleep_share(0.0, 0.03), 0.0, "noise");
        assert_eq!(asleep_share(0.0, 0.5), 0.5);
        assert_eq!(asleep_share(0.8, 0.5), 0.8);
        let cap = |asleep_share| WorkerCap {
            cores: 2,
            ranks: 1,
            step_threads: 0,
            asleep_share,
        };
        assert_eq!(cap(asleep_share(0.0, 0.5)).workers(), 4);
        assert_eq!(cap(0.0).workers(), 2);
        assert_eq!(cap(0.99).workers(), 40, "at most 20 per core");
    }

    #[test]
    fn the_bound_is_what_removing_every_wait_gives() {
        assert_eq!(wait_bound(0.0), 1.0);
        assert_eq!(wait_bound(0.5), 2.0);
        assert!((wait_bound(0.8) - 5.0).abs() < 1e-12);
        assert!(wait_bound(1.0).is_infinite());
    }

    #[test]
    fn headroom_is_images_over_elapsed() {
        let r = HeadroomRecord {
            batches: 4,
            steps: 10,
            images: 640,
            elapsed_s: 0.5,
            step_ms: vec![50.0; 10],
            segments: vec![],
        };
        let h = Headroom::from_record(&r, 640.0).unwrap();
        assert_eq!(h.img_per_s, 1280.0);
        assert_eq!(h.step_ms, 50.0);
        assert_eq!(h.share_of_ceiling, 0.5);
        // With segments, one slow stretch does not set the ceiling.
        let r = HeadroomRecord {
            segments: vec![(3, 192, 0.15), (3, 192, 0.6), (4, 256, 0.2)],
            ..r
        };
        let h = Headroom::from_record(&r, 640.0).unwrap();
        assert_eq!(h.img_per_s, 1280.0);
        assert_eq!(h.step_ms, 50.0);
    }
}
