//! The raw measurement rows: their columns and CSV encoding. The runner writes them (as each
//! step is measured), analysis, verify and merge read them.

use std::fs::File;
use std::io::Write;
use std::path::Path;

pub const STEP_COLUMNS: [&str; 13] = [
    "run",
    "condition",
    "round",
    "position",
    "step",
    "batch_wait_ms",
    "h2d_ms",
    "compute_ms",
    "step_ms",
    "loss",
    "fingerprint",
    "epoch",
    "device_ms",
];

/// steps.csv's columns for several ranks per node (absent in folders written before them: rank
/// 0, no barrier): the rank that took the step, and its wait at the barrier after it, ms.
pub const STEP_RANK_COLUMNS: [&str; 2] = ["rank", "sync_ms"];

/// steps.csv's header: the required columns, then the rank columns.
pub fn step_header() -> Vec<&'static str> {
    STEP_COLUMNS
        .iter()
        .chain(STEP_RANK_COLUMNS.iter())
        .copied()
        .collect()
}

pub const RUN_COLUMNS: [&str; 11] = [
    "run",
    "condition",
    "round",
    "position",
    "workers",
    "startup_ms",
    "elapsed_s",
    "images",
    "img_per_s",
    "device",
    "interrupted",
];

/// runs.csv's resource columns (absent, so NaN, in folders written before them): CPU time of
/// the process, of the loader's workers and of the rest (training) over the timed window, s,
/// the peak resident memory inside it, MiB, and the share of the dataset's files the page
/// cache held as it opened (NaN for a dataset held in memory).
pub const RUN_RESOURCE_COLUMNS: [&str; 5] = [
    "process_cpu_s",
    "workers_cpu_s",
    "training_cpu_s",
    "peak_rss_mib",
    "page_cache_resident",
];

/// runs.csv's header: the required columns, then the resource columns.
pub fn run_header() -> Vec<&'static str> {
    RUN_COLUMNS
        .iter()
        .chain(RUN_RESOURCE_COLUMNS.iter())
        .copied()
        .collect()
}

/// One timed step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub run: usize,
    pub condition: String,
    pub round: usize,
    pub position: usize,
    pub step: usize,
    pub batch_wait_ms: f64,
    pub h2d_ms: f64,
    pub compute_ms: f64,
    pub step_ms: f64,
    pub loss: f64,
    pub fingerprint: u64,
    pub epoch: u64,
    /// Device busy with this step: CUDA events on a GPU (copy start to last kernel's end),
    /// h2d + compute on the CPU.
    pub device_ms: f64,
    /// The rank that took the step (0 with one rank).
    pub rank: usize,
    /// Its wait at the barrier after the step, ms (0 with one rank): inside `step_ms`.
    pub sync_ms: f64,
}

/// One timed run's totals.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub run: usize,
    pub condition: String,
    pub round: usize,
    pub position: usize,
    pub workers: u64,
    pub startup_ms: f64,
    pub elapsed_s: f64,
    pub images: u64,
    pub img_per_s: f64,
    pub device: String,
    pub interrupted: bool,
    /// [`RUN_RESOURCE_COLUMNS`], in order.
    pub resources: [f64; 5],
}

/// A CSV field, quoted when it holds a comma, quote or line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl StepRecord {
    pub fn to_csv(&self) -> String {
        format!(
            "{},{},{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:016x},{},{:.6},{},{:.6}\n",
            self.run,
            csv_field(&self.condition),
            self.round,
            self.position,
            self.step,
            self.batch_wait_ms,
            self.h2d_ms,
            self.compute_ms,
            self.step_ms,
            self.loss,
            self.fingerprint,
            self.epoch,
            self.device_ms,
            self.rank,
            self.sync_ms
        )
    }
}

impl RunRecord {
    pub fn to_csv(&self) -> String {
        format!(
            "{},{},{},{},{},{:.6},{:.9},{},{:.6},{},{},{:.6},{:.6},{:.6},{:.3},{:.6}\n",
            self.run,
            csv_field(&self.condition),
            self.round,
            self.position,
            self.workers,
            self.startup_ms,
            self.elapsed_s,
            self.images,
            self.img_per_s,
            csv_field(&self.device),
            self.interrupted,
            self.resources[0],
            self.resources[1],
            self.resources[2],
            self.resources[3],
            self.resources[4]
        )
    }
}

/// An append-only CSV file, each row written through to the OS as soon as it is measured.
pub struct CsvAppender {
    file: File,
}

impl CsvAppender {
    pub fn create(path: &Path, columns: &[&str]) -> std::io::Result<Self> {
        let mut file = File::create(path)?;
        file.write_all(format!("{}\n", columns.join(",")).as_bytes())?;
        Ok(CsvAppender { file })
    }

    pub fn append(&mut self, row: &str) -> std::io::Result<()> {
        self.file.write_all(row.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_with_commas_are_quoted() {
        assert_eq!(csv_field("workers=4"), "workers=4");
        assert_eq!(
            csv_field("workers=4,batch_size=8"),
            "\"workers=4,batch_size=8\""
        );
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
