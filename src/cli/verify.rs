//! `verify`: every check on a results folder, one line each; exit 1 when any fails.

use std::path::Path;

use super::{Failure, Status};

pub(super) fn verify(dir: &Path) -> Result<(), Failure> {
    let checks = crate::commands::verify::verify(dir);
    let failed = checks.iter().filter(|c| !c.ok).count();
    for c in &checks {
        let mark = if c.ok { "ok  " } else { "FAIL" };
        println!("{mark} {}: {}", c.name, c.detail);
    }
    if failed == 0 {
        println!("all {} checks passed", checks.len());
        Ok(())
    } else {
        println!("{failed} of {} checks failed", checks.len());
        Err(Failure::Reported(Status::Failed))
    }
}
