//! `preview`: the transforms' effect on the first samples, as files.

use std::path::Path;

use super::experiment::load;
use super::{Failure, Global, exit::failed};
use crate::config::Overrides;

pub(super) fn preview(
    file: &Path,
    overrides: &Overrides,
    g: &Global,
    n: usize,
    condition: Option<&str>,
) -> Result<(), Failure> {
    let exp = load(file, overrides)?;
    let chosen = exp
        .condition(condition)
        .map_err(|e| Failure::Invalid(format!("--condition {e}")))?;
    let out = g
        .out
        .clone()
        .unwrap_or_else(|| exp.output_dir(None).join("preview"));
    let files =
        crate::commands::preview::preview(&chosen.settings, n, &out, g.quiet).map_err(failed)?;
    for f in files {
        println!("{}", f.display());
    }
    Ok(())
}
