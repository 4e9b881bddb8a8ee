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
    /// Print the expanded conditions and the run order.
    Plan {
        #[arg(value_name = "FILE")]
        file: PathBuf,
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
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
        (None, Some(experiment)) => Command::Run { experiment },
        (None, None) => {
            eprintln!(
                "error: give an experiment file, e.g. `loaderlab experiments/dataloader_workers.toml`, or a subcommand (see --help)"
            );
            return ExitCode::from(EXIT_INVALID);
        }
    };
    match command {
        Command::Validate { files } => validate(&files, &overrides),
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
        Command::Run { experiment } => match config::load(&experiment, &overrides) {
            Ok(exp) => run(&exp, &cli.global),
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

fn run(exp: &config::Experiment, global: &Global) -> ExitCode {
    let plan = plan::build(exp);
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
