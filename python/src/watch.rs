//! `loaderlab.watch`'s native half: the [`Recorder`] that writes each step of the user's own
//! loop as a steps.csv row (formatting and buffering in Rust, so the training thread pays a
//! method call per step), and the stage clocks as `stages.json`.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use loaderlab::commands::watch;
use loaderlab::loader::StageTotals;
use loaderlab::results::{StagesFile, WatchInfo, WatchedStages};

/// One step as the training thread hands it over: wait ns, step ns, device ms, images, epoch.
type Row = (u64, u64, f64, u64, u64);

/// What the training thread and the writer share.
#[derive(Default)]
struct Shared {
    /// Rows waiting for the writer, and whether the watch is ending.
    rows: Mutex<(Vec<Row>, bool)>,
    wake: Condvar,
    /// The writer's first error (it stops writing then).
    failed: Mutex<Option<String>>,
}

/// How often the writer takes the rows, formats them and hands them to the OS.
const WRITE_EVERY: Duration = Duration::from_millis(200);

/// Streams a watched job's steps into `out/steps.csv`: the training thread only appends each
/// step's numbers to a vector; a writer thread formats them and writes them to the OS every
/// 200 ms, so a job that dies keeps all but its last fifth of a second.
#[pyclass(module = "loaderlab._loaderlab")]
pub struct Recorder {
    shared: Arc<Shared>,
    writer: Option<JoinHandle<watch::Recorder>>,
    steps: u64,
    dir: PathBuf,
}

/// The writer thread: rows to steps.csv until the watch ends; gives the recorder back.
fn write(mut recorder: watch::Recorder, shared: Arc<Shared>) -> watch::Recorder {
    let mut taken = Vec::new();
    loop {
        let ending = {
            let mut guard = shared.rows.lock().unwrap_or_else(|p| p.into_inner());
            if guard.0.is_empty() && !guard.1 {
                guard = shared
                    .wake
                    .wait_timeout(guard, WRITE_EVERY)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            std::mem::swap(&mut guard.0, &mut taken);
            guard.1
        };
        let written = taken
            .drain(..)
            .try_for_each(|(w, s, d, i, e)| recorder.step(w, s, d, i, e))
            .and_then(|()| recorder.flush());
        if let Err(e) = written {
            let mut failed = shared.failed.lock().unwrap_or_else(|p| p.into_inner());
            failed.get_or_insert(format!("{}: {e}", recorder.dir().display()));
        }
        if ending {
            return recorder;
        }
        std::thread::sleep(WRITE_EVERY);
    }
}

#[pymethods]
impl Recorder {
    /// Start watching into `out`, described by `info` (watch.json's fields, as JSON); refused
    /// (ValueError) where `out` holds another run or files of something else.
    #[new]
    fn new(out: PathBuf, info: &str) -> PyResult<Recorder> {
        let info: WatchInfo = serde_json::from_str(info)
            .map_err(|e| PyValueError::new_err(format!("watch.json's fields: {e}")))?;
        let inner = watch::Recorder::open(&out, info)
            .map_err(|e| PyValueError::new_err(format!("loaderlab.watch: {e}")))?;
        let shared = Arc::new(Shared::default());
        let theirs = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("loaderlab-watch".into())
            .spawn(move || write(inner, theirs))
            .map_err(|e| PyOSError::new_err(format!("loaderlab.watch: {e}")))?;
        Ok(Recorder {
            shared,
            writer: Some(writer),
            steps: 0,
            dir: out,
        })
    }

    /// One step: the wait in next(), the whole step, ns; the device's busy time, ms (NaN where
    /// not measured); the batch's size; the epoch. Appended for the writer; a write that failed
    /// raises here.
    fn step(
        &mut self,
        wait_ns: u64,
        step_ns: u64,
        device_ms: f64,
        images: u64,
        epoch: u64,
    ) -> PyResult<()> {
        if self.writer.is_none() {
            return Err(PyValueError::new_err("the watch has ended"));
        }
        let mut guard = self.shared.rows.lock().unwrap_or_else(|p| p.into_inner());
        guard.0.push((wait_ns, step_ns, device_ms, images, epoch));
        drop(guard);
        self.steps += 1;
        if self.steps.is_multiple_of(256) {
            self.check()?;
        }
        Ok(())
    }

    /// Steps recorded so far.
    #[getter]
    fn steps(&self) -> u64 {
        self.steps
    }

    /// Wake the writer (the rows so far reach the OS within its next round).
    fn flush(&self) -> PyResult<()> {
        self.shared.wake.notify_one();
        self.check()
    }

    /// Write the stage clocks sampled inside a DataLoader (`stages.json`, WatchedStages as
    /// JSON) or loaderlab's loader's own stage totals (JSON).
    fn stages(&self, json: &str) -> PyResult<()> {
        let stages = serde_json::from_str::<WatchedStages>(json)
            .map(StagesFile::Watched)
            .or_else(|_| serde_json::from_str::<StageTotals>(json).map(StagesFile::Native))
            .map_err(|e| PyValueError::new_err(format!("stage clocks: {e}")))?;
        watch::write_stages(&self.dir, &stages).map_err(|e| PyOSError::new_err(e.to_string()))
    }

    /// End the watch: every row written, the folder completed as a results folder with its
    /// report. A watch that recorded no step leaves its folder as it is.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some(writer) = self.writer.take() else {
            return Ok(());
        };
        {
            let mut guard = self.shared.rows.lock().unwrap_or_else(|p| p.into_inner());
            guard.1 = true;
        }
        self.shared.wake.notify_one();
        let recorder = py
            .detach(|| writer.join())
            .map_err(|_| PyOSError::new_err("loaderlab.watch: the writer thread panicked"))?;
        self.check()?;
        if recorder.steps() == 0 {
            return Ok(());
        }
        let dir = recorder.dir().to_path_buf();
        py.detach(|| {
            recorder.close().map_err(|e| e.to_string())?;
            loaderlab::report::build(&dir)
                .map(|_| ())
                .map_err(|e| format!("cannot build the report: {e}"))
        })
        .map_err(|e| PyOSError::new_err(format!("loaderlab.watch: {e}")))
    }
}

impl Recorder {
    /// The writer's error, if a write failed.
    fn check(&self) -> PyResult<()> {
        match &*self.shared.failed.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(PyOSError::new_err(format!("loaderlab.watch: {e}"))),
            None => Ok(()),
        }
    }
}

/// Complete a watched folder as a results folder, with its report, from the rows it holds (a
/// job that died).
#[pyfunction]
pub fn complete(py: Python<'_>, out: PathBuf) -> PyResult<()> {
    py.detach(|| watch::finish(&out))
        .map_err(PyOSError::new_err)
}

/// `a` and `b`, two passes' stage totals (JSON), added up.
#[pyfunction]
pub fn add_stage_totals(a: &str, b: &str) -> PyResult<String> {
    let parse = |s: &str| {
        serde_json::from_str::<StageTotals>(s)
            .map_err(|e| PyValueError::new_err(format!("stage totals: {e}")))
    };
    let mut sum = parse(a)?;
    sum.absorb(&parse(b)?);
    serde_json::to_string(&sum).map_err(|e| PyValueError::new_err(e.to_string()))
}
