//! The training step at 1 and 2 threads, and PyTorch's step in the same run when a Python with
//! torch exists.

use std::time::Instant;

use candle_core::{Device, Tensor};

use crate::analysis::median;
use crate::config::OptimizerSection;
use crate::net::{Layer, Network};
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

/// The network as the layer list [`PYTORCH_STEP`] builds a torch module from.
fn layers_json(net: &Network) -> serde_json::Value {
    use serde_json::json;
    fn walk(layers: &[Layer], net: &Network) -> Vec<serde_json::Value> {
        layers
            .iter()
            .map(|l| match l {
                Layer::Conv {
                    weight,
                    bias,
                    kernel,
                    stride,
                    padding,
                } => {
                    let s = &net.params[*weight].shape;
                    json!(["conv", s[1], s[0], kernel, stride, padding, bias.is_some()])
                }
                Layer::BatchNorm { weight, .. } => json!(["bn", net.params[*weight].shape[0]]),
                Layer::Relu => json!(["relu"]),
                Layer::MaxPool2 => json!(["pool2"]),
                Layer::MaxPool3 => json!(["pool3"]),
                Layer::Residual { body, shortcut } => {
                    json!(["res", walk(body, net), walk(shortcut, net)])
                }
                Layer::GlobalAvgPool => json!(["gap"]),
                Layer::Flatten => json!(["flatten"]),
                Layer::Linear { weight, .. } => {
                    let s = &net.params[*weight].shape;
                    json!(["linear", s[1], s[0]])
                }
            })
            .collect()
    }
    serde_json::Value::Array(walk(&net.layers, net))
}

/// One repetition of PyTorch's step for `case` on `threads` threads: (median ms, torch version),
/// or None when no `python3` with torch runs it.
fn pytorch_step(case: &StepCase, threads: usize) -> Option<(f64, String)> {
    let o = &case.optimizer;
    let spec = serde_json::json!({
        "layers": layers_json(&case.net),
        "input": [case.net.input.shape.channels, case.net.input.shape.height, case.net.input.shape.width],
        "classes": case.net.input.classes,
        "batch": case.batch,
        "steps": case.steps,
        "threads": threads,
        "optimizer": o,
    });
    let output = std::process::Command::new("python3")
        .arg("-c")
        .arg(PYTORCH_STEP)
        .arg(spec.to_string())
        .output()
        .ok()?;
    python_result(&output, "PyTorch's step")
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
const PYTORCH_STEP: &str = include_str!("pytorch_step.py");
