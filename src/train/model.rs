//! The seed's SmallCNN in candle-nn: Conv(1→16, 3, pad 1)–ReLU–MaxPool2–Conv(16→32, 3, pad 1)–
//! ReLU–MaxPool2–Flatten–Linear(1568→64)–ReLU–Linear(64→10).
//!
//! Parameters are `Var`s created from explicit tensors, so a run can start from exactly the
//! same initial weights as every other run (PyTorch's default initialisation, drawn from the
//! experiment seed).

use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::{Conv2d, Conv2dConfig, Linear, Module};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::hash::splitmix;

/// Parameter names and shapes, in PyTorch's `named_parameters()` order.
pub const PARAMS: [(&str, &[usize]); 8] = [
    ("conv1.weight", &[16, 1, 3, 3]),
    ("conv1.bias", &[16]),
    ("conv2.weight", &[32, 16, 3, 3]),
    ("conv2.bias", &[32]),
    ("fc1.weight", &[64, 1568]),
    ("fc1.bias", &[64]),
    ("fc2.weight", &[10, 64]),
    ("fc2.bias", &[10]),
];

/// Fan-in of each layer (weights and bias share it).
fn fan_in(name: &str) -> usize {
    match name.split('.').next() {
        Some("conv1") => 9,
        Some("conv2") => 16 * 9,
        Some("fc1") => 1568,
        _ => 64,
    }
}

/// Host copies of every parameter, in [`PARAMS`] order.
#[derive(Debug, Clone)]
pub struct InitialWeights(pub Vec<Vec<f32>>);

impl InitialWeights {
    /// PyTorch's defaults for Conv2d and Linear: weights and biases uniform in ±1/√fan_in
    /// (kaiming_uniform with a = √5), drawn from the seed.
    pub fn pytorch_default(seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(splitmix(seed ^ 0x0077_6569_6768_7473));
        InitialWeights(
            PARAMS
                .iter()
                .map(|(name, shape)| {
                    let bound = 1.0 / (fan_in(name) as f64).sqrt();
                    let n: usize = shape.iter().product();
                    (0..n)
                        .map(|_| (rng.random::<f64>() * 2.0 - 1.0) as f32 * bound as f32)
                        .collect()
                })
                .collect(),
        )
    }
}

/// Which implementation of the layers runs the model; the parameters and the numbers are the
/// same either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layers {
    /// candle's own ops, NCHW: any device (the CUDA path).
    Candle,
    /// Hand-written NHWC convolution fused with ReLU and pooling ([`super::fast_cpu`]): CPU only.
    FastCpu,
}

pub struct SmallCnn {
    layers: Layers,
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
    vars: Vec<Var>,
}

impl SmallCnn {
    /// A model whose parameters are fresh copies of `init` on `device`.
    pub fn new(init: &InitialWeights, device: &Device, layers: Layers) -> Result<Self> {
        let mut vars = Vec::with_capacity(PARAMS.len());
        for ((_, shape), values) in PARAMS.iter().zip(&init.0) {
            let t = Tensor::from_slice(values, *shape, device)?.to_dtype(DType::F32)?;
            vars.push(Var::from_tensor(&t)?);
        }
        let pad = Conv2dConfig {
            padding: 1,
            ..Default::default()
        };
        let t = |i: usize| vars[i].as_tensor().clone();
        Ok(SmallCnn {
            layers,
            conv1: Conv2d::new(t(0), Some(t(1)), pad),
            conv2: Conv2d::new(t(2), Some(t(3)), pad),
            fc1: Linear::new(t(4), Some(t(5))),
            fc2: Linear::new(t(6), Some(t(7))),
            vars,
        })
    }

    pub fn vars(&self) -> &[Var] {
        &self.vars
    }

    /// Logits for a batch of shape (N, 1, 28, 28).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.layers {
            Layers::Candle => self.forward_candle(x),
            Layers::FastCpu => self.forward_fast_cpu(x),
        }
    }

    fn forward_fast_cpu(&self, x: &Tensor) -> Result<Tensor> {
        use super::fast_cpu::ConvReluPool;
        let t = |i: usize| self.vars[i].as_tensor();
        let n = x.dim(0)?;
        // With one channel, NCHW and NHWC are the same memory.
        let x = x.reshape((n, 28, 28, 1))?;
        let x = x.apply_op3(t(0), t(1), ConvReluPool::default())?;
        let x = x.apply_op3(t(2), t(3), ConvReluPool::default())?;
        // Flattened in (h, w, c) order; fc1's columns are PyTorch's (c, h, w): reorder them.
        let x = x.reshape((n, 7 * 7 * 32))?;
        let w1 = t(4)
            .reshape((64, 32, 49))?
            .transpose(1, 2)?
            .reshape((64, 7 * 7 * 32))?;
        let x = Linear::new(w1, Some(t(5).clone())).forward(&x)?.relu()?;
        self.fc2.forward(&x)
    }

    fn forward_candle(&self, x: &Tensor) -> Result<Tensor> {
        let x = max_pool_2x2(&self.conv1.forward(x)?.relu()?)?;
        let x = max_pool_2x2(&self.conv2.forward(&x)?.relu()?)?;
        let x = x.flatten_from(1)?;
        let x = self.fc1.forward(&x)?.relu()?;
        self.fc2.forward(&x)
    }
}

/// 2×2 max pooling with stride 2, as two reductions over a reshaped view.
///
/// Not `Tensor::max_pool2d`: candle 0.11.1's backward for it multiplies the gradient by the
/// window's share of maxima (¼ for a unique maximum) instead of passing it through, so every
/// layer below a pooling received ¼ of its gradient (caught by the PyTorch gradient fixture).
/// The reductions' backward routes the gradient to the maximum, as PyTorch does; exact ties
/// are shared, which after ReLU only happens at zero, where ReLU's gradient is zero anyway.
pub fn max_pool_2x2(x: &Tensor) -> Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    x.reshape((n, c, h / 2, 2, w / 2, 2))?.max(5)?.max(3)
}
