//! A watched job (`loaderlab.watch(loader, out=…)` in Python): the [`Recorder`] that streams
//! each step of the user's own loop into `steps.csv` as it is measured, and [`complete`], which
//! makes the folder a results folder like any other (`plan.json`, `runs.csv`, `run.json`,
//! `config.resolved.toml`), so `report`, `verify`, `compare` and `diagnose` read it.
//!
//! The job's steps fall into blocks of `block_steps` steps: each block is a run (the folder's
//! one condition, `job`, in as many rounds as blocks), so every CI is taken over blocks of the
//! job as an experiment's are over its rounds. A last block cut short is kept in steps.csv and
//! left out of the speed figures, as an interrupted run is.
//!
//! Invariant: the rows are written as they are measured (flushed to the OS at least once a
//! second and as the watch ends), so a job that dies keeps them; everything else is derived
//! from them, atomically, and can be derived again.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::{
    Condition, EngineKind, Experiment, ModelKind, ProtocolSection, ReportSection, RunOrder,
    Settings, resolved_toml,
};
use crate::format::utc;
use crate::plan::{Plan, PlanCondition, PlanExperiment, PlannedRun};
use crate::results::{
    CONFIG_TOML, ComputeDevice, ConditionMeta, EngineRecord, Environment, PLAN_JSON, RUN_JSON,
    RUNS_CSV, ResultsError, RunMeta, RunRecord, STAGES_JSON, STEPS_CSV, StagesFile, StepRecord,
    WATCH_JSON, WATCHED_CONDITION, WatchInfo, column, read_json, run_header, step_header,
    write_atomic, write_json,
};

/// How often the rows reach the OS at least.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// steps.csv's header in a watched folder: the contract's columns, then the batch's size.
pub fn watched_step_header() -> Vec<&'static str> {
    let mut h = step_header();
    h.push(column::IMAGES);
    h
}

/// Whether `dir` holds a watched job.
pub fn is_watched(dir: &Path) -> bool {
    dir.join(WATCH_JSON).is_file()
}

fn read_err(path: &Path, message: impl ToString) -> ResultsError {
    ResultsError::Read {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

fn folder_err(path: &Path, message: String) -> ResultsError {
    ResultsError::Folder {
        path: path.to_path_buf(),
        source: std::io::Error::other(message),
    }
}

/// Streams a watched job's steps into `steps.csv`.
pub struct Recorder {
    dir: PathBuf,
    info: WatchInfo,
    rows: BufWriter<File>,
    steps: u64,
    flushed: Instant,
}

impl Recorder {
    /// Start watching into `dir`: refused where it holds another run (an experiment's
    /// results, another watch's rows, or files of something else).
    pub fn open(dir: &Path, info: WatchInfo) -> Result<Recorder, ResultsError> {
        if info.block_steps == 0 || info.batch_size == 0 {
            return Err(folder_err(
                dir,
                "block_steps and batch_size must be at least 1".into(),
            ));
        }
        if dir.is_file() {
            return Err(folder_err(dir, "it is a file, not a folder".into()));
        }
        if is_watched(dir) {
            let other: WatchInfo = read_json(&dir.join(WATCH_JSON))?;
            return Err(folder_err(
                dir,
                format!(
                    "it holds another watched run ({:?}, started {} by {:?}): choose another \
                     `out`, or remove the folder to record over it",
                    other.name,
                    utc(other.started_unix_s),
                    other.command
                ),
            ));
        }
        if dir.join(PLAN_JSON).is_file() || dir.join(RUN_JSON).is_file() {
            return Err(folder_err(
                dir,
                "it holds an experiment's results: choose another `out`".into(),
            ));
        }
        if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
            return Err(folder_err(
                dir,
                "it exists and is not empty: choose another `out` (a watch never writes over \
                 files it did not make)"
                    .into(),
            ));
        }
        let ferr = |source| ResultsError::Folder {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(ferr)?;
        write_json(&dir.join(WATCH_JSON), &info)?;
        let path = dir.join(STEPS_CSV);
        let werr = |source| ResultsError::Write {
            path: path.clone(),
            source,
        };
        let mut rows = BufWriter::with_capacity(1 << 16, File::create(&path).map_err(werr)?);
        writeln!(rows, "{}", watched_step_header().join(",")).map_err(werr)?;
        rows.flush().map_err(werr)?;
        Ok(Recorder {
            dir: dir.to_path_buf(),
            info,
            rows,
            steps: 0,
            flushed: Instant::now(),
        })
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Steps recorded so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// One step: the wait inside `next()`, the whole step (that wait, then the loop's own work
    /// until it asks again), the device's busy time (NaN where not measured: the CPU's is the
    /// step's own time), the batch's size and the epoch.
    pub fn step(
        &mut self,
        wait_ns: u64,
        step_ns: u64,
        device_ms: f64,
        images: u64,
        epoch: u64,
    ) -> std::io::Result<()> {
        let block = self.info.block_steps;
        let (run, step) = ((self.steps / block) as usize, (self.steps % block) as usize);
        let wait_ms = wait_ns as f64 / 1e6;
        let step_ms = step_ns.max(wait_ns) as f64 / 1e6;
        let compute_ms = step_ms - wait_ms;
        let row = StepRecord {
            run,
            condition: WATCHED_CONDITION.into(),
            round: run,
            position: 0,
            step,
            batch_wait_ms: wait_ms,
            h2d_ms: 0.0,
            compute_ms,
            step_ms,
            loss: f64::NAN,
            fingerprint: 0,
            epoch,
            device_ms: if device_ms.is_nan() && self.info.compute_device == "cpu" {
                compute_ms
            } else {
                device_ms
            },
            rank: 0,
            sync_ms: 0.0,
        }
        .to_csv();
        self.rows.write_all(&row.as_bytes()[..row.len() - 1])?;
        writeln!(self.rows, ",{images}")?;
        self.steps += 1;
        if self.flushed.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// The rows so far to the OS.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.flushed = Instant::now();
        self.rows.flush()
    }

    /// The stage clocks so far, as `stages.json` (atomically).
    pub fn stages(&self, stages: &StagesFile) -> Result<(), ResultsError> {
        write_stages(&self.dir, stages)
    }

    /// End the watch in order: the rows flushed, `watch.json` marked finished, the folder
    /// completed.
    pub fn close(mut self) -> Result<(), ResultsError> {
        let path = self.dir.join(STEPS_CSV);
        self.flush()
            .map_err(|source| ResultsError::Write { path, source })?;
        self.info.finished_unix_s = Some(now_unix());
        write_json(&self.dir.join(WATCH_JSON), &self.info)?;
        complete(&self.dir)
    }
}

/// The stage clocks so far, as `dir/stages.json` (atomically).
pub fn write_stages(dir: &Path, stages: &StagesFile) -> Result<(), ResultsError> {
    write_json(&dir.join(STAGES_JSON), stages)
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One steps.csv row as [`complete`] needs it.
struct Row {
    run: usize,
    step_ms: f64,
    images: u64,
}

/// The rows of a watched steps.csv up to the first that is cut short or malformed (a job
/// killed mid-write), and how many lines were dropped.
fn read_rows(path: &Path) -> Result<(String, Vec<Row>, usize), ResultsError> {
    let text = std::fs::read_to_string(path).map_err(|e| read_err(path, e))?;
    let header = watched_step_header();
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != header.join(",") {
        return Err(read_err(
            path,
            "not a watched job's steps (its header differs)",
        ));
    }
    let (run_at, step_at, images_at) = (
        0,
        header
            .iter()
            .position(|c| *c == column::STEP_MS)
            .unwrap_or(0),
        header.len() - 1,
    );
    let mut kept = first.len();
    let mut rows = Vec::new();
    let mut dropped = 0;
    for line in lines {
        let fields: Vec<&str> = line.trim_end().split(',').collect();
        let parsed = (line.ends_with('\n') && fields.len() == header.len())
            .then(|| {
                Some(Row {
                    run: fields[run_at].parse().ok()?,
                    step_ms: fields[step_at].parse().ok()?,
                    images: fields[images_at].parse().ok()?,
                })
            })
            .flatten();
        match parsed {
            Some(r) if dropped == 0 => {
                kept += line.len();
                rows.push(r);
            }
            _ => dropped += 1,
        }
    }
    Ok((text[..kept].to_string(), rows, dropped))
}

/// The settings the watched job ran with, as an experiment's condition records them.
fn settings(info: &WatchInfo, name: &str) -> Settings {
    let mut s = Settings::default();
    s.experiment.name = name.to_string();
    s.experiment.description = format!("watched: {}", info.command);
    s.loader.batch_size = info.batch_size;
    s.loader.workers = info.workers;
    s.loader.prefetch_factor = info.prefetch_factor.unwrap_or(s.loader.prefetch_factor);
    s.loader.persistent_workers = info.persistent_workers;
    s.loader.pin_memory = info.pin_memory;
    s.loader.engine = if info.loader == "loaderlab.Loader" {
        EngineKind::Native
    } else {
        EngineKind::Pytorch
    };
    s.model.kind = ModelKind::StandIn;
    s.device.threads = info.cpu_threads.max(1);
    s
}

/// Make the watched folder `dir` a results folder: `steps.csv` cut at a torn last row,
/// `runs.csv` (one run per block), `plan.json`, `run.json` and `config.resolved.toml`, each
/// written atomically. Safe to call again (on a job still running it takes the rows so far).
pub fn complete(dir: &Path) -> Result<(), ResultsError> {
    let info: WatchInfo = read_json(&dir.join(WATCH_JSON))?;
    let steps_path = dir.join(STEPS_CSV);
    let (kept, rows, dropped) = read_rows(&steps_path)?;
    let mut warnings = Vec::new();
    if dropped > 0 {
        write_atomic(&steps_path, kept.as_bytes()).map_err(|source| ResultsError::Write {
            path: steps_path.clone(),
            source,
        })?;
        warnings.push(format!(
            "steps.csv ended in {dropped} row(s) cut short (the job stopped while writing); they \
             were dropped"
        ));
    }
    if rows.is_empty() {
        return Err(read_err(
            &steps_path,
            "no step was recorded: the watched loop took no batch",
        ));
    }
    let mut blocks: BTreeMap<usize, (u64, f64, u64)> = BTreeMap::new();
    for r in &rows {
        let b = blocks.entry(r.run).or_default();
        b.0 += 1;
        b.1 += r.step_ms;
        b.2 += r.images;
    }
    // A job shorter than one block is one whole run of its own length.
    let block_steps = if blocks.len() == 1 {
        rows.len() as u64
    } else {
        info.block_steps
    };
    let name = if info.name.is_empty() {
        dir.file_name()
            .map_or("watched job".into(), |n| n.to_string_lossy().into_owned())
    } else {
        info.name.clone()
    };
    let mut runs_csv = format!("{}\n", run_header().join(","));
    for (&run, &(steps, ms, images)) in &blocks {
        let elapsed_s = ms / 1e3;
        runs_csv.push_str(
            &RunRecord {
                run,
                condition: WATCHED_CONDITION.into(),
                round: run,
                position: 0,
                workers: info.workers,
                // Worker start-up is inside the first wait of each epoch.
                startup_ms: f64::NAN,
                elapsed_s,
                images,
                img_per_s: if elapsed_s > 0.0 {
                    images as f64 / elapsed_s
                } else {
                    f64::NAN
                },
                device: info.device.clone(),
                interrupted: steps < block_steps,
                resources: [f64::NAN; 5],
            }
            .to_csv(),
        );
    }
    write_atomic(&dir.join(RUNS_CSV), runs_csv.as_bytes()).map_err(|source| {
        ResultsError::Write {
            path: dir.join(RUNS_CSV),
            source,
        }
    })?;
    let settings = settings(&info, &name);
    let protocol = ProtocolSection {
        warmup_steps: 0,
        timed_steps: block_steps,
        rounds: blocks.len() as u64,
        order: RunOrder::Fixed,
        profile: false,
        profile_steps: 0,
        headroom: false,
        headroom_steps: 0,
    };
    let report = ReportSection::default();
    let plan = Plan {
        experiment: PlanExperiment {
            name: name.clone(),
            description: settings.experiment.description.clone(),
            file: String::new(),
            seed: settings.experiment.seed,
            protocol: protocol.clone(),
            report: report.clone(),
        },
        conditions: vec![PlanCondition {
            name: WATCHED_CONDITION.into(),
            overrides: toml::Table::new(),
            config: settings.clone(),
        }],
        runs: blocks
            .keys()
            .map(|&run| PlannedRun {
                index: run,
                round: run,
                position: 0,
                condition: WATCHED_CONDITION.into(),
                condition_index: 0,
            })
            .collect(),
    };
    write_json(&dir.join(PLAN_JSON), &plan)?;
    let stages_path = dir.join(STAGES_JSON);
    let stages: Option<StagesFile> = if stages_path.is_file() {
        Some(read_json(&stages_path)?)
    } else {
        None
    };
    let cuda = info.compute_device == "cuda";
    let mut notices = Vec::new();
    if info.finished_unix_s.is_none() {
        notices.push(
            "the watch did not end in order (the job stopped, or is still running): the rows \
             are those written until then"
                .into(),
        );
    }
    let meta = RunMeta {
        experiment: name.clone(),
        file: String::new(),
        command: info.command.clone(),
        started_unix_s: info.started_unix_s,
        finished_unix_s: info.finished_unix_s.unwrap_or_else(|| {
            std::fs::metadata(&steps_path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(info.started_unix_s, |d| d.as_secs())
        }),
        loaderlab_version: env!("CARGO_PKG_VERSION").into(),
        build_profile: env!("LLBUILD_PROFILE").into(),
        build_opt_level: env!("LLBUILD_OPT_LEVEL").into(),
        rustc: env!("LLBUILD_RUSTC").into(),
        conditions: vec![ConditionMeta {
            name: WATCHED_CONDITION.into(),
            device: info.device.clone(),
            compute_device: if cuda {
                ComputeDevice::Cuda
            } else {
                ComputeDevice::Cpu
            },
            cpu_threads: info.cpu_threads as usize,
            workers: info.workers,
            dataset: info.dataset.clone(),
            pin_memory: info.pin_memory.to_string(),
            trace: None,
            profile_startup_ms: None,
            memory_pool: None,
            model: Some("your own training step (watched, not run by loaderlab)".into()),
            engine: EngineRecord::Watched {
                loader: info.loader.clone(),
                python: info.python.clone(),
                torch: info.torch.clone(),
            },
            stages: stages.as_ref().and_then(StagesFile::totals),
            headroom: None,
            host: None,
        }],
        warnings,
        notices,
        interrupted: false,
        timing_note: WATCH_TIMING_NOTE.into(),
        environment: Environment::capture(vec![info.device.clone()]),
        tasks: None,
    };
    write_json(&dir.join(RUN_JSON), &meta)?;
    let exp = Experiment {
        file: PathBuf::new(),
        base: settings.clone(),
        protocol,
        report,
        conditions: vec![Condition {
            name: WATCHED_CONDITION.into(),
            overrides: toml::Table::new(),
            settings,
        }],
    };
    let toml = resolved_toml(&exp).map_err(|e| ResultsError::Encode {
        path: dir.join(CONFIG_TOML),
        message: e.to_string(),
    })?;
    let toml = format!(
        "# The watched job's loader settings in an experiment file's terms (a record, not a \
         runnable experiment: the dataset and the step were the job's own).\n{toml}"
    );
    write_atomic(&dir.join(CONFIG_TOML), toml.as_bytes()).map_err(|source| ResultsError::Write {
        path: dir.join(CONFIG_TOML),
        source,
    })
}

/// Complete the watched folder `dir` and build its report (`report.md`, `result.json`, the
/// charts), as a run ends with its report.
pub fn finish(dir: &Path) -> Result<(), String> {
    complete(dir).map_err(|e| e.to_string())?;
    crate::report::build(dir)
        .map(|_| ())
        .map_err(|e| format!("cannot build the report: {e}"))
}

/// Whether the watched folder `dir` holds rows its results files do not (its job died before
/// completing it, or is still running).
pub fn stale(dir: &Path) -> bool {
    let modified = |name: &str| {
        std::fs::metadata(dir.join(name))
            .and_then(|m| m.modified())
            .ok()
    };
    match (modified(STEPS_CSV), modified(crate::results::RESULT_JSON)) {
        (Some(rows), Some(result)) => rows > result,
        _ => true,
    }
}

/// What a watched job's step times hold, as the report states it.
pub const WATCH_TIMING_NOTE: &str = "a watched job's steps, on the monotonic clock of its \
    training thread: batch_wait is the time inside the loader's next() (the first of an epoch \
    from iter() on, so a DataLoader's worker start-up counts); the step runs from the batch \
    being handed over to the loop's next call to next(), so it holds everything the loop does \
    between batches (forward, backward, optimizer, logging); the time between epochs (outside \
    the loop) is not in any step. On the CPU the device time is the step's own time; on CUDA, \
    events recorded on the current stream without synchronising.";

#[cfg(test)]
mod tests {
    use super::*;

    fn info(block_steps: u64) -> WatchInfo {
        WatchInfo {
            id: "host-1-2".into(),
            name: "job under test".into(),
            command: "python train.py".into(),
            started_unix_s: 1,
            finished_unix_s: None,
            loader: "torch.utils.data.DataLoader".into(),
            dataset: "Planted (64 items)".into(),
            transforms: vec!["Slow".into()],
            batch_size: 4,
            workers: 0,
            prefetch_factor: None,
            persistent_workers: false,
            pin_memory: false,
            device: "cpu (1 thread)".into(),
            compute_device: "cpu".into(),
            cpu_threads: 1,
            python: "3.11".into(),
            torch: "2.15".into(),
            block_steps,
            every: 8,
        }
    }

    #[test]
    fn a_watched_folder_reads_as_results_and_keeps_a_torn_last_row_out() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        let mut r = Recorder::open(&dir, info(5)).unwrap();
        for k in 0..12u64 {
            r.step(2_000_000, 10_000_000, f64::NAN, 4, k / 6).unwrap();
        }
        r.flush().unwrap();
        // A job killed mid-row.
        drop(r);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join(STEPS_CSV))
            .unwrap();
        f.write_all(b"2,job,2,0,2,1.0").unwrap();
        drop(f);
        complete(&dir).unwrap();
        let raw = crate::results::Raw::load(&dir).unwrap();
        assert_eq!(raw.steps.height(), 12);
        assert_eq!(raw.runs.height(), 3);
        assert_eq!(raw.plan.runs.len(), 3);
        assert!(
            raw.meta.warnings[0].contains("cut short"),
            "{:?}",
            raw.meta.warnings
        );
        let a = crate::analysis::analyse(&raw).unwrap();
        let job = &a.conditions[0];
        // Two whole blocks count; the last (2 steps) is left out of the speed figures.
        assert!(
            (job.img_per_s.point - 400.0).abs() < 1e-6,
            "{}",
            job.img_per_s.point
        );
        // A second watch on the folder is refused, naming the first.
        let e = Recorder::open(&dir, info(5)).err().unwrap().to_string();
        assert!(
            e.contains("another watched run") && e.contains("job under test"),
            "{e}"
        );
    }

    #[test]
    fn a_folder_of_something_else_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
        let e = Recorder::open(tmp.path(), info(5))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("not empty"), "{e}");
        assert!(tmp.path().join("notes.txt").is_file());
    }
}
