//! `merge`: task folders (from `slurm` or `run --only-run`) into one results folder.

use std::path::PathBuf;

use super::{Failure, Global, exit::failed};
use crate::results::REPORT_MD;

pub(super) fn merge(dirs: &[PathBuf], g: &Global) -> Result<(), Failure> {
    let Some(out) = &g.out else {
        return Err(Failure::Invalid(
            "merge needs --out DIR for the merged results".into(),
        ));
    };
    let n = crate::commands::merge::merge(dirs, out, &super::command_line()).map_err(failed)?;
    println!(
        "merged {n} runs from {} task folders: {}",
        dirs.len(),
        out.join(REPORT_MD).display()
    );
    Ok(())
}
