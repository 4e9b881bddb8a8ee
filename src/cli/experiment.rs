//! `validate` and `plan`: an experiment file read and checked, nothing run.

use std::path::{Path, PathBuf};

use super::{Failure, Status};
use crate::config::{self, ConfigError, Experiment, Overrides};
use crate::plan;

/// Load an experiment; an invalid one is printed with every problem and fails with exit 2.
pub(super) fn load(file: &Path, overrides: &Overrides) -> Result<Experiment, Failure> {
    config::load(file, overrides).map_err(|e| {
        print_problems(file, &e);
        Failure::Reported(Status::Invalid)
    })
}

fn print_problems(file: &Path, e: &ConfigError) {
    match e {
        ConfigError::Invalid { problems } => {
            let n = problems.len();
            eprintln!(
                "error: {} is not a valid experiment ({n} problem{}):",
                file.display(),
                if n == 1 { "" } else { "s" }
            );
            for p in problems {
                eprintln!("  {p}");
            }
        }
        ConfigError::Read { .. } => eprintln!("error: {e}"),
    }
}

pub(super) fn validate(files: &[PathBuf], overrides: &Overrides) -> Result<(), Failure> {
    let mut failed = 0;
    for file in files {
        match load(file, overrides) {
            Ok(exp) => println!(
                "ok: {} ({} conditions, {} runs)",
                file.display(),
                exp.conditions.len(),
                exp.conditions.len() as u64 * exp.base.protocol.rounds
            ),
            Err(_) => failed += 1,
        }
    }
    if failed == 0 {
        Ok(())
    } else {
        eprintln!("{failed} of {} files invalid", files.len());
        Err(Failure::Reported(Status::Invalid))
    }
}

pub(super) fn plan(file: &Path, overrides: &Overrides, json: bool) -> Result<(), Failure> {
    let plan = plan::build(&load(file, overrides)?);
    if json {
        let text = serde_json::to_string_pretty(&plan)
            .map_err(|e| Failure::Failed(format!("cannot write the plan as JSON: {e}")))?;
        println!("{text}");
    } else {
        print!("{}", plan.to_text());
    }
    Ok(())
}
