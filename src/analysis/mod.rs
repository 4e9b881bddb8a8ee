//! From the raw files of a results folder to the figures a report states.
//!
//! Invariant: everything is computed from the files on disk (`steps.csv`, `runs.csv`,
//! `plan.json`, `run.json`, `traces/`), never from the runner's memory, so
//! `loaderlab report <dir>` rebuilds exactly what the run wrote. Percentiles use linear
//! interpolation (pandas' and numpy's default) so anyone can recompute them.

mod adopt;
mod advice;
mod checks;
mod engines;
mod framework;
mod groups;
mod judge;
mod profile;
mod ranks;
mod resources;
mod scale;
mod stats;
mod steps;
mod tables;

pub use adopt::Adopt;
pub use advice::{
    Headroom, PredictionCheck, WorkerPrediction, same_but_workers, wait_bound, worker_cap,
    workers_wanted,
};
pub use engines::EngineSwitch;
pub use framework::{FRAMEWORK_BOUND, FrameworkStep};
use groups::speedup;
pub use groups::{Group, LOADER_OWN, group_of, is_loader_own};
pub use judge::{ClassifiedBy, InputBound, Judgement, LoaderVerdict, Thresholds};
pub use profile::{BuildSplit, ProfileSummary, SpanRow, StageCost};
pub use ranks::{Node, RankFigures, WAIT_FLOOR_MS};
pub use resources::Resources;
pub use scale::{ModelScale, ScaleGroup, ScalePoint};
pub use stats::{
    BOOTSTRAP_RESAMPLES, CONFIDENCE, Effect, Estimate, bootstrap, median, paired_ratio, quantile,
};
pub use tables::{summary_frame, write_tables};

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde::{Deserialize, Serialize};

use crate::format::rate;
use crate::plan::PlanCondition;
use crate::results::column;
use crate::results::{Raw, ResultsError, bools, f64s, i64s, strs};
use steps::{stat_columns, step_stats};

/// An order effect is flagged only when the gap between first-position and later runs exceeds
/// both the spread within positions and this share of the condition's median throughput.
pub const ORDER_NOISE_FLOOR: f64 = 0.02;

#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    #[error("{}: {message}", path.display())]
    File { path: PathBuf, message: String },
    #[error("{0}")]
    Data(String),
    #[error(transparent)]
    Results(#[from] ResultsError),
}

impl From<PolarsError> for AnalysisError {
    fn from(e: PolarsError) -> Self {
        AnalysisError::Data(e.to_string())
    }
}

fn file_err(path: &Path, message: impl ToString) -> AnalysisError {
    AnalysisError::File {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunSummary {
    pub run: i64,
    pub condition: String,
    pub round: i64,
    pub position: i64,
    pub workers: i64,
    pub steps: i64,
    pub images: i64,
    pub elapsed_s: f64,
    pub img_per_s: f64,
    pub startup_ms: f64,
    pub batch_wait_median_ms: f64,
    pub batch_wait_p95_ms: f64,
    pub batch_wait_max_ms: f64,
    pub h2d_median_ms: f64,
    pub compute_median_ms: f64,
    pub step_median_ms: f64,
    /// Sum of batch_wait over sum of step time.
    pub wait_share: f64,
    /// Share of the timed window in which the device did no step work (1 − Σ device_ms /
    /// elapsed): from CUDA events on a GPU, from the step's own timers on the CPU.
    pub device_idle: f64,
    pub interrupted: bool,
    /// runs.csv's resource figures over the timed window (NaN in older folders).
    #[serde(default)]
    pub process_cpu_s: f64,
    #[serde(default)]
    pub workers_cpu_s: f64,
    #[serde(default)]
    pub training_cpu_s: f64,
    #[serde(default)]
    pub peak_rss_mib: f64,
    #[serde(default)]
    pub page_cache_resident: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Speedup {
    /// The condition it is compared with: its group's baseline.
    #[serde(default)]
    pub against: String,
    /// Median img/s of this condition over the baseline's, with its 95 % CI.
    pub ratio: Estimate,
    /// (round, ratio) for rounds where both ran.
    pub paired: Vec<(i64, f64)>,
    /// The 95 % interval excludes 1.
    pub beyond_noise: bool,
    /// Faster or slower by a difference that matters (`[report] min_effect`), no practical
    /// difference, or within noise.
    #[serde(default)]
    pub effect: Effect,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OrderEffect {
    pub first_median_img_per_s: Option<f64>,
    pub later_median_img_per_s: Option<f64>,
    /// later − first, img/s.
    pub difference: Option<f64>,
    /// Largest range of img/s among runs sharing a position group.
    pub spread: Option<f64>,
    pub flagged: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConditionSummary {
    pub condition: String,
    pub runs: usize,
    pub workers: i64,
    /// The median img/s over runs, with its 95 % bootstrap CI.
    pub img_per_s: Estimate,
    pub img_per_s_min: f64,
    pub img_per_s_max: f64,
    pub batch_wait_p50_ms: f64,
    pub batch_wait_p95_ms: f64,
    pub batch_wait_max_ms: f64,
    pub h2d_median_ms: f64,
    pub compute_median_ms: f64,
    pub step_median_ms: f64,
    /// The device's busy time per step, median (on the CPU h2d + compute).
    #[serde(default)]
    pub device_median_ms: f64,
    pub wait_share: f64,
    /// Median over runs of [`RunSummary::device_idle`].
    pub device_idle_median: f64,
    /// Where device busy time comes from: "CUDA events" or "host timers (CPU)".
    pub device_clock: String,
    pub startup_ms_median: f64,
    pub speedup: Option<Speedup>,
    pub order_effect: OrderEffect,
    /// Whether the loader held training back, against the thresholds it states.
    pub judgement: Judgement,
    /// 1 / (1 − the judged share): the most any loader change could speed this condition up.
    pub speedup_bound: f64,
    /// The throughput if data were free (its headroom run), when one ran.
    pub headroom: Option<Headroom>,
    /// Memory, CPU and the step's slowdown under the loader's load.
    #[serde(default)]
    pub resources: Option<Resources>,
    /// Several ranks: each rank's figures, the skew and the straggler.
    #[serde(default)]
    pub node: Option<Node>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Determinism {
    /// Every timed run, of every condition, saw the same fingerprint sequence.
    pub identical: bool,
    /// Conditions whose rounds disagree among themselves (never expected).
    pub inconsistent_conditions: Vec<String>,
    /// Groups of conditions sharing a sequence (more than one group means the data differed).
    pub groups: Vec<Vec<String>>,
    /// Conditions whose data settings agree (dataset, transforms but `cpu_work`, batch size,
    /// shuffle, drop_last, seed, ranks) share a group: more than one group is then the
    /// matrix's doing, not a fault.
    #[serde(default)]
    pub groups_follow_settings: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Analysis {
    /// The experiment's baseline: the `[report] baseline` condition, else the first.
    pub baseline: String,
    /// The conditions in the groups they are compared in, each with its own baseline.
    #[serde(default)]
    pub groups: Vec<Group>,
    /// `[report] min_effect`: the smallest speed-up that matters.
    #[serde(default)]
    pub min_effect: f64,
    pub runs: Vec<RunSummary>,
    pub conditions: Vec<ConditionSummary>,
    pub determinism: Determinism,
    pub profiles: Vec<ProfileSummary>,
    /// Workers the baseline's stage costs call for, checked against the matrix.
    pub prediction: Option<WorkerPrediction>,
    /// Where extra workers stop paying as model compute grows (a matrix over a model setting
    /// and the worker count).
    pub model_scale: Option<ModelScale>,
    /// The baseline's step beside the user's framework's (`[report] framework_step_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<FrameworkStep>,
    /// What switching from the PyTorch DataLoader to loaderlab's loader would buy, where the
    /// matrix holds both engines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_switch: Option<EngineSwitch>,
    pub warnings: Vec<String>,
}

impl Analysis {
    /// The summary of `condition`, when it has completed runs.
    pub fn summary(&self, condition: &str) -> Option<&ConditionSummary> {
        self.conditions.iter().find(|c| c.condition == condition)
    }

    /// The groups the conditions are compared in; one group of every condition with the
    /// experiment's baseline for a folder analysed before groups were recorded.
    pub fn comparison_groups(&self) -> Vec<Group> {
        if !self.groups.is_empty() {
            return self.groups.clone();
        }
        vec![Group {
            label: String::new(),
            baseline: self.baseline.clone(),
            conditions: self
                .conditions
                .iter()
                .map(|c| c.condition.clone())
                .collect(),
        }]
    }
}

pub fn analyse(raw: &Raw) -> Result<Analysis, AnalysisError> {
    let mut warnings = raw.meta.warnings.clone();
    let runs = run_summaries(raw, &mut warnings)?;
    // Per condition, in plan order, over completed runs.
    let complete: Vec<&RunSummary> = runs.iter().filter(|r| !r.interrupted).collect();
    let baseline = baseline(&raw.plan.conditions, &raw.plan.report().baseline);
    let groups = groups::groups(&raw.plan.conditions, &baseline);
    let mut conditions = condition_summaries(raw, &complete, &groups)?;
    if let Some(tasks) = &raw.meta.tasks {
        // Separate processes, possibly on separate nodes: positions in the plan say nothing
        // about what ran before a run on the same machine.
        for s in &mut conditions {
            s.order_effect.flagged = false;
        }
        let mut hosts: Vec<&str> = tasks.iter().map(|t| t.host.as_str()).collect();
        hosts.sort_unstable();
        hosts.dedup();
        warnings.push(format!(
            "the runs ran as {} separate tasks (a Slurm job array) on {} host(s): {}; each run \
             started a fresh process, so order effects are not assessed and speed differences \
             between hosts add to the spread",
            tasks.len(),
            hosts.len(),
            hosts.join(", ")
        ));
    }
    for s in conditions.iter().filter(|s| s.order_effect.flagged) {
        warnings.push(format!(
            "order effect in {}: runs in later positions were {} img/s from runs in first \
             position, more than the spread within positions ({} img/s)",
            s.condition,
            rate(s.order_effect.difference.unwrap_or(0.0)),
            rate(s.order_effect.spread.unwrap_or(0.0))
        ));
    }
    let complete_ids: Vec<i64> = complete.iter().map(|r| r.run).collect();
    let determinism = checks::determinism(&raw.steps, &complete_ids, &raw.plan)?;
    if !determinism.inconsistent_conditions.is_empty() {
        warnings.push(format!(
            "fingerprints differ between rounds of {}: the batches were not reproducible",
            determinism.inconsistent_conditions.join(", ")
        ));
    }
    for c in &conditions {
        warnings.extend(checks::condition_warnings(raw, c));
    }
    let profiles = profile::profile_summaries(raw);
    let prediction = advice::predict(
        &raw.plan.conditions,
        &conditions,
        &profiles,
        &raw.meta,
        &baseline,
    );
    let model_scale = scale::model_scale(
        &raw.plan.conditions,
        &conditions,
        &complete,
        |name| raw.meta.condition(name).and_then(|c| c.model.clone()),
        raw.plan.experiment.seed,
        raw.plan.report().min_effect,
    );
    let base_stand_in =
        (raw.plan.conditions.iter()).any(|p| p.name == baseline && p.config.model.is_stand_in());
    let framework = FrameworkStep::of(
        raw.plan.report().framework_step_ms,
        conditions.iter().find(|c| c.condition == baseline),
        base_stand_in,
    );
    let engine_switch = engines::switch(
        &raw.plan.conditions,
        &conditions,
        &complete,
        &baseline,
        raw.plan.experiment.seed,
    )
    .map(|mut s| {
        let file = &raw.plan.experiment.file;
        // The fewest native workers that keep up, if that is faster; else the same workers.
        let candidates = [
            (s.fewest_native.clone(), s.fewest_native_ratio),
            (s.native_same_workers.clone(), s.speedup_same_workers),
        ];
        s.adopt = adopt::adopt(&raw.plan.conditions, file, &baseline, &candidates);
        s
    });
    Ok(Analysis {
        baseline,
        groups,
        min_effect: raw.plan.report().min_effect,
        runs,
        conditions,
        determinism,
        profiles,
        prediction,
        model_scale,
        framework,
        engine_switch,
        warnings,
    })
}

/// The condition the others are compared with: the one `[report] baseline` names, else the
/// first.
fn baseline(conditions: &[PlanCondition], wanted: &str) -> String {
    conditions
        .iter()
        .find(|c| c.name == wanted)
        .or(conditions.first())
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

/// Share of a window (ms) in which the device did no step work, from the steps' device busy
/// times; NaN for an empty window.
pub fn idle_fraction(busy_ms: f64, window_ms: f64) -> f64 {
    if window_ms <= 0.0 || window_ms.is_nan() {
        return f64::NAN;
    }
    (1.0 - busy_ms / window_ms).clamp(0.0, 1.0)
}

/// One summary per row of runs.csv, with its steps' statistics.
fn run_summaries(raw: &Raw, warnings: &mut Vec<String>) -> Result<Vec<RunSummary>, AnalysisError> {
    let per_run = step_stats(raw.steps.clone(), "run")?;
    let stat_index: HashMap<i64, usize> = i64s(&per_run, column::RUN)?
        .into_iter()
        .enumerate()
        .map(|(i, r)| (r, i))
        .collect();
    let cols = stat_columns(&per_run)?;
    let step_counts = i64s(&per_run, "steps")?;
    // Each rank's device is busy on its own: idle is over the ranks' windows together.
    let ranks_of = |condition: &str| {
        raw.plan
            .conditions
            .iter()
            .find(|c| c.name == condition)
            .map_or(1, |c| c.config.distributed.ranks) as f64
    };
    let r = &raw.runs;
    let (run_ids, conditions, rounds, positions, workers) = (
        i64s(r, column::RUN)?,
        strs(r, column::CONDITION)?,
        i64s(r, column::ROUND)?,
        i64s(r, column::POSITION)?,
        i64s(r, column::WORKERS)?,
    );
    let (startup, elapsed, images, ips, interrupted) = (
        f64s(r, column::STARTUP_MS)?,
        f64s(r, column::ELAPSED_S)?,
        i64s(r, column::IMAGES)?,
        f64s(r, column::IMG_PER_S)?,
        bools(r, column::INTERRUPTED)?,
    );
    let used: Vec<Vec<f64>> = crate::results::RUN_RESOURCE_COLUMNS
        .iter()
        .map(|c| f64s(r, c))
        .collect::<Result<_, _>>()?;
    let mut runs = Vec::new();
    for i in 0..run_ids.len() {
        let Some(&k) = stat_index.get(&run_ids[i]) else {
            warnings.push(format!("run {} has no step rows in steps.csv", run_ids[i]));
            continue;
        };
        if interrupted[i] {
            warnings.push(format!(
                "run {} ({}) was interrupted after {} steps; it is left out of the speed figures",
                run_ids[i], conditions[i], step_counts[k]
            ));
        }
        let stat = |name: &str| cols[name][k];
        runs.push(RunSummary {
            run: run_ids[i],
            condition: conditions[i].clone(),
            round: rounds[i],
            position: positions[i],
            workers: workers[i],
            steps: step_counts[k],
            images: images[i],
            elapsed_s: elapsed[i],
            img_per_s: ips[i],
            startup_ms: startup[i],
            batch_wait_median_ms: stat("batch_wait_median_ms"),
            batch_wait_p95_ms: stat("batch_wait_p95_ms"),
            batch_wait_max_ms: stat("batch_wait_max_ms"),
            h2d_median_ms: stat("h2d_median_ms"),
            compute_median_ms: stat("compute_median_ms"),
            step_median_ms: stat("step_median_ms"),
            wait_share: stat("wait_share"),
            device_idle: idle_fraction(
                stat("device_ms_sum"),
                elapsed[i] * 1e3 * ranks_of(&conditions[i]),
            ),
            interrupted: interrupted[i],
            process_cpu_s: used[0][i],
            workers_cpu_s: used[1][i],
            training_cpu_s: used[2][i],
            peak_rss_mib: used[3][i],
            page_cache_resident: used[4][i],
        });
    }
    Ok(runs)
}

/// One summary per condition of the plan that has completed runs: step figures pooled over its
/// runs' steps, throughput over its runs, the speed-up against its group's baseline and the
/// judgement.
fn condition_summaries(
    raw: &Raw,
    complete: &[&RunSummary],
    groups: &[Group],
) -> Result<Vec<ConditionSummary>, AnalysisError> {
    let min_effect = raw.plan.report().min_effect;
    let seed = raw.plan.experiment.seed;
    let complete_ids: Vec<i64> = complete.iter().map(|r| r.run).collect();
    let mask: BooleanChunked = i64s(&raw.steps, column::RUN)?
        .iter()
        .map(|r| complete_ids.contains(r))
        .collect();
    let timed_steps = raw.steps.filter(&mask)?;
    let (step_conditions, step_compute) = (
        strs(&timed_steps, column::CONDITION)?,
        f64s(&timed_steps, column::COMPUTE_MS)?,
    );
    let rank_steps = rank_steps(&timed_steps)?;
    let pooled = step_stats(timed_steps, "condition")?;
    let pooled_names = strs(&pooled, column::CONDITION)?;
    let pooled_cols = stat_columns(&pooled)?;
    let of = |name: &str| -> Vec<&RunSummary> {
        complete
            .iter()
            .copied()
            .filter(|r| r.condition == name)
            .collect()
    };
    let ips = |runs: &[&RunSummary]| -> Vec<f64> { runs.iter().map(|r| r.img_per_s).collect() };
    let thresholds = Thresholds::from_report(raw.plan.report());
    let mut summaries = Vec::new();
    for (ci, c) in raw.plan.conditions.iter().enumerate() {
        let mine = of(&c.name);
        if mine.is_empty() {
            continue;
        }
        let values = ips(&mine);
        let k = pooled_names.iter().position(|n| n == &c.name);
        let pooled_of = |col: &str| k.map_or(f64::NAN, |k| pooled_cols[col][k]);
        let baseline = group_of(groups, &c.name).map_or("", |g| g.baseline.as_str());
        let base_runs = of(baseline);
        let speedup = (c.name != baseline && !base_runs.is_empty()).then(|| {
            let mut s = speedup(&mine, &base_runs, seed ^ ci as u64, min_effect);
            s.against = baseline.to_string();
            s
        });
        let (wait_share, p50, p95) = (
            pooled_of("wait_share"),
            pooled_of("batch_wait_median_ms"),
            pooled_of("batch_wait_p95_ms"),
        );
        let img_per_s = bootstrap(&[&values], seed ^ 0x100 ^ ci as u64, |s| median(&s[0]));
        let meta = raw.meta.condition(&c.name);
        let headroom = meta
            .and_then(|m| m.headroom.as_ref())
            .and_then(|h| node_headroom(h, img_per_s.point, &c.config));
        let device_idle = median(&mine.iter().map(|r| r.device_idle).collect::<Vec<_>>());
        let (share, by) = classifying_share(meta, device_idle, wait_share);
        summaries.push(ConditionSummary {
            condition: c.name.clone(),
            runs: mine.len(),
            workers: c.config.loader.workers as i64,
            img_per_s,
            img_per_s_min: stats::min(&values),
            img_per_s_max: stats::max(&values),
            batch_wait_p50_ms: p50,
            batch_wait_p95_ms: p95,
            batch_wait_max_ms: pooled_of("batch_wait_max_ms"),
            h2d_median_ms: pooled_of("h2d_median_ms"),
            compute_median_ms: pooled_of("compute_median_ms"),
            step_median_ms: pooled_of("step_median_ms"),
            device_median_ms: pooled_of("device_median_ms"),
            wait_share,
            device_idle_median: device_idle,
            device_clock: checks::device_clock(raw, &c.name),
            startup_ms_median: median(&mine.iter().map(|r| r.startup_ms).collect::<Vec<_>>()),
            speedup,
            order_effect: checks::order_effect(&mine),
            judgement: thresholds.judge(share, by, p50, p95),
            speedup_bound: wait_bound(share),
            headroom,
            resources: Some(resources::of(
                &mine,
                &of_condition(&step_compute, &step_conditions, &c.name),
                meta.filter(|m| m.compute_device != crate::results::ComputeDevice::Emulated)
                    .and_then(|m| m.headroom.as_ref())
                    .map(|h| &h.step_ms[..]),
                seed ^ 0x1f1a ^ ci as u64,
            )),
            node: ranks::node(
                &of_condition(&rank_steps, &step_conditions, &c.name),
                mine.iter().map(|r| r.elapsed_s * 1e3).sum(),
                &thresholds,
                raw.plan.report().straggler_skew,
                seed ^ 0x2a ^ ci as u64,
            ),
        });
    }
    Ok(summaries)
}

/// The share a condition is classified by: on an asynchronous device the host's waiting
/// overlaps device work, so the device's idle share where device times exist; else the
/// waiting share.
fn classifying_share(
    meta: Option<&crate::results::ConditionMeta>,
    device_idle: f64,
    wait_share: f64,
) -> (f64, ClassifiedBy) {
    if meta.is_some_and(|m| m.compute_device.asynchronous()) && device_idle.is_finite() {
        (device_idle, ClassifiedBy::DeviceIdle)
    } else {
        (wait_share, ClassifiedBy::Waiting)
    }
}

/// The values of the steps that `name` took (`conditions` names each step's condition).
fn of_condition<T: Copy>(values: &[T], conditions: &[String], name: &str) -> Vec<T> {
    values
        .iter()
        .zip(conditions)
        .filter(|(_, n)| *n == name)
        .map(|(v, _)| *v)
        .collect()
}

/// The ceiling from a headroom record. With several ranks the headroom run is one rank's
/// device alone; the node's ceiling is the ranks' together.
fn node_headroom(
    h: &crate::results::HeadroomRecord,
    img_per_s: f64,
    config: &crate::config::Settings,
) -> Option<Headroom> {
    let ranks = config.distributed.ranks as f64;
    Headroom::from_record(h, img_per_s / ranks).map(|h| Headroom {
        img_per_s: h.img_per_s * ranks,
        ..h
    })
}

/// Every step's rank figures, in the frame's order.
fn rank_steps(steps: &DataFrame) -> Result<Vec<ranks::RankStep>, AnalysisError> {
    let (run, rank, wait, step, sync, device) = (
        i64s(steps, column::RUN)?,
        i64s(steps, column::RANK)?,
        f64s(steps, column::BATCH_WAIT_MS)?,
        f64s(steps, column::STEP_MS)?,
        f64s(steps, column::SYNC_MS)?,
        f64s(steps, column::DEVICE_MS)?,
    );
    Ok((0..rank.len())
        .map(|i| ranks::RankStep {
            run: run[i],
            rank: rank[i],
            batch_wait_ms: wait[i],
            step_ms: step[i],
            sync_ms: sync[i],
            device_ms: device[i],
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_is_the_unbusy_share_of_the_window() {
        assert_eq!(idle_fraction(40.0, 100.0), 0.6);
        assert_eq!(idle_fraction(120.0, 100.0), 0.0);
        assert!(idle_fraction(1.0, 0.0).is_nan());
        assert!(idle_fraction(f64::NAN, 100.0).is_nan(), "unknown busy time");
    }
}
