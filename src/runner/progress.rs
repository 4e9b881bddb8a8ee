//! What a run tells the person at the terminal, behind one trait (criterion's `Report`): the
//! runner calls [`Reporter`] methods, [`Terminal`] prints them to stderr with progress bars and
//! [`Quiet`] (`--quiet`) keeps them to itself. Results never go through here.

use indicatif::{ProgressBar, ProgressStyle};

use crate::plan::PlannedRun;
use crate::results::{ConditionMeta, HeadroomRecord, RunRecord};

/// Terminal output of a run; every method defaults to saying nothing.
pub trait Reporter: Sync {
    /// Whether progress bars are shown (also a download's, which happens below the runner).
    fn shows_progress(&self) -> bool {
        false
    }
    fn warning(&self, _message: &str) {}
    fn note(&self, _message: &str) {}
    /// A condition is ready: its device, workers and dataset.
    fn condition(&self, _meta: &ConditionMeta) {}
    /// A progress bar over `len` steps (hidden unless the reporter shows progress).
    fn progress(&self, _len: u64) -> ProgressBar {
        ProgressBar::hidden()
    }
    /// A timed run finished.
    fn run_finished(&self, _run: &PlannedRun, _total_runs: usize, _record: &RunRecord) {}
    /// A profiled run wrote its trace.
    fn profiled(&self, _condition: &str, _trace: &str) {}
    /// A headroom run finished.
    fn headroom(&self, _condition: &str, _record: &HeadroomRecord) {}
}

/// `--quiet`: nothing but errors (which the caller prints) and the final summary.
pub struct Quiet;

impl Reporter for Quiet {}

/// Progress bars and one line per event, on stderr.
pub struct Terminal;

impl Reporter for Terminal {
    fn shows_progress(&self) -> bool {
        true
    }

    fn warning(&self, message: &str) {
        eprintln!("warning: {message}");
    }

    fn note(&self, message: &str) {
        eprintln!("note: {message}");
    }

    fn condition(&self, m: &ConditionMeta) {
        eprintln!(
            "{}: {} ({} workers; {})",
            m.name, m.device, m.workers, m.dataset
        );
    }

    fn progress(&self, len: u64) -> ProgressBar {
        let bar = ProgressBar::new(len);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos:>4}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    }

    fn run_finished(&self, run: &PlannedRun, total_runs: usize, record: &RunRecord) {
        eprintln!(
            "run {}/{total_runs} {:<24} round {} position {}: {:>9.1} img/s  (worker start-up {:.1} ms)",
            run.index + 1,
            run.condition,
            run.round,
            run.position,
            record.img_per_s,
            record.startup_ms
        );
    }

    fn profiled(&self, condition: &str, trace: &str) {
        eprintln!("profiled {condition}: {trace}");
    }

    fn headroom(&self, condition: &str, r: &HeadroomRecord) {
        // The figure the report uses: the median segment's rate.
        let rate = r.ceiling().map_or(0.0, |(rate, _)| rate);
        eprintln!(
            "headroom {condition}: {} img/s with data free (median of {} segments; {} steps on \
             {} replayed batches)",
            crate::format::rate(rate),
            r.segments.len().max(1),
            r.steps,
            r.batches
        );
    }
}

/// The reporter `--quiet` asks for.
pub fn reporter(quiet: bool) -> &'static dyn Reporter {
    if quiet { &Quiet } else { &Terminal }
}
