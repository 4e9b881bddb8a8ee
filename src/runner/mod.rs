//! Executes a plan: for each planned run start the loader, reset the model, run the warm-up,
//! then time every step; afterwards one separate, traced run per condition.
//!
//! Invariants: every run starts from the same weights and optimizer state and sees the same
//! batches; each step's row reaches `steps.csv` as soon as it is measured; results are built in
//! `<out>.partial/` and replace `<out>/` only when the whole experiment completed, so an
//! interrupted or failed run never touches earlier results. Profiled runs never enter the
//! speed figures.

pub mod records;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};

use crate::config::{DeviceKind, Experiment, Settings};
use crate::data::{self, DataError, Dataset, IMAGE_SIDE};
use crate::loader::{Loader, LoaderConfig, LoaderError};
use crate::plan::Plan;
use crate::trace::{self, Recording, TraceError};
use crate::train::{self, DeviceError, InitialWeights, Trainer};
use crate::transforms::Pipeline;
use records::{
    CONFIG_TOML, CsvAppender, PLAN_JSON, RUN_COLUMNS, RUN_JSON, RUNS_CSV, RunRecord, STEP_COLUMNS,
    STEPS_CSV, StepRecord, TRACES_DIR, write_atomic,
};

/// Set by the Ctrl-C handler; the runner stops after the current step.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Stop after the current step on the first Ctrl-C; exit at once on the second.
pub fn install_interrupt_handler() {
    let _ = ctrlc::set_handler(|| {
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!("\ninterrupted: stopping after the current step (Ctrl-C again to quit now)");
    });
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot use the output folder {}: {source}", path.display())]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("run {run} ({condition}): {source}")]
    Loader {
        run: String,
        condition: String,
        source: LoaderError,
    },
    #[error("training failed: {0}")]
    Train(#[from] candle_core::Error),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    GpuTrack(#[from] trace::GpuTrackError),
    #[error("interrupted; the measurements so far are in {}", partial.display())]
    Interrupted { partial: PathBuf },
}

pub struct RunOptions {
    /// The final results folder.
    pub out: PathBuf,
    pub quiet: bool,
    /// The command line that reproduces this run, for the report.
    pub command: String,
    /// Only these planned runs (by index); all when None. Used by Slurm array tasks.
    pub only_runs: Option<Vec<usize>>,
    /// Profile only these conditions (by index); all when None.
    pub profile_conditions: Option<Vec<usize>>,
}

/// What the runner learned besides the raw rows, written to `run.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunMeta {
    pub experiment: String,
    pub file: String,
    pub command: String,
    pub started_unix_s: u64,
    pub finished_unix_s: u64,
    pub loaderlab_version: String,
    pub build_profile: String,
    pub build_opt_level: String,
    pub rustc: String,
    pub conditions: Vec<ConditionMeta>,
    pub warnings: Vec<String>,
    pub notices: Vec<String>,
    pub interrupted: bool,
    pub timing_note: String,
    pub environment: crate::environment::Environment,
    /// Set when the runs were executed as separate tasks (a Slurm job array) and merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<TaskInfo>>,
}

/// One task of a distributed run: where it ran and which runs it executed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskInfo {
    pub dir: String,
    pub host: String,
    pub runs: Vec<usize>,
    pub profiled: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConditionMeta {
    pub name: String,
    pub device: String,
    pub cpu_threads: usize,
    pub workers: u64,
    pub dataset: String,
    pub pin_memory: String,
    pub trace: Option<String>,
    pub profile_startup_ms: Option<f64>,
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

pub fn partial_dir(out: &Path) -> PathBuf {
    let mut name = out
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".partial");
    out.with_file_name(name)
}

/// A trace file name for a condition: its label with unsafe characters replaced.
pub fn trace_file_name(condition: &str) -> String {
    let safe: String = condition
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "=,._-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}.json")
}

/// Everything one condition needs, built once.
struct Prepared {
    settings: Settings,
    dataset: Arc<dyn Dataset>,
    pipeline: Arc<Pipeline>,
    device: Device,
    device_name: String,
    threads: usize,
}

pub fn warn(quiet: bool, message: &str) {
    if !quiet {
        eprintln!("warning: {message}");
    }
}

/// Run the experiment; on success the results are in `opts.out`.
pub fn run(exp: &Experiment, plan: &Plan, opts: &RunOptions) -> Result<RunMeta, RunError> {
    let started = now_unix();
    let out_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RunError::Output { path, source }
    };
    // Fail on an unwritable output folder before any work.
    let partial = partial_dir(&opts.out);
    if let Some(parent) = opts.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(out_err(parent))?;
    }
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(out_err(&partial))?;
    }
    std::fs::create_dir_all(partial.join(TRACES_DIR)).map_err(out_err(&partial))?;
    let resolved = resolved_toml(exp);
    write_atomic(&partial.join(CONFIG_TOML), resolved.as_bytes()).map_err(out_err(&partial))?;
    let plan_json = serde_json::to_vec_pretty(plan).unwrap_or_default();
    write_atomic(&partial.join(PLAN_JSON), &plan_json).map_err(out_err(&partial))?;

    let mut warnings = Vec::new();
    let mut notices = Vec::new();
    if env!("LLBUILD_OPT_LEVEL") == "0" {
        warnings.push(
            "this loaderlab binary was built without optimisations (opt-level 0): step times \
             are not representative; use `cargo run --release`"
                .to_string(),
        );
    }

    // Prepare every condition: dataset, pipeline, device.
    let cores = train::cores();
    let mut datasets: Vec<(crate::config::DatasetSection, Arc<dyn Dataset>)> = Vec::new();
    let mut devices: HashMap<(DeviceKind, u64), train::Chosen> = HashMap::new();
    let mut prepared = Vec::new();
    let mut metas = Vec::new();
    for c in &exp.conditions {
        let s = &c.settings;
        let dataset = match datasets.iter().find(|(d, _)| *d == s.dataset) {
            Some((_, ds)) => Arc::clone(ds),
            None => {
                let ds = data::open(s, opts.quiet)?;
                datasets.push((s.dataset.clone(), Arc::clone(&ds)));
                ds
            }
        };
        let key = (s.device.kind, s.device.ordinal);
        if let std::collections::hash_map::Entry::Vacant(e) = devices.entry(key) {
            let chosen = train::select(s.device.kind, s.device.ordinal as usize)?;
            if let Some(n) = &chosen.notice {
                notices.push(n.clone());
            }
            e.insert(chosen);
        }
        let chosen = &devices[&key];
        let threads = if s.device.threads == 0 {
            cores
        } else {
            s.device.threads as usize
        };
        let on_cpu = chosen.device.is_cpu();
        if on_cpu && s.loader.workers as usize + threads > cores {
            warnings.push(format!(
                "{}: {} loader workers + {threads} compute threads exceed the {cores} cores of \
                 this machine; workers and training compete for cores, so the comparison \
                 measures contention as much as loading",
                c.name, s.loader.workers
            ));
        }
        let device_name = if on_cpu {
            format!("cpu ({threads} threads)")
        } else {
            chosen.name.clone()
        };
        metas.push(ConditionMeta {
            name: c.name.clone(),
            device: device_name.clone(),
            cpu_threads: threads,
            workers: s.loader.workers,
            dataset: dataset.describe(),
            pin_memory: if !s.loader.pin_memory {
                "off".into()
            } else if on_cpu {
                "not applicable on the CPU".into()
            } else {
                "on: page-locked batch buffers, asynchronous copies".into()
            },
            trace: None,
            profile_startup_ms: None,
        });
        prepared.push(Prepared {
            settings: s.clone(),
            pipeline: Arc::new(Pipeline::new(&s.transforms, s.experiment.seed, IMAGE_SIDE)),
            dataset,
            device: chosen.device.clone(),
            device_name,
            threads,
        });
    }
    crate::bench::init_compute_pool(prepared.iter().map(|p| p.threads).max().unwrap_or(cores));
    train::keep_freed_memory();
    for w in &warnings {
        warn(opts.quiet, w);
    }
    if !opts.quiet {
        for m in &metas {
            eprintln!(
                "{}: {} ({} workers; {})",
                m.name, m.device, m.workers, m.dataset
            );
        }
    }
    for n in &notices {
        if !opts.quiet {
            eprintln!("note: {n}");
        }
    }

    let init = InitialWeights::pytorch_default(exp.base.experiment.seed);
    let mut steps_csv =
        CsvAppender::create(&partial.join(STEPS_CSV), &STEP_COLUMNS).map_err(out_err(&partial))?;
    let mut runs_csv =
        CsvAppender::create(&partial.join(RUNS_CSV), &RUN_COLUMNS).map_err(out_err(&partial))?;
    let mut trainers: HashMap<usize, Trainer> = HashMap::new();
    let total_runs = plan.runs.len();
    let mut interrupted = false;

    let selected = plan.runs.iter().filter(|r| {
        opts.only_runs
            .as_ref()
            .is_none_or(|only| only.contains(&r.index))
    });
    for planned in selected {
        if INTERRUPTED.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        let p = &prepared[planned.condition_index];
        let s = &p.settings;
        let trainer = trainer_for(&mut trainers, planned.condition_index, p, &init)?;
        set_cpu_threads(p.threads);
        let loader_err = |source| RunError::Loader {
            run: format!("{}/{total_runs}", planned.index + 1),
            condition: planned.condition.clone(),
            source,
        };
        train::set_tf32(s.device.tf32);
        let mut loader = Loader::with_memory(
            Arc::clone(&p.dataset),
            Arc::clone(&p.pipeline),
            LoaderConfig::from_settings(s),
            train::pinned_memory(&p.device, s.loader.pin_memory),
        )
        .map_err(loader_err)?;
        let startup_ms = loader.startup().as_secs_f64() * 1e3;
        trainer.reset()?;
        let bar = progress(opts.quiet, s.protocol.warmup_steps + s.protocol.timed_steps);
        bar.set_message(format!(
            "run {}/{total_runs} {} (round {}) warm-up",
            planned.index + 1,
            planned.condition,
            planned.round
        ));
        for _ in 0..s.protocol.warmup_steps {
            let batch = loader.next_batch().map_err(loader_err)?;
            let (x, y) = train::to_device(batch, &p.device)?;
            trainer.step(&x, &y)?;
            bar.inc(1);
            if INTERRUPTED.load(Ordering::SeqCst) {
                break;
            }
        }
        train::synchronize(&p.device)?;

        // The timed window: from the first timed batch request to the device being idle.
        let mut rows: Vec<StepRecord> = Vec::with_capacity(s.protocol.timed_steps as usize);
        let mut losses: Vec<Tensor> = Vec::new();
        let mut images: u64 = 0;
        let mut clock = train::DeviceClock::for_device(&p.device);
        clock.anchor()?;
        let window = Instant::now();
        let stream_now = !clock.on_device();
        for step in 0..s.protocol.timed_steps as usize {
            if INTERRUPTED.load(Ordering::SeqCst) {
                interrupted = true;
                break;
            }
            let t0 = Instant::now();
            let batch = loader.next_batch().map_err(loader_err)?;
            let t1 = Instant::now();
            let (fingerprint, epoch, n) = (batch.fingerprint, batch.epoch, batch.len);
            clock.mark()?;
            let (x, y) = train::to_device(batch, &p.device)?;
            let t2 = Instant::now();
            clock.mark()?;
            let loss = trainer.step(&x, &y)?;
            clock.mark()?;
            let t3 = Instant::now();
            images += n as u64;
            let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
            let mut row = StepRecord {
                run: planned.index,
                condition: planned.condition.clone(),
                round: planned.round,
                position: planned.position,
                step,
                batch_wait_ms: ms(t0, t1),
                h2d_ms: ms(t1, t2),
                compute_ms: ms(t2, t3),
                step_ms: ms(t0, t3),
                loss: f64::NAN,
                fingerprint,
                epoch,
                // Replaced by the device's own figure below where it has a clock.
                device_ms: ms(t1, t3),
            };
            if stream_now {
                // On the CPU the loss is already computed: reading it costs nothing.
                row.loss = loss.to_scalar::<f32>()? as f64;
                steps_csv.append(&row.to_csv()).map_err(out_err(&partial))?;
            } else {
                losses.push(loss);
            }
            rows.push(row);
            bar.inc(1);
            // The message is formatted inside the timed window: only every tenth step, and
            // not at all when the bar is hidden (--quiet).
            let so_far = window.elapsed().as_secs_f64();
            if step % 10 == 0 && !bar.is_hidden() && so_far > 0.0 {
                bar.set_message(format!(
                    "run {}/{total_runs} {} (round {}) {:.0} img/s",
                    planned.index + 1,
                    planned.condition,
                    planned.round,
                    images as f64 / so_far
                ));
            }
        }
        train::synchronize(&p.device)?;
        let elapsed_s = window.elapsed().as_secs_f64();
        bar.finish_and_clear();
        if !stream_now {
            let marks = clock.read()?;
            for (k, (row, loss)) in rows.iter_mut().zip(&losses).enumerate() {
                row.loss = loss.to_scalar::<f32>()? as f64;
                row.device_ms = marks.get(k).map_or(f64::NAN, |m| m.busy_ms());
                steps_csv.append(&row.to_csv()).map_err(out_err(&partial))?;
            }
        }
        let record = RunRecord {
            run: planned.index,
            condition: planned.condition.clone(),
            round: planned.round,
            position: planned.position,
            workers: s.loader.workers,
            startup_ms,
            elapsed_s,
            images,
            img_per_s: if elapsed_s > 0.0 {
                images as f64 / elapsed_s
            } else {
                0.0
            },
            device: p.device_name.clone(),
            interrupted,
        };
        runs_csv
            .append(&record.to_csv())
            .map_err(out_err(&partial))?;
        if !opts.quiet {
            eprintln!(
                "run {}/{total_runs} {:<24} round {} position {}: {:>9.1} img/s  (worker start-up {:.1} ms)",
                planned.index + 1,
                planned.condition,
                planned.round,
                planned.position,
                record.img_per_s,
                startup_ms
            );
        }
        drop(loader);
        if interrupted {
            break;
        }
    }

    // Profiled runs: separate, short, traced; never part of the speed figures.
    if !interrupted && exp.base.protocol.profile {
        let profiled = exp.conditions.iter().enumerate().filter(|(i, _)| {
            opts.profile_conditions
                .as_ref()
                .is_none_or(|only| only.contains(i))
        });
        for (i, c) in profiled {
            if INTERRUPTED.load(Ordering::SeqCst) {
                interrupted = true;
                break;
            }
            let p = &prepared[i];
            let trainer = trainer_for(&mut trainers, i, p, &init)?;
            set_cpu_threads(p.threads);
            let file = trace_file_name(&c.name);
            let path = partial.join(TRACES_DIR).join(&file);
            let recording = Recording::create(&path)?;
            let loader_err = |source| RunError::Loader {
                run: "profiled".into(),
                condition: c.name.clone(),
                source,
            };
            train::set_tf32(p.settings.device.tf32);
            let mut loader = Loader::with_memory(
                Arc::clone(&p.dataset),
                Arc::clone(&p.pipeline),
                LoaderConfig::from_settings(&p.settings),
                train::pinned_memory(&p.device, p.settings.loader.pin_memory),
            )
            .map_err(loader_err)?;
            metas[i].profile_startup_ms = Some(loader.startup().as_secs_f64() * 1e3);
            trainer.reset()?;
            let s = &p.settings;
            for _ in 0..s.protocol.warmup_steps {
                let batch = loader.next_batch().map_err(loader_err)?;
                let (x, y) = train::to_device(batch, &p.device)?;
                trainer.step(&x, &y)?;
            }
            train::synchronize(&p.device)?;
            let mut clock = train::DeviceClock::for_device(&p.device);
            recording.start();
            if clock.on_device() {
                // The anchor event's device time is this span's host time: the GPU track is
                // placed relative to it.
                let _span = tracing::info_span!(trace::GPU_CLOCK_ANCHOR).entered();
                clock.anchor()?;
            }
            for _ in 0..s.protocol.profile_steps {
                let batch = {
                    let _span = tracing::info_span!(trace::BATCH_WAIT).entered();
                    loader.next_batch().map_err(loader_err)?
                };
                let (x, y) = {
                    let _span = tracing::info_span!(trace::H2D_TRANSFER).entered();
                    clock.mark()?;
                    train::to_device(batch, &p.device)?
                };
                let _span = tracing::info_span!(trace::FORWARD_BACKWARD_ADAM).entered();
                clock.mark()?;
                trainer.step(&x, &y)?;
                clock.mark()?;
            }
            train::synchronize(&p.device)?;
            recording.stop();
            drop(loader);
            recording.finish()?;
            if clock.on_device() {
                trace::add_gpu_track(&path, &clock.read()?)?;
            }
            metas[i].trace = Some(format!("{TRACES_DIR}/{file}"));
            if !opts.quiet {
                eprintln!("profiled {}: {TRACES_DIR}/{file}", c.name);
            }
        }
    }

    let meta = RunMeta {
        experiment: exp.base.experiment.name.clone(),
        file: exp.file.display().to_string(),
        command: opts.command.clone(),
        started_unix_s: started,
        finished_unix_s: now_unix(),
        loaderlab_version: env!("CARGO_PKG_VERSION").into(),
        build_profile: env!("LLBUILD_PROFILE").into(),
        build_opt_level: env!("LLBUILD_OPT_LEVEL").into(),
        rustc: env!("LLBUILD_RUSTC").into(),
        conditions: metas,
        warnings,
        notices,
        interrupted,
        timing_note: TIMING_NOTE.into(),
        environment: crate::environment::Environment::capture(
            devices.values().map(|c| c.name.clone()).collect(),
        ),
        tasks: None,
    };
    let meta_json = serde_json::to_vec_pretty(&meta).unwrap_or_default();
    write_atomic(&partial.join(RUN_JSON), &meta_json).map_err(out_err(&partial))?;
    if interrupted {
        return Err(RunError::Interrupted { partial });
    }
    Ok(meta)
}

/// What the timings include and exclude, stated in the results.
pub const TIMING_NOTE: &str = "Each timed run starts its loader (worker start-up is measured \
separately as startup_ms), resets the model and optimizer, runs the warm-up steps untimed, then \
times every step on a monotonic clock: batch_wait = inside the loader's next, h2d = copy to the \
device (submission on CUDA), compute = forward, loss, backward and Adam step (enqueue time on \
CUDA), step = their sum. device = time the device was busy with the step: on CUDA from events \
on the device's stream (the device reaching the step's copy to it finishing the step's last \
kernel; launch gaps inside a step count as busy), on the CPU h2d + compute. Device idle = 1 - \
sum(device) / elapsed. Throughput = images / elapsed, where elapsed runs from the first timed \
batch request to the device having finished all work. Writing each step's row (a few \
microseconds) happens inside elapsed. Profiled runs are separate and never enter these figures.";

fn trainer_for<'a>(
    trainers: &'a mut HashMap<usize, Trainer>,
    condition: usize,
    p: &Prepared,
    init: &InitialWeights,
) -> Result<&'a mut Trainer, RunError> {
    if let std::collections::hash_map::Entry::Vacant(e) = trainers.entry(condition) {
        e.insert(Trainer::new(
            init.clone(),
            &p.settings.optimizer,
            p.device.clone(),
        )?);
    }
    Ok(trainers.get_mut(&condition).expect("inserted above"))
}

/// candle's CPU kernels read RAYON_NUM_THREADS on every call.
fn set_cpu_threads(threads: usize) {
    // SAFETY: no loader threads exist between runs, and candle reads the variable through
    // std::env (which locks), so nothing reads the environment concurrently from C.
    unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
}

fn progress(quiet: bool, len: u64) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos:>4}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// Move `partial` into place as `out`, replacing earlier results only now.
pub fn promote(partial: &Path, out: &Path) -> std::io::Result<()> {
    if out.exists() {
        let mut old_name = out
            .file_name()
            .map(|n| n.to_os_string())
            .unwrap_or_default();
        old_name.push(".old");
        let old = out.with_file_name(old_name);
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        std::fs::rename(out, &old)?;
        std::fs::rename(partial, out)?;
        std::fs::remove_dir_all(&old)?;
    } else {
        std::fs::rename(partial, out)?;
    }
    Ok(())
}

/// The experiment as it runs, as a TOML experiment file of its own: the resolved base settings
/// and every condition listed explicitly. Loading it gives the same conditions and plan.
pub fn resolved_toml(exp: &Experiment) -> String {
    toml::to_string(&ResolvedFile::new(exp)).unwrap_or_default()
}

/// The experiment as it ran: the base settings plus the conditions.
#[derive(Serialize)]
struct ResolvedFile {
    #[serde(flatten)]
    base: Settings,
    conditions: Vec<ResolvedCondition>,
}

#[derive(Serialize)]
struct ResolvedCondition {
    name: String,
    #[serde(flatten)]
    overrides: toml::Table,
}

impl ResolvedFile {
    fn new(exp: &Experiment) -> Self {
        ResolvedFile {
            base: exp.base.clone(),
            conditions: exp
                .conditions
                .iter()
                .map(|c| {
                    let mut nested = toml::Table::new();
                    for (k, v) in &c.overrides {
                        let parts: Vec<&str> = k.split('.').collect();
                        insert_nested(&mut nested, &parts, v.clone());
                    }
                    ResolvedCondition {
                        name: c.name.clone(),
                        overrides: nested,
                    }
                })
                .collect(),
        }
    }
}

fn insert_nested(t: &mut toml::Table, parts: &[&str], v: toml::Value) {
    match parts {
        [] => {}
        [last] => {
            t.insert(last.to_string(), v);
        }
        [first, rest @ ..] => {
            let entry = t
                .entry(first.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(inner) = entry {
                insert_nested(inner, rest, v);
            }
        }
    }
}
