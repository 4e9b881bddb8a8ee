//! What a run leaves, whichever engine ran it: a timed run's row of runs.csv (written here, the
//! one place), a profiled run's trace and stage clocks.

use super::resources::Used;
use super::setup::Setup;
use super::{Outputs, RunError};
use crate::loader::StageTotals;
use crate::plan::PlannedRun;
use crate::results::RunRecord;

/// The outcome of one timed run.
pub(crate) struct Timed {
    pub record: RunRecord,
    pub interrupted: bool,
}

/// What a timed window measured as a whole.
pub(crate) struct Window {
    pub startup_ms: f64,
    pub elapsed_s: f64,
    /// Images over every rank.
    pub images: u64,
    pub interrupted: bool,
    pub used: Used,
    pub resident: f64,
}

/// The run's row of runs.csv, written.
pub(crate) fn finish(
    planned: &PlannedRun,
    setup: &Setup,
    w: Window,
    out: &mut Outputs,
) -> Result<Timed, RunError> {
    let record = RunRecord {
        run: planned.index,
        condition: planned.condition.clone(),
        round: planned.round,
        position: planned.position,
        workers: setup.settings().loader.workers,
        startup_ms: w.startup_ms,
        elapsed_s: w.elapsed_s,
        images: w.images,
        img_per_s: if w.elapsed_s > 0.0 {
            w.images as f64 / w.elapsed_s
        } else {
            0.0
        },
        device: setup.device_name.clone(),
        interrupted: w.interrupted,
        resources: [
            w.used.process_cpu_s,
            w.used.workers_cpu_s,
            w.used.training_cpu_s,
            w.used.peak_rss_mib,
            w.resident,
        ],
    };
    out.run(&record)?;
    Ok(Timed {
        record,
        interrupted: w.interrupted,
    })
}

/// What a profiled run leaves for `run.json`.
pub(crate) struct Profiled {
    /// The trace, relative to the results folder.
    pub trace: String,
    pub startup_ms: f64,
    /// The loader's stage clocks over the profiled window.
    pub stages: Option<StageTotals>,
}
