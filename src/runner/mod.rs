//! Executes a plan: each condition set up once ([`setup`]), then for each planned run a timed
//! run ([`timed`]) and afterwards one separate, traced run per condition ([`profiled`]), both
//! over one shared start and warm-up ([`session`]). Writes through [`crate::results`] alone.
//!
//! Invariants: every run starts from the same weights and optimizer state and sees the same
//! batches; each step's row reaches `steps.csv` as soon as it is measured; results are built in
//! `<out>.partial/` and replace `<out>/` only when the whole experiment completed, so an
//! interrupted or failed run never touches earlier results. Profiled runs never enter the
//! speed figures.

pub mod engine;
mod headroom;
mod outcome;
mod profiled;
pub mod progress;
mod ranks;
mod resources;
mod session;
pub mod setup;
mod timed;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

pub use progress::{Quiet, Reporter, Terminal, reporter};
pub use setup::{DataSetup, Setup, SetupError, Setups, StandInStep, Step, Workload};

use crate::config::{Experiment, resolved_toml};
use crate::loader::LoaderError;
use crate::plan::Plan;
use crate::results::{
    CONFIG_TOML, ConditionMeta, CsvAppender, Environment, PLAN_JSON, Partial, RUN_JSON, RUNS_CSV,
    ResultsError, RunMeta, RunRecord, STEPS_CSV, StepRecord, run_header, step_header,
};
use crate::trace::{self, TraceError};

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
    Setup(#[from] SetupError),
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
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error("{0}")]
    Rank(String),
    #[error("interrupted; the measurements so far are in {}", partial.display())]
    Interrupted { partial: PathBuf },
    #[error("{condition} (pytorch engine): {message}")]
    Engine { condition: String, message: String },
}

pub struct RunOptions {
    /// The final results folder.
    pub out: PathBuf,
    /// The command line that reproduces this run, for the report.
    pub command: String,
    /// Only these planned runs (by index); all when None. Used by Slurm array tasks.
    pub only_runs: Option<Vec<usize>>,
    /// Profile only these conditions (by index); all when None.
    pub profile_conditions: Option<Vec<usize>>,
}

impl RunOptions {
    /// Whether this process records condition `i`'s profiled (and headroom) run.
    fn profiles(&self, i: usize) -> bool {
        self.profile_conditions
            .as_ref()
            .is_none_or(|only| only.contains(&i))
    }
}

/// Where the runs' rows and files go: the partial folder and its two streamed CSV files.
pub(crate) struct Outputs {
    partial: Partial,
    steps_csv: CsvAppender,
    runs_csv: CsvAppender,
    reporter: &'static dyn Reporter,
}

impl Outputs {
    fn create(partial: Partial, reporter: &'static dyn Reporter) -> Result<Outputs, RunError> {
        let appender = |name: &str, columns: &[&str]| {
            CsvAppender::create(&partial.join(name), columns).map_err(|source| RunError::Output {
                path: partial.join(name),
                source,
            })
        };
        Ok(Outputs {
            steps_csv: appender(STEPS_CSV, &step_header())?,
            runs_csv: appender(RUNS_CSV, &run_header())?,
            partial,
            reporter,
        })
    }

    fn write_err(&self, name: &str) -> impl FnOnce(std::io::Error) -> RunError + use<> {
        let path = self.partial.join(name);
        move |source| RunError::Output { path, source }
    }

    fn step(&mut self, row: &StepRecord) -> Result<(), RunError> {
        let err = self.write_err(STEPS_CSV);
        self.steps_csv.append(&row.to_csv()).map_err(err)
    }

    fn run(&mut self, record: &RunRecord) -> Result<(), RunError> {
        let err = self.write_err(RUNS_CSV);
        self.runs_csv.append(&record.to_csv()).map_err(err)
    }
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Run the experiment into `<out>.partial/`; the caller builds the report there and promotes
/// it. On Ctrl-C the rows measured so far stay in the partial folder.
pub fn run(
    exp: &Experiment,
    plan: &Plan,
    opts: &RunOptions,
    reporter: &'static dyn Reporter,
) -> Result<RunMeta, RunError> {
    let started = now_unix();
    // Fail on an unwritable output folder before any work.
    let partial = Partial::create(&opts.out)?;
    let resolved = resolved_toml(exp).map_err(|e| ResultsError::Encode {
        path: partial.join(CONFIG_TOML),
        message: e.to_string(),
    })?;
    partial.write(CONFIG_TOML, resolved.as_bytes())?;
    partial.write_json(PLAN_JSON, plan)?;

    let quiet = !reporter.shows_progress();
    let Prepared {
        setups,
        prepared,
        mut metas,
        warnings,
    } = prepare(exp, quiet)?;
    warnings.iter().for_each(|w| reporter.warning(w));
    metas.iter().for_each(|m| reporter.condition(m));
    setups.notices.iter().for_each(|n| reporter.note(n));

    let mut out = Outputs::create(partial, reporter)?;
    let mut runs = Runs {
        exp,
        opts,
        prepared: &prepared,
        metas: &mut metas,
        engines: HashMap::new(),
    };
    let mut interrupted = runs.timed(plan, &mut out)?;
    if !interrupted && exp.protocol.headroom {
        for (i, c) in exp.conditions.iter().enumerate() {
            if let Some(record) = &runs.metas[i].headroom {
                reporter.headroom(&c.name, record);
            }
        }
    }
    // Profiled runs: separate, short, traced; never part of the speed figures.
    if !interrupted && exp.protocol.profile {
        interrupted = runs.profiled(&out)?;
    }

    // The engines stop here (the pytorch engine's children leave).
    drop(runs);
    let mut warnings = warnings;
    for w in setups.skipped_images() {
        reporter.warning(&w);
        warnings.push(w);
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
        notices: setups.notices.clone(),
        interrupted,
        timing_note: TIMING_NOTE.into(),
        environment: Environment::capture(setups.device_names()),
        tasks: None,
    };
    out.partial.write_json(RUN_JSON, &meta)?;
    if interrupted {
        return Err(RunError::Interrupted {
            partial: out.partial.dir().to_path_buf(),
        });
    }
    Ok(meta)
}

/// What the runs of one `run` share: the experiment, the conditions' set-ups, their engines
/// and the metadata they fill in.
struct Runs<'a, 'm> {
    exp: &'a Experiment,
    opts: &'a RunOptions,
    prepared: &'a [Setup],
    metas: &'m mut [ConditionMeta],
    /// Each condition's engine, opened on its first run and kept for its others.
    engines: HashMap<usize, Box<dyn engine::Engine + 'a>>,
}

impl<'a> Runs<'a, '_> {
    /// Condition `i`'s engine, opened on first use.
    fn engine(&mut self, i: usize) -> Result<&mut (dyn engine::Engine + 'a), RunError> {
        use std::collections::hash_map::Entry;
        let (prepared, exp): (&'a [Setup], &'a Experiment) = (self.prepared, self.exp);
        Ok(match self.engines.entry(i) {
            Entry::Occupied(e) => e.into_mut().as_mut(),
            Entry::Vacant(e) => e
                .insert(engine::open(engine::Opening {
                    setup: &prepared[i],
                    condition: &exp.conditions[i].name,
                    experiment: &exp.file,
                    seed: exp.base.experiment.seed,
                })?)
                .as_mut(),
        })
    }

    /// The timed runs this process was given, in plan order, each round ending with its
    /// headroom share; true when interrupted.
    fn timed(&mut self, plan: &Plan, out: &mut Outputs) -> Result<bool, RunError> {
        let selected: Vec<_> = plan
            .runs
            .iter()
            .filter(|r| {
                self.opts
                    .only_runs
                    .as_ref()
                    .is_none_or(|only| only.contains(&r.index))
            })
            .collect();
        for (at, planned) in selected.iter().enumerate() {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Ok(true);
            }
            let protocol = &self.exp.protocol;
            let total = plan.runs.len();
            let engine = match self.engine(planned.condition_index) {
                Ok(engine) => engine,
                // Ctrl-C reached the pytorch engine's child while it started.
                Err(_) if INTERRUPTED.load(Ordering::SeqCst) => return Ok(true),
                Err(err) => return Err(err),
            };
            let done = engine.timed(planned, total, protocol, out)?;
            out.reporter
                .run_finished(planned, plan.runs.len(), &done.record);
            if done.interrupted {
                return Ok(true);
            }
            let round_ends = selected
                .get(at + 1)
                .is_none_or(|next| next.round != planned.round);
            if round_ends && self.exp.protocol.headroom && !self.round_headroom(planned.round)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Headroom runs (batches already on the device, no loader in the loop; never part of the
    /// speed figures) at the end of `round`: every profiled condition (all, or a Slurm task's
    /// share) runs its share of `protocol.headroom_steps`, added to its record, so the ceiling
    /// meets the machine's drift as the timed runs do (a single headroom run after all rounds once
    /// came out 8–16 % below the timed runs, which had met a faster machine). False when
    /// interrupted.
    fn round_headroom(&mut self, round: usize) -> Result<bool, RunError> {
        let (exp, opts) = (self.exp, self.opts);
        let (rounds, r) = (exp.protocol.rounds.max(1), round as u64);
        for i in 0..exp.conditions.len() {
            let total = exp.protocol.headroom_steps;
            let steps = total * (r + 1) / rounds - total * r / rounds;
            if !opts.profiles(i) || steps == 0 {
                continue;
            }
            let record = self.engine(i)?.headroom(steps)?;
            let Some(record) = record else {
                return Ok(false);
            };
            match &mut self.metas[i].headroom {
                Some(earlier) => earlier.absorb(record),
                None => self.metas[i].headroom = Some(record),
            }
        }
        Ok(true)
    }

    /// The profiled runs of the conditions this process profiles; true when interrupted.
    fn profiled(&mut self, out: &Outputs) -> Result<bool, RunError> {
        let exp = self.exp;
        let profiled = exp
            .conditions
            .iter()
            .enumerate()
            .filter(|(i, _)| self.opts.profiles(*i));
        for (i, c) in profiled {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Ok(true);
            }
            let done = self.engine(i)?.profiled(&exp.protocol, out)?;
            out.reporter.profiled(&c.name, &done.trace);
            self.metas[i].trace = Some(done.trace);
            self.metas[i].profile_startup_ms = Some(done.startup_ms);
            self.metas[i].stages = done.stages;
        }
        Ok(false)
    }
}

/// Every condition ready to run.
struct Prepared {
    setups: Setups,
    /// One per condition, in plan order.
    prepared: Vec<Setup>,
    /// What run.json records of each condition.
    metas: Vec<ConditionMeta>,
    /// Known before any run (an unoptimised build, more threads than cores).
    warnings: Vec<String>,
}

/// Every condition set up once (datasets, devices and compute pools shared).
fn prepare(exp: &Experiment, quiet: bool) -> Result<Prepared, RunError> {
    let mut warnings = Vec::new();
    if env!("LLBUILD_OPT_LEVEL") == "0" {
        warnings.push(
            "this loaderlab binary was built without optimisations (opt-level 0): step times \
             are not representative; use `cargo run --release`"
                .to_string(),
        );
    }
    let mut setups = Setups::default();
    let mut prepared = Vec::new();
    for c in &exp.conditions {
        let setup = setups.prepare(&c.settings, quiet)?;
        warnings.extend(setup.contention(&c.name));
        prepared.push(setup);
    }
    let metas: Vec<_> = exp
        .conditions
        .iter()
        .zip(&prepared)
        .map(|(c, s)| s.meta(&c.name))
        .collect();
    Ok(Prepared {
        setups,
        prepared,
        metas,
        warnings,
    })
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
microseconds) happens inside elapsed. On CUDA with pin_memory, batch_wait at workers = 0 is the \
time to build the batch into the other of two page-locked buffers (never a wait for the device \
to finish copying the previous batch); with workers it is the wait for a worker's batch. \
With the stand-in step (model.kind = stand_in) h2d is the host's copy into \
the emulated device's memory, compute is the enqueue (and any wait for a free queue slot), and \
device is the emulated device's own busy time per step (from the step's start on its schedule to \
its end). With several ranks (`[distributed]`) every rank times its own steps the same way, each followed \
by its wait at the barrier for the other ranks (sync_ms, inside its step); the window runs from \
the ranks' common start to every rank's device having finished, and images count every rank's. \
Profiled runs are separate and never enter these figures.";
