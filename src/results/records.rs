//! The raw measurement rows: their columns and CSV encoding. The runner writes them (as each
//! step is measured), analysis, verify and merge read them.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Every column name of steps.csv and runs.csv, once: the writers' headers below and every
/// reader (analysis, charts, verify, compare) name a column through these.
pub mod column {
    pub const RUN: &str = "run";
    pub const CONDITION: &str = "condition";
    pub const ROUND: &str = "round";
    pub const POSITION: &str = "position";
    pub const STEP: &str = "step";
    pub const BATCH_WAIT_MS: &str = "batch_wait_ms";
    pub const H2D_MS: &str = "h2d_ms";
    pub const COMPUTE_MS: &str = "compute_ms";
    pub const STEP_MS: &str = "step_ms";
    pub const LOSS: &str = "loss";
    pub const FINGERPRINT: &str = "fingerprint";
    pub const EPOCH: &str = "epoch";
    pub const DEVICE_MS: &str = "device_ms";
    pub const RANK: &str = "rank";
    pub const SYNC_MS: &str = "sync_ms";
    pub const WORKERS: &str = "workers";
    pub const STARTUP_MS: &str = "startup_ms";
    pub const ELAPSED_S: &str = "elapsed_s";
    pub const IMAGES: &str = "images";
    pub const IMG_PER_S: &str = "img_per_s";
    pub const DEVICE: &str = "device";
    pub const INTERRUPTED: &str = "interrupted";
    pub const PROCESS_CPU_S: &str = "process_cpu_s";
    pub const WORKERS_CPU_S: &str = "workers_cpu_s";
    pub const TRAINING_CPU_S: &str = "training_cpu_s";
    pub const PEAK_RSS_MIB: &str = "peak_rss_mib";
    pub const PAGE_CACHE_RESIDENT: &str = "page_cache_resident";
}

pub const STEP_COLUMNS: [&str; 13] = [
    column::RUN,
    column::CONDITION,
    column::ROUND,
    column::POSITION,
    column::STEP,
    column::BATCH_WAIT_MS,
    column::H2D_MS,
    column::COMPUTE_MS,
    column::STEP_MS,
    column::LOSS,
    column::FINGERPRINT,
    column::EPOCH,
    column::DEVICE_MS,
];

/// steps.csv's columns for several ranks per node (absent in folders written before them: rank
/// 0, no barrier): the rank that took the step, and its wait at the barrier after it, ms.
pub const STEP_RANK_COLUMNS: [&str; 2] = [column::RANK, column::SYNC_MS];

/// steps.csv's header: the required columns, then the rank columns.
pub fn step_header() -> Vec<&'static str> {
    STEP_COLUMNS
        .iter()
        .chain(STEP_RANK_COLUMNS.iter())
        .copied()
        .collect()
}

pub const RUN_COLUMNS: [&str; 11] = [
    column::RUN,
    column::CONDITION,
    column::ROUND,
    column::POSITION,
    column::WORKERS,
    column::STARTUP_MS,
    column::ELAPSED_S,
    column::IMAGES,
    column::IMG_PER_S,
    column::DEVICE,
    column::INTERRUPTED,
];

/// runs.csv's resource columns (absent, so NaN, in folders written before them): CPU time of
/// the process, of the loader's workers and of the rest (training) over the timed window, s,
/// the peak resident memory inside it, MiB, and the share of the dataset's files the page
/// cache held as it opened (NaN for a dataset held in memory).
pub const RUN_RESOURCE_COLUMNS: [&str; 5] = [
    column::PROCESS_CPU_S,
    column::WORKERS_CPU_S,
    column::TRAINING_CPU_S,
    column::PEAK_RSS_MIB,
    column::PAGE_CACHE_RESIDENT,
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

impl StepRecord {
    /// Step `step` of `planned`'s run before anything is measured: no times, no loss, rank 0.
    pub fn unmeasured(planned: &crate::plan::PlannedRun, step: usize) -> StepRecord {
        StepRecord {
            run: planned.index,
            condition: planned.condition.clone(),
            round: planned.round,
            position: planned.position,
            step,
            batch_wait_ms: f64::NAN,
            h2d_ms: f64::NAN,
            compute_ms: f64::NAN,
            step_ms: f64::NAN,
            loss: f64::NAN,
            fingerprint: 0,
            epoch: 0,
            device_ms: f64::NAN,
            rank: 0,
            sync_ms: 0.0,
        }
    }
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
    use crate::results::{bools, f64s, i64s, read_csv, strs};

    /// A row written by the record reads back, column by column under [`column`]'s names,
    /// through the reader analysis uses: writer and readers agree on every column.
    #[test]
    fn records_read_back_under_their_column_names() {
        let dir = tempfile::tempdir().unwrap();
        let step = StepRecord {
            run: 3,
            condition: "workers=4,batch_size=8".into(),
            round: 1,
            position: 2,
            step: 7,
            batch_wait_ms: 1.5,
            h2d_ms: 0.25,
            compute_ms: 8.0,
            step_ms: 9.75,
            loss: 2.25,
            fingerprint: 0xdead_beef,
            epoch: 1,
            device_ms: 8.25,
            rank: 1,
            sync_ms: 0.5,
        };
        let path = dir.path().join("steps.csv");
        let mut w = CsvAppender::create(&path, &step_header()).unwrap();
        w.append(&step.to_csv()).unwrap();
        drop(w);
        let df = read_csv(&path, &[column::CONDITION, column::FINGERPRINT]).unwrap();
        assert_eq!(df.width(), step_header().len());
        let i = |c| i64s(&df, c).unwrap()[0];
        let f = |c| f64s(&df, c).unwrap()[0];
        assert_eq!(
            [
                i(column::RUN),
                i(column::ROUND),
                i(column::POSITION),
                i(column::STEP)
            ],
            [3, 1, 2, 7]
        );
        assert_eq!(
            [
                f(column::BATCH_WAIT_MS),
                f(column::H2D_MS),
                f(column::COMPUTE_MS),
                f(column::STEP_MS),
                f(column::LOSS),
                f(column::DEVICE_MS),
                f(column::SYNC_MS)
            ],
            [1.5, 0.25, 8.0, 9.75, 2.25, 8.25, 0.5]
        );
        assert_eq!([i(column::EPOCH), i(column::RANK)], [1, 1]);
        assert_eq!(strs(&df, column::CONDITION).unwrap()[0], step.condition);
        assert_eq!(
            strs(&df, column::FINGERPRINT).unwrap()[0],
            "00000000deadbeef"
        );

        let run = RunRecord {
            run: 3,
            condition: "a".into(),
            round: 1,
            position: 0,
            workers: 2,
            startup_ms: 12.5,
            elapsed_s: 1.25,
            images: 640,
            img_per_s: 512.0,
            device: "cpu (2 threads)".into(),
            interrupted: false,
            resources: [1.0, 0.5, 0.5, 300.0, 0.25],
        };
        let path = dir.path().join("runs.csv");
        let mut w = CsvAppender::create(&path, &run_header()).unwrap();
        w.append(&run.to_csv()).unwrap();
        drop(w);
        let df = read_csv(&path, &[column::CONDITION, column::DEVICE]).unwrap();
        assert_eq!(df.width(), run_header().len());
        let f = |c| f64s(&df, c).unwrap()[0];
        assert_eq!(i64s(&df, column::WORKERS).unwrap()[0], 2);
        assert_eq!(i64s(&df, column::IMAGES).unwrap()[0], 640);
        assert_eq!(
            [
                f(column::STARTUP_MS),
                f(column::ELAPSED_S),
                f(column::IMG_PER_S)
            ],
            [12.5, 1.25, 512.0]
        );
        let resources: Vec<f64> = RUN_RESOURCE_COLUMNS.iter().map(|c| f(c)).collect();
        assert_eq!(resources, run.resources);
        assert_eq!(strs(&df, column::DEVICE).unwrap()[0], run.device);
        assert!(!bools(&df, column::INTERRUPTED).unwrap()[0]);
    }

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
