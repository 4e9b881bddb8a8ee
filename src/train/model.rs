//! The seed's SmallCNN in candle-nn: Conv(C→16, 3, pad 1)–ReLU–MaxPool2–Conv(16→32, 3, pad 1)–
//! ReLU–MaxPool2–Flatten–Linear(32·⌊H/4⌋·⌊W/4⌋→64)–ReLU–Linear(64→classes); for the seed's
//! 1×28×28 FashionMNIST that is Linear(1568→64) and 10 classes. The input follows the data.
//!
//! Parameters are `Var`s created from explicit tensors, so a run can start from exactly the
//! same initial weights as every other run (PyTorch's default initialisation, drawn from the
//! experiment seed).

use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::{Conv2d, Conv2dConfig, Linear, Module};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::hash::splitmix;
use crate::shape::ImageShape;

/// What a model is built for: the tensors the transforms hand it, and the number of classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelInput {
    pub shape: ImageShape,
    pub classes: usize,
}

impl ModelInput {
    /// The seed article's: 28×28 grey FashionMNIST, 10 classes.
    pub const SEED: ModelInput = ModelInput {
        shape: ImageShape::GREY_28,
        classes: 10,
    };

    /// Side lengths after the two 2×2 poolings (floored, as PyTorch's MaxPool2d).
    fn pooled(&self) -> (usize, usize) {
        (self.shape.height / 4, self.shape.width / 4)
    }

    /// Inputs of fc1: conv2's 32 channels over the pooled map (1568 for the seed).
    fn flat(&self) -> usize {
        let (h, w) = self.pooled();
        32 * h * w
    }

    /// Parameter names and shapes, in PyTorch's `named_parameters()` order.
    pub fn params(&self) -> Vec<(&'static str, Vec<usize>)> {
        let c = self.shape.channels;
        vec![
            ("conv1.weight", vec![16, c, 3, 3]),
            ("conv1.bias", vec![16]),
            ("conv2.weight", vec![32, 16, 3, 3]),
            ("conv2.bias", vec![32]),
            ("fc1.weight", vec![64, self.flat()]),
            ("fc1.bias", vec![64]),
            ("fc2.weight", vec![self.classes, 64]),
            ("fc2.bias", vec![self.classes]),
        ]
    }

    /// Fan-in of each layer (weights and bias share it).
    fn fan_in(&self, name: &str) -> usize {
        match name.split('.').next() {
            Some("conv1") => self.shape.channels * 9,
            Some("conv2") => 16 * 9,
            Some("fc1") => self.flat(),
            _ => 64,
        }
    }

    /// "SmallCNN, input 3×32×32, 10 classes, 545,098 parameters".
    pub fn describe(&self) -> String {
        format!(
            "SmallCNN, input {}, {} classes, {} parameters",
            self.shape,
            self.classes,
            crate::format::thousands(self.parameter_count() as f64)
        )
    }

    /// Number of trainable parameters.
    pub fn parameter_count(&self) -> usize {
        self.params()
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum()
    }
}

/// Host copies of every parameter, in [`ModelInput::params`] order, for the model `input`
/// describes.
#[derive(Debug, Clone)]
pub struct InitialWeights {
    pub input: ModelInput,
    pub values: Vec<Vec<f32>>,
}

impl InitialWeights {
    /// PyTorch's defaults for Conv2d and Linear: weights and biases uniform in ±1/√fan_in
    /// (kaiming_uniform with a = √5), drawn from the seed.
    pub fn pytorch_default(seed: u64, input: ModelInput) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(splitmix(seed ^ 0x0077_6569_6768_7473));
        let values = input
            .params()
            .iter()
            .map(|(name, shape)| {
                let bound = 1.0 / (input.fan_in(name) as f64).sqrt();
                let n: usize = shape.iter().product();
                (0..n)
                    .map(|_| (rng.random::<f64>() * 2.0 - 1.0) as f32 * bound as f32)
                    .collect()
            })
            .collect();
        InitialWeights { input, values }
    }
}

/// Which implementation of the layers runs the model; the parameters and the numbers are the
/// same either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layers {
    /// candle's own ops, NCHW: any device (the CUDA path).
    Candle,
    /// Hand-written NHWC convolution fused with ReLU and pooling ([`super::fast_cpu`]): CPU
    /// only, and only for images whose sides both poolings halve exactly (multiples of 4).
    FastCpu,
}

impl Layers {
    /// The fast layers on the CPU where the shape allows them, candle's elsewhere.
    pub fn best_for(device: &Device, input: ModelInput) -> Layers {
        let ImageShape { height, width, .. } = input.shape;
        if device.is_cpu() && height % 4 == 0 && width % 4 == 0 {
            Layers::FastCpu
        } else {
            Layers::Candle
        }
    }
}

pub struct SmallCnn {
    layers: Layers,
    input: ModelInput,
    conv1: Conv2d,
    conv2: Conv2d,
    fc1: Linear,
    fc2: Linear,
    vars: Vec<Var>,
}

impl SmallCnn {
    /// A model whose parameters are fresh copies of `init` on `device`.
    pub fn new(init: &InitialWeights, device: &Device, layers: Layers) -> Result<Self> {
        let params = init.input.params();
        let mut vars = Vec::with_capacity(params.len());
        for ((_, shape), values) in params.iter().zip(&init.values) {
            let t = Tensor::from_slice(values, shape.as_slice(), device)?.to_dtype(DType::F32)?;
            vars.push(Var::from_tensor(&t)?);
        }
        let pad = Conv2dConfig {
            padding: 1,
            ..Default::default()
        };
        let t = |i: usize| vars[i].as_tensor().clone();
        Ok(SmallCnn {
            layers,
            input: init.input,
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

    /// Logits for a batch of shape (N, C, H, W), the model's input shape.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.layers {
            Layers::Candle => self.forward_candle(x),
            Layers::FastCpu => self.forward_fast_cpu(x),
        }
    }

    fn forward_fast_cpu(&self, x: &Tensor) -> Result<Tensor> {
        use super::fast_cpu::ConvReluPool;
        let t = |i: usize| self.vars[i].as_tensor();
        let (n, c, h, w) = x.dims4()?;
        // With one channel, NCHW and NHWC are the same memory.
        let x = if c == 1 {
            x.reshape((n, h, w, 1))?
        } else {
            x.permute((0, 2, 3, 1))?.contiguous()?
        };
        let x = x.apply_op3(t(0), t(1), ConvReluPool::default())?;
        let x = x.apply_op3(t(2), t(3), ConvReluPool::default())?;
        // Flattened in (h, w, c) order; fc1's columns are PyTorch's (c, h, w): reorder them.
        let (ph, pw) = self.input.pooled();
        let flat = self.input.flat();
        let x = x.reshape((n, flat))?;
        let w1 = t(4)
            .reshape((64, 32, ph * pw))?
            .transpose(1, 2)?
            .reshape((64, flat))?;
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
/// An odd last row or column is dropped first, as PyTorch's floor mode does.
pub fn max_pool_2x2(x: &Tensor) -> Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    let x = if h % 2 == 1 || w % 2 == 1 {
        x.narrow(2, 0, h / 2 * 2)?.narrow(3, 0, w / 2 * 2)?
    } else {
        x.clone()
    };
    x.reshape((n, c, h / 2, 2, w / 2, 2))?.max(5)?.max(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_match_pytorch() {
        // sum(p.numel() for p in SmallCNN().parameters()) for the seed's 1×28×28 model, and
        // with Conv2d(3, 16, 3, padding=1) and Linear(32 * 8 * 8, 64) for 3×32×32.
        assert_eq!(ModelInput::SEED.parameter_count(), 105_866);
        let cifar = ModelInput {
            shape: ImageShape::new(3, 32, 32),
            classes: 10,
        };
        assert_eq!(cifar.parameter_count(), 136_874);
        assert_eq!(
            cifar.describe(),
            "SmallCNN, input 3×32×32, 10 classes, 136,874 parameters"
        );
    }
}
