//! The run plan: which run executes which condition, in which round and position.
//!
//! Invariant: the order is a pure function of the experiment (conditions, rounds, order rule
//! and seed), so `plan` prints exactly what `run` will execute.

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::config::{Experiment, ProtocolSection, ReportSection, RunOrder, Settings};

/// Mixed into the experiment seed so the run order does not share a stream with the data.
const ORDER_STREAM: u64 = 0x6f72_6465_725f_7273;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(try_from = "PlanFile")]
pub struct Plan {
    pub experiment: PlanExperiment,
    pub conditions: Vec<PlanCondition>,
    pub runs: Vec<PlannedRun>,
}

/// The experiment-wide part of the plan: who it is, and the `[protocol]` and `[report]`
/// sections, held once (they cannot vary between conditions).
#[derive(Debug, Clone, Serialize)]
pub struct PlanExperiment {
    pub name: String,
    pub description: String,
    pub file: String,
    pub seed: u64,
    pub protocol: ProtocolSection,
    pub report: ReportSection,
}

/// plan.json as every version wrote it: today `protocol` and `report` sections; before, the
/// protocol's fields flat beside the name (without `headroom` in the first folders, which had
/// no headroom run) and no `report` (then it is the first condition's), and before that every
/// condition's config held its own copy of both sections.
#[derive(Deserialize)]
struct PlanFile {
    experiment: PlanExperimentFile,
    conditions: Vec<PlanConditionFile>,
    runs: Vec<PlannedRun>,
}

#[derive(Deserialize)]
struct PlanConditionFile {
    name: String,
    overrides: toml::Table,
    config: serde_json::Value,
}

#[derive(Deserialize)]
struct PlanExperimentFile {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    file: String,
    seed: u64,
    protocol: Option<ProtocolSection>,
    report: Option<ReportSection>,
    rounds: Option<u64>,
    order: Option<RunOrder>,
    warmup_steps: Option<u64>,
    timed_steps: Option<u64>,
    profile: Option<bool>,
    profile_steps: Option<u64>,
    headroom: Option<bool>,
    headroom_steps: Option<u64>,
}

impl TryFrom<PlanFile> for Plan {
    type Error = String;

    fn try_from(f: PlanFile) -> Result<Plan, String> {
        let e = f.experiment;
        // Earlier layouts: the experiment-wide sections inside each condition's config.
        let mut first_report = None;
        let mut conditions = Vec::with_capacity(f.conditions.len());
        for mut c in f.conditions {
            if let serde_json::Value::Object(config) = &mut c.config {
                config.remove("protocol");
                if let Some(r) = config.remove("report")
                    && first_report.is_none()
                {
                    first_report = serde_json::from_value::<ReportSection>(r).ok();
                }
            }
            conditions.push(PlanCondition {
                config: serde_json::from_value(c.config)
                    .map_err(|err| format!("condition {:?}: {err}", c.name))?,
                name: c.name,
                overrides: c.overrides,
            });
        }
        let d = ProtocolSection::default();
        let protocol = e.protocol.unwrap_or(ProtocolSection {
            warmup_steps: e.warmup_steps.unwrap_or(d.warmup_steps),
            timed_steps: e.timed_steps.unwrap_or(d.timed_steps),
            rounds: e.rounds.unwrap_or(d.rounds),
            order: e.order.unwrap_or(d.order),
            profile: e.profile.unwrap_or(d.profile),
            profile_steps: e.profile_steps.unwrap_or(d.profile_steps),
            // Folders from before the headroom run existed had none.
            headroom: e.headroom.unwrap_or(false),
            headroom_steps: e.headroom_steps.unwrap_or(0),
        });
        let report = e.report.or(first_report).unwrap_or_default();
        Ok(Plan {
            experiment: PlanExperiment {
                name: e.name,
                description: e.description,
                file: e.file,
                seed: e.seed,
                protocol,
                report,
            },
            // The file names each run's condition; its index is restored from the name.
            runs: f
                .runs
                .into_iter()
                .map(|r| PlannedRun {
                    condition_index: conditions
                        .iter()
                        .position(|c| c.name == r.condition)
                        .unwrap_or(0),
                    ..r
                })
                .collect(),
            conditions,
        })
    }
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
    let p = &exp.protocol;
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
            protocol: p.clone(),
            report: exp.report.clone(),
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
    /// The experiment-wide report settings.
    pub fn report(&self) -> &ReportSection {
        &self.experiment.report
    }

    /// The experiment-wide protocol.
    pub fn protocol(&self) -> &ProtocolSection {
        &self.experiment.protocol
    }

    /// A person's view of the plan.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let e = &self.experiment;
        let p = &e.protocol;
        let mut out = String::new();
        let _ = writeln!(out, "experiment {} ({})", e.name, e.file);
        if !e.description.is_empty() {
            let _ = writeln!(out, "  {}", e.description);
        }
        let order = match p.order {
            RunOrder::Alternate => "alternate (reversed in odd rounds)",
            RunOrder::Fixed => "fixed",
            RunOrder::Shuffled => "shuffled (seeded)",
        };
        let _ = writeln!(
            out,
            "  seed {}; {} warm-up + {} timed steps per run; {} rounds, order {order}",
            e.seed, p.warmup_steps, p.timed_steps, p.rounds
        );
        if p.profile {
            let _ = writeln!(
                out,
                "  profiled run: {} steps per condition, separate from the timed runs",
                p.profile_steps
            );
        }
        if p.headroom {
            let _ = writeln!(
                out,
                "  headroom run: {} steps per condition on batches already on the device \
                 (the throughput if data were free), split over the rounds, each share after \
                 its round's timed runs",
                p.headroom_steps
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

    fn plan_json(experiment: serde_json::Value) -> Plan {
        serde_json::from_value(serde_json::json!({
            "experiment": experiment,
            "conditions": [{
                "name": "default",
                "overrides": {},
                "config": {"report": {"baseline": "from the condition"}}
            }],
            "runs": []
        }))
        .unwrap()
    }

    #[test]
    fn every_plan_json_layout_reads() {
        // Today's: the sections once.
        let protocol = ProtocolSection {
            timed_steps: 7,
            ..ProtocolSection::default()
        };
        let plan = Plan {
            experiment: PlanExperiment {
                name: "e".into(),
                description: String::new(),
                file: "e.toml".into(),
                seed: 1,
                protocol: protocol.clone(),
                report: ReportSection::default(),
            },
            conditions: ["a", "b"]
                .map(|name| PlanCondition {
                    name: name.into(),
                    overrides: toml::Table::new(),
                    config: Settings::default(),
                })
                .to_vec(),
            runs: [(0, "b", 1), (1, "a", 0)]
                .map(|(index, condition, condition_index)| PlannedRun {
                    index,
                    round: 0,
                    position: index,
                    condition: condition.into(),
                    condition_index,
                })
                .to_vec(),
        };
        let back: Plan = serde_json::from_str(&serde_json::to_string(&plan).unwrap()).unwrap();
        assert_eq!(back.experiment.protocol, protocol);
        // The file holds no condition index: it is restored from the condition's name.
        assert_eq!(back.runs, plan.runs);
        // The first layout: the protocol flat, no headroom (there was no headroom run), the
        // report only in the conditions.
        let old = plan_json(serde_json::json!({
            "name": "e", "description": "", "file": "e.toml", "seed": 1, "rounds": 2,
            "order": "fixed", "warmup_steps": 3, "timed_steps": 4, "profile": false,
            "profile_steps": 5
        }));
        let p = old.protocol();
        assert_eq!((p.rounds, p.warmup_steps, p.timed_steps), (2, 3, 4));
        assert_eq!(
            (p.order, p.profile, p.profile_steps),
            (RunOrder::Fixed, false, 5)
        );
        assert!(!p.headroom);
        assert_eq!(old.report().baseline, "from the condition");
        // The second: headroom and the report beside the flat protocol.
        let mid = plan_json(serde_json::json!({
            "name": "e", "seed": 1, "rounds": 3, "order": "alternate", "warmup_steps": 40,
            "timed_steps": 100, "profile": true, "profile_steps": 20, "headroom": true,
            "headroom_steps": 30, "report": {"baseline": "workers=0"}
        }));
        assert!(mid.protocol().headroom);
        assert_eq!(mid.protocol().headroom_steps, 30);
        assert_eq!(mid.report().baseline, "workers=0");
    }

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
