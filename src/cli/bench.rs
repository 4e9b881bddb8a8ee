//! `bench FILE` (the data pipeline) and `bench step` (the training step, and PyTorch's).

use std::path::Path;

use clap::Args;

use super::experiment::load;
use super::{Failure, Global, exit::failed};
use crate::bench::{self, Measurement};
use crate::config::Overrides;
use crate::train::{self, Layers};

#[derive(Args)]
pub(super) struct BenchArgs {
    /// An experiment file, or `step`.
    #[arg(value_name = "EXPERIMENT.toml|step")]
    target: String,
    /// Repetitions; each figure is their median with min–max. Default 11 for an experiment
    /// file (its paired ratios swing by tens of percent on a shared machine, so their median
    /// needs many), 5 for `step`.
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
}

pub(super) fn bench(a: &BenchArgs, overrides: &Overrides, g: &Global) -> Result<(), Failure> {
    if env!("LLBUILD_OPT_LEVEL") == "0" {
        eprintln!(
            "warning: this binary is unoptimised; benchmark with `cargo run --release -- bench ...`"
        );
    }
    let measurements = if a.target == "step" {
        step(a)?
    } else {
        let file = Path::new(&a.target);
        let exp = load(file, overrides)?;
        let repeat = a.repeat.unwrap_or(11).max(1);
        println!(
            "data pipeline of {} (first condition), {repeat} repetitions ({} cores)",
            a.target,
            train::cores()
        );
        bench::data(&exp.conditions[0].settings, repeat, g.quiet).map_err(failed)?
    };
    for m in measurements {
        println!("{}", m.line());
    }
    Ok(())
}

fn step(a: &BenchArgs) -> Result<Vec<Measurement>, Failure> {
    let cores = train::cores();
    let (repeat, steps, batch) = (a.repeat.unwrap_or(5).max(1), a.steps.max(1), a.batch);
    let threads: Vec<usize> = if cores >= 2 { vec![1, 2] } else { vec![1] };
    let layers = if a.candle_layers {
        Layers::Candle
    } else {
        Layers::FastCpu
    };
    println!(
        "training step, SmallCNN + Adam, batch {batch}, {steps} timed steps × {repeat} repetitions ({cores} cores)"
    );
    let mut ours = bench::step(batch, steps, &threads, repeat, layers).map_err(failed)?;
    match bench::pytorch_step(batch, steps, &threads, repeat) {
        Some(theirs) => {
            for (o, t) in ours.clone().iter().zip(&theirs) {
                println!(
                    "ratio loaderlab / PyTorch at {}: {:.2}×",
                    o.name,
                    o.median / t.median
                );
            }
            ours.extend(theirs);
        }
        None => println!("(no python3 with torch found: PyTorch not measured)"),
    }
    Ok(ours)
}
