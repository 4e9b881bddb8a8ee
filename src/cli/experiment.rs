//! Loading an experiment for any subcommand: an invalid one is printed with every problem.

use std::path::Path;

use super::{Failure, Status};
use crate::config::{self, ConfigError, Experiment, Overrides};

/// Load an experiment; an invalid one is printed with every problem and fails with exit 2.
pub(super) fn load(file: &Path, overrides: &Overrides) -> Result<Experiment, Failure> {
    config::load(file, overrides).map_err(|e| {
        print_problems(file, &e);
        Failure::Reported(Status::Invalid)
    })
}

/// The default settings with `overrides`, checked as an experiment file named `name` would be.
pub(super) fn load_defaults(name: &str, overrides: &Overrides) -> Result<Experiment, Failure> {
    let file = Path::new(name);
    config::load_str(file, "", overrides).map_err(|e| {
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
