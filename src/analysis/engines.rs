//! What switching engines would buy, where a matrix sets the pytorch engine beside the native
//! one: within the baseline's group (the conditions that share every setting but the engine and
//! the worker count), loaderlab's loader against the PyTorch DataLoader's best condition at the
//! same workers, and the fewest native workers that keep up with that best.
//!
//! Invariant: every figure comes from the timed runs' img/s, as a ratio of medians with a
//! bootstrap CI over both conditions' runs (the speed-up's own estimate), so `verify`
//! recomputes it.

use serde::{Deserialize, Serialize};

use super::stats::Estimate;
use super::{ConditionSummary, RunSummary};
use crate::config::{EngineKind, Settings};
use crate::plan::PlanCondition;

/// The native engine beside the PyTorch DataLoader's best, in the baseline's group.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EngineSwitch {
    /// The pytorch condition with the highest median img/s in the group.
    pub pytorch_best: String,
    pub pytorch_best_img_per_s: f64,
    pub pytorch_best_workers: u64,
    /// The native condition at the same worker count, and its median img/s over the pytorch
    /// best's (bootstrap CI over both conditions' runs).
    pub native_same_workers: Option<String>,
    pub speedup_same_workers: Option<Estimate>,
    /// The native condition with the fewest workers whose img/s is not below the pytorch
    /// best's beyond noise (its ratio's 95 % CI reaches 1), and that ratio.
    pub fewest_native: Option<String>,
    pub fewest_native_workers: Option<u64>,
    pub fewest_native_ratio: Option<Estimate>,
    /// The change as code, where the baseline is the DataLoader and ours is faster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adopt: Option<super::Adopt>,
}

/// Two conditions' settings are equal but for the engine and the worker count.
fn same_but_engine_and_workers(a: &Settings, b: &Settings) -> bool {
    let mut b = b.clone();
    b.loader.engine = a.loader.engine;
    b.loader.workers = a.loader.workers;
    *a == b
}

/// `mine`'s median img/s over `other`'s, with its CI: the speed-up's own estimate.
fn ratio(mine: &[&RunSummary], other: &[&RunSummary], seed: u64) -> Estimate {
    super::speedup(mine, other, seed, 0.0).ratio
}

/// The switch for the baseline's group, when it holds both engines.
pub fn switch(
    plan: &[PlanCondition],
    conditions: &[ConditionSummary],
    complete: &[&RunSummary],
    baseline: &str,
    seed: u64,
) -> Option<EngineSwitch> {
    let base = plan.iter().find(|c| c.name == baseline)?;
    let group: Vec<&PlanCondition> = plan
        .iter()
        .filter(|c| same_but_engine_and_workers(&base.config, &c.config))
        .collect();
    let img_per_s = |name: &str| {
        conditions
            .iter()
            .find(|s| s.condition == name)
            .map(|s| s.img_per_s.point)
    };
    let runs_of = |name: &str| -> Vec<&RunSummary> {
        complete
            .iter()
            .copied()
            .filter(|r| r.condition == name)
            .collect()
    };
    let of_engine = |engine: EngineKind| -> Vec<(&PlanCondition, f64)> {
        let mut v: Vec<(&PlanCondition, f64)> = group
            .iter()
            .filter(|c| c.config.loader.engine == engine)
            .filter_map(|c| Some((*c, img_per_s(&c.name)?)))
            .collect();
        v.sort_by_key(|(c, _)| c.config.loader.workers);
        v
    };
    let (pytorch, native) = (
        of_engine(EngineKind::Pytorch),
        of_engine(EngineKind::Native),
    );
    if native.is_empty() {
        return None;
    }
    let (best, best_ips) = pytorch.iter().max_by(|a, b| a.1.total_cmp(&b.1)).copied()?;
    let best_runs = runs_of(&best.name);
    let workers = best.config.loader.workers;
    let same = native
        .iter()
        .find(|(c, _)| c.config.loader.workers == workers);
    let speedup_same_workers = same.map(|(c, _)| ratio(&runs_of(&c.name), &best_runs, seed));
    let fewest = native.iter().find_map(|(c, _)| {
        let r = ratio(&runs_of(&c.name), &best_runs, seed ^ 0x5157);
        (r.high >= 1.0).then_some((*c, r))
    });
    Some(EngineSwitch {
        pytorch_best: best.name.clone(),
        pytorch_best_img_per_s: best_ips,
        pytorch_best_workers: workers,
        native_same_workers: same.map(|(c, _)| c.name.clone()),
        speedup_same_workers,
        fewest_native: fewest.map(|(c, _)| c.name.clone()),
        fewest_native_workers: fewest.map(|(c, _)| c.config.loader.workers),
        fewest_native_ratio: fewest.map(|(_, r)| r),
        adopt: None,
    })
}
