//! `report`: rebuild analysis, charts, result.json and report.md from a results folder.

use std::path::Path;

use super::Failure;
use crate::results::REPORT_MD;

pub(super) fn report(dir: &Path) -> Result<(), Failure> {
    crate::report::build(dir)
        .map_err(|e| Failure::Failed(format!("cannot build the report: {e}")))?;
    println!("{}", dir.join(REPORT_MD).display());
    Ok(())
}
