//! The experiment as it runs, written back as a TOML experiment file of its own: the resolved
//! base settings and every condition listed explicitly. Loading it gives the same conditions
//! and plan (Slurm tasks run exactly this file).

use serde::Serialize;

use super::{Experiment, ProtocolSection, ReportSection, Settings};

/// The resolved experiment as TOML. An experiment that cannot be encoded is an error, never an
/// empty file that a reader would take for the defaults.
pub fn resolved_toml(exp: &Experiment) -> Result<String, toml::ser::Error> {
    toml::to_string(&ResolvedFile::new(exp))
}

/// The experiment as it ran: the base settings, the experiment-wide sections, the conditions.
#[derive(Serialize)]
struct ResolvedFile {
    #[serde(flatten)]
    base: Settings,
    protocol: ProtocolSection,
    report: ReportSection,
    conditions: Vec<ResolvedCondition>,
}

#[derive(Serialize)]
struct ResolvedCondition {
    name: String,
    #[serde(flatten)]
    overrides: toml::Table,
}

impl ResolvedFile {
    fn new(exp: &Experiment) -> Self {
        ResolvedFile {
            base: exp.base.clone(),
            protocol: exp.protocol.clone(),
            report: exp.report.clone(),
            conditions: exp
                .conditions
                .iter()
                .map(|c| {
                    let mut nested = toml::Table::new();
                    for (k, v) in &c.overrides {
                        let parts: Vec<&str> = k.split('.').collect();
                        insert_nested(&mut nested, &parts, v.clone());
                    }
                    ResolvedCondition {
                        name: c.name.clone(),
                        overrides: nested,
                    }
                })
                .collect(),
        }
    }
}

fn insert_nested(t: &mut toml::Table, parts: &[&str], v: toml::Value) {
    match parts {
        [] => {}
        [last] => {
            t.insert(last.to_string(), v);
        }
        [first, rest @ ..] => {
            let entry = t
                .entry(first.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(inner) = entry {
                insert_nested(inner, rest, v);
            }
        }
    }
}
