//! `diagnose`: a user's torch.profiler trace in the report's terms; `--emit` a stand-in
//! experiment for it. Every problem with the trace is an invalid input (exit 2).

use std::path::{Path, PathBuf};

use clap::Args;

use super::{Failure, Global};
use crate::analysis::Thresholds;
use crate::commands::diagnose::{self, WaitSpan};
use crate::results::write_atomic;

#[derive(Args)]
pub struct DiagnoseArgs {
    /// A torch.profiler Chrome trace (.json or .json.gz), a folder of them (one per rank), or
    /// a watched job's folder (`loaderlab.watch`).
    #[arg(value_name = "TRACE")]
    trace: PathBuf,
    /// The span that takes a batch, when it is neither `batch_wait` (record_function) nor
    /// PyTorch DataLoader's `enumerate(DataLoader)#…__next__`.
    #[arg(long = "wait-span", value_name = "NAME")]
    wait_span: Option<String>,
    /// Also write a stand-in experiment with the trace's step time, ready to edit and run.
    #[arg(long, value_name = "FILE.toml")]
    emit: Option<PathBuf>,
}

impl DiagnoseArgs {
    /// The trace, folder of traces or watched folder.
    pub(super) fn trace(&self) -> &Path {
        &self.trace
    }
}

pub(super) fn diagnose(args: &DiagnoseArgs, g: &Global) -> Result<(), Failure> {
    let wanted = args
        .wait_span
        .clone()
        .map_or(WaitSpan::Default, WaitSpan::Named);
    let d = diagnose::diagnose(&args.trace, &wanted, Thresholds::default())
        .map_err(|e| Failure::Invalid(e.to_string()))?;
    let out = g
        .out
        .clone()
        .unwrap_or_else(|| Path::new("reports").join("diagnose"));
    let report = diagnose::write_folder(&d, &out).map_err(Failure::Failed)?;
    if let Some(file) = &args.emit {
        write_atomic(file, diagnose::emit_experiment(&d, file).as_bytes())
            .map_err(|e| Failure::Failed(format!("cannot write {}: {e}", file.display())))?;
    }
    for r in &d.ranks {
        println!("{}", diagnose::headline(r));
    }
    if let Some(slowest) = &d.slowest {
        println!("slowest rank: {slowest}");
    }
    println!("report: {}", report.display());
    if let Some(file) = &args.emit {
        println!("stand-in experiment: {}", file.display());
    }
    Ok(())
}
