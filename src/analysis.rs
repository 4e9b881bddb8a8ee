//! From the raw files of a results folder to the figures a report states.
//!
//! Invariant: everything is computed from the files on disk (`steps.csv`, `runs.csv`,
//! `plan.json`, `run.json`, `traces/`), never from the runner's memory, so
//! `loaderlab report <dir>` rebuilds exactly what the run wrote. Percentiles use linear
//! interpolation (pandas' and numpy's default) so anyone can recompute them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use polars::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::hash::splitmix;
use crate::plan::Plan;
use crate::results::{
    ComputeDevice, Raw, ResultsError, STEPS_PARQUET, SUMMARY_CSV, bools, f64s, i64s, strs,
    write_atomic,
};
use crate::trace::{self, Span, read_trace};

/// An order effect is flagged only when the gap between first-position and later runs exceeds
/// both the spread within positions and this share of the condition's median throughput.
pub const ORDER_NOISE_FLOOR: f64 = 0.02;

/// Bootstrap resamples for confidence intervals.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Speedup {
    /// Median img/s of this condition over the baseline's.
    pub ratio: f64,
    pub ci_low: f64,
    pub ci_high: f64,
    /// (round, ratio) for rounds where both ran.
    pub paired: Vec<(i64, f64)>,
    /// The 95 % interval excludes 1.
    pub beyond_noise: bool,
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
    pub img_per_s_median: f64,
    pub img_per_s_min: f64,
    pub img_per_s_max: f64,
    /// 95 % bootstrap interval of the median img/s.
    pub img_per_s_ci: (f64, f64),
    pub batch_wait_p50_ms: f64,
    pub batch_wait_p95_ms: f64,
    pub batch_wait_max_ms: f64,
    pub h2d_median_ms: f64,
    pub compute_median_ms: f64,
    pub step_median_ms: f64,
    pub wait_share: f64,
    /// Median over runs of [`RunSummary::device_idle`].
    pub device_idle_median: f64,
    /// Where device busy time comes from: "CUDA events" or "host timers (CPU)".
    pub device_clock: String,
    pub startup_ms_median: f64,
    pub speedup: Option<Speedup>,
    pub order_effect: OrderEffect,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Determinism {
    /// Every timed run, of every condition, saw the same fingerprint sequence.
    pub identical: bool,
    /// Conditions whose rounds disagree among themselves (never expected).
    pub inconsistent_conditions: Vec<String>,
    /// Groups of conditions sharing a sequence (more than one group means the data differed).
    pub groups: Vec<Vec<String>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpanRow {
    /// "training thread" or "workers (summed)".
    pub track: String,
    pub span: String,
    pub count: usize,
    pub total_ms: f64,
    pub mean_ms: f64,
    /// Total over the profiled window (summed worker time can exceed 1).
    pub share: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProfileSummary {
    pub condition: String,
    pub file: String,
    pub bytes: u64,
    pub window_ms: f64,
    pub rows: Vec<SpanRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Analysis {
    pub baseline: String,
    pub runs: Vec<RunSummary>,
    pub conditions: Vec<ConditionSummary>,
    pub determinism: Determinism,
    pub profiles: Vec<ProfileSummary>,
    pub warnings: Vec<String>,
}

/// Linear-interpolation quantile of unsorted data (numpy/pandas default).
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

pub fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5)
}

/// 95 % percentile-bootstrap interval of `stat` over resamples of each group.
fn bootstrap<F: Fn(&[Vec<f64>]) -> f64>(groups: &[&[f64]], seed: u64, stat: F) -> (f64, f64) {
    if groups.iter().any(|g| g.is_empty()) {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(splitmix(seed ^ 0x626f_6f74));
    let mut samples: Vec<Vec<f64>> = groups.iter().map(|g| vec![0.0; g.len()]).collect();
    let mut stats = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        for (g, s) in groups.iter().zip(samples.iter_mut()) {
            for slot in s.iter_mut() {
                *slot = g[rng.random_range(0..g.len())];
            }
        }
        stats.push(stat(&samples));
    }
    (quantile(&stats, 0.025), quantile(&stats, 0.975))
}

/// The step statistics computed per run and per condition, by column name.
const STAT_COLUMNS: [&str; 8] = [
    "batch_wait_median_ms",
    "batch_wait_p95_ms",
    "batch_wait_max_ms",
    "h2d_median_ms",
    "compute_median_ms",
    "step_median_ms",
    "wait_share",
    "device_ms_sum",
];

/// Step statistics grouped by `key` (`run`, or `condition` for pooled figures), with polars.
fn step_stats(steps: DataFrame, key: &str) -> Result<DataFrame, AnalysisError> {
    Ok(steps
        .lazy()
        .group_by([col(key)])
        .agg([
            col("step").count().alias("steps"),
            col("batch_wait_ms").median().alias(STAT_COLUMNS[0]),
            col("batch_wait_ms")
                .quantile(lit(0.95), QuantileMethod::Linear)
                .alias(STAT_COLUMNS[1]),
            col("batch_wait_ms").max().alias(STAT_COLUMNS[2]),
            col("h2d_ms").median().alias(STAT_COLUMNS[3]),
            col("compute_ms").median().alias(STAT_COLUMNS[4]),
            col("step_ms").median().alias(STAT_COLUMNS[5]),
            (col("batch_wait_ms").sum() / col("step_ms").sum()).alias(STAT_COLUMNS[6]),
            col("device_ms").sum().alias(STAT_COLUMNS[7]),
        ])
        .sort([key], Default::default())
        .collect()?)
}

fn stat_columns(df: &DataFrame) -> Result<BTreeMap<&'static str, Vec<f64>>, AnalysisError> {
    STAT_COLUMNS
        .into_iter()
        .map(|c| Ok((c, f64s(df, c)?)))
        .collect()
}

pub fn analyse(raw: &Raw) -> Result<Analysis, AnalysisError> {
    let seed = raw.plan.experiment.seed;
    let mut warnings = raw.meta.warnings.clone();

    // Per run.
    let per_run = step_stats(raw.steps.clone(), "run")?;
    let stat_runs = i64s(&per_run, "run")?;
    let stat_index: HashMap<i64, usize> =
        stat_runs.iter().enumerate().map(|(i, r)| (*r, i)).collect();
    let cols = stat_columns(&per_run)?;
    let step_counts = i64s(&per_run, "steps")?;

    let r = &raw.runs;
    let (run_ids, conditions, rounds, positions, workers) = (
        i64s(r, "run")?,
        strs(r, "condition")?,
        i64s(r, "round")?,
        i64s(r, "position")?,
        i64s(r, "workers")?,
    );
    let (startup, elapsed, images, ips, interrupted) = (
        f64s(r, "startup_ms")?,
        f64s(r, "elapsed_s")?,
        i64s(r, "images")?,
        f64s(r, "img_per_s")?,
        bools(r, "interrupted")?,
    );
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
            batch_wait_median_ms: cols["batch_wait_median_ms"][k],
            batch_wait_p95_ms: cols["batch_wait_p95_ms"][k],
            batch_wait_max_ms: cols["batch_wait_max_ms"][k],
            h2d_median_ms: cols["h2d_median_ms"][k],
            compute_median_ms: cols["compute_median_ms"][k],
            step_median_ms: cols["step_median_ms"][k],
            wait_share: cols["wait_share"][k],
            device_idle: crate::train::idle_fraction([cols["device_ms_sum"][k]], elapsed[i] * 1e3),
            interrupted: interrupted[i],
        });
    }

    // Per condition, in plan order, over completed runs.
    let complete: Vec<&RunSummary> = runs.iter().filter(|r| !r.interrupted).collect();
    let complete_ids: Vec<i64> = complete.iter().map(|r| r.run).collect();
    let all_runs = i64s(&raw.steps, "run")?;
    let mask: BooleanChunked = all_runs.iter().map(|r| complete_ids.contains(r)).collect();
    let pooled = step_stats(raw.steps.filter(&mask)?, "condition")?;
    let pooled_names = strs(&pooled, "condition")?;
    let pooled_cols = stat_columns(&pooled)?;
    let baseline = raw
        .plan
        .conditions
        .iter()
        .find(|c| c.config.report.baseline == c.name)
        .or_else(|| {
            let wanted = &raw.plan.conditions.first()?.config.report.baseline;
            raw.plan.conditions.iter().find(|c| &c.name == wanted)
        })
        .or(raw.plan.conditions.first())
        .map(|c| c.name.clone())
        .unwrap_or_default();
    let ips_of = |name: &str| -> Vec<f64> {
        complete
            .iter()
            .filter(|r| r.condition == name)
            .map(|r| r.img_per_s)
            .collect()
    };
    let base_ips = ips_of(&baseline);
    let mut summaries = Vec::new();
    for (ci, c) in raw.plan.conditions.iter().enumerate() {
        let mine: Vec<&&RunSummary> = complete.iter().filter(|r| r.condition == c.name).collect();
        if mine.is_empty() {
            continue;
        }
        let values: Vec<f64> = mine.iter().map(|r| r.img_per_s).collect();
        let k = pooled_names.iter().position(|n| n == &c.name);
        let pooled_of = |col: &str| k.map_or(f64::NAN, |k| pooled_cols[col][k]);
        let speedup = (c.name != baseline && !base_ips.is_empty()).then(|| {
            let ratio = median(&values) / median(&base_ips);
            let (lo, hi) = bootstrap(&[&values, &base_ips], seed ^ ci as u64, |s| {
                median(&s[0]) / median(&s[1])
            });
            let paired = mine
                .iter()
                .filter_map(|r| {
                    complete
                        .iter()
                        .find(|b| b.condition == baseline && b.round == r.round)
                        .map(|b| (r.round, r.img_per_s / b.img_per_s))
                })
                .collect();
            Speedup {
                ratio,
                ci_low: lo,
                ci_high: hi,
                paired,
                beyond_noise: !(lo <= 1.0 && 1.0 <= hi),
            }
        });
        summaries.push(ConditionSummary {
            condition: c.name.clone(),
            runs: mine.len(),
            workers: c.config.loader.workers as i64,
            img_per_s_median: median(&values),
            img_per_s_min: values.iter().copied().fold(f64::INFINITY, f64::min),
            img_per_s_max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            img_per_s_ci: bootstrap(&[&values], seed ^ 0x100 ^ ci as u64, |s| median(&s[0])),
            batch_wait_p50_ms: pooled_of("batch_wait_median_ms"),
            batch_wait_p95_ms: pooled_of("batch_wait_p95_ms"),
            batch_wait_max_ms: pooled_of("batch_wait_max_ms"),
            h2d_median_ms: pooled_of("h2d_median_ms"),
            compute_median_ms: pooled_of("compute_median_ms"),
            step_median_ms: pooled_of("step_median_ms"),
            wait_share: pooled_of("wait_share"),
            device_idle_median: median(&mine.iter().map(|r| r.device_idle).collect::<Vec<_>>()),
            device_clock: device_clock(raw, &c.name),
            startup_ms_median: median(&mine.iter().map(|r| r.startup_ms).collect::<Vec<_>>()),
            speedup,
            order_effect: order_effect(&mine),
        });
    }
    if let Some(tasks) = &raw.meta.tasks {
        // Separate processes, possibly on separate nodes: positions in the plan say nothing
        // about what ran before a run on the same machine.
        for s in &mut summaries {
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
    for s in &summaries {
        if s.order_effect.flagged {
            warnings.push(format!(
                "order effect in {}: runs in later positions were {:+.0} img/s from runs in first \
                 position, more than the spread within positions ({:.0} img/s)",
                s.condition,
                s.order_effect.difference.unwrap_or(0.0),
                s.order_effect.spread.unwrap_or(0.0)
            ));
        }
    }

    let determinism = determinism(&raw.steps, &complete_ids, &raw.plan)?;
    if !determinism.inconsistent_conditions.is_empty() {
        warnings.push(format!(
            "fingerprints differ between rounds of {}: the batches were not reproducible",
            determinism.inconsistent_conditions.join(", ")
        ));
    }
    let profiles = profile_summaries(raw);
    Ok(Analysis {
        baseline,
        runs,
        conditions: summaries,
        determinism,
        profiles,
        warnings,
    })
}

/// First-position runs against later-position runs of one condition.
/// "CUDA events" when the condition trained on a CUDA device, else the host's timers.
fn device_clock(raw: &Raw, condition: &str) -> String {
    let on_cuda = raw
        .meta
        .condition(condition)
        .is_some_and(|c| c.compute_device == ComputeDevice::Cuda);
    if on_cuda {
        "CUDA events".into()
    } else {
        "host timers (CPU)".into()
    }
}

fn order_effect(runs: &[&&RunSummary]) -> OrderEffect {
    let first: Vec<f64> = runs
        .iter()
        .filter(|r| r.position == 0)
        .map(|r| r.img_per_s)
        .collect();
    let later: Vec<f64> = runs
        .iter()
        .filter(|r| r.position > 0)
        .map(|r| r.img_per_s)
        .collect();
    if first.is_empty() || later.is_empty() {
        return OrderEffect {
            first_median_img_per_s: (!first.is_empty()).then(|| median(&first)),
            later_median_img_per_s: (!later.is_empty()).then(|| median(&later)),
            difference: None,
            spread: None,
            flagged: false,
        };
    }
    let range = |v: &[f64]| {
        v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            - v.iter().copied().fold(f64::INFINITY, f64::min)
    };
    let spread = range(&first).max(range(&later));
    let difference = median(&later) - median(&first);
    // With one run per group there is no spread to compare against; gaps under
    // ORDER_NOISE_FLOOR of the median are run-to-run noise on any machine.
    let measurable = first.len() > 1 || later.len() > 1;
    let all: Vec<f64> = first.iter().chain(&later).copied().collect();
    let floor = ORDER_NOISE_FLOOR * median(&all);
    OrderEffect {
        first_median_img_per_s: Some(median(&first)),
        later_median_img_per_s: Some(median(&later)),
        difference: Some(difference),
        spread: Some(spread),
        flagged: measurable && difference.abs() > spread && difference.abs() > floor,
    }
}

fn determinism(
    steps: &DataFrame,
    complete: &[i64],
    plan: &Plan,
) -> Result<Determinism, AnalysisError> {
    let runs = i64s(steps, "run")?;
    let conds = strs(steps, "condition")?;
    let fps = strs(steps, "fingerprint")?;
    let step_no = i64s(steps, "step")?;
    let mut seq: BTreeMap<i64, (String, Vec<(i64, String)>)> = BTreeMap::new();
    for i in 0..runs.len() {
        if !complete.contains(&runs[i]) {
            continue;
        }
        seq.entry(runs[i])
            .or_insert_with(|| (conds[i].clone(), Vec::new()))
            .1
            .push((step_no[i], fps[i].clone()));
    }
    let mut by_condition: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    for (_, (cond, mut rows)) in seq {
        rows.sort();
        by_condition
            .entry(cond)
            .or_default()
            .push(rows.into_iter().map(|(_, f)| f).collect());
    }
    let mut inconsistent = Vec::new();
    let mut groups: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for c in &plan.conditions {
        let Some(seqs) = by_condition.get(&c.name) else {
            continue;
        };
        if seqs.windows(2).any(|w| w[0] != w[1]) {
            inconsistent.push(c.name.clone());
        }
        match groups.iter_mut().find(|(s, _)| *s == seqs[0]) {
            Some((_, names)) => names.push(c.name.clone()),
            None => groups.push((seqs[0].clone(), vec![c.name.clone()])),
        }
    }
    Ok(Determinism {
        identical: inconsistent.is_empty() && groups.len() <= 1,
        inconsistent_conditions: inconsistent,
        groups: groups.into_iter().map(|(_, n)| n).collect(),
    })
}

/// Span statistics from each condition's Chrome trace.
fn profile_summaries(raw: &Raw) -> Vec<ProfileSummary> {
    raw.meta
        .conditions
        .iter()
        .filter_map(|c| {
            let file = c.trace.clone()?;
            let path = raw.dir.join(&file);
            let bytes = std::fs::metadata(&path).ok()?.len();
            let (window_ms, rows) = summarise_trace(&path).ok()?;
            Some(ProfileSummary {
                condition: c.name.clone(),
                file,
                bytes,
                window_ms,
                rows,
            })
        })
        .collect()
}

fn summarise_trace(path: &Path) -> Result<(f64, Vec<SpanRow>), AnalysisError> {
    let (mut spans, names) = read_trace(path)?;
    spans.retain(|s| s.1 != trace::GPU_CLOCK_ANCHOR);
    // The training thread is the one with batch_wait spans; the GPU track is named.
    let main = spans.iter().find(|s| s.1 == trace::BATCH_WAIT).map(|s| s.0);
    let gpu = names
        .iter()
        .find(|(_, n)| n.as_str() == trace::GPU_TRACK)
        .map(|(t, _)| *t);
    let track_of = |tid: u64| {
        if Some(tid) == main {
            0
        } else if Some(tid) == gpu {
            2
        } else {
            1
        }
    };
    let on_main: Vec<&Span> = spans.iter().filter(|s| Some(s.0) == main).collect();
    let start = on_main.iter().map(|s| s.2).fold(f64::INFINITY, f64::min);
    let end = on_main
        .iter()
        .map(|s| s.3)
        .fold(f64::NEG_INFINITY, f64::max);
    let window_ms = if end > start {
        (end - start) / 1e3
    } else {
        0.0
    };
    let mut rows = Vec::new();
    for (t, track) in ["training thread", "workers (summed)", trace::GPU_TRACK]
        .into_iter()
        .enumerate()
    {
        let mut names: Vec<&str> = Vec::new();
        for s in spans.iter().filter(|s| track_of(s.0) == t) {
            if !names.contains(&s.1.as_str()) {
                names.push(&s.1);
            }
        }
        for name in names {
            let durations: Vec<f64> = spans
                .iter()
                .filter(|s| track_of(s.0) == t && s.1 == name)
                .map(|s| (s.3 - s.2) / 1e3)
                .collect();
            let total: f64 = durations.iter().sum();
            rows.push(SpanRow {
                track: track.into(),
                span: name.into(),
                count: durations.len(),
                total_ms: total,
                mean_ms: total / durations.len() as f64,
                share: if window_ms > 0.0 {
                    total / window_ms
                } else {
                    0.0
                },
            });
        }
    }
    Ok((window_ms, rows))
}

/// `summary.csv`: one row per condition.
pub fn summary_frame(a: &Analysis) -> Result<DataFrame, AnalysisError> {
    let c = &a.conditions;
    let get = |f: fn(&ConditionSummary) -> f64| c.iter().map(f).collect::<Vec<f64>>();
    let df = DataFrame::new_infer_height(vec![
        Column::new(
            "condition".into(),
            c.iter().map(|s| s.condition.clone()).collect::<Vec<_>>(),
        ),
        Column::new(
            "runs".into(),
            c.iter().map(|s| s.runs as i64).collect::<Vec<_>>(),
        ),
        Column::new(
            "workers".into(),
            c.iter().map(|s| s.workers).collect::<Vec<_>>(),
        ),
        Column::new("img_per_s_median".into(), get(|s| s.img_per_s_median)),
        Column::new("img_per_s_min".into(), get(|s| s.img_per_s_min)),
        Column::new("img_per_s_max".into(), get(|s| s.img_per_s_max)),
        Column::new("img_per_s_ci_low".into(), get(|s| s.img_per_s_ci.0)),
        Column::new("img_per_s_ci_high".into(), get(|s| s.img_per_s_ci.1)),
        Column::new(
            "speedup".into(),
            get(|s| s.speedup.as_ref().map_or(1.0, |x| x.ratio)),
        ),
        Column::new(
            "speedup_ci_low".into(),
            get(|s| s.speedup.as_ref().map_or(f64::NAN, |x| x.ci_low)),
        ),
        Column::new(
            "speedup_ci_high".into(),
            get(|s| s.speedup.as_ref().map_or(f64::NAN, |x| x.ci_high)),
        ),
        Column::new("batch_wait_p50_ms".into(), get(|s| s.batch_wait_p50_ms)),
        Column::new("batch_wait_p95_ms".into(), get(|s| s.batch_wait_p95_ms)),
        Column::new("batch_wait_max_ms".into(), get(|s| s.batch_wait_max_ms)),
        Column::new("h2d_median_ms".into(), get(|s| s.h2d_median_ms)),
        Column::new("compute_median_ms".into(), get(|s| s.compute_median_ms)),
        Column::new("step_median_ms".into(), get(|s| s.step_median_ms)),
        Column::new("wait_share".into(), get(|s| s.wait_share)),
        Column::new("device_idle".into(), get(|s| s.device_idle_median)),
        Column::new("startup_ms_median".into(), get(|s| s.startup_ms_median)),
    ])?;
    Ok(df)
}

/// Write `summary.csv` and `steps.parquet` (atomically) next to the raw files.
pub fn write_tables(raw: &Raw, a: &Analysis) -> Result<(), AnalysisError> {
    let mut summary = summary_frame(a)?;
    let mut buf = Vec::new();
    CsvWriter::new(&mut buf).finish(&mut summary)?;
    let path = raw.dir.join(SUMMARY_CSV);
    write_atomic(&path, &buf).map_err(|e| file_err(&path, e))?;
    let mut steps = raw.steps.clone();
    let mut pq = Vec::new();
    ParquetWriter::new(&mut pq).finish(&mut steps)?;
    let path = raw.dir.join(STEPS_PARQUET);
    write_atomic(&path, &pq).map_err(|e| file_err(&path, e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_linearly() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(median(&v), 2.5);
        assert!((quantile(&v, 0.95) - 3.85).abs() < 1e-12);
        assert_eq!(quantile(&[7.0], 0.95), 7.0);
    }

    #[test]
    fn bootstrap_interval_brackets_the_ratio() {
        let a = [100.0, 110.0, 105.0];
        let b = [50.0, 52.0, 49.0];
        let (lo, hi) = bootstrap(&[&a, &b], 1, |s| median(&s[0]) / median(&s[1]));
        assert!(
            lo > 1.8 && hi < 2.3 && lo <= 105.0 / 50.0 && 105.0 / 50.0 <= hi,
            "{lo} {hi}"
        );
    }
}
