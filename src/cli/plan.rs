//! `plan`: the expanded conditions and the run order, as text or JSON; nothing run.

use std::path::Path;

use super::Failure;
use super::experiment::load;
use crate::config::Overrides;
use crate::plan;

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
