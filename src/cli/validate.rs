//! `validate`: check experiment files and print every problem; nothing run.

use std::path::PathBuf;

use super::experiment::load;
use super::{Failure, Status};
use crate::config::Overrides;

pub(super) fn validate(files: &[PathBuf], overrides: &Overrides) -> Result<(), Failure> {
    let mut failed = 0;
    for file in files {
        match load(file, overrides) {
            Ok(exp) => println!(
                "ok: {} ({} conditions, {} runs)",
                file.display(),
                exp.conditions.len(),
                exp.conditions.len() as u64 * exp.protocol.rounds
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
