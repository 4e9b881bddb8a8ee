//! `loaderlab verify <dir>`: the seed's artifact checks, generalised. Every figure the report
//! states is recomputed from the raw rows and compared; counts, traces and fingerprints are
//! checked against the plan.

use std::collections::BTreeMap;
use std::path::Path;

use crate::analysis::{self, Analysis};
use crate::results::{RESULT_JSON, Raw, SUMMARY_CSV};
use crate::trace::{STEP_SPANS, read_trace};

/// One check and its outcome.
#[derive(Debug, Clone)]
pub struct Check {
    pub name: String,
    pub ok: bool,
    pub detail: String,
}

fn check(name: &str, ok: bool, detail: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        ok,
        detail: detail.into(),
    }
}

/// The outcome of recomputing a file's figures: passes when nothing differed; names the first
/// five differences otherwise.
fn recomputed(name: &str, diffs: Vec<String>) -> Check {
    let detail = if diffs.is_empty() {
        "every number recomputed".to_string()
    } else {
        diffs.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
    };
    check(name, diffs.is_empty(), detail)
}

fn close(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1e-9)
}

/// Run every check on a results folder. A folder that cannot be read at all is one failed check.
pub fn verify(dir: &Path) -> Vec<Check> {
    let raw = match Raw::load(dir) {
        Ok(raw) => raw,
        Err(e) => return vec![check("results folder readable", false, e.to_string())],
    };
    let mut out = vec![check(
        "results folder readable",
        true,
        dir.display().to_string(),
    )];
    let plan = &raw.plan;
    let analysis = analysis::analyse(&raw);

    // Runs = conditions × rounds, each planned run exactly once.
    let expected_runs = plan.conditions.len() as u64 * plan.experiment.rounds;
    let run_ids: Vec<i64> = column_i64(&raw, "runs", "run");
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for r in &run_ids {
        *seen.entry(*r).or_default() += 1;
    }
    let missing: Vec<usize> = plan
        .runs
        .iter()
        .filter(|r| !seen.contains_key(&(r.index as i64)))
        .map(|r| r.index)
        .collect();
    let duplicated: Vec<i64> = seen
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(r, _)| *r)
        .collect();
    out.push(check(
        "runs = conditions × rounds",
        plan.runs.len() as u64 == expected_runs
            && missing.is_empty()
            && duplicated.is_empty()
            && run_ids.len() == plan.runs.len(),
        format!(
            "{} conditions × {} rounds = {expected_runs}; runs.csv has {} rows{}{}",
            plan.conditions.len(),
            plan.experiment.rounds,
            run_ids.len(),
            if missing.is_empty() {
                String::new()
            } else {
                format!("; missing runs {missing:?}")
            },
            if duplicated.is_empty() {
                String::new()
            } else {
                format!("; duplicated runs {duplicated:?}")
            },
        ),
    ));

    // steps.csv rows = runs × timed_steps, steps 0..timed_steps in each run.
    let timed = plan.experiment.timed_steps as i64;
    let step_runs = column_i64(&raw, "steps", "run");
    let steps = column_i64(&raw, "steps", "step");
    let mut per_run: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (r, s) in step_runs.iter().zip(&steps) {
        per_run.entry(*r).or_default().push(*s);
    }
    let interrupted: Vec<i64> = match &analysis {
        Ok(a) => a
            .runs
            .iter()
            .filter(|r| r.interrupted)
            .map(|r| r.run)
            .collect(),
        Err(_) => Vec::new(),
    };
    let mut bad_runs = Vec::new();
    for r in &run_ids {
        let mut s = per_run.get(r).cloned().unwrap_or_default();
        s.sort();
        let complete = s == (0..timed).collect::<Vec<_>>();
        let prefix = s.iter().enumerate().all(|(i, v)| *v == i as i64);
        if !(complete || (interrupted.contains(r) && prefix)) {
            bad_runs.push(format!("run {r}: {} rows", s.len()));
        }
    }
    out.push(check(
        "steps.csv rows = runs × timed_steps",
        bad_runs.is_empty()
            && step_runs.len() as i64
                == run_ids.len() as i64 * timed - missing_rows(&per_run, &interrupted, timed),
        format!(
            "{} runs × {timed} steps; steps.csv has {} rows{}",
            run_ids.len(),
            step_runs.len(),
            if bad_runs.is_empty() {
                String::new()
            } else {
                format!("; {}", bad_runs.join(", "))
            }
        ),
    ));

    // runs.csv figures agree with themselves and with the steps.
    let ips = column_f64(&raw, "runs", "img_per_s");
    let images = column_f64(&raw, "runs", "images");
    let elapsed = column_f64(&raw, "runs", "elapsed_s");
    let bad: Vec<String> = (0..ips.len())
        // runs.csv keeps nanosecond elapsed and 6 decimals of img/s.
        .filter(|&i| (ips[i] - images[i] / elapsed[i]).abs() > 1e-5 * ips[i].abs().max(1.0))
        .map(|i| {
            format!(
                "run {}: {} ≠ {} / {}",
                run_ids[i], ips[i], images[i], elapsed[i]
            )
        })
        .collect();
    out.push(check(
        "runs.csv img_per_s = images / elapsed_s",
        bad.is_empty(),
        bad.join("; "),
    ));

    // Every figure in result.json and summary.csv recomputed from the raw rows.
    match &analysis {
        Ok(a) => {
            out.push(compare_result(dir, a));
            out.push(compare_summary(dir, a));
            let d = &a.determinism;
            out.push(check(
                "fingerprints identical across conditions",
                d.identical,
                if d.identical {
                    "every timed run saw the same batch sequence".to_string()
                } else if d.inconsistent_conditions.is_empty() {
                    format!(
                        "conditions with different data settings form {} groups: {:?}",
                        d.groups.len(),
                        d.groups
                    )
                } else {
                    format!("rounds disagree within {:?}", d.inconsistent_conditions)
                },
            ));
        }
        Err(e) => out.push(check(
            "figures recomputed from the raw rows",
            false,
            e.to_string(),
        )),
    }

    // Traces: valid JSON with profile_steps spans of each stage on the training thread.
    if plan.experiment.profile {
        for c in &raw.meta.conditions {
            let name = format!("trace of {}", c.name);
            let Some(file) = &c.trace else {
                out.push(check(&name, false, "no trace recorded"));
                continue;
            };
            match read_trace(&dir.join(file)) {
                Err(e) => out.push(check(&name, false, e.to_string())),
                Ok((spans, _)) => {
                    let main = spans.iter().find(|s| s.1 == STEP_SPANS[0]).map(|s| s.0);
                    let counts: Vec<(String, usize)> = STEP_SPANS
                        .iter()
                        .map(|n| {
                            (
                                n.to_string(),
                                spans
                                    .iter()
                                    .filter(|s| Some(s.0) == main && s.1 == *n)
                                    .count(),
                            )
                        })
                        .collect();
                    let want = plan.experiment.profile_steps as usize;
                    let ok = counts.iter().all(|(_, n)| *n == want);
                    let size = std::fs::metadata(dir.join(file))
                        .map(|m| m.len())
                        .unwrap_or(0);
                    out.push(check(
                        &name,
                        ok,
                        format!(
                            "{file}: {} (want {want} each), {} KiB",
                            counts
                                .iter()
                                .map(|(n, c)| format!("{n} {c}"))
                                .collect::<Vec<_>>()
                                .join(", "),
                            size.div_ceil(1024)
                        ),
                    ));
                }
            }
        }
    }
    out
}

fn missing_rows(per_run: &BTreeMap<i64, Vec<i64>>, interrupted: &[i64], timed: i64) -> i64 {
    interrupted
        .iter()
        .map(|r| timed - per_run.get(r).map_or(0, |s| s.len() as i64))
        .sum()
}

fn column_f64(raw: &Raw, which: &str, name: &str) -> Vec<f64> {
    let df = if which == "runs" {
        &raw.runs
    } else {
        &raw.steps
    };
    df.column(name)
        .ok()
        .and_then(|c| c.cast(&polars::prelude::DataType::Float64).ok())
        .and_then(|c| {
            c.f64()
                .ok()
                .map(|ca| ca.iter().map(|v| v.unwrap_or(f64::NAN)).collect())
        })
        .unwrap_or_default()
}

fn column_i64(raw: &Raw, which: &str, name: &str) -> Vec<i64> {
    column_f64(raw, which, name)
        .into_iter()
        .map(|v| v as i64)
        .collect()
}

fn compare_result(dir: &Path, a: &Analysis) -> Check {
    let name = "result.json figures match the raw rows";
    let text = match std::fs::read_to_string(dir.join(RESULT_JSON)) {
        Ok(t) => t,
        Err(e) => return check(name, false, format!("{RESULT_JSON}: {e}")),
    };
    let stored: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => return check(name, false, format!("{RESULT_JSON} is not valid JSON: {e}")),
    };
    let fresh = serde_json::to_value(a).unwrap_or_default();
    let mut diffs = Vec::new();
    compare_json(&stored["analysis"], &fresh, "analysis", &mut diffs);
    recomputed(name, diffs)
}

fn compare_json(
    stored: &serde_json::Value,
    fresh: &serde_json::Value,
    path: &str,
    diffs: &mut Vec<String>,
) {
    use serde_json::Value;
    match (stored, fresh) {
        (Value::Object(s), Value::Object(f)) => {
            for (k, fv) in f {
                compare_json(
                    s.get(k).unwrap_or(&Value::Null),
                    fv,
                    &format!("{path}.{k}"),
                    diffs,
                );
            }
        }
        (Value::Array(s), Value::Array(f)) => {
            if s.len() != f.len() {
                diffs.push(format!(
                    "{path}: {} entries, recomputed {}",
                    s.len(),
                    f.len()
                ));
                return;
            }
            for (i, (sv, fv)) in s.iter().zip(f).enumerate() {
                compare_json(sv, fv, &format!("{path}[{i}]"), diffs);
            }
        }
        (Value::Number(s), Value::Number(f)) => {
            let (s, f) = (
                s.as_f64().unwrap_or(f64::NAN),
                f.as_f64().unwrap_or(f64::NAN),
            );
            if !close(s, f) {
                diffs.push(format!("{path}: stored {s}, recomputed {f}"));
            }
        }
        (s, f) if s != f => diffs.push(format!("{path}: stored {s}, recomputed {f}")),
        _ => {}
    }
}

fn compare_summary(dir: &Path, a: &Analysis) -> Check {
    let name = "summary.csv figures match the raw rows";
    let path = dir.join(SUMMARY_CSV);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return check(name, false, format!("{SUMMARY_CSV}: {e}")),
    };
    let fresh = match analysis::summary_frame(a) {
        Ok(df) => df,
        Err(e) => return check(name, false, e.to_string()),
    };
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let rows: Vec<Vec<String>> = lines.map(split_csv).collect();
    if rows.len() != fresh.height() {
        return check(
            name,
            false,
            format!("{} rows, recomputed {}", rows.len(), fresh.height()),
        );
    }
    let mut diffs = Vec::new();
    for (j, col) in header.iter().enumerate() {
        let Ok(c) = fresh.column(col) else {
            diffs.push(format!("unknown column {col}"));
            continue;
        };
        let Ok(values) = c.cast(&polars::prelude::DataType::String) else {
            continue;
        };
        let Ok(values) = values.str() else { continue };
        for (i, v) in values.iter().enumerate() {
            let stored = rows[i].get(j).map(String::as_str).unwrap_or("");
            let fresh = v.unwrap_or("");
            let same = match (stored.parse::<f64>(), fresh.parse::<f64>()) {
                (Ok(x), Ok(y)) => close(x, y),
                _ => stored == fresh || (stored.is_empty() && fresh == "NaN"),
            };
            if !same {
                diffs.push(format!(
                    "row {i} {col}: stored {stored}, recomputed {fresh}"
                ));
            }
        }
    }
    recomputed(name, diffs)
}

/// Split one CSV line, honouring double quotes.
fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                field.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    out.push(field);
    out
}
