//! `tune`: search one knob, write the results folder with its search section and tuned.toml,
//! print the choice.

use std::path::{Path, PathBuf};

use clap::Args;

use super::experiment::load;
use super::{Failure, Global};
use crate::commands::tune::{Knob, TuneError, TuneOptions, tune as run_tune};
use crate::config::Overrides;
use crate::results::{REPORT_MD, TUNED_TOML};

#[derive(Args)]
pub struct TuneArgs {
    #[arg(value_name = "EXPERIMENT.toml")]
    experiment: PathBuf,
    /// The setting to search: loader.workers, loader.prefetch_factor or device.threads.
    #[arg(long, default_value = "loader.workers")]
    knob: String,
    /// Start no new trial after this many seconds.
    #[arg(long = "budget-s", default_value_t = 600.0)]
    budget_s: f64,
    /// The most workers to try (default: on the CPU the cores left beside the training
    /// step's compute threads, on a GPU twice the cores).
    #[arg(long = "max-workers")]
    max_workers: Option<u64>,
    /// Untimed steps before each timed run of a trial.
    #[arg(long, default_value_t = 10)]
    warmup: u64,
    /// Timed steps per run of a trial.
    #[arg(long, default_value_t = 30)]
    steps: u64,
    /// Interleaved rounds per trial.
    #[arg(long, default_value_t = 5)]
    rounds: u64,
    /// The condition of the file whose settings are tuned (default: the first).
    #[arg(long)]
    condition: Option<String>,
}

pub(super) fn tune(args: &TuneArgs, overrides: &Overrides, g: &Global) -> Result<(), Failure> {
    let knob = Knob::parse(&args.knob).map_err(Failure::Invalid)?;
    if args.steps == 0 || args.rounds == 0 {
        return Err(Failure::Invalid(
            "--steps and --rounds must be at least 1".into(),
        ));
    }
    if args.budget_s.is_nan() || args.budget_s <= 0.0 {
        return Err(Failure::Invalid(format!(
            "--budget-s: expected seconds > 0, found {}",
            args.budget_s
        )));
    }
    let exp = load(&args.experiment, overrides)?;
    let out = match &g.out {
        Some(o) => o.clone(),
        None => Path::new("reports").join(format!("{}_tune", exp.base.experiment.name)),
    };
    let opts = TuneOptions {
        knob,
        budget_s: args.budget_s,
        max_workers: args.max_workers,
        warmup_steps: args.warmup,
        timed_steps: args.steps,
        rounds: args.rounds,
        condition: args.condition.clone(),
        command: super::command_line(),
    };
    crate::runner::install_interrupt_handler();
    let tuned = run_tune(
        &args.experiment,
        &exp,
        overrides,
        &opts,
        &out,
        crate::runner::reporter(g.quiet),
    )
    .map_err(|e| match e {
        TuneError::Invalid(m) => Failure::Invalid(m),
        interrupted @ TuneError::Interrupted(_) => Failure::Interrupted(interrupted.to_string()),
        other => Failure::Failed(other.to_string()),
    })?;
    let s = &tuned.search;
    for t in &s.trials {
        for x in &t.settings {
            println!(
                "trial {} {:<22} {:>10.1} img/s  waiting {:>6.2} %  ratio to best {:.3} ({:.3}–{:.3})",
                t.trial,
                x.condition,
                x.img_per_s,
                x.wait_share * 100.0,
                x.ratio_to_best,
                x.ratio_low,
                x.ratio_high
            );
        }
    }
    match s.chosen {
        Some(v) => println!("chosen: {} = {v}: {}", s.knob, s.reason),
        None => println!("no setting chosen: {}", s.reason),
    }
    println!("report: {}", tuned.out.join(REPORT_MD).display());
    if s.chosen.is_some() {
        println!("tuned experiment: {}", tuned.out.join(TUNED_TOML).display());
    }
    if s.interrupted {
        return Err(Failure::Interrupted(format!(
            "interrupted: the finished trials are reported in {}",
            tuned.out.display()
        )));
    }
    Ok(())
}
