//! The results folder: the one contract between the code that writes it (runner, merge) and the
//! code that reads it (analysis, report, verify, merge, slurm).
//!
//! It owns every file and column name, the step and run records, the run metadata and the
//! environment, and the folder's lifecycle: a run builds `<out>.partial/`, writes each summary
//! file atomically, and only a complete run replaces `<out>/` ([`Partial::promote`]).
//!
//! Invariant: nothing here knows how the numbers were measured or what they mean; writers and
//! readers agree on names and encodings through this module alone.

pub mod environment;
mod folder;
pub mod meta;
mod read;
pub mod records;
pub mod search;
pub mod watch;

pub use environment::Environment;
pub use folder::{Partial, partial_dir, promote, write_atomic, write_json};
pub use meta::{
    ComputeDevice, ConditionMeta, EngineRecord, HeadroomRecord, HostSide, RunMeta, TaskInfo,
};
pub use read::{Raw, bools, f64s, i64s, read_csv, read_json, strs};
pub use records::{
    CsvAppender, RUN_COLUMNS, RUN_RESOURCE_COLUMNS, RunRecord, STEP_COLUMNS, STEP_RANK_COLUMNS,
    StepRecord, column, csv_field, run_header, step_header,
};
pub use search::{InputBound, SearchRecord, Trial, TrialSetting};
pub use watch::{STAGES_JSON, StagesFile, WATCH_JSON, WATCHED_CONDITION, WatchInfo, WatchedStages};

use std::path::PathBuf;

/// One row per timed step, appended as each step is measured.
pub const STEPS_CSV: &str = "steps.csv";
/// One row per timed run.
pub const RUNS_CSV: &str = "runs.csv";
/// What the runner learned besides the rows ([`RunMeta`]).
pub const RUN_JSON: &str = "run.json";
/// The plan that ran ([`crate::plan::Plan`]).
pub const PLAN_JSON: &str = "plan.json";
/// The experiment as it ran, as a TOML experiment file of its own.
pub const CONFIG_TOML: &str = "config.resolved.toml";
/// One Chrome trace per profiled condition.
pub const TRACES_DIR: &str = "traces";
/// Written by analysis: one row per condition.
pub const SUMMARY_CSV: &str = "summary.csv";
/// Written by analysis: the step rows in Parquet.
pub const STEPS_PARQUET: &str = "steps.parquet";
/// Written by the report: environment, configuration, plan, run metadata and every figure.
pub const RESULT_JSON: &str = "result.json";
/// Written by the report: the human-readable answer.
pub const REPORT_MD: &str = "report.md";
/// report.md as one self-contained page (`[report] html = true`, the default).
pub const REPORT_HTML: &str = "report.html";
/// Written by the report: the charts, SVG and PNG.
pub const CHARTS_DIR: &str = "charts";
/// Written by `tune`: the search that chose a setting ([`SearchRecord`]).
pub const SEARCH_JSON: &str = "search.json";
/// Written by `tune`: the experiment file with the chosen setting.
pub const TUNED_TOML: &str = "tuned.toml";

/// Reading or writing a results folder failed; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    #[error("{}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot use the output folder {}: {source}", path.display())]
    Folder {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode {}: {message}", path.display())]
    Encode { path: PathBuf, message: String },
}

/// A trace file name for a condition: its label with unsafe characters replaced.
pub fn trace_file_name(condition: &str) -> String {
    let safe: String = condition
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=,._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.json")
}
