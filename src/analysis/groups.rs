//! The groups a matrix is compared in. Conditions that share every setting but the loader's
//! own (its worker count, prefetch, pinned memory, persistent workers, read-ahead, engine and
//! the engine's `[pytorch]` section) form a group; each group has its own baseline, and every
//! speed-up, paired ratio, headroom column and headline clause compares conditions within one
//! group. A 40 ms step is not "4× slower" than a 10 ms one: nobody asks that.

use serde::{Deserialize, Serialize};

use super::{Effect, RunSummary, Speedup, bootstrap, median};
use crate::plan::PlanCondition;

/// The loader's own settings: varying them never starts a new group.
pub const LOADER_OWN: [&str; 6] = [
    "workers",
    "prefetch_factor",
    "pin_memory",
    "persistent_workers",
    "read_ahead",
    "engine",
];

/// Conditions compared among themselves.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Group {
    /// What sets the group apart, as its conditions' names spell it ("step_ms=10.0"); empty
    /// where the matrix is one group.
    pub label: String,
    /// The condition the group's others are compared with: the one sharing the `[report]
    /// baseline` condition's loader settings, else the group's first.
    pub baseline: String,
    /// The group's conditions, in plan order.
    pub conditions: Vec<String>,
}

/// Whether a dotted setting (`loader.workers`, `pytorch.dataset`) is the loader's own.
pub fn is_loader_own(setting: &str) -> bool {
    match setting.split_once('.') {
        Some(("loader", key)) => LOADER_OWN.contains(&key),
        Some(("pytorch", _)) => true,
        _ => setting == "pytorch",
    }
}

/// A condition's settings with the loader's own left out: equal keys, one group.
fn key(c: &PlanCondition) -> String {
    let mut v = serde_json::to_value(&c.config).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("pytorch");
        if let Some(loader) = o.get_mut("loader").and_then(|l| l.as_object_mut()) {
            for k in LOADER_OWN {
                loader.remove(k);
            }
        }
    }
    v.to_string()
}

/// The loader's own settings of a condition, as a comparable string.
fn loader_key(c: &PlanCondition) -> String {
    let v = serde_json::to_value(&c.config).unwrap_or_default();
    let own: Vec<String> = LOADER_OWN
        .iter()
        .map(|k| v["loader"][k].to_string())
        .chain([v["pytorch"].to_string()])
        .collect();
    own.join("|")
}

/// `setting=value` for each override that is not the loader's own, by its last key as the
/// matrix names conditions.
fn label(c: &PlanCondition) -> String {
    let parts: Vec<String> = c
        .overrides
        .iter()
        .filter(|(k, _)| !is_loader_own(k))
        .map(|(k, v)| {
            let leaf = k.rsplit('.').next().unwrap_or(k);
            let value = match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            format!("{leaf}={value}")
        })
        .collect();
    parts.join(",")
}

/// The plan's conditions in groups, in order of each group's first condition; `baseline` is
/// the experiment's (the `[report] baseline` condition, else the first).
pub fn groups(conditions: &[PlanCondition], baseline: &str) -> Vec<Group> {
    let mut keyed: Vec<(String, Vec<&PlanCondition>)> = Vec::new();
    for c in conditions {
        let k = key(c);
        match keyed.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(c),
            None => keyed.push((k, vec![c])),
        }
    }
    let base_loader = conditions
        .iter()
        .find(|c| c.name == baseline)
        .map(loader_key);
    let single = keyed.len() == 1;
    let mut labels_seen: Vec<String> = Vec::new();
    keyed
        .into_iter()
        .enumerate()
        .map(|(i, (_, members))| {
            let base = members
                .iter()
                .find(|c| c.name == baseline)
                .or_else(|| members.iter().find(|c| Some(loader_key(c)) == base_loader))
                .unwrap_or(&members[0]);
            let mut label = if single {
                String::new()
            } else {
                self::label(members[0])
            };
            if !single && (label.is_empty() || labels_seen.contains(&label)) {
                label = format!("group {}", i + 1);
            }
            labels_seen.push(label.clone());
            Group {
                label,
                baseline: base.name.clone(),
                conditions: members.iter().map(|c| c.name.clone()).collect(),
            }
        })
        .collect()
}

/// The ratio of median img/s against the baseline's, its bootstrap CI over both conditions'
/// runs, and the per-round ratios.
pub(super) fn speedup(
    mine: &[&RunSummary],
    base: &[&RunSummary],
    seed: u64,
    min_effect: f64,
) -> Speedup {
    let values: Vec<f64> = mine.iter().map(|r| r.img_per_s).collect();
    let base_values: Vec<f64> = base.iter().map(|r| r.img_per_s).collect();
    let ratio = bootstrap(&[&values, &base_values], seed, |s| {
        median(&s[0]) / median(&s[1])
    });
    let paired = mine
        .iter()
        .filter_map(|r| {
            base.iter()
                .find(|b| b.round == r.round)
                .map(|b| (r.round, r.img_per_s / b.img_per_s))
        })
        .collect();
    Speedup {
        against: String::new(),
        beyond_noise: !ratio.contains(1.0),
        effect: Effect::of(&ratio, min_effect),
        ratio,
        paired,
    }
}

/// The group `condition` belongs to.
pub fn group_of<'a>(groups: &'a [Group], condition: &str) -> Option<&'a Group> {
    groups
        .iter()
        .find(|g| g.conditions.iter().any(|c| c == condition))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Overrides, load_str};
    use std::path::Path;

    fn plan_conditions(matrix: &str, baseline: &str) -> Vec<PlanCondition> {
        let text = format!(
            "[experiment]\nname = \"g\"\n[model]\nkind = \"stand_in\"\nstep_ms = 10\n\
             [report]\nbaseline = \"{baseline}\"\n[matrix]\n{matrix}\n"
        );
        let exp = load_str(Path::new("g.toml"), &text, &Overrides::default()).unwrap();
        exp.conditions
            .into_iter()
            .map(|c| PlanCondition {
                name: c.name,
                overrides: c.overrides,
                config: c.settings,
            })
            .collect()
    }

    #[test]
    fn a_step_by_workers_matrix_is_one_group_per_step() {
        let cs = plan_conditions(
            "\"model.step_ms\" = [10, 40]\n\"loader.workers\" = [0, 1, 2]",
            "step_ms=10,workers=1",
        );
        let g = groups(&cs, "step_ms=10,workers=1");
        assert_eq!(g.len(), 2, "{g:?}");
        assert_eq!(g[0].label, "step_ms=10");
        assert_eq!(g[1].label, "step_ms=40");
        assert_eq!(g[0].conditions.len(), 3);
        // The baseline's loader settings (1 worker) pick each group's baseline.
        assert_eq!(g[0].baseline, "step_ms=10,workers=1");
        assert_eq!(g[1].baseline, "step_ms=40,workers=1");
        assert_eq!(
            group_of(&g, "step_ms=40,workers=2").unwrap().label,
            "step_ms=40"
        );
    }

    #[test]
    fn loader_settings_alone_make_one_group() {
        let cs = plan_conditions(
            "\"loader.workers\" = [0, 2]\n\"loader.prefetch_factor\" = [2, 4]",
            "",
        );
        let g = groups(&cs, &cs[0].name);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].label, "");
        assert_eq!(g[0].baseline, cs[0].name);
        assert!(is_loader_own("loader.engine") && is_loader_own("pytorch.dataset"));
        assert!(!is_loader_own("loader.batch_size") && !is_loader_own("model.step_ms"));
    }
}
