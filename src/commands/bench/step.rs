//! The training step at 1 and 2 threads, and PyTorch's step in the same run when a Python with
//! torch exists; on a GPU ([`step_on_gpu`]), ours beside PyTorch's eager, fused-optimizer and
//! CUDA-graphed steps on the same GPU.

use std::time::Instant;

use candle_core::{Device, Tensor};

use crate::analysis::median;
use crate::config::OptimizerSection;
use crate::net::Network;
use crate::train::{ComputePool, InitialWeights, Layers, Trainer};

use super::Measurement;

/// What `bench step` times: a network, its optimizer and the batch.
pub struct StepCase {
    pub net: Network,
    pub optimizer: OptimizerSection,
    pub batch: usize,
    pub steps: usize,
    pub layers: Layers,
}

impl StepCase {
    /// The formula batch of the fixtures: pixels 0.5 + 0.5·sin(0.13·i + 1), labels n mod classes.
    fn batch(&self) -> candle_core::Result<(Tensor, Tensor)> {
        let (input, batch) = (self.net.input, self.batch);
        let shape = input.shape;
        let pixels: Vec<f32> = (0..batch * shape.len())
            .map(|i| (0.5 + 0.5 * (0.13 * i as f64 + 1.0).sin()) as f32)
            .collect();
        let labels: Vec<u32> = (0..batch as u32)
            .map(|n| n % input.classes as u32)
            .collect();
        let dims = (batch, shape.channels, shape.height, shape.width);
        Ok((
            Tensor::from_vec(pixels, dims, &Device::Cpu)?,
            Tensor::from_vec(labels, batch, &Device::Cpu)?,
        ))
    }

    /// "SmallCNN + adam, batch 256".
    pub fn describe(&self) -> String {
        let kind = toml::Value::try_from(self.optimizer.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        format!("{} + {kind}, batch {}", self.net.describe(), self.batch)
    }
}

/// Our step and PyTorch's (when `python3` has torch) at each thread count, repetitions
/// interleaved (ours, then PyTorch's, then ours …) so drift hits both alike; the ratio is taken
/// per repetition pair and reported as its median with min–max.
pub fn step(
    case: &StepCase,
    threads: &[usize],
    repeats: usize,
) -> anyhow::Result<Vec<Measurement>> {
    let (x, y) = case.batch()?;
    let mut trainer = Trainer::with_layers(
        InitialWeights::pytorch_default(42, case.net.clone()),
        &case.optimizer,
        Device::Cpu,
        case.layers,
    )?;
    let which = match trainer.model().layers() {
        Layers::FastCpu => "loaderlab step",
        Layers::Candle => "loaderlab step (candle layers)",
    };
    let batch = case.batch;
    let mut results = Vec::new();
    for &t in threads {
        let pool = ComputePool::new(t)?;
        let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let mut version = None;
        for _ in 0..repeats {
            trainer.reset()?;
            // The whole repetition runs on the pool: its threads are the step's threads.
            let times = pool.install(|| -> candle_core::Result<Vec<f64>> {
                for _ in 0..3 {
                    trainer.step(&x, &y)?;
                }
                let mut times = Vec::with_capacity(case.steps);
                for _ in 0..case.steps {
                    let t0 = Instant::now();
                    trainer.step(&x, &y)?.to_scalar::<f32>()?;
                    times.push(t0.elapsed().as_secs_f64() * 1e3);
                }
                Ok(times)
            })?;
            let m = median(&times);
            ours.push(m);
            if let Some((p, v)) = pytorch_step(case, t) {
                ratios.push(m / p);
                theirs.push(p);
                version = Some(v);
            }
        }
        results.push(Measurement::new(
            format!("{which}, batch {batch}, {t} thread(s)"),
            "ms",
            ours,
        ));
        if let Some(v) = version {
            results.push(Measurement::new(
                format!("PyTorch {v} step, batch {batch}, {t} thread(s)"),
                "ms",
                theirs,
            ));
            results.push(Measurement::new(
                format!("ratio loaderlab / PyTorch, {t} thread(s), per interleaved pair"),
                "×",
                ratios,
            ));
        }
    }
    Ok(results)
}

/// One repetition of PyTorch's step for `case` on `threads` threads: (median ms, torch version),
/// or None when no `python3` with torch runs it.
fn pytorch_step(case: &StepCase, threads: usize) -> Option<(f64, String)> {
    let output = run_python(PYTORCH_STEP, case, ("threads", serde_json::json!(threads)))?;
    python_result(&output, "PyTorch's step")
}

/// `script` (after pytorch_model.py) in `python3` with `case`'s spec plus one `extra` key.
fn run_python(
    script: &str,
    case: &StepCase,
    extra: (&str, serde_json::Value),
) -> Option<std::process::Output> {
    let shape = case.net.input.shape;
    let mut spec = serde_json::json!({
        "layers": case.net.torch_layers(),
        "input": [shape.channels, shape.height, shape.width],
        "classes": case.net.input.classes,
        "batch": case.batch,
        "steps": case.steps,
        "optimizer": &case.optimizer,
    });
    spec[extra.0] = extra.1;
    std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(spec.to_string())
        .output()
        .ok()
}

/// A comparison script's printed JSON; None, with the reason on stderr when it is more than
/// a missing module (a script that breaks on a machine with torch must not pass silently).
pub(super) fn python_result<T: serde::de::DeserializeOwned>(
    output: &std::process::Output,
    what: &str,
) -> Option<T> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if !stderr.contains("ModuleNotFoundError") {
            let last = stderr.lines().last().unwrap_or("(nothing on stderr)");
            eprintln!("warning: {what} in python3 failed: {last}");
        }
        return None;
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| eprintln!("warning: {what} in python3 printed no result ({e})"))
        .ok()
}

/// The same network and optimizer in PyTorch, timed like ours: 3 warm-up steps, then the median
/// of `steps` steps (loss read each step). Prints [median_ms, torch_version].
const PYTORCH_STEP: &str = concat!(
    include_str!("../../net/pytorch_model.py"),
    include_str!("pytorch_step.py")
);

/// One way of running a step on a GPU, timed: wall time per step over a run of steps with no
/// synchronisation between them, the host's time to queue one step, the device's time per step
/// (CUDA events around it). Host time close to the step time means the step is host-bound.
#[derive(Debug, Clone, Copy, Default, serde::Deserialize)]
pub struct GpuFigures {
    pub step_ms: f64,
    pub host_ms: f64,
    pub device_ms: f64,
}

/// The PyTorch variants timed beside ours on a GPU (see `pytorch_cuda_step.py`).
const GPU_VARIANTS: [&str; 3] = ["eager", "fused", "graph"];

/// Our step on `device` (a GPU) and PyTorch's variants on the same GPU when `python3` has
/// torch with CUDA, repetitions interleaved; ratios per repetition pair (ours / theirs).
pub fn step_on_gpu(
    case: &StepCase,
    device: &Device,
    repeats: usize,
) -> anyhow::Result<Vec<Measurement>> {
    let (x, y) = case.batch()?;
    let (x, y) = (x.to_device(device)?, y.to_device(device)?);
    let mut trainer = Trainer::with_layers(
        InitialWeights::pytorch_default(42, case.net.clone()),
        &case.optimizer,
        device.clone(),
        Layers::Candle,
    )?;
    let mut ours: Vec<GpuFigures> = Vec::new();
    let mut theirs: Vec<Vec<GpuFigures>> = vec![Vec::new(); GPU_VARIANTS.len()];
    let mut ratios: Vec<Vec<f64>> = vec![Vec::new(); GPU_VARIANTS.len()];
    let mut version = None;
    for _ in 0..repeats {
        trainer.reset()?;
        let f = time_on_gpu(&mut trainer, &x, &y, case.steps)?;
        ours.push(f);
        if let Some(p) = pytorch_gpu_step(case) {
            version = Some(p.version.clone());
            for (k, name) in GPU_VARIANTS.iter().enumerate() {
                match p.variants.get(*name) {
                    Some(Ok(t)) => {
                        theirs[k].push(*t);
                        ratios[k].push(f.step_ms / t.step_ms);
                    }
                    Some(Err(why)) => eprintln!("note: PyTorch {name} step failed: {why}"),
                    None => {}
                }
            }
        }
    }
    let batch = case.batch;
    let mut out = figures(
        &format!("loaderlab on {}, batch {batch}", device_name(device)),
        &ours,
    );
    println!(
        "(loaderlab's weights updated by {})",
        trainer.optimizer_path()
    );
    if let Some(v) = version {
        for (k, name) in GPU_VARIANTS.iter().enumerate() {
            if theirs[k].is_empty() {
                continue;
            }
            out.extend(figures(
                &format!("PyTorch {v} {name}, batch {batch}"),
                &theirs[k],
            ));
            out.push(Measurement::new(
                format!("ratio loaderlab / PyTorch {name} (step), per interleaved pair"),
                "×",
                ratios[k].clone(),
            ));
        }
    }
    Ok(out)
}

fn device_name(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        other => format!("{other:?}"),
    }
}

/// Step, host and device time of `who`'s repetitions, one measurement each.
fn figures(who: &str, f: &[GpuFigures]) -> Vec<Measurement> {
    let pick = |g: fn(&GpuFigures) -> f64| f.iter().map(g).collect::<Vec<_>>();
    vec![
        Measurement::new(
            format!("{who}: step (wall / steps)"),
            "ms",
            pick(|f| f.step_ms),
        ),
        Measurement::new(format!("{who}: host enqueue"), "ms", pick(|f| f.host_ms)),
        Measurement::new(
            format!("{who}: device (events)"),
            "ms",
            pick(|f| f.device_ms),
        ),
    ]
}

/// One repetition of our step on a GPU: 3 warm-up steps, then `steps` steps queued back to
/// back, synchronised at the end; every loss read (and checked finite) after the timing.
fn time_on_gpu(
    trainer: &mut Trainer,
    x: &Tensor,
    y: &Tensor,
    steps: usize,
) -> anyhow::Result<GpuFigures> {
    use crate::train::{DeviceClock, synchronize};
    let device = trainer.device().clone();
    for _ in 0..3 {
        trainer.step(x, y)?;
    }
    synchronize(&device)?;
    let mut clock = DeviceClock::for_device(&device);
    clock.anchor()?;
    let (mut host, mut losses) = (Vec::with_capacity(steps), Vec::with_capacity(steps));
    let t0 = Instant::now();
    for _ in 0..steps {
        // No copy in a data-free step: the copy mark and the compute mark coincide.
        clock.mark()?;
        clock.mark()?;
        let h = Instant::now();
        losses.push(trainer.step(x, y)?);
        host.push(h.elapsed().as_secs_f64() * 1e3);
        clock.mark()?;
    }
    synchronize(&device)?;
    let step_ms = t0.elapsed().as_secs_f64() * 1e3 / steps as f64;
    let device_ms: Vec<f64> = clock.read()?.iter().map(|m| m.busy_ms()).collect();
    for (k, loss) in losses.iter().enumerate() {
        let v = loss.to_scalar::<f32>()?;
        anyhow::ensure!(v.is_finite(), "the loss of step {k} is {v}");
    }
    Ok(GpuFigures {
        step_ms,
        host_ms: median(&host),
        device_ms: median(&device_ms),
    })
}

/// What `pytorch_cuda_step.py` printed.
struct GpuResult {
    version: String,
    variants: std::collections::HashMap<String, Result<GpuFigures, String>>,
}

/// One repetition of PyTorch's variants on the GPU; None when no `python3` with torch runs it.
fn pytorch_gpu_step(case: &StepCase) -> Option<GpuResult> {
    let variants = ("variants", serde_json::json!(GPU_VARIANTS));
    let output = run_python(PYTORCH_CUDA_STEP, case, variants)?;
    let raw: serde_json::Value = python_result(&output, "PyTorch's CUDA step")?;
    let variants = raw["variants"]
        .as_object()?
        .iter()
        .map(|(name, v)| {
            let figures = match v["error"].as_str() {
                Some(why) => Err(why.to_string()),
                None => serde_json::from_value(v.clone()).map_err(|e| e.to_string()),
            };
            (name.clone(), figures)
        })
        .collect();
    Some(GpuResult {
        version: raw["version"].as_str().unwrap_or("?").to_string(),
        variants,
    })
}

/// PyTorch's step on the GPU in its variants (see the script's header).
const PYTORCH_CUDA_STEP: &str = concat!(
    include_str!("../../net/pytorch_model.py"),
    include_str!("pytorch_cuda_step.py")
);
