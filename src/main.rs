//! The `loaderlab` command: parse arguments, call the library, map errors to exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use loaderlab::config::{self, ConfigError, Overrides};
use loaderlab::plan;
use loaderlab::runner::{self, RunError, RunOptions};

/// Exit status for an experiment or argument that is not valid.
const EXIT_INVALID: u8 = 2;
/// Exit status for a failure while running.
const EXIT_FAILED: u8 = 1;
/// Exit status after Ctrl-C (128 + SIGINT), as shells use.
const EXIT_INTERRUPTED: u8 = 130;

#[derive(Parser)]
#[command(
    name = "loaderlab",
    version,
    about = "Declarative experiments that answer: is my GPU waiting for data?",
    long_about = "Runs the experiment a TOML file declares (dataset, CPU transforms, loader \
                  settings, protocol, a matrix of conditions), measures every training step and \
                  writes a report.\n\nSettings are layered: built-in defaults < the file < \
                  LOADERLAB_<SECTION>__<KEY> environment variables < --set.",
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Experiment file to run (the same as `loaderlab run FILE`).
    #[arg(value_name = "EXPERIMENT.toml")]
    experiment: Option<PathBuf>,
    #[command(flatten)]
    global: Global,
}

#[derive(Args)]
struct Global {
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
    /// Measure speed: `bench FILE` times the transform chain (one thread) and the loader at
    /// 0, 1, 2 workers; `bench step` times the training step at 1 and 2 threads (and PyTorch's,
    /// when python3 has torch). Use a release build.
    Bench {
        /// An experiment file, or `step`.
        #[arg(value_name = "EXPERIMENT.toml|step")]
        target: String,
        /// Repetitions; each figure is their median with min–max. Default 11 for an
        /// experiment file (its paired ratios swing by tens of percent on a shared machine, so
        /// their median needs many), 5 for `step`.
        #[arg(long)]
        repeat: Option<usize>,
        /// Batch size for `bench step`.
        #[arg(long, default_value_t = 256)]
        batch: usize,
        /// Timed steps per repetition for `bench step`.
        #[arg(long, default_value_t = 20)]
        steps: usize,
        /// For `bench step`: time candle's own layers instead of the fast CPU path.
        #[arg(long)]
        candle_layers: bool,
    },
    /// Run the plan as a Slurm job array (one task per run, or per condition), each task
    /// writing to <shared>/runs/task-K; then `loaderlab merge <shared>/runs/* --out DIR`.
    /// The shared folder is --out (default reports/<name>.slurm).
    Slurm {
        #[arg(value_name = "EXPERIMENT.toml")]
        experiment: PathBuf,
        #[arg(long)]
        partition: Option<String>,
        /// Generic resources per task, e.g. gpu:1.
        #[arg(long)]
        gres: Option<String>,
        /// Time limit per task, e.g. 00:30:00.
        #[arg(long)]
        time: Option<String>,
        #[arg(long)]
        cpus_per_task: Option<u32>,
        /// One array task per run (default) or per condition.
        #[arg(long, value_enum, default_value_t = Per::Run)]
        per: Per,
        /// Write the script and print it; do not submit.
        #[arg(long)]
        dry_run: bool,
    },
    /// Combine task folders (from `slurm` or `run --only-run`) into one results folder,
    /// refusing mismatched configurations and missing or duplicated runs; builds its report.
    Merge {
        #[arg(value_name = "DIR", required = true)]
        dirs: Vec<PathBuf>,
    },
    /// Print the expanded conditions and the run order.
    Plan {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Per {
    Run,
    Condition,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let overrides = Overrides::from_process(cli.global.set.clone());
    let command = match (cli.command, cli.experiment) {
        (Some(c), _) => c,
        (None, Some(experiment)) => Command::Run {
            experiment,
            only_run: Vec::new(),
            with_profile: false,
        },
        (None, None) => {
            eprintln!(
                "error: give an experiment file, e.g. `loaderlab experiments/dataloader_workers.toml`, or a subcommand (see --help)"
            );
            return ExitCode::from(EXIT_INVALID);
        }
    };
    match command {
        Command::Validate { files } => validate(&files, &overrides),
        Command::Slurm {
            experiment,
            partition,
            gres,
            time,
            cpus_per_task,
            per,
            dry_run,
        } => match config::load(&experiment, &overrides) {
            Ok(exp) => {
                let plan = plan::build(&exp);
                let shared = cli.global.out.clone().unwrap_or_else(|| {
                    let mut p = exp.output_dir(None).into_os_string();
                    p.push(".slurm");
                    PathBuf::from(p)
                });
                let opts = loaderlab::slurm::SlurmOptions {
                    shared: shared.clone(),
                    partition,
                    gres,
                    time,
                    cpus_per_task,
                    grouping: match per {
                        Per::Run => loaderlab::slurm::Grouping::Run,
                        Per::Condition => loaderlab::slurm::Grouping::Condition,
                    },
                };
                let script = match loaderlab::slurm::prepare(
                    &exp,
                    &plan,
                    &runner::resolved_toml(&exp),
                    &opts,
                ) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("error: cannot write the job into {}: {e}", shared.display());
                        return ExitCode::from(EXIT_FAILED);
                    }
                };
                let merge_hint = format!(
                    "loaderlab merge {}/runs/task-* --out {}",
                    shared.display(),
                    exp.output_dir(None).display()
                );
                if dry_run {
                    print!("{}", std::fs::read_to_string(&script).unwrap_or_default());
                    eprintln!(
                        "wrote {} (not submitted); after the job: {merge_hint}",
                        script.display()
                    );
                    return ExitCode::SUCCESS;
                }
                match loaderlab::slurm::submit(&script) {
                    Ok(id) => {
                        println!("{id}");
                        eprintln!(
                            "submitted job {id} ({}); when it has finished: {merge_hint}",
                            script.display()
                        );
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::from(EXIT_FAILED)
                    }
                }
            }
            Err(e) => config_failure(&experiment, &e),
        },
        Command::Merge { dirs } => {
            let Some(out) = cli.global.out.clone() else {
                eprintln!("error: merge needs --out DIR for the merged results");
                return ExitCode::from(EXIT_INVALID);
            };
            let command: Vec<String> = std::env::args().collect();
            match loaderlab::merge::merge(&dirs, &out, &command.join(" ")) {
                Ok(n) => {
                    println!(
                        "merged {n} runs from {} task folders: {}",
                        dirs.len(),
                        out.join(loaderlab::report::REPORT_MD).display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_FAILED)
                }
            }
        }
        Command::Preview {
            experiment,
            n,
            condition,
        } => match config::load(&experiment, &overrides) {
            Ok(exp) => {
                let chosen = match &condition {
                    Some(name) => exp.conditions.iter().find(|c| &c.name == name),
                    None => exp.conditions.first(),
                };
                let Some(chosen) = chosen else {
                    let names: Vec<&str> = exp.conditions.iter().map(|c| c.name.as_str()).collect();
                    eprintln!("error: no condition {condition:?}; the conditions are {names:?}");
                    return ExitCode::from(EXIT_INVALID);
                };
                let out = cli
                    .global
                    .out
                    .clone()
                    .unwrap_or_else(|| exp.output_dir(None).join("preview"));
                match loaderlab::preview::preview(&chosen.settings, n, &out, cli.global.quiet) {
                    Ok(files) => {
                        for f in files {
                            println!("{}", f.display());
                        }
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: {e:#}");
                        ExitCode::from(EXIT_FAILED)
                    }
                }
            }
            Err(e) => config_failure(&experiment, &e),
        },
        Command::Bench {
            target,
            repeat,
            batch,
            steps,
            candle_layers,
        } => {
            let layers = if candle_layers {
                loaderlab::train::Layers::Candle
            } else {
                loaderlab::train::Layers::FastCpu
            };
            let repeat = repeat.unwrap_or(if target == "step" { 5 } else { 11 });
            bench(
                &target,
                repeat.max(1),
                batch,
                steps.max(1),
                layers,
                &overrides,
                cli.global.quiet,
            )
        }
        Command::Verify { dir } => {
            let checks = loaderlab::verify::verify(&dir);
            let failed = checks.iter().filter(|c| !c.ok).count();
            for c in &checks {
                println!(
                    "{} {}: {}",
                    if c.ok { "ok  " } else { "FAIL" },
                    c.name,
                    c.detail
                );
            }
            if failed == 0 {
                println!("all {} checks passed", checks.len());
                ExitCode::SUCCESS
            } else {
                println!("{failed} of {} checks failed", checks.len());
                ExitCode::from(EXIT_FAILED)
            }
        }
        Command::Report { dir } => match loaderlab::report::build(&dir) {
            Ok(_) => {
                println!("{}", dir.join(loaderlab::report::REPORT_MD).display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot build the report: {e}");
                ExitCode::from(EXIT_FAILED)
            }
        },
        Command::Plan { file, format } => match config::load(&file, &overrides) {
            Ok(exp) => {
                let plan = plan::build(&exp);
                match format {
                    Format::Text => print!("{}", plan.to_text()),
                    Format::Json => match serde_json::to_string_pretty(&plan) {
                        Ok(s) => println!("{s}"),
                        Err(e) => {
                            eprintln!("error: cannot write the plan as JSON: {e}");
                            return ExitCode::from(EXIT_FAILED);
                        }
                    },
                }
                ExitCode::SUCCESS
            }
            Err(e) => config_failure(&file, &e),
        },
        Command::Run {
            experiment,
            only_run,
            with_profile,
        } => match config::load(&experiment, &overrides) {
            Ok(exp) => run(&exp, &cli.global, &only_run, with_profile),
            Err(e) => config_failure(&experiment, &e),
        },
    }
}

fn validate(files: &[PathBuf], overrides: &Overrides) -> ExitCode {
    let mut failed = 0;
    for file in files {
        match config::load(file, overrides) {
            Ok(exp) => println!(
                "ok: {} ({} conditions, {} runs)",
                file.display(),
                exp.conditions.len(),
                exp.conditions.len() as u64 * exp.base.protocol.rounds
            ),
            Err(e) => {
                failed += 1;
                config_failure(file, &e);
            }
        }
    }
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("{failed} of {} files invalid", files.len());
        ExitCode::from(EXIT_INVALID)
    }
}

fn config_failure(file: &std::path::Path, e: &ConfigError) -> ExitCode {
    match e {
        ConfigError::Invalid { problems } => {
            let n = problems.len();
            eprintln!(
                "error: {} is not a valid experiment ({n} problem{}):",
                file.display(),
                if n == 1 { "" } else { "s" }
            );
            for p in problems {
                eprintln!("  {p}");
            }
        }
        ConfigError::Read { .. } => eprintln!("error: {e}"),
    }
    ExitCode::from(EXIT_INVALID)
}

fn run(
    exp: &config::Experiment,
    global: &Global,
    only_run: &[usize],
    with_profile: bool,
) -> ExitCode {
    let plan = plan::build(exp);
    if let Some(bad) = only_run.iter().find(|k| **k >= plan.runs.len()) {
        eprintln!(
            "error: --only-run {bad}: the plan has runs 0 to {} (see `loaderlab plan`)",
            plan.runs.len().saturating_sub(1)
        );
        return ExitCode::from(EXIT_INVALID);
    }
    let (only_runs, profile_conditions) = if only_run.is_empty() {
        (None, None)
    } else {
        let mut conditions: Vec<usize> = if with_profile {
            only_run
                .iter()
                .map(|k| plan.runs[*k].condition_index)
                .collect()
        } else {
            Vec::new()
        };
        conditions.sort_unstable();
        conditions.dedup();
        (Some(only_run.to_vec()), Some(conditions))
    };
    let out = exp.output_dir(global.out.as_deref());
    if !global.quiet {
        eprint!("{}", plan.to_text());
        eprintln!("results: {}\n", out.display());
    }
    runner::install_interrupt_handler();
    let command: Vec<String> = std::env::args().collect();
    let opts = RunOptions {
        out: out.clone(),
        quiet: global.quiet,
        command: command.join(" "),
        only_runs,
        profile_conditions,
    };
    match runner::run(exp, &plan, &opts) {
        Ok(_meta) => {
            let partial = runner::partial_dir(&out);
            let analysis = match loaderlab::report::build(&partial) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!(
                        "error: the measurements are complete in {} but the report failed: {e}",
                        partial.display()
                    );
                    return ExitCode::from(EXIT_FAILED);
                }
            };
            if let Err(e) = runner::promote(&partial, &out) {
                eprintln!(
                    "error: the run finished but its results could not be moved from {} to {}: {e}",
                    partial.display(),
                    out.display()
                );
                return ExitCode::from(EXIT_FAILED);
            }
            print!("{}", summary_table(&analysis));
            println!(
                "report: {}",
                out.join(loaderlab::report::REPORT_MD).display()
            );
            ExitCode::SUCCESS
        }
        Err(RunError::Interrupted { partial }) => {
            eprintln!(
                "interrupted: measurements so far kept in {}; earlier results in {} untouched",
                partial.display(),
                out.display()
            );
            ExitCode::from(EXIT_INTERRUPTED)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}

/// The short summary for stdout at the end of a run.
fn summary_table(a: &loaderlab::analysis::Analysis) -> String {
    use loaderlab::report::thousands;
    let width = a
        .conditions
        .iter()
        .map(|c| c.condition.len())
        .max()
        .unwrap_or(9)
        .max(9);
    let mut out = format!(
        "{:<width$}  {:>10}  {:>14}  {:>16}  {:>13}\n",
        "condition", "img/s", "speed-up", "batch_wait p50", "waiting share"
    );
    for c in &a.conditions {
        let speed = c
            .speedup
            .as_ref()
            .map_or("baseline".to_string(), |s| format!("{:.2}×", s.ratio));
        out.push_str(&format!(
            "{:<width$}  {:>10}  {:>14}  {:>13.3} ms  {:>12.0} %\n",
            c.condition,
            thousands(c.img_per_s_median),
            speed,
            c.batch_wait_p50_ms,
            c.wait_share * 100.0
        ));
    }
    out
}

fn bench(
    target: &str,
    repeat: usize,
    batch: usize,
    steps: usize,
    layers: loaderlab::train::Layers,
    overrides: &Overrides,
    quiet: bool,
) -> ExitCode {
    if env!("LLBUILD_OPT_LEVEL") == "0" {
        eprintln!(
            "warning: this binary is unoptimised; benchmark with `cargo run --release -- bench ...`"
        );
    }
    let cores = loaderlab::train::cores();
    let result = if target == "step" {
        let threads: Vec<usize> = if cores >= 2 { vec![1, 2] } else { vec![1] };
        println!(
            "training step, SmallCNN + Adam, batch {batch}, {steps} timed steps × {repeat} repetitions ({cores} cores)"
        );
        loaderlab::bench::step(batch, steps, &threads, repeat, layers).map(|mut ours| {
            match loaderlab::bench::pytorch_step(batch, steps, &threads, repeat) {
                Some(theirs) => {
                    for (o, t) in ours.clone().iter().zip(&theirs) {
                        ours.push(t.clone());
                        println!(
                            "ratio loaderlab / PyTorch at {}: {:.2}×",
                            o.name,
                            o.median / t.median
                        );
                    }
                }
                None => println!("(no python3 with torch found: PyTorch not measured)"),
            }
            ours
        })
    } else {
        match config::load(std::path::Path::new(target), overrides) {
            Ok(exp) => {
                let settings = &exp.conditions[0].settings;
                println!(
                    "data pipeline of {target} (first condition), {repeat} repetitions ({cores} cores)"
                );
                loaderlab::bench::data(settings, repeat, quiet)
            }
            Err(e) => return config_failure(std::path::Path::new(target), &e),
        }
    };
    match result {
        Ok(measurements) => {
            for m in measurements {
                println!("{}", m.line());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_FAILED)
        }
    }
}
