//! The run plan: which run executes which condition, in which round and position.
//!
//! Invariant: the order is a pure function of the experiment (conditions, rounds, order rule
//! and seed), so `plan` prints exactly what `run` will execute.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::config::{Experiment, ReportSection, RunOrder, Settings};

/// Mixed into the experiment seed so the run order does not share a stream with the data.
const ORDER_STREAM: u64 = 0x6f72_6465_725f_7273;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub experiment: PlanExperiment,
    pub conditions: Vec<PlanCondition>,
    pub runs: Vec<PlannedRun>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanExperiment {
    pub name: String,
    pub description: String,
    pub file: String,
    pub seed: u64,
    pub rounds: u64,
    pub order: RunOrder,
    pub warmup_steps: u64,
    pub timed_steps: u64,
    pub profile: bool,
    pub profile_steps: u64,
    /// A headroom run per condition (absent, so false, in folders written before it existed).
    #[serde(default)]
    pub headroom: bool,
    #[serde(default)]
    pub headroom_steps: u64,
    /// The experiment-wide `[report]` settings (absent in folders written before it was
    /// recorded here; see [`Plan::report`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<ReportSection>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanCondition {
    pub name: String,
    pub overrides: toml::Table,
    pub config: Settings,
}

/// One timed run. `round` and `position` count from 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRun {
    pub index: usize,
    pub round: usize,
    pub position: usize,
    pub condition: String,
    /// Index into `Plan::conditions`.
    #[serde(skip, default)]
    pub condition_index: usize,
}

/// Condition indices in execution order, one list per round.
pub fn round_orders(
    conditions: usize,
    rounds: usize,
    order: RunOrder,
    seed: u64,
) -> Vec<Vec<usize>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ ORDER_STREAM);
    (0..rounds)
        .map(|round| {
            let mut idx: Vec<usize> = (0..conditions).collect();
            match order {
                RunOrder::Fixed => {}
                RunOrder::Alternate => {
                    if round % 2 == 1 {
                        idx.reverse();
                    }
                }
                RunOrder::Shuffled => idx.shuffle(&mut rng),
            }
            idx
        })
        .collect()
}

pub fn build(exp: &Experiment) -> Plan {
    let s = &exp.base;
    let p = &s.protocol;
    let orders = round_orders(
        exp.conditions.len(),
        p.rounds as usize,
        p.order,
        s.experiment.seed,
    );
    let mut runs = Vec::new();
    for (round, order) in orders.iter().enumerate() {
        for (position, &c) in order.iter().enumerate() {
            runs.push(PlannedRun {
                index: runs.len(),
                round,
                position,
                condition: exp.conditions[c].name.clone(),
                condition_index: c,
            });
        }
    }
    Plan {
        experiment: PlanExperiment {
            name: s.experiment.name.clone(),
            description: s.experiment.description.clone(),
            file: exp.file.display().to_string(),
            seed: s.experiment.seed,
            rounds: p.rounds,
            order: p.order,
            warmup_steps: p.warmup_steps,
            timed_steps: p.timed_steps,
            profile: p.profile,
            profile_steps: p.profile_steps,
            headroom: p.headroom,
            headroom_steps: p.headroom_steps,
            report: Some(s.report.clone()),
        },
        conditions: exp
            .conditions
            .iter()
            .map(|c| PlanCondition {
                name: c.name.clone(),
                overrides: c.overrides.clone(),
                config: c.settings.clone(),
            })
            .collect(),
        runs,
    }
}

impl Plan {
    /// The experiment-wide report settings (from the first condition in older folders; the
    /// section cannot vary between conditions).
    pub fn report(&self) -> ReportSection {
        self.experiment
            .report
            .clone()
            .or_else(|| self.conditions.first().map(|c| c.config.report.clone()))
            .unwrap_or_default()
    }

    /// A person's view of the plan.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let e = &self.experiment;
        let mut out = String::new();
        let _ = writeln!(out, "experiment {} ({})", e.name, e.file);
        if !e.description.is_empty() {
            let _ = writeln!(out, "  {}", e.description);
        }
        let order = match e.order {
            RunOrder::Alternate => "alternate (reversed in odd rounds)",
            RunOrder::Fixed => "fixed",
            RunOrder::Shuffled => "shuffled (seeded)",
        };
        let _ = writeln!(
            out,
            "  seed {}; {} warm-up + {} timed steps per run; {} rounds, order {order}",
            e.seed, e.warmup_steps, e.timed_steps, e.rounds
        );
        if e.profile {
            let _ = writeln!(
                out,
                "  profiled run: {} steps per condition, separate from the timed runs",
                e.profile_steps
            );
        }
        if e.headroom {
            let _ = writeln!(
                out,
                "  headroom run: {} steps per condition on batches already on the device \
                 (the throughput if data were free), split over the rounds, each share after \
                 its round's timed runs",
                e.headroom_steps
            );
        }
        let width = self
            .conditions
            .iter()
            .map(|c| c.name.len())
            .max()
            .unwrap_or(9)
            .max(9);
        let _ = writeln!(out, "\nconditions ({}):", self.conditions.len());
        for c in &self.conditions {
            let overrides: Vec<String> = c
                .overrides
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            let overrides = if overrides.is_empty() {
                "(base settings)".to_string()
            } else {
                overrides.join(", ")
            };
            let _ = writeln!(out, "  {:<width$}  {overrides}", c.name);
        }
        let _ = writeln!(out, "\nruns ({}), in execution order:", self.runs.len());
        let _ = writeln!(
            out,
            "  {:>5}  {:>5}  {:>8}  condition",
            "run", "round", "position"
        );
        for r in &self.runs {
            let _ = writeln!(
                out,
                "  {:>5}  {:>5}  {:>8}  {}",
                r.index, r.round, r.position, r.condition
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternate_reverses_odd_rounds() {
        assert_eq!(
            round_orders(2, 3, RunOrder::Alternate, 42),
            vec![vec![0, 1], vec![1, 0], vec![0, 1]]
        );
    }

    #[test]
    fn fixed_repeats() {
        assert_eq!(
            round_orders(3, 2, RunOrder::Fixed, 1),
            vec![vec![0, 1, 2]; 2]
        );
    }

    #[test]
    fn shuffled_is_a_reproducible_permutation() {
        let a = round_orders(5, 4, RunOrder::Shuffled, 42);
        assert_eq!(a, round_orders(5, 4, RunOrder::Shuffled, 42));
        assert_ne!(a, round_orders(5, 4, RunOrder::Shuffled, 43));
        for round in &a {
            let mut sorted = round.clone();
            sorted.sort();
            assert_eq!(sorted, vec![0, 1, 2, 3, 4]);
        }
        assert!(a.windows(2).any(|w| w[0] != w[1]), "rounds differ: {a:?}");
    }
}
