//! `loaderlab verify <dir>`: the seed's artifact checks, generalised. Every figure the report
//! states is recomputed from the raw rows and compared; counts, traces and fingerprints are
//! checked against the plan.

use std::collections::BTreeMap;
use std::path::Path;

use crate::analysis::{self, Analysis};
use crate::results::column;
use crate::results::{RESULT_JSON, Raw, SUMMARY_CSV, f64s, i64s, read_csv, strs};
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
    // `a == b` first: an infinite bound equals itself, but inf − inf is NaN.
    a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-6 * a.abs().max(b.abs()).max(1e-9)
}

/// Run every check on a results folder. A folder that cannot be read at all is one failed check.
pub fn verify(dir: &Path) -> Vec<Check> {
    let raw = match Raw::load(dir) {
        Ok(raw) => raw,
        Err(e) => return vec![check("results folder readable", false, e.to_string())],
    };
    let analysis = analysis::analyse(&raw);
    let interrupted: Vec<i64> = match &analysis {
        Ok(a) => a
            .runs
            .iter()
            .filter(|r| r.interrupted)
            .map(|r| r.run)
            .collect(),
        Err(_) => Vec::new(),
    };
    let mut out = vec![
        check("results folder readable", true, dir.display().to_string()),
        runs_cover_the_plan(&raw),
        steps_cover_the_runs(&raw, &interrupted),
        rates_match(&raw),
    ];
    match &analysis {
        Ok(a) => out.extend([
            compare_result(dir, a),
            compare_summary(dir, a),
            headline_matches(dir, a),
            fingerprints(a),
        ]),
        Err(e) => out.push(check(
            "figures recomputed from the raw rows",
            false,
            e.to_string(),
        )),
    }
    if raw.plan.protocol().profile {
        out.extend(traces(&raw));
    }
    out
}

/// report.md opens with the headline rebuilt from the recomputed figures.
fn headline_matches(dir: &Path, a: &Analysis) -> Check {
    let name = "report.md's headline recomputed from the raw rows";
    let want = format!("**{}**", crate::report::headline(a));
    match std::fs::read_to_string(dir.join(crate::results::REPORT_MD)) {
        Ok(md) if md.contains(&want) => check(name, true, "the same sentence"),
        Ok(_) => check(name, false, format!("report.md lacks {want}")),
        Err(e) => check(name, false, format!("report.md: {e}")),
    }
}

/// A column of the runs or steps table (empty when it cannot be read: the counts then fail).
fn column_f64(df: &polars::prelude::DataFrame, name: &str) -> Vec<f64> {
    f64s(df, name).unwrap_or_default()
}

fn column_i64(df: &polars::prelude::DataFrame, name: &str) -> Vec<i64> {
    i64s(df, name).unwrap_or_default()
}

/// Runs = conditions × rounds, each planned run exactly once.
fn runs_cover_the_plan(raw: &Raw) -> Check {
    let plan = &raw.plan;
    let expected_runs = plan.conditions.len() as u64 * plan.protocol().rounds;
    let run_ids = column_i64(&raw.runs, "run");
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
    let listed = |what: &str, v: String| {
        if v == "[]" {
            String::new()
        } else {
            format!("; {what} runs {v}")
        }
    };
    check(
        "runs = conditions × rounds",
        plan.runs.len() as u64 == expected_runs
            && missing.is_empty()
            && duplicated.is_empty()
            && run_ids.len() == plan.runs.len(),
        format!(
            "{} conditions × {} rounds = {expected_runs}; runs.csv has {} rows{}{}",
            plan.conditions.len(),
            plan.protocol().rounds,
            run_ids.len(),
            listed("missing", format!("{missing:?}")),
            listed("duplicated", format!("{duplicated:?}")),
        ),
    )
}

/// steps.csv rows = runs × ranks × timed_steps, steps 0..timed_steps of each rank in each run
/// (a prefix of them in an interrupted run).
fn steps_cover_the_runs(raw: &Raw, interrupted: &[i64]) -> Check {
    let timed = raw.plan.protocol().timed_steps as i64;
    let run_ids = column_i64(&raw.runs, "run");
    let step_runs = column_i64(&raw.steps, "run");
    let steps = column_i64(&raw.steps, "step");
    let ranks = column_i64(&raw.steps, "rank");
    let ranks_of = |run: i64| {
        raw.plan
            .runs
            .iter()
            .find(|p| p.index as i64 == run)
            .and_then(|p| raw.plan.conditions.get(p.condition_index))
            .map_or(1, |c| c.config.distributed.ranks as i64)
    };
    let mut per_rank: BTreeMap<(i64, i64), Vec<i64>> = BTreeMap::new();
    for ((r, k), s) in step_runs.iter().zip(&ranks).zip(&steps) {
        per_rank.entry((*r, *k)).or_default().push(*s);
    }
    let (mut bad_runs, mut expected) = (Vec::new(), 0i64);
    for r in &run_ids {
        let ranks = ranks_of(*r);
        let mut rows = 0;
        let mut bad = per_rank
            .keys()
            .any(|(run, k)| run == r && !(0..ranks).contains(k));
        for k in 0..ranks {
            let mut s = per_rank.get(&(*r, k)).cloned().unwrap_or_default();
            s.sort();
            rows += s.len();
            let complete = s == (0..timed).collect::<Vec<_>>();
            let prefix = s.iter().enumerate().all(|(i, v)| *v == i as i64);
            bad |= !(complete || (interrupted.contains(r) && prefix));
            expected += if interrupted.contains(r) {
                s.len() as i64
            } else {
                timed
            };
        }
        if bad {
            bad_runs.push(format!("run {r}: {rows} rows over {ranks} rank(s)"));
        }
    }
    check(
        "steps.csv rows = runs × ranks × timed_steps",
        bad_runs.is_empty() && step_runs.len() as i64 == expected,
        format!(
            "{} runs × {timed} steps per rank; steps.csv has {} rows{}",
            run_ids.len(),
            step_runs.len(),
            if bad_runs.is_empty() {
                String::new()
            } else {
                format!("; {}", bad_runs.join(", "))
            }
        ),
    )
}

/// runs.csv's img/s = images / elapsed_s in every row.
fn rates_match(raw: &Raw) -> Check {
    let run_ids = column_i64(&raw.runs, "run");
    let ips = column_f64(&raw.runs, column::IMG_PER_S);
    let images = column_f64(&raw.runs, column::IMAGES);
    let elapsed = column_f64(&raw.runs, column::ELAPSED_S);
    let bad: Vec<String> = (0..ips.len().min(images.len()).min(elapsed.len()))
        // runs.csv keeps nanosecond elapsed and 6 decimals of img/s.
        .filter(|&i| (ips[i] - images[i] / elapsed[i]).abs() > 1e-5 * ips[i].abs().max(1.0))
        .map(|i| {
            format!(
                "run {}: {} ≠ {} / {}",
                run_ids.get(i).copied().unwrap_or(-1),
                ips[i],
                images[i],
                elapsed[i]
            )
        })
        .collect();
    check(
        "runs.csv img_per_s = images / elapsed_s",
        bad.is_empty(),
        bad.join("; "),
    )
}

fn fingerprints(a: &Analysis) -> Check {
    let d = &a.determinism;
    check(
        "fingerprints identical across conditions with the same data settings",
        d.identical || (d.inconsistent_conditions.is_empty() && d.groups_follow_settings),
        if d.identical {
            "every timed run saw the same batch sequence".to_string()
        } else if d.inconsistent_conditions.is_empty() && d.groups_follow_settings {
            format!(
                "{} groups, one per set of data settings (dataset, transforms, batch size, \
                 shuffle, seed, ranks): {:?}",
                d.groups.len(),
                d.groups
            )
        } else if d.inconsistent_conditions.is_empty() {
            format!(
                "conditions with the same data settings saw different batches: {} groups: {:?}",
                d.groups.len(),
                d.groups
            )
        } else {
            format!("rounds disagree within {:?}", d.inconsistent_conditions)
        },
    )
}

/// Traces: valid JSON with profile_steps spans of each stage on the training thread.
fn traces(raw: &Raw) -> Vec<Check> {
    let want = raw.plan.protocol().profile_steps as usize;
    raw.meta
        .conditions
        .iter()
        .map(|c| {
            let name = format!("trace of {}", c.name);
            let Some(file) = &c.trace else {
                return check(&name, false, "no trace recorded");
            };
            let path = raw.dir.join(file);
            let spans = match read_trace(&path) {
                Err(e) => return check(&name, false, e.to_string()),
                Ok((spans, _)) => spans,
            };
            let main = spans
                .iter()
                .find(|s| s.name == STEP_SPANS[0])
                .map(|s| s.tid);
            let counts: Vec<(&str, usize)> = STEP_SPANS
                .iter()
                .map(|n| {
                    let k = spans
                        .iter()
                        .filter(|s| Some(s.tid) == main && s.name == *n)
                        .count();
                    (*n, k)
                })
                .collect();
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let listed: Vec<String> = counts.iter().map(|(n, k)| format!("{n} {k}")).collect();
            check(
                &name,
                counts.iter().all(|(_, k)| *k == want),
                format!(
                    "{file}: {} (want {want} each), {} KiB",
                    listed.join(", "),
                    size.div_ceil(1024)
                ),
            )
        })
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
    let stored = match read_csv(&dir.join(SUMMARY_CSV), &["condition"]) {
        Ok(df) => df,
        Err(e) => return check(name, false, e.to_string()),
    };
    let fresh = match analysis::summary_frame(a) {
        Ok(df) => df,
        Err(e) => return check(name, false, e.to_string()),
    };
    if stored.height() != fresh.height() {
        return check(
            name,
            false,
            format!("{} rows, recomputed {}", stored.height(), fresh.height()),
        );
    }
    let mut diffs = Vec::new();
    for col in stored.get_column_names() {
        let Ok(f) = fresh.column(col) else {
            diffs.push(format!("unknown column {col}"));
            continue;
        };
        let numeric = f.dtype().is_primitive_numeric();
        if numeric {
            let (s, f) = (column_f64(&stored, col), column_f64(&fresh, col));
            for (i, (x, y)) in s.iter().zip(&f).enumerate() {
                if !close(*x, *y) {
                    diffs.push(format!("row {i} {col}: stored {x}, recomputed {y}"));
                }
            }
        } else {
            let (s, f) = (
                strs(&stored, col).unwrap_or_default(),
                strs(&fresh, col).unwrap_or_default(),
            );
            for (i, (x, y)) in s.iter().zip(&f).enumerate() {
                if x != y {
                    diffs.push(format!("row {i} {col}: stored {x}, recomputed {y}"));
                }
            }
        }
    }
    recomputed(name, diffs)
}
