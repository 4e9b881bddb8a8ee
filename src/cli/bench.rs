//! `bench FILE` (the data pipeline) and `bench step` (the training step, and PyTorch's).

use std::path::Path;

use clap::Args;

use super::experiment::{load, load_defaults};
use super::{Failure, Global, exit::failed};
use crate::commands::bench::{self, Measurement, StepCase};
use crate::config::{Overrides, chain_output, dataset_shape};
use crate::net::{ModelInput, Network};
use crate::shape::ImageShape;
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
    /// For `bench step`: the model kind (small_cnn, cnn, resnet, mlp); its other keys and the
    /// optimizer come from `--set model.KEY=VALUE` / `--set optimizer.KEY=VALUE`.
    #[arg(long)]
    model: Option<String>,
    /// For `bench step`: the input as CxHxW (default: what the settings' transforms hand the
    /// model, 1x28x28 for the seed's).
    #[arg(long, value_name = "CxHxW")]
    input: Option<String>,
    /// For `bench step`: classes of the last layer.
    #[arg(long, default_value_t = 10)]
    classes: usize,
    /// For `bench step`: the device. On `cuda` it times the step with the batch on the GPU
    /// (step, host enqueue and device time) beside PyTorch's eager, fused-optimizer and
    /// CUDA-graphed steps on the same GPU when python3 has torch with CUDA.
    #[arg(long, value_enum, default_value_t = super::DeviceArg::Cpu)]
    device: super::DeviceArg,
}

pub(super) fn bench(a: &BenchArgs, overrides: &Overrides, g: &Global) -> Result<(), Failure> {
    if env!("LLBUILD_OPT_LEVEL") == "0" {
        eprintln!(
            "warning: this binary is unoptimised; benchmark with `cargo run --release -- bench ...`"
        );
    }
    let measurements = if a.target == "step" {
        step(a, overrides)?
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

/// "3x32x32" → channels, height, width.
fn parse_input(text: &str) -> Option<ImageShape> {
    let parts: Vec<usize> = text
        .split(['x', '×'])
        .map(|p| p.trim().parse().ok())
        .collect::<Option<_>>()?;
    match parts[..] {
        [c, h, w] if c > 0 && h > 0 && w > 0 => Some(ImageShape::new(c, h, w)),
        _ => None,
    }
}

fn step(a: &BenchArgs, overrides: &Overrides) -> Result<Vec<Measurement>, Failure> {
    let cores = train::cores();
    let (repeat, steps, batch) = (a.repeat.unwrap_or(5).max(1), a.steps.max(1), a.batch);
    let threads: Vec<usize> = if cores >= 2 { vec![1, 2] } else { vec![1] };
    let layers = if a.candle_layers {
        Layers::Candle
    } else {
        Layers::FastCpu
    };
    // The default settings with the command line's overrides, checked as an experiment file.
    let mut overrides = overrides.clone();
    if let Some(kind) = &a.model {
        overrides.set.insert(0, format!("model.kind={kind}"));
    }
    let exp = load_defaults("<bench step>", &overrides)?;
    let settings = &exp.conditions[0].settings;
    let shape = match &a.input {
        Some(text) => parse_input(text).ok_or_else(|| {
            failed(format!(
                "--input {text:?}: expected CxHxW with positive sides, e.g. 3x32x32"
            ))
        })?,
        None => chain_output(&settings.transforms, dataset_shape(settings)),
    };
    let input = ModelInput {
        shape,
        classes: a.classes.max(1),
    };
    let architecture = settings.model.architecture().ok_or_else(|| {
        failed(
            "bench step measures a network's training step; the stand-in step has none (its \
             time is model.step_ms)"
                .to_string(),
        )
    })?;
    let net = Network::new(&architecture, input)
        .map_err(|e| failed(format!("model.{}: {}", e.key, e.message)))?;
    let case = StepCase {
        net,
        optimizer: settings.optimizer.clone(),
        batch,
        steps,
        layers,
    };
    if matches!(a.device, super::DeviceArg::Cuda) {
        let device = train::select(crate::config::DeviceKind::Cuda, 0)
            .map_err(failed)?
            .device;
        println!(
            "training step on CUDA, {}, batch on the device, TF32 {}, {steps} steps × {repeat} \
             repetitions, PyTorch's variants interleaved when python3 has torch with CUDA",
            case.describe(),
            if settings.device.tf32 { "on" } else { "off" }
        );
        train::set_tf32(settings.device.tf32);
        let all = bench::step_on_gpu(&case, &device, repeat).map_err(failed)?;
        if !all.iter().any(|m| m.name.starts_with("PyTorch")) {
            println!("(no python3 with torch and CUDA found: PyTorch not measured)");
        }
        return Ok(all);
    }
    println!(
        "training step, {}, {steps} timed steps × {repeat} repetitions, PyTorch's interleaved \
         when python3 has torch ({cores} cores)",
        case.describe()
    );
    let ours = bench::step(&case, &threads, repeat).map_err(failed)?;
    if !ours.iter().any(|m| m.name.starts_with("PyTorch")) {
        println!("(no python3 with torch found: PyTorch not measured)");
    }
    Ok(ours)
}
