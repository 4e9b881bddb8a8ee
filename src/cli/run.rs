//! `run`: execute an experiment, build its report in the partial folder, promote it, and print
//! a short summary.

use std::path::Path;

use super::experiment::load;
use super::{Failure, Global};
use crate::analysis::Analysis;
use crate::commands::execute::{self, ExecuteError};
use crate::config::Overrides;
use crate::plan;
use crate::results::REPORT_MD;
use crate::runner::{self, RunOptions};

pub(super) fn run(
    file: &Path,
    overrides: &Overrides,
    g: &Global,
    only_run: &[usize],
    with_profile: bool,
) -> Result<(), Failure> {
    let exp = load(file, overrides)?;
    let plan = plan::build(&exp);
    if let Some(bad) = only_run.iter().find(|k| **k >= plan.runs.len()) {
        return Err(Failure::Invalid(format!(
            "--only-run {bad}: the plan has runs 0 to {} (see `loaderlab plan`)",
            plan.runs.len().saturating_sub(1)
        )));
    }
    let (only_runs, profile_conditions) = if only_run.is_empty() {
        (None, None)
    } else {
        let mut conditions: Vec<usize> = only_run
            .iter()
            .filter(|_| with_profile)
            .map(|k| plan.runs[*k].condition_index)
            .collect();
        conditions.sort_unstable();
        conditions.dedup();
        (Some(only_run.to_vec()), Some(conditions))
    };
    // Each condition's engine is checked before any run (the pytorch engine's interpreter
    // must import torch and torchvision: else nothing would be measured): exit 2, naming the
    // interpreter and the way out.
    for c in &exp.conditions {
        runner::engine::child::record(&c.settings)
            .map_err(|m| Failure::Invalid(format!("{}: {m}", c.name)))?;
    }
    let out = exp.output_dir(g.out.as_deref());
    if !g.quiet {
        eprint!("{}", plan.to_text());
        eprintln!("results: {}\n", out.display());
    }
    runner::install_interrupt_handler();
    let opts = RunOptions {
        out: out.clone(),
        command: super::command_line(),
        only_runs,
        profile_conditions,
    };
    let analysis = execute::run_to_folder(&exp, &plan, &opts, runner::reporter(g.quiet)).map_err(
        |e| match e {
            interrupted @ ExecuteError::Interrupted { .. } => {
                Failure::Interrupted(interrupted.to_string())
            }
            other => Failure::Failed(other.to_string()),
        },
    )?;
    print!("{}", summary_table(&analysis));
    println!("report: {}", out.join(REPORT_MD).display());
    println!("{}", crate::report::headline(&analysis));
    Ok(())
}

/// The short summary for stdout at the end of a run.
fn summary_table(a: &Analysis) -> String {
    use crate::format::{ms, pct, rate, ratio};
    let width = a
        .conditions
        .iter()
        .map(|c| c.condition.len())
        .max()
        .unwrap_or(9)
        .max(9);
    let mut out = format!(
        "{:<width$}  {:>10}  {:>14}  {:>16}  {:>13}  input-bound\n",
        "condition", "img/s", "speed-up", "batch_wait p50", "waiting share"
    );
    for c in &a.conditions {
        let speed = c
            .speedup
            .as_ref()
            .map_or("baseline".to_string(), |s| ratio(s.ratio.point));
        let j = &c.judgement;
        out.push_str(&format!(
            "{:<width$}  {:>10}  {:>14}  {:>16}  {:>13}  {} ({} {})\n",
            c.condition,
            rate(c.img_per_s.point),
            speed,
            ms(c.batch_wait_p50_ms),
            pct(c.wait_share),
            j.input_bound.word(),
            pct(j.share),
            j.classified_by.name()
        ));
    }
    out
}
