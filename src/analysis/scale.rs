//! Model compute as an axis: when the matrix varies a model setting and the worker count, the
//! conditions fall into groups that differ only in their workers. Per group: the step's
//! compute time, each worker count's waiting share and its speed-up over the group's fewest
//! workers (bootstrap CI over rounds) — and, over the groups ordered by compute, where extra
//! workers stopped paying.

use serde::{Deserialize, Serialize};

use super::advice::same_but_workers;
use super::{ClassifiedBy, ConditionSummary, Effect, Estimate, InputBound, RunSummary, speedup};
use crate::plan::PlanCondition;

/// One condition of a group.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScalePoint {
    pub condition: String,
    pub workers: u64,
    /// The share its class was judged on: waiting, or device idle on an asynchronous device
    /// (the condition's `judgement.classified_by`).
    pub wait_share: f64,
    /// Median img/s over the group's fewest-workers condition's, with its 95 % CI (None for
    /// that condition itself).
    pub speedup: Option<Estimate>,
    /// The extra workers paid: faster beyond noise and by a difference that matters
    /// (`[report] min_effect`).
    pub pays: bool,
}

/// Conditions that share every setting but the worker count.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScaleGroup {
    /// What sets this group apart, e.g. "width=16".
    pub label: String,
    /// The model as built (name, input, parameter count), when run.json records it.
    pub model: Option<String>,
    /// Median compute time per step of the fewest-workers condition, ms (its device time
    /// where the device runs asynchronously: CUDA, the stand-in).
    pub compute_ms: f64,
    /// Points in worker order; the first is the reference of the speed-ups.
    pub points: Vec<ScalePoint>,
    /// Some extra worker count paid beyond noise.
    pub workers_pay: bool,
    /// The fewest-workers condition's input-bound class.
    pub input_bound: InputBound,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelScale {
    /// Groups in order of compute time per step.
    pub groups: Vec<ScaleGroup>,
    /// Index of the first group from which on no group's extra workers paid, when an earlier
    /// one's did.
    pub stops_paying_from: Option<usize>,
    /// Index of the first group from which on the fewest-workers condition is not input-bound,
    /// when an earlier one's was: where the step's compute hides the loader.
    pub hidden_from: Option<usize>,
}

/// "key=value" for each override but `loader.workers`, by its last key.
fn label(c: &PlanCondition) -> String {
    fn walk(t: &toml::Table, prefix: &str, out: &mut Vec<String>) {
        for (k, v) in t {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            match v {
                toml::Value::Table(inner) => walk(inner, &path, out),
                _ if path == "loader.workers" => {}
                toml::Value::String(s) => out.push(format!("{k}={s}")),
                other => out.push(format!("{k}={other}")),
            }
        }
    }
    let mut parts = Vec::new();
    walk(&c.overrides, "", &mut parts);
    if parts.is_empty() {
        c.name.clone()
    } else {
        parts.join(",")
    }
}

/// The crossover analysis, when the conditions vary both the model and the worker count.
pub fn model_scale(
    plan: &[PlanCondition],
    summaries: &[ConditionSummary],
    runs: &[&RunSummary],
    model_of: impl Fn(&str) -> Option<String>,
    seed: u64,
    min_effect: f64,
) -> Option<ModelScale> {
    let mut families: Vec<Vec<&PlanCondition>> = Vec::new();
    for c in plan {
        match families
            .iter_mut()
            .find(|f| same_but_workers(&f[0].config, &c.config))
        {
            Some(f) => f.push(c),
            None => families.push(vec![c]),
        }
    }
    let models_differ = families
        .iter()
        .any(|f| f[0].config.model != families[0][0].config.model);
    let workers_vary = families.iter().any(|f| f.len() > 1);
    if families.len() < 2 || !models_differ || !workers_vary {
        return None;
    }
    let runs_of = |name: &str| -> Vec<&RunSummary> {
        runs.iter()
            .copied()
            .filter(|r| r.condition == name)
            .collect()
    };
    let mut groups = Vec::new();
    for (gi, family) in families.iter_mut().enumerate() {
        family.sort_by_key(|c| c.config.loader.workers);
        let measured: Vec<(&PlanCondition, &ConditionSummary)> = family
            .iter()
            .filter_map(|c| Some((*c, summaries.iter().find(|s| s.condition == c.name)?)))
            .collect();
        let Some((first, first_summary)) = measured.first().copied() else {
            continue;
        };
        let base_runs = runs_of(&first.name);
        let points: Vec<ScalePoint> = measured
            .iter()
            .enumerate()
            .map(|(k, (c, s))| {
                let ratio = (k > 0 && !base_runs.is_empty()).then(|| {
                    speedup(
                        &runs_of(&c.name),
                        &base_runs,
                        seed ^ 0x5ca1e ^ (gi * 64 + k) as u64,
                        min_effect,
                    )
                    .ratio
                });
                ScalePoint {
                    condition: c.name.clone(),
                    workers: c.config.loader.workers,
                    wait_share: s.judgement.share,
                    pays: ratio
                        .as_ref()
                        .is_some_and(|r| Effect::of(r, min_effect) == Effect::Faster),
                    speedup: ratio,
                }
            })
            .collect();
        groups.push(ScaleGroup {
            label: label(first),
            model: model_of(&first.name),
            // On an asynchronous device the host's compute time is only the enqueue: the
            // device's busy time is the step's compute.
            compute_ms: match first_summary.judgement.classified_by {
                ClassifiedBy::DeviceIdle => first_summary.device_median_ms,
                ClassifiedBy::Waiting => first_summary.compute_median_ms,
            },
            workers_pay: points.iter().any(|p| p.pays),
            input_bound: first_summary.judgement.input_bound,
            points,
        });
    }
    groups.sort_by(|a, b| a.compute_ms.total_cmp(&b.compute_ms));
    let last_paying = groups.iter().rposition(|g| g.workers_pay);
    let stops_paying_from = last_paying.map(|k| k + 1).filter(|&k| k < groups.len());
    let last_bound = groups
        .iter()
        .rposition(|g| g.input_bound != InputBound::Not);
    let hidden_from = last_bound.map(|k| k + 1).filter(|&k| k < groups.len());
    Some(ModelScale {
        groups,
        stops_paying_from,
        hidden_from,
    })
}
