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
    let chosen = match condition {
        Some(name) => exp.conditions.iter().find(|c| c.name == name),
        None => exp.conditions.first(),
    };
    let Some(chosen) = chosen else {
        let names: Vec<&str> = exp.conditions.iter().map(|c| c.name.as_str()).collect();
        return Err(Failure::Invalid(format!(
            "no condition {condition:?}; the conditions are {names:?}"
        )));
    };
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
