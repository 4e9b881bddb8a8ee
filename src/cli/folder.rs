//! `report`, `verify` and `merge`: commands over results folders, nothing run.

use std::path::{Path, PathBuf};

use super::{Failure, Global, Status, exit::failed};
use crate::results::REPORT_MD;

pub(super) fn report(dir: &Path) -> Result<(), Failure> {
    crate::report::build(dir)
        .map_err(|e| Failure::Failed(format!("cannot build the report: {e}")))?;
    println!("{}", dir.join(REPORT_MD).display());
    Ok(())
}

pub(super) fn verify(dir: &Path) -> Result<(), Failure> {
    let checks = crate::verify::verify(dir);
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

pub(super) fn merge(dirs: &[PathBuf], g: &Global) -> Result<(), Failure> {
    let Some(out) = &g.out else {
        return Err(Failure::Invalid(
            "merge needs --out DIR for the merged results".into(),
        ));
    };
    let n = crate::merge::merge(dirs, out, &super::command_line()).map_err(failed)?;
    println!(
        "merged {n} runs from {} task folders: {}",
        dirs.len(),
        out.join(REPORT_MD).display()
    );
    Ok(())
}
