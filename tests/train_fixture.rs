//! SmallCNN + Adam against PyTorch (tests/fixtures/make_optimizer_fixture.py): the same
//! weights and inputs give the same losses over 5 Adam steps, within 1e-4.

use candle_core::{Device, Tensor};
use loaderlab::config::OptimizerSection;
use loaderlab::net::{Architecture, Network};
use loaderlab::train::{InitialWeights, Layers, ModelInput, Trainer};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(&std::fs::read_to_string("tests/fixtures/optimizer_fixture.json").unwrap())
        .unwrap()
}

fn formula_weights(amps: &[f64]) -> InitialWeights {
    let net = Network::seed();
    InitialWeights {
        values: net
            .params
            .iter()
            .enumerate()
            .map(|(k, p)| {
                let n = p.len();
                (0..n)
                    .map(|i| (amps[k] * (0.7 * i as f64 + k as f64).sin()) as f32)
                    .collect()
            })
            .collect(),
        net,
    }
}

fn formula_batch(batch: usize) -> (Tensor, Tensor) {
    let pixels: Vec<f32> = (0..batch * 784)
        .map(|i| (0.5 + 0.5 * (0.13 * i as f64 + 1.0).sin()) as f32)
        .collect();
    let labels: Vec<u32> = (0..batch as u32).map(|n| n % 10).collect();
    (
        Tensor::from_vec(pixels, (batch, 1, 28, 28), &Device::Cpu).unwrap(),
        Tensor::from_vec(labels, batch, &Device::Cpu).unwrap(),
    )
}

/// candle's `test_device!` pattern: one test body, every implementation of the layers.
macro_rules! for_each_layers {
    ($body:ident, $candle:ident, $fast:ident) => {
        #[test]
        fn $candle() {
            $body(Layers::Candle);
        }
        #[test]
        fn $fast() {
            $body(Layers::FastCpu);
        }
    };
}

for_each_layers!(
    adam_losses_match_pytorch,
    adam_losses_candle,
    adam_losses_fast_cpu
);
for_each_layers!(
    gradients_match_pytorch,
    gradients_candle,
    gradients_fast_cpu
);

fn adam_losses_match_pytorch(layers: Layers) {
    let f = fixture();
    let amps: Vec<f64> = f["amps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_f64().unwrap())
        .collect();
    let expected: Vec<f64> = f["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_f64().unwrap())
        .collect();
    let (x, y) = formula_batch(f["batch"].as_u64().unwrap() as usize);
    let mut trainer = Trainer::with_layers(
        formula_weights(&amps),
        &OptimizerSection::default(),
        Device::Cpu,
        layers,
    )
    .unwrap();
    let mut losses = Vec::new();
    for _ in 0..5 {
        losses.push(trainer.step(&x, &y).unwrap().to_scalar::<f32>().unwrap() as f64);
    }
    let logits = trainer.model().forward(&x).unwrap();
    losses.push(
        candle_nn::loss::cross_entropy(&logits, &y)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap() as f64,
    );
    for (i, (got, want)) in losses.iter().zip(&expected).enumerate() {
        assert!(
            (got - want).abs() < 1e-4,
            "loss {i}: {got} vs PyTorch {want}\nall: {losses:?}"
        );
    }
    // Reset gives the same start again.
    trainer.reset().unwrap();
    let again = trainer.step(&x, &y).unwrap().to_scalar::<f32>().unwrap() as f64;
    assert_eq!(again, losses[0]);
}

fn gradients_match_pytorch(layers: Layers) {
    let f = fixture();
    let amps: Vec<f64> = f["amps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_f64().unwrap())
        .collect();
    let (x, y) = formula_batch(f["batch"].as_u64().unwrap() as usize);
    let trainer = Trainer::with_layers(
        formula_weights(&amps),
        &OptimizerSection::default(),
        Device::Cpu,
        layers,
    )
    .unwrap();
    let logits = trainer.model().forward(&x).unwrap();
    let loss = candle_nn::loss::cross_entropy(&logits, &y).unwrap();
    let grads = loss.backward().unwrap();
    for (var, p) in trainer.model().vars().iter().zip(&Network::seed().params) {
        let name = &p.name;
        let g: Vec<f32> = grads
            .get(var)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let want = &f["grads"][name];
        let norm = g.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
        let want_norm = want["norm"].as_f64().unwrap();
        assert!(
            (norm - want_norm).abs() <= 1e-4 * want_norm.max(1e-3),
            "{layers:?} {name}: norm {norm} vs {want_norm}"
        );
        for (i, w) in want["head"].as_array().unwrap().iter().enumerate() {
            let w = w.as_f64().unwrap();
            assert!(
                (g[i] as f64 - w).abs() <= 1e-4 * want_norm.max(1e-3) + 1e-7,
                "{name}[{i}]: {} vs {w}",
                g[i]
            );
        }
    }
}

/// Weights and a batch for any input, from closed formulas.
fn formula_case(input: ModelInput, batch: usize) -> (InitialWeights, Tensor, Tensor) {
    let net = Network::new(&Architecture::SEED, input).unwrap();
    let values = net
        .params
        .iter()
        .enumerate()
        .map(|(k, p)| {
            let n = p.len();
            let amp = 0.3 / (n as f64).sqrt().max(1.0) * 4.0;
            (0..n)
                .map(|i| (amp * (0.7 * i as f64 + k as f64).sin()) as f32)
                .collect()
        })
        .collect();
    let shape = input.shape;
    let pixels: Vec<f32> = (0..batch * shape.len())
        .map(|i| (0.5 + 0.5 * (0.13 * i as f64 + 1.0).sin()) as f32)
        .collect();
    let labels: Vec<u32> = (0..batch as u32)
        .map(|n| n % input.classes as u32)
        .collect();
    let dims = (batch, shape.channels, shape.height, shape.width);
    (
        InitialWeights { net, values },
        Tensor::from_vec(pixels, dims, &Device::Cpu).unwrap(),
        Tensor::from_vec(labels, batch, &Device::Cpu).unwrap(),
    )
}

/// Logits, loss and every gradient of one model on one batch.
fn forward_backward(init: InitialWeights, x: &Tensor, y: &Tensor, layers: Layers) -> Vec<Vec<f32>> {
    let trainer =
        Trainer::with_layers(init, &OptimizerSection::default(), Device::Cpu, layers).unwrap();
    let logits = trainer.model().forward(x).unwrap();
    let loss = candle_nn::loss::cross_entropy(&logits, y).unwrap();
    let grads = loss.backward().unwrap();
    let mut out = vec![logits.flatten_all().unwrap().to_vec1().unwrap()];
    for var in trainer.model().vars() {
        out.push(
            grads
                .get(var)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap(),
        );
    }
    out
}

/// The fast layers take colour images of other sizes (NCHW → NHWC, fc1's columns reordered
/// for the pooled map) and agree with candle's own layers, which the PyTorch fixture pins.
#[test]
fn fast_layers_equal_candle_on_colour_images_of_another_size() {
    let input = ModelInput {
        shape: loaderlab::shape::ImageShape::new(3, 32, 24),
        classes: 7,
    };
    let (init, x, y) = formula_case(input, 6);
    let fast = forward_backward(init.clone(), &x, &y, Layers::FastCpu);
    let candle = forward_backward(init, &x, &y, Layers::Candle);
    for (k, (a, b)) in fast.iter().zip(&candle).enumerate() {
        assert_eq!(a.len(), b.len());
        let scale = b.iter().map(|v| v.abs()).fold(0f32, f32::max).max(1e-6);
        let worst = a
            .iter()
            .zip(b)
            .map(|(p, q)| (p - q).abs())
            .fold(0f32, f32::max);
        assert!(
            worst <= 1e-4 * scale,
            "tensor {k}: worst difference {worst} (scale {scale})"
        );
    }
    assert_eq!(fast[0].len(), 6 * 7, "logits for 7 classes");
}

/// Sides that a 2×2 pooling does not halve exactly: the fused blocks do not fit, and the CPU
/// layers run candle's graph (floor pooling, as PyTorch) with the im2col convolution.
#[test]
fn odd_sides_train_with_floor_pooling() {
    let input = ModelInput {
        shape: loaderlab::shape::ImageShape::new(1, 30, 27),
        classes: 10,
    };
    // fc1 sees 32 × ⌊⌊30/2⌋/2⌋ × ⌊⌊27/2⌋/2⌋ = 32 × 7 × 6.
    let net = Network::new(&Architecture::SEED, input).unwrap();
    assert_eq!(net.params[4].shape, vec![64, 32 * 7 * 6]);
    assert!(!loaderlab::train::fast_cpu_fits(&net));
    assert_eq!(Layers::best_for(&Device::Cpu, &net), Layers::FastCpu);
    let (init, x, y) = formula_case(input, 4);
    let mut trainer = Trainer::new(init, &OptimizerSection::default(), Device::Cpu).unwrap();
    let first = trainer.step(&x, &y).unwrap().to_scalar::<f32>().unwrap();
    let mut last = first;
    for _ in 0..4 {
        last = trainer.step(&x, &y).unwrap().to_scalar::<f32>().unwrap();
    }
    assert!(first.is_finite() && last < first, "loss {first} → {last}");
}
