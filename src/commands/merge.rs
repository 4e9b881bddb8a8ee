//! `loaderlab merge`: combine the folders of separately executed runs (Slurm array tasks) into
//! one results folder that `report` and `verify` accept.
//!
//! Invariant: a merge refuses rather than mixes: every task must have run the same resolved
//! configuration and plan, and every planned run must appear exactly once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::results::{
    CONFIG_TOML, PLAN_JSON, Partial, RUN_JSON, RUNS_CSV, ResultsError, RunMeta, STEPS_CSV,
    TaskInfo, run_header, step_header,
};

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{}: {message}", dir.display())]
    Task { dir: PathBuf, message: String },
    #[error("{}: ran a different {what} than {}; refusing to merge results of different experiments", dir.display(), reference.display())]
    Mismatch {
        dir: PathBuf,
        reference: PathBuf,
        what: &'static str,
    },
    #[error("the tasks do not cover the plan exactly once:{missing}{duplicated}")]
    Coverage { missing: String, duplicated: String },
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error("no task folders given")]
    Empty,
}

struct Task {
    dir: PathBuf,
    plan: serde_json::Value,
    config: String,
    meta: RunMeta,
    /// run index → its runs.csv row
    runs: BTreeMap<usize, String>,
    /// run index → its steps.csv rows
    steps: BTreeMap<usize, Vec<String>>,
}

fn read(dir: &Path, name: &str) -> Result<String, MergeError> {
    std::fs::read_to_string(dir.join(name)).map_err(|e| MergeError::Task {
        dir: dir.to_path_buf(),
        message: format!("cannot read {name}: {e}"),
    })
}

fn rows_by_run(
    dir: &Path,
    name: &str,
    text: &str,
) -> Result<BTreeMap<usize, Vec<String>>, MergeError> {
    let mut out: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.is_empty() {
            continue;
        }
        let run = line
            .split(',')
            .next()
            .and_then(|f| f.parse::<usize>().ok())
            .ok_or_else(|| MergeError::Task {
                dir: dir.to_path_buf(),
                message: format!("{name} line {}: no run number", i + 1),
            })?;
        out.entry(run).or_default().push(line.to_string());
    }
    Ok(out)
}

fn load(dir: &Path) -> Result<Task, MergeError> {
    let task_err = |message: String| MergeError::Task {
        dir: dir.to_path_buf(),
        message,
    };
    let plan: serde_json::Value = serde_json::from_str(&read(dir, PLAN_JSON)?)
        .map_err(|e| task_err(format!("{PLAN_JSON} is not valid JSON: {e}")))?;
    let meta: RunMeta = serde_json::from_str(&read(dir, RUN_JSON)?)
        .map_err(|e| task_err(format!("{RUN_JSON} is not valid: {e}")))?;
    if meta.interrupted {
        return Err(task_err(
            "this task was interrupted; rerun it before merging".into(),
        ));
    }
    let runs = rows_by_run(dir, RUNS_CSV, &read(dir, RUNS_CSV)?)?
        .into_iter()
        .map(|(k, mut v)| (k, v.remove(0)))
        .collect();
    Ok(Task {
        dir: dir.to_path_buf(),
        config: read(dir, CONFIG_TOML)?,
        steps: rows_by_run(dir, STEPS_CSV, &read(dir, STEPS_CSV)?)?,
        plan,
        meta,
        runs,
    })
}

/// Merge task folders into `out` (built in `<out>.partial`, moved into place when complete),
/// then build its report; `command` is recorded as what reproduces the merge. Returns the
/// number of runs merged.
pub fn merge(dirs: &[PathBuf], out: &Path, command: &str) -> Result<usize, MergeError> {
    let tasks: Vec<Task> = dirs.iter().map(|d| load(d)).collect::<Result<_, _>>()?;
    let first = same_experiment(&tasks)?;
    let planned = covered_once(&tasks, first)?;
    let partial = Partial::create(out)?;
    let (runs_csv, steps_csv) = rows_in_plan_order(&tasks, &planned);
    let meta = merged_meta(&tasks, first, &partial, command)?;
    partial.write_json(PLAN_JSON, &first.plan)?;
    partial.write(CONFIG_TOML, first.config.as_bytes())?;
    partial.write(RUNS_CSV, runs_csv.as_bytes())?;
    partial.write(STEPS_CSV, steps_csv.as_bytes())?;
    partial.write_json(RUN_JSON, &meta)?;
    crate::report::build(partial.dir()).map_err(|e| MergeError::Task {
        dir: partial.dir().to_path_buf(),
        message: format!("report: {e}"),
    })?;
    partial.promote()?;
    Ok(planned.len())
}

/// The first task, once every task is known to have run the same configuration and plan.
fn same_experiment(tasks: &[Task]) -> Result<&Task, MergeError> {
    let Some(first) = tasks.first() else {
        return Err(MergeError::Empty);
    };
    for t in &tasks[1..] {
        if t.config != first.config {
            return Err(MergeError::Mismatch {
                dir: t.dir.clone(),
                reference: first.dir.clone(),
                what: "configuration (config.resolved.toml)",
            });
        }
        if t.plan != first.plan {
            return Err(MergeError::Mismatch {
                dir: t.dir.clone(),
                reference: first.dir.clone(),
                what: "plan (plan.json)",
            });
        }
    }
    Ok(first)
}

/// The planned runs, once every one appears in exactly one task (and no task ran another).
fn covered_once(tasks: &[Task], first: &Task) -> Result<Vec<usize>, MergeError> {
    let planned: Vec<usize> = first.plan["runs"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|x| x["index"].as_u64().map(|i| i as usize))
                .collect()
        })
        .unwrap_or_default();
    let mut owner: BTreeMap<usize, Vec<&Path>> = BTreeMap::new();
    for t in tasks {
        for run in t.runs.keys() {
            owner.entry(*run).or_default().push(&t.dir);
        }
    }
    let missing: Vec<String> = planned
        .iter()
        .filter(|r| !owner.contains_key(r))
        .map(|r| r.to_string())
        .collect();
    let duplicated: Vec<String> = owner
        .iter()
        .filter(|(_, d)| d.len() > 1)
        .map(|(r, d)| {
            format!(
                "run {r} in {}",
                d.iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" and ")
            )
        })
        .collect();
    let unplanned: Vec<String> = owner
        .keys()
        .filter(|r| !planned.contains(r))
        .map(|r| r.to_string())
        .collect();
    if !missing.is_empty() || !duplicated.is_empty() || !unplanned.is_empty() {
        return Err(MergeError::Coverage {
            missing: if missing.is_empty() {
                String::new()
            } else {
                format!(" missing runs {}", missing.join(", "))
            },
            duplicated: [
                if duplicated.is_empty() {
                    String::new()
                } else {
                    format!("; duplicated: {}", duplicated.join("; "))
                },
                if unplanned.is_empty() {
                    String::new()
                } else {
                    format!("; not in the plan: runs {}", unplanned.join(", "))
                },
            ]
            .concat(),
        });
    }

    Ok(planned)
}

/// runs.csv and steps.csv of the merged folder, rows in plan order.
fn rows_in_plan_order(tasks: &[Task], planned: &[usize]) -> (String, String) {
    let mut runs_csv = format!("{}\n", run_header().join(","));
    let mut steps_csv = format!("{}\n", step_header().join(","));
    for run in planned {
        let t = tasks
            .iter()
            .find(|t| t.runs.contains_key(run))
            .expect("coverage checked above");
        runs_csv.push_str(&t.runs[run]);
        runs_csv.push('\n');
        for line in t.steps.get(run).into_iter().flatten() {
            steps_csv.push_str(line);
            steps_csv.push('\n');
        }
    }
    (runs_csv, steps_csv)
}

/// The first task's run.json with every task's traces (copied into the partial folder),
/// warnings, hosts and times, and the merge's own command.
fn merged_meta(
    tasks: &[Task],
    first: &Task,
    partial: &Partial,
    command: &str,
) -> Result<RunMeta, MergeError> {
    let mut meta = first.meta.clone();
    let mut infos = Vec::new();
    for (ci, c) in meta.conditions.iter_mut().enumerate() {
        // The headroom run of a condition ran in the task that profiled it.
        c.headroom = tasks
            .iter()
            .find_map(|t| t.meta.conditions.get(ci).and_then(|tc| tc.headroom.clone()));
        c.trace = None;
        c.stages = None;
        for t in tasks {
            let Some(file) = t.meta.conditions.get(ci).and_then(|tc| tc.trace.clone()) else {
                continue;
            };
            let from = t.dir.join(&file);
            let to = partial.join(&file);
            std::fs::copy(&from, &to).map_err(|e| MergeError::Task {
                dir: t.dir.clone(),
                message: format!("cannot copy {file}: {e}"),
            })?;
            c.trace = Some(file);
            c.profile_startup_ms = t.meta.conditions[ci].profile_startup_ms;
            c.stages = t.meta.conditions[ci].stages.clone();
            break;
        }
    }
    for t in tasks {
        for w in t.meta.warnings.iter().chain(&t.meta.notices) {
            if !meta.warnings.contains(w) && !meta.notices.contains(w) {
                meta.warnings.push(w.clone());
            }
        }
        meta.started_unix_s = meta.started_unix_s.min(t.meta.started_unix_s);
        meta.finished_unix_s = meta.finished_unix_s.max(t.meta.finished_unix_s);
        infos.push(TaskInfo {
            dir: t.dir.display().to_string(),
            host: t.meta.environment.hostname.clone(),
            runs: t.runs.keys().copied().collect(),
            profiled: t
                .meta
                .conditions
                .iter()
                .filter(|c| c.trace.is_some())
                .map(|c| c.name.clone())
                .collect(),
        });
    }
    meta.tasks = Some(infos);
    meta.command = command.to_string();
    meta.interrupted = false;
    Ok(meta)
}
