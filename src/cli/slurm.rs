//! `slurm`: write (and submit) the plan as a Slurm job array.

use clap::{Args, ValueEnum};

use super::experiment::load;
use super::{Failure, Global, exit::failed};
use crate::commands::slurm::{self, Grouping, SlurmOptions};
use crate::config::{self, Overrides};
use crate::plan;

#[derive(Args)]
pub(super) struct SlurmArgs {
    #[arg(value_name = "EXPERIMENT.toml")]
    experiment: std::path::PathBuf,
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
}

#[derive(Clone, Copy, ValueEnum)]
enum Per {
    Run,
    Condition,
}

pub(super) fn slurm(a: &SlurmArgs, overrides: &Overrides, g: &Global) -> Result<(), Failure> {
    let exp = load(&a.experiment, overrides)?;
    let plan = plan::build(&exp);
    let shared = g.out.clone().unwrap_or_else(|| {
        let mut p = exp.output_dir(None).into_os_string();
        p.push(".slurm");
        p.into()
    });
    let resolved = config::resolved_toml(&exp).map_err(|e| {
        Failure::Failed(format!("cannot write the resolved experiment as TOML: {e}"))
    })?;
    let opts = SlurmOptions {
        shared: shared.clone(),
        partition: a.partition.clone(),
        gres: a.gres.clone(),
        time: a.time.clone(),
        cpus_per_task: a.cpus_per_task,
        grouping: match a.per {
            Per::Run => Grouping::Run,
            Per::Condition => Grouping::Condition,
        },
    };
    let script = slurm::prepare(&exp, &plan, &resolved, &opts).map_err(|e| {
        Failure::Failed(format!(
            "cannot write the job into {}: {e}",
            shared.display()
        ))
    })?;
    let hint = slurm::merge_hint(&shared, &exp.output_dir(None));
    if a.dry_run {
        let text = std::fs::read_to_string(&script)
            .map_err(|e| Failure::Failed(format!("cannot read {}: {e}", script.display())))?;
        print!("{text}");
        eprintln!(
            "wrote {} (not submitted); after the job: {hint}",
            script.display()
        );
        return Ok(());
    }
    let id = slurm::submit(&script).map_err(failed)?;
    println!("{id}");
    eprintln!(
        "submitted job {id} ({}); when it has finished: {hint}",
        script.display()
    );
    Ok(())
}
