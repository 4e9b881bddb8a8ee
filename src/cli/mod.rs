//! The command line: clap types (what the user typed), one module per subcommand, and one
//! mapping from failure to exit status ([`exit`]). `main` parses, calls [`run`], exits.

mod bench;
mod check_transforms;
mod compare;
mod diagnose;
mod exit;
mod experiment;
mod merge;
mod plan;
mod preview;
mod python;
mod report;
mod run;
mod selftest;
mod slurm;
mod tune;
mod validate;
mod verify;
mod watch;

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use exit::{Failure, Status};

use crate::config::Overrides;

#[derive(Parser)]
#[command(
    name = "loaderlab",
    version,
    about = "Declarative experiments that answer: is my GPU waiting for data?",
    long_about = "Runs the experiment a TOML file declares (dataset, CPU transforms, loader \
                  settings, protocol, a matrix of conditions), measures every training step and \
                  writes a report.\n\nSettings are layered: built-in defaults < the file < \
                  LOADERLAB_<SECTION>__<KEY> environment variables < --set.\n\nExit status: 0 \
                  success, 1 a failure while running, 2 an invalid experiment or argument, 130 \
                  interrupted (Ctrl-C).",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Experiment file to run (the same as `loaderlab run FILE`).
    #[arg(value_name = "EXPERIMENT.toml")]
    experiment: Option<PathBuf>,
    #[command(flatten)]
    global: Global,
}

/// Options every subcommand takes.
#[derive(Args)]
pub struct Global {
    /// Override a setting, e.g. --set loader.workers=2 or --set 'matrix.loader.workers=[0,2]'
    /// (TOML value syntax; repeatable; wins over the file and the environment).
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    set: Vec<String>,
    /// Results folder (default: experiment.output, else reports/<experiment name>).
    #[arg(long, value_name = "DIR", global = true)]
    out: Option<PathBuf>,
    /// No progress bars; only errors and the final summary.
    #[arg(long, short, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Run an experiment: timed runs, profiled runs, analysis and report.
    Run {
        #[arg(value_name = "EXPERIMENT.toml")]
        experiment: PathBuf,
        /// Run only planned run K (see `plan`), e.g. as one Slurm array task; repeatable.
        #[arg(long = "only-run", value_name = "K")]
        only_run: Vec<usize>,
        /// With --only-run: also record the profiled run of these runs' conditions.
        #[arg(long)]
        with_profile: bool,
    },
    /// Check experiment files and print every problem; exit 0 only when all pass.
    Validate {
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
    },
    /// Rebuild analysis, charts, result.json and report.md from a results folder alone.
    Report {
        #[arg(value_name = "RESULTS_DIR")]
        dir: PathBuf,
    },
    /// Check a results folder: counts, every figure recomputed from the raw rows, traces,
    /// fingerprints. Exits non-zero on any failure.
    Verify {
        #[arg(value_name = "RESULTS_DIR")]
        dir: PathBuf,
    },
    /// Show what the transforms do: a PNG grid (originals above, augmented below),
    /// samples.json with every transform parameter, originals.npy and augmented.npy.
    Preview {
        #[arg(value_name = "EXPERIMENT.toml")]
        experiment: PathBuf,
        /// Number of samples (the first ones the loader would serve in epoch 0).
        #[arg(long, default_value_t = 16)]
        n: usize,
        /// Condition whose settings to use (default: the first).
        #[arg(long)]
        condition: Option<String>,
    },
    /// Prove a condition's chain on its dataset: each op against torchvision's functional form
    /// of it, with the parameters loaderlab drew, on N images; exit 1 naming any op that
    /// differs. Runs in Python (`pip install loaderlab torchvision` in [pytorch] python).
    CheckTransforms {
        #[arg(value_name = "EXPERIMENT.toml")]
        experiment: PathBuf,
        /// Number of images checked, spread over the dataset.
        #[arg(short, default_value_t = 64)]
        n: usize,
        /// Condition whose chain to check (default: the first).
        #[arg(long)]
        condition: Option<String>,
    },
    /// Run COMMAND (a script that cannot be edited) with every torch DataLoader it iterates
    /// watched by loaderlab.watch into --out DIR (the next into DIR-2, …), each folder completed
    /// with its report as the script ends; exits 1 when COMMAND fails. Runs in Python
    /// (`pip install loaderlab` in LOADERLAB_PYTHON, else python3).
    Watch {
        /// One item in N is timed transform by transform inside the DataLoader.
        #[arg(long, default_value_t = 16)]
        every: u64,
        /// The command, after --.
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Measure speed: `bench FILE` times the transform chain (one thread) and the loader at
    /// 0, 1, 2 workers; `bench step` times the training step at 1 and 2 threads (and PyTorch's,
    /// when python3 has torch). Use a release build.
    Bench(bench::BenchArgs),
    /// Run the plan as a Slurm job array (one task per run, or per condition), each task
    /// writing to <shared>/runs/task-K; then `loaderlab merge <shared>/runs/* --out DIR`.
    /// The shared folder is --out (default reports/<name>.slurm).
    Slurm(slurm::SlurmArgs),
    /// Combine task folders (from `slurm` or `run --only-run`) into one results folder,
    /// refusing mismatched configurations and missing or duplicated runs; builds its report.
    Merge {
        #[arg(value_name = "DIR", required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Search one knob (loader.workers by default) for the cheapest setting within noise of the
    /// best: starts from the prediction, measures short interleaved trials of neighbouring
    /// settings, climbs, and writes a results folder with a search section and tuned.toml
    /// (--out, default reports/<name>_tune; the trials in <out>.trials/).
    Tune(tune::TuneArgs),
    /// Two results folders (before / after a change) side by side: every shared condition's
    /// img/s, batch wait and device idle with the ratio after / before and its 95 % CI.
    /// Writes compare.md (and compare.json) into --out when given. Exits 1 when a --fail-if
    /// gate fails beyond noise.
    Compare {
        #[arg(value_name = "BEFORE_DIR")]
        before: PathBuf,
        #[arg(value_name = "AFTER_DIR")]
        after: PathBuf,
        /// Fail when a figure's change lies past this limit with its whole 95 % CI, e.g.
        /// "img_per_s < -5%", "batch_wait_ms > +10%", "device_idle > +20%"; repeatable.
        #[arg(long = "fail-if", value_name = "GATE")]
        fail_if: Vec<String>,
    },
    /// Is *my* job waiting for data? Read a torch.profiler trace (`.json`, `.json.gz`, or a
    /// folder with one per rank): the waiting share per step with its CI, the GPU's idle share
    /// when the trace has device work, the input-bound class and the bound on any loader
    /// speed-up; writes report.md and result.json into --out (default reports/diagnose).
    Diagnose(diagnose::DiagnoseArgs),
    /// Train every model kind with every optimizer for 3 steps on a device against a reference
    /// (on CUDA: the CPU; on the CPU: the hand-written layers against candle's), from the same
    /// weights and batch; exits 1 when any loss, parameter or running statistic differs by
    /// more than 1e-4 of its tensor's largest value.
    Selftest {
        #[arg(long, value_enum, default_value_t = DeviceArg::Cuda)]
        device: DeviceArg,
    },
    /// Print the expanded conditions and the run order.
    Plan {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

/// A device named on the command line.
#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    Cpu,
    Cuda,
}

impl DeviceArg {
    fn kind(self) -> crate::config::DeviceKind {
        match self {
            DeviceArg::Cpu => crate::config::DeviceKind::Cpu,
            DeviceArg::Cuda => crate::config::DeviceKind::Cuda,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// Run the command the user typed.
pub fn run(cli: Cli) -> Result<(), Failure> {
    let overrides = Overrides::from_process(cli.global.set.clone());
    let command = match (cli.command, cli.experiment) {
        (Some(c), _) => c,
        (None, Some(experiment)) => Command::Run {
            experiment,
            only_run: Vec::new(),
            with_profile: false,
        },
        (None, None) => {
            return Err(Failure::Invalid(
                "give an experiment file, e.g. `loaderlab experiments/dataloader_workers.toml`, \
                 or a subcommand (see --help)"
                    .into(),
            ));
        }
    };
    let g = &cli.global;
    match command {
        Command::Run {
            experiment,
            only_run,
            with_profile,
        } => run::run(&experiment, &overrides, g, &only_run, with_profile),
        Command::Validate { files } => validate::validate(&files, &overrides),
        Command::Plan { file, format } => {
            plan::plan(&file, &overrides, matches!(format, Format::Json))
        }
        Command::Report { dir } => {
            watched(&dir)?;
            report::report(&dir)
        }
        Command::Verify { dir } => {
            watched(&dir)?;
            verify::verify(&dir)
        }
        Command::Merge { dirs } => merge::merge(&dirs, g),
        Command::Compare {
            before,
            after,
            fail_if,
        } => {
            watched(&before)?;
            watched(&after)?;
            compare::compare(&before, &after, &fail_if, g)
        }
        Command::Preview {
            experiment,
            n,
            condition,
        } => preview::preview(&experiment, &overrides, g, n, condition.as_deref()),
        Command::CheckTransforms {
            experiment,
            n,
            condition,
        } => {
            check_transforms::check_transforms(&experiment, &overrides, g, n, condition.as_deref())
        }
        Command::Watch { every, command } => watch::watch(g, every, &command),
        Command::Bench(args) => bench::bench(&args, &overrides, g),
        Command::Tune(args) => tune::tune(&args, &overrides, g),
        Command::Slurm(args) => slurm::slurm(&args, &overrides, g),
        Command::Diagnose(args) => {
            watched(args.trace())?;
            diagnose::diagnose(&args, g)
        }
        Command::Selftest { device } => selftest::selftest(device.kind()),
    }
}

/// A watched job's folder (`loaderlab.watch`) completed as a results folder, with its report,
/// from the rows it holds, before anything reads it — where its job died before doing so, or
/// wrote rows since.
fn watched(dir: &Path) -> Result<(), Failure> {
    use crate::commands::watch;
    if watch::is_watched(dir) && watch::stale(dir) {
        watch::finish(dir)
            .map_err(|e| Failure::Failed(format!("cannot complete the watched folder: {e}")))?;
    }
    Ok(())
}

/// The command line as typed, each word shell-quoted, to record what reproduces a result.
fn command_line() -> String {
    crate::shell::join(std::env::args())
}
