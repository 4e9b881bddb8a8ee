//! An experiment run to a finished results folder: the runner writes `<out>.partial/`, the
//! report is built there, and only then does the folder replace `<out>/`. `loaderlab run` and
//! every `tune` trial go through [`run_to_folder`], so both leave folders of the same shape and
//! neither promotes a folder whose report failed.

use std::path::PathBuf;

use crate::analysis::{Analysis, AnalysisError};
use crate::config::Experiment;
use crate::plan::Plan;
use crate::report;
use crate::results::{partial_dir, promote};
use crate::runner::{self, Reporter, RunError, RunOptions};

#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    #[error(
        "interrupted: measurements so far kept in {}; earlier results in {} untouched",
        partial.display(),
        out.display()
    )]
    Interrupted { partial: PathBuf, out: PathBuf },
    #[error(transparent)]
    Run(RunError),
    #[error("the measurements are complete in {} but the report failed: {source}", partial.display())]
    Report {
        partial: PathBuf,
        source: AnalysisError,
    },
    #[error(
        "the run finished but its results could not be moved from {} to {}: {source}",
        partial.display(),
        out.display()
    )]
    Promote {
        partial: PathBuf,
        out: PathBuf,
        source: std::io::Error,
    },
}

/// Run `plan` of `exp` into `opts.out`: measure, build the report in the partial folder,
/// promote it. Returns the report's analysis.
pub fn run_to_folder(
    exp: &Experiment,
    plan: &Plan,
    opts: &RunOptions,
    reporter: &'static dyn Reporter,
) -> Result<Analysis, ExecuteError> {
    let out = opts.out.clone();
    match runner::run(exp, plan, opts, reporter) {
        Ok(_) => {}
        Err(RunError::Interrupted { partial }) => {
            return Err(ExecuteError::Interrupted { partial, out });
        }
        Err(e) => return Err(ExecuteError::Run(e)),
    }
    let partial = partial_dir(&out);
    let analysis = report::build(&partial).map_err(|source| ExecuteError::Report {
        partial: partial.clone(),
        source,
    })?;
    promote(&partial, &out).map_err(|source| ExecuteError::Promote {
        partial,
        out,
        source,
    })?;
    Ok(analysis)
}
