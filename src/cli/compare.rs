//! `compare`: the comparison's markdown on stdout (and compare.md / compare.json in --out);
//! exit 1 when a gate fails, 2 for a gate that does not parse.

use std::path::Path;

use super::{Failure, Global, Status, exit::failed};
use crate::commands::compare::{Gate, compare as run_compare};
use crate::results::{write_atomic, write_json};

pub(super) fn compare(
    before: &Path,
    after: &Path,
    fail_if: &[String],
    g: &Global,
) -> Result<(), Failure> {
    let gates = fail_if
        .iter()
        .map(|t| Gate::parse(t))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::Invalid)?;
    let c = run_compare(before, after, &gates).map_err(failed)?;
    let md = c.markdown();
    print!("{md}");
    if let Some(out) = &g.out {
        std::fs::create_dir_all(out)
            .map_err(|e| failed(format!("cannot create {}: {e}", out.display())))?;
        write_atomic(&out.join("compare.md"), md.as_bytes())
            .map_err(|e| failed(format!("{}: {e}", out.join("compare.md").display())))?;
        write_json(&out.join("compare.json"), &c).map_err(failed)?;
    }
    if c.failures.is_empty() {
        Ok(())
    } else {
        for f in &c.failures {
            eprintln!(
                "regression: {} in {} (after / before {:.4}, 95 % CI {:.4}–{:.4})",
                f.gate, f.condition, f.ratio.point, f.ratio.low, f.ratio.high
            );
        }
        Err(Failure::Reported(Status::Failed))
    }
}
