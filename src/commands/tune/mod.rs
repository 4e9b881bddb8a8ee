//! `loaderlab tune FILE`: find the cheapest setting of one knob (`loader.workers` by default,
//! or `loader.prefetch_factor`, `device.threads`) whose throughput is within noise of the best.
//!
//! For workers it starts from the prediction (loader time per batch ÷ step time without
//! waiting, from a probe trial at 0 workers with a profiled and a headroom run); otherwise from
//! the file's value. Each trial measures a setting and its neighbours in short interleaved
//! rounds — an ordinary experiment, in a results folder of its own — and the search climbs
//! towards the best until the best is surrounded, waiting falls below the `moderately`
//! threshold, the budget runs out, or Ctrl-C. The choice is the cheapest setting of the last
//! trial whose ratio to that trial's best (paired by round) has a 95 % CI including 1 and
//! which is not input-bound where the best is not.
//!
//! Invariant: every figure comes from a trial's own results folder, and a setting is only
//! compared with settings measured in the same interleaved rounds.
//!
//! [`search`] holds the policy (tested against a fake trial runner), [`trial`] measures a
//! trial for real; this file ties them to a results folder and writes `tuned.toml`.

mod choose;
mod knob;
mod search;
mod trial;

pub use search::{Knob, Limits, Measured, Outcome, Trials, choose, search};
pub use trial::{ExperimentTrials, TrialProtocol, trial_experiment};

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::analysis::{self, Analysis};
use crate::commands::execute::ExecuteError;
use crate::config::{Experiment, Overrides};
use crate::report;
use crate::results::{Partial, ResultsError, SEARCH_JSON, SearchRecord, TUNED_TOML};
use crate::runner::Reporter;
use crate::train::CoreBudget;

pub struct TuneOptions {
    pub knob: Knob,
    /// Start no new trial after this many seconds.
    pub budget_s: f64,
    /// The most workers to try (default: on the CPU the cores left beside the compute
    /// threads, else twice the cores).
    pub max_workers: Option<u64>,
    pub warmup_steps: u64,
    pub timed_steps: u64,
    pub rounds: u64,
    /// The condition of the file to tune (default: the first).
    pub condition: Option<String>,
    /// The command line, for the reports.
    pub command: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error("{0}")]
    Invalid(String),
    #[error("trial {trial}: {source}")]
    Execute { trial: usize, source: ExecuteError },
    #[error("the search's report: {0}")]
    Analysis(#[from] analysis::AnalysisError),
    #[error("interrupted before any trial finished; the partial trial is in {}", .0.display())]
    Interrupted(PathBuf),
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a finished (or interrupted) search leaves.
pub struct Tuned {
    pub out: PathBuf,
    pub search: SearchRecord,
    pub analysis: Analysis,
}

/// Run the search for `exp` (loaded from `file` with `overrides`, which `tuned.toml` is made
/// from) into `out`; trials go to `<out>.trials/`.
pub fn tune(
    file: &Path,
    exp: &Experiment,
    overrides: &Overrides,
    opts: &TuneOptions,
    out: &Path,
    reporter: &'static dyn Reporter,
) -> Result<Tuned, TuneError> {
    let condition = exp
        .condition(opts.condition.as_deref())
        .map_err(|e| TuneError::Invalid(format!("--condition {e}")))?;
    let trials_dir = PathBuf::from(format!("{}.trials", out.display()));
    std::fs::create_dir_all(&trials_dir).map_err(|source| TuneError::Write {
        path: trials_dir.clone(),
        source,
    })?;
    let mut trials = ExperimentTrials {
        exp,
        condition,
        knob: opts.knob,
        protocol: TrialProtocol {
            warmup_steps: opts.warmup_steps,
            timed_steps: opts.timed_steps,
            rounds: opts.rounds,
        },
        trials_dir: trials_dir.clone(),
        command: opts.command.clone(),
        reporter,
        started: Instant::now(),
    };
    let limits = Limits {
        budget_s: opts.budget_s,
        max_workers: opts.max_workers,
        cores: CoreBudget::here(),
        min_effect: trials.exp.report.min_effect,
    };
    let Outcome { mut search, last } = search::search(
        &mut trials,
        opts.knob,
        &condition.settings,
        limits,
        &mut |line| reporter.note(line),
    )?;
    let Some(last) = last else {
        return Err(TuneError::Interrupted(trials_dir));
    };
    let analysis = finish(file, overrides, opts.knob, &mut search, &last, out)?;
    Ok(Tuned {
        out: out.to_path_buf(),
        search,
        analysis,
    })
}

/// The final folder: the last trial's results with search.json and tuned.toml beside them,
/// the report rebuilt in the partial folder (with the search section), then promoted.
fn finish(
    file: &Path,
    overrides: &Overrides,
    knob: Knob,
    search: &mut SearchRecord,
    last: &Measured,
    out: &Path,
) -> Result<Analysis, TuneError> {
    let partial = Partial::create(out)?;
    copy_dir(&last.folder, partial.dir()).map_err(|source| TuneError::Write {
        path: partial.dir().to_path_buf(),
        source,
    })?;
    if let Some(v) = search.chosen {
        let original = std::fs::read_to_string(file).map_err(|source| TuneError::Read {
            path: file.to_path_buf(),
            source,
        })?;
        let tuned = tuned_toml(&original, overrides, knob, v, &search.reason);
        partial.write(TUNED_TOML, tuned.as_bytes())?;
        search.tuned_toml = Some(TUNED_TOML.into());
    }
    partial.write_json(SEARCH_JSON, search)?;
    let analysis = report::build(partial.dir())?;
    partial.promote()?;
    Ok(analysis)
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// The experiment file with every override the search ran under written in (`LOADERLAB_*`,
/// then `--set`, each replacing what the file had), then the knob set to `value` (and no
/// longer a matrix axis); the file's comments and layout kept.
pub fn tuned_toml(
    original: &str,
    overrides: &Overrides,
    knob: Knob,
    value: u64,
    reason: &str,
) -> String {
    use toml_edit::{DocumentMut, Item, value as v};
    let Ok(mut doc) = original.parse::<DocumentMut>() else {
        return original.to_string();
    };
    let mut applied = Vec::new();
    for (key, value, given) in overrides.layers() {
        let Ok(item) = value.to_string().parse::<toml_edit::Value>() else {
            continue;
        };
        let path: Vec<&str> = match key.strip_prefix("matrix.") {
            // An axis is one dotted key inside [matrix], as files write it.
            Some(axis) => vec!["matrix", axis],
            None => key.split('.').collect(),
        };
        set_item(doc.as_table_mut(), &path, item);
        applied.push(given);
    }
    let (section, key) = knob.key().split_once('.').expect("knob keys are dotted");
    if let Some(matrix) = doc.get_mut("matrix").and_then(Item::as_table_like_mut) {
        matrix.remove(knob.key());
        if let Some(inner) = matrix.get_mut(section).and_then(Item::as_table_like_mut) {
            inner.remove(key);
        }
        if matrix.is_empty() {
            doc.remove("matrix");
        }
    }
    set_item(
        doc.as_table_mut(),
        &[section, key],
        v(value as i64).into_value().expect("a value"),
    );
    let mut header = format!(
        "# Tuned by `loaderlab tune`: {} = {value}. {reason}\n",
        knob.key()
    );
    if !applied.is_empty() {
        header.push_str(&format!(
            "# The search ran with these overrides, written in below: {}\n",
            applied.join(", ")
        ));
    }
    format!("{header}{doc}")
}

/// Set `path` (tables created on the way) to `value`.
fn set_item(table: &mut toml_edit::Table, path: &[&str], value: toml_edit::Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = table;
    for part in parents {
        if !node.get(part).is_some_and(toml_edit::Item::is_table_like) {
            node.insert(part, toml_edit::table());
        }
        match node.get_mut(part) {
            Some(toml_edit::Item::Table(t)) => node = t,
            // An inline table (`loader = { workers = 2 }`): made a standard table.
            Some(item) => {
                let inline = item.as_inline_table().cloned().unwrap_or_default();
                *item = toml_edit::Item::Table(inline.into_table());
                match item {
                    toml_edit::Item::Table(t) => node = t,
                    _ => return,
                }
            }
            None => return,
        }
    }
    node.insert(last, toml_edit::Item::Value(value));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tuned_toml_sets_the_knob_and_drops_its_axis() {
        let original = "# mine\n[loader]\nbatch_size = 64 # keep\n\n[matrix]\n\"loader.workers\" = [0, 2]\n\"model.width\" = [1, 2]\n";
        let t = tuned_toml(original, &Overrides::default(), Knob::Workers, 3, "because");
        assert!(t.starts_with("# Tuned by `loaderlab tune`: loader.workers = 3. because\n"));
        assert!(t.contains("# mine") && t.contains("batch_size = 64 # keep"));
        assert!(t.contains("workers = 3"));
        assert!(!t.contains("\"loader.workers\""));
        assert!(t.contains("\"model.width\" = [1, 2]"));
        let no_section = tuned_toml(
            "[experiment]\nname = \"x\"\n",
            &Overrides::default(),
            Knob::Threads,
            1,
            "r",
        );
        assert!(no_section.contains("[device]\nthreads = 1"), "{no_section}");
    }

    #[test]
    fn tuned_toml_carries_the_overrides_the_search_ran_under() {
        let original = "# mine\n[loader]\nbatch_size = 64\n\n[dataset]\nkind = \"fashion_mnist\"\n";
        let overrides = Overrides {
            set: vec![
                "dataset.kind=synthetic".into(),
                "dataset.synthetic_size=512".into(),
                "matrix.model.width=[1, 2]".into(),
            ],
            env: vec![("LOADERLAB_PROTOCOL__ROUNDS".into(), "5".into())],
        };
        let t = tuned_toml(original, &overrides, Knob::Workers, 2, "why");
        let doc: toml::Table = t.parse().unwrap();
        assert_eq!(doc["dataset"]["kind"].as_str(), Some("synthetic"), "{t}");
        assert_eq!(doc["dataset"]["synthetic_size"].as_integer(), Some(512));
        assert_eq!(doc["protocol"]["rounds"].as_integer(), Some(5));
        assert_eq!(doc["loader"]["workers"].as_integer(), Some(2));
        assert_eq!(doc["loader"]["batch_size"].as_integer(), Some(64));
        assert_eq!(
            doc["matrix"]["model.width"].as_array().map(Vec::len),
            Some(2)
        );
        assert!(t.contains("--set dataset.kind=synthetic"), "{t}");
        assert!(t.contains("LOADERLAB_PROTOCOL__ROUNDS=5"), "{t}");
        assert!(t.contains("# mine"));
    }
}
