//! Checks on the runs themselves: the order effect (did position in a round matter?) and
//! determinism (did every run see the same batches?), and where device time came from.

use std::collections::BTreeMap;

use polars::prelude::*;

use super::stats::median;
use super::{
    AnalysisError, ConditionSummary, Determinism, ORDER_NOISE_FLOOR, OrderEffect, RunSummary,
};
use crate::plan::Plan;
use crate::results::column;
use crate::results::{ComputeDevice, Raw, i64s, strs};

/// Where device busy time came from: CUDA events, the emulated device's own schedule, or
/// the host's timers (the CPU, whose step is synchronous).
pub(super) fn device_clock(raw: &Raw, condition: &str) -> String {
    match raw.meta.condition(condition).map(|c| c.compute_device) {
        Some(ComputeDevice::Cuda) => "CUDA events".into(),
        Some(ComputeDevice::Emulated) => "the emulated device's own schedule".into(),
        _ => "host timers (CPU)".into(),
    }
}

/// First-position runs against later-position runs of one condition.
pub(super) fn order_effect(runs: &[&RunSummary]) -> OrderEffect {
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

pub(super) fn determinism(
    steps: &DataFrame,
    complete: &[i64],
    plan: &Plan,
) -> Result<Determinism, AnalysisError> {
    let runs = i64s(steps, column::RUN)?;
    let conds = strs(steps, column::CONDITION)?;
    let fps = strs(steps, column::FINGERPRINT)?;
    let step_no = i64s(steps, column::STEP)?;
    let rank = i64s(steps, column::RANK)?;
    // Each run's fingerprints by step, then rank (each rank's share of the epoch differs).
    type Sequence = Vec<(i64, i64, String)>;
    let mut seq: BTreeMap<i64, (String, Sequence)> = BTreeMap::new();
    for i in 0..runs.len() {
        if !complete.contains(&runs[i]) {
            continue;
        }
        seq.entry(runs[i])
            .or_insert_with(|| (conds[i].clone(), Vec::new()))
            .1
            .push((step_no[i], rank[i], fps[i].clone()));
    }
    let mut by_condition: BTreeMap<String, Vec<Vec<String>>> = BTreeMap::new();
    for (_, (cond, mut rows)) in seq {
        rows.sort();
        by_condition
            .entry(cond)
            .or_default()
            .push(rows.into_iter().map(|(_, _, f)| f).collect());
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
    let group_of = |name: &str| {
        groups
            .iter()
            .position(|(_, names)| names.iter().any(|n| n == name))
    };
    let ran: Vec<&crate::plan::PlanCondition> = plan
        .conditions
        .iter()
        .filter(|c| group_of(&c.name).is_some())
        .collect();
    let groups_follow_settings = ran.iter().all(|a| {
        ran.iter().all(|b| {
            data_key(&a.config) != data_key(&b.config) || group_of(&a.name) == group_of(&b.name)
        })
    });
    Ok(Determinism {
        groups_follow_settings,
        identical: inconsistent.is_empty() && groups.len() <= 1,
        inconsistent_conditions: inconsistent,
        groups: groups.into_iter().map(|(_, n)| n).collect(),
    })
}

/// What decides a condition's batches: its dataset (but where and how its files are kept and
/// read), its transforms (but `cpu_work`, which changes no pixel), batch size, shuffle,
/// drop_last, seed and ranks.
fn data_key(s: &crate::config::Settings) -> String {
    use crate::config::{DatasetSection, TransformSpec};
    let d = DatasetSection {
        storage: Default::default(),
        page_cache: crate::config::PageCache::AsIs,
        cache: crate::config::CacheMode::None,
        roi_decode: true,
        ..s.dataset.clone()
    };
    let transforms: Vec<&TransformSpec> = s
        .transforms
        .iter()
        .filter(|t| !matches!(t, TransformSpec::CpuWork(_)))
        .collect();
    let l = &s.loader;
    // Each engine fingerprints its own batches; a torch DataLoader's random transforms also
    // follow its worker count (each worker seeds its own generator).
    let pytorch = l.engine == crate::config::EngineKind::Pytorch;
    let engine_workers = pytorch.then_some(l.workers);
    // The user's own Dataset and collate_fn are the data (the declared ones do not apply).
    let users = pytorch.then_some((&s.pytorch.dataset, &s.pytorch.collate_fn));
    serde_json::json!([
        d,
        transforms,
        l.batch_size,
        l.shuffle,
        l.drop_last,
        s.experiment.seed,
        s.distributed.ranks,
        l.engine,
        engine_workers,
        users
    ])
    .to_string()
}

/// What one condition's figures warn of: the step slowed by the loader (compute inflation), a
/// "cold" page cache that was not, a headroom ceiling below the timed runs.
pub(super) fn condition_warnings(raw: &Raw, c: &ConditionSummary) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(w) = c
        .resources
        .as_ref()
        .and_then(|r| super::resources::inflation_warning(&c.condition, r))
    {
        out.push(w);
    }
    let cold = raw.plan.conditions.iter().any(|p| {
        p.name == c.condition && p.config.dataset.page_cache == crate::config::PageCache::Cold
    });
    if let Some(r) = c
        .resources
        .as_ref()
        .filter(|r| cold && r.page_cache_resident > 0.05)
    {
        out.push(format!(
            "{}: dataset.page_cache = \"cold\", but {} of the dataset's pages were still \
             in the page cache as the timed windows opened (median): this filesystem \
             ignores POSIX_FADV_DONTNEED (a tmpfs does), so reads were not cold",
            c.condition,
            crate::format::pct(r.page_cache_resident)
        ));
    }
    if let Some(h) = c.headroom.as_ref().filter(|h| h.share_of_ceiling > 1.05) {
        out.push(format!(
            "{}: its timed runs reached {} of the headroom ceiling: the headroom run (one, \
             after the timed runs) met a slower machine than they did, so that ceiling is \
             an underestimate; this machine's speed drifts between runs",
            c.condition,
            crate::format::pct(h.share_of_ceiling)
        ));
    }
    out
}
