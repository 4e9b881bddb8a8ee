//! A [`Network`] as trainable candle tensors.
//!
//! Parameters are `Var`s created from explicit tensors, so a run can start from exactly the
//! same initial weights as every other run (PyTorch's default initialisation, drawn from the
//! experiment seed). The forward pass walks the network's layers; the plain CNNs (the seed's
//! SmallCNN among them) run their Conv–ReLU–MaxPool blocks through the fused CPU op of
//! [`super::fast_cpu`] where the shape allows, everything else through candle's own ops.

use std::sync::Mutex;

use super::pooling::{max_pool_2x2, max_pool_3x3_s2};
use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::{Linear, Module};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::hash::splitmix;
pub use crate::net::ModelInput;
use crate::net::{BN_EPS, BN_MOMENTUM, Init, Layer, Network};

/// Host copies of every parameter, in [`Network::params`] order, for `net`.
#[derive(Debug, Clone)]
pub struct InitialWeights {
    pub net: Network,
    pub values: Vec<Vec<f32>>,
}

impl InitialWeights {
    /// PyTorch's defaults for each parameter ([`Init`]), drawn from the seed. The draws for
    /// the seed's SmallCNN are those of every earlier version, so its runs start where they did.
    pub fn pytorch_default(seed: u64, net: Network) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(splitmix(seed ^ 0x0077_6569_6768_7473));
        let values = net
            .params
            .iter()
            .map(|p| match p.init {
                Init::Uniform(bound) => (0..p.len())
                    .map(|_| (rng.random::<f64>() * 2.0 - 1.0) as f32 * bound as f32)
                    .collect(),
                Init::Normal(std) => (0..p.len())
                    .map(|_| {
                        // Box–Muller from two uniforms in (0, 1].
                        let u1 = 1.0 - rng.random::<f64>();
                        let u2 = rng.random::<f64>();
                        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos() * std) as f32
                    })
                    .collect(),
                Init::Constant(v) => vec![v as f32; p.len()],
            })
            .collect();
        InitialWeights { net, values }
    }
}

/// Which implementation of the layers runs the model; the parameters and the numbers are the
/// same either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layers {
    /// candle's own ops, NCHW: any device (the CUDA path), any network.
    Candle,
    /// Hand-written CPU layers ([`super::fast_cpu`]), CPU only: fused NHWC Conv–ReLU–MaxPool
    /// blocks for the plain CNNs where every block's pooling halves both sides exactly
    /// ([`fast_cpu_fits`]); elsewhere candle's graph with the im2col + gemm convolution (any
    /// stride and padding: the ResNets, odd sides).
    FastCpu,
}

impl Layers {
    /// The hand-written layers on the CPU, candle's on other devices.
    pub fn best_for(device: &Device, _net: &Network) -> Layers {
        if device.is_cpu() {
            Layers::FastCpu
        } else {
            Layers::Candle
        }
    }
}

/// Whether `net` is conv blocks (k 3 or 5, stride 1, same padding, bias) + ReLU + 2×2 pool, each
/// on even sides, then a flatten and linear layers: what the fused op computes.
pub fn fast_cpu_fits(net: &Network) -> bool {
    let (mut h, mut w) = (net.input.shape.height, net.input.shape.width);
    let mut layers = net.layers.as_slice();
    let mut blocks = 0;
    while let [
        Layer::Conv {
            bias: Some(_),
            kernel,
            stride: 1,
            padding,
            ..
        },
        Layer::Relu,
        Layer::MaxPool2,
        rest @ ..,
    ] = layers
    {
        if !matches!(kernel, 3 | 5) || *padding != kernel / 2 || h % 2 != 0 || w % 2 != 0 {
            return false;
        }
        (h, w) = (h / 2, w / 2);
        blocks += 1;
        layers = rest;
    }
    blocks > 0
        && matches!(layers.first(), Some(Layer::Flatten))
        && layers[1..]
            .iter()
            .all(|l| matches!(l, Layer::Linear { .. } | Layer::Relu))
}

/// BatchNorm's running statistics, one (mean, variance) pair per [`Network::norms`] entry.
pub type RunningStats = Vec<(Tensor, Tensor)>;

pub struct Model {
    layers: Layers,
    net: Network,
    vars: Vec<Var>,
    running: Mutex<RunningStats>,
}

impl Model {
    /// A model whose parameters are fresh copies of `init` on `device`; running statistics
    /// start as PyTorch's (mean 0, variance 1).
    pub fn new(init: &InitialWeights, device: &Device, layers: Layers) -> Result<Self> {
        let mut vars = Vec::with_capacity(init.net.params.len());
        for (p, values) in init.net.params.iter().zip(&init.values) {
            let t = Tensor::from_slice(values, p.shape.as_slice(), device)?.to_dtype(DType::F32)?;
            vars.push(Var::from_tensor(&t)?);
        }
        let running = init
            .net
            .norms
            .iter()
            .map(|n| {
                Ok((
                    Tensor::zeros(n.channels, DType::F32, device)?,
                    Tensor::ones(n.channels, DType::F32, device)?,
                ))
            })
            .collect::<Result<_>>()?;
        let layers = if layers == Layers::FastCpu && !device.is_cpu() {
            Layers::Candle
        } else {
            layers
        };
        Ok(Model {
            layers,
            net: init.net.clone(),
            vars,
            running: Mutex::new(running),
        })
    }

    pub fn vars(&self) -> &[Var] {
        &self.vars
    }

    pub fn network(&self) -> &Network {
        &self.net
    }

    /// The implementation that runs (the fast layers fall back to candle's where they do not fit).
    pub fn layers(&self) -> Layers {
        self.layers
    }

    /// BatchNorm's running statistics now, in [`Network::norms`] order.
    pub fn running_stats(&self) -> RunningStats {
        self.running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Logits for a batch of shape (N, C, H, W), the model's input shape. Training mode:
    /// BatchNorm normalises with the batch's statistics and updates the running ones.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self.layers {
            Layers::Candle => self.run(&self.net.layers, x.clone()),
            Layers::FastCpu if fast_cpu_fits(&self.net) => self.forward_fast_cpu(x),
            Layers::FastCpu => self.run(&self.net.layers, x.clone()),
        }
    }

    fn t(&self, i: usize) -> &Tensor {
        self.vars[i].as_tensor()
    }

    fn forward_fast_cpu(&self, x: &Tensor) -> Result<Tensor> {
        use super::fast_cpu::ConvReluPool;
        let (n, c, h, w) = x.dims4()?;
        // With one channel, NCHW and NHWC are the same memory.
        let mut x = if c == 1 {
            x.reshape((n, h, w, 1))?
        } else {
            x.permute((0, 2, 3, 1))?.contiguous()?
        };
        let mut layers = self.net.layers.as_slice();
        while let [
            Layer::Conv { weight, bias, .. },
            Layer::Relu,
            Layer::MaxPool2,
            rest @ ..,
        ] = layers
        {
            let bias = bias.expect("fast_cpu_fits checked");
            x = x.apply_op3(self.t(*weight), self.t(bias), ConvReluPool::default())?;
            layers = rest;
        }
        // Flattened in (h, w, c) order; the first linear layer's columns are PyTorch's
        // (c, h, w): reorder them.
        let (n, ph, pw, co) = x.dims4()?;
        let flat = ph * pw * co;
        let mut x = x.reshape((n, flat))?;
        let mut first = true;
        for layer in &layers[1..] {
            x = match layer {
                Layer::Linear { weight, bias } => {
                    let w = self.t(*weight);
                    let w = if first {
                        first = false;
                        let out = w.dim(0)?;
                        w.reshape((out, co, ph * pw))?
                            .transpose(1, 2)?
                            .reshape((out, flat))?
                    } else {
                        w.clone()
                    };
                    Linear::new(w, Some(self.t(*bias).clone())).forward(&x)?
                }
                _ => x.relu()?,
            };
        }
        Ok(x)
    }

    fn run(&self, layers: &[Layer], mut x: Tensor) -> Result<Tensor> {
        for layer in layers {
            x = match layer {
                Layer::Conv {
                    weight,
                    bias,
                    stride,
                    padding,
                    ..
                } => {
                    let y = if self.layers == Layers::FastCpu {
                        let op = super::fast_cpu::Conv2dNchw {
                            stride: *stride,
                            padding: *padding,
                        };
                        x.contiguous()?.apply_op2(self.t(*weight), op)?
                    } else {
                        conv2d(&x, self.t(*weight), *padding, *stride)?
                    };
                    match bias {
                        Some(b) => y.broadcast_add(&self.t(*b).reshape((1, (), 1, 1))?)?,
                        None => y,
                    }
                }
                Layer::BatchNorm { weight, norm } => self.batch_norm(&x, *weight, *norm)?,
                Layer::Relu => x.relu()?,
                Layer::MaxPool2 => max_pool(&x, 2)?,
                Layer::MaxPool3 => max_pool(&x, 3)?,
                Layer::Residual { body, shortcut } => {
                    let y = self.run(body, x.clone())?;
                    let s = if shortcut.is_empty() {
                        x
                    } else {
                        self.run(shortcut, x)?
                    };
                    (y + s)?.relu()?
                }
                Layer::GlobalAvgPool => x.flatten_from(2)?.mean(2)?,
                Layer::Flatten => x.flatten_from(1)?,
                Layer::Linear { weight, bias } => {
                    Linear::new(self.t(*weight).clone(), Some(self.t(*bias).clone())).forward(&x)?
                }
            };
        }
        Ok(x)
    }

    /// Training-mode BatchNorm2d: normalise with the batch's mean and biased variance over
    /// (N, H, W); running_mean and running_var (unbiased) move by PyTorch's momentum 0.1.
    ///
    /// On the CPU it computes in float64: candle's CPU sums run sequentially in the tensor's
    /// type, and over the 32,768 values of a stem channel (64×64 input, batch 32) float32 put
    /// the bias gradient 4.9e-4 (relative) from the exact one, where PyTorch's float32 is 3e-6
    /// away (tests/models_fixture.rs); in float64 ours is 1.3e-5 from PyTorch's. GPU reductions
    /// are tree-shaped and stay in float32.
    fn batch_norm(&self, x: &Tensor, weight: usize, norm: usize) -> Result<Tensor> {
        let (n, c, h, w) = x.dims4()?;
        let count = (n * h * w) as f64;
        if self.layers == Layers::FastCpu {
            let stats = std::sync::Arc::new(Mutex::new(super::fast_cpu::BatchStats::default()));
            let op = super::fast_cpu::BatchNormNchw {
                eps: BN_EPS,
                stats: stats.clone(),
            };
            let y = x
                .contiguous()?
                .apply_op3(self.t(weight), self.t(weight + 1), op)?;
            let s = stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let as_tensor = |v: &[f64]| {
                let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                Tensor::from_vec(v, c, x.device())
            };
            self.update_running(norm, &as_tensor(&s.mean)?, &as_tensor(&s.var)?, count)?;
            return Ok(y);
        }
        let dtype = x.dtype();
        let exact = if x.device().is_cpu() {
            DType::F64
        } else {
            dtype
        };
        let x = &x.to_dtype(exact)?;
        let mean = x.mean_keepdim((0, 2, 3))?;
        let centred = x.broadcast_sub(&mean)?;
        let var = centred.sqr()?.mean_keepdim((0, 2, 3))?;
        let inv = (var.clone() + BN_EPS)?.sqrt()?.recip()?;
        let gamma = self.t(weight).reshape((1, c, 1, 1))?.to_dtype(exact)?;
        let beta = self.t(weight + 1).reshape((1, c, 1, 1))?.to_dtype(exact)?;
        let y = centred
            .broadcast_mul(&inv.broadcast_mul(&gamma)?)?
            .broadcast_add(&beta)?
            .to_dtype(dtype)?;
        let (mean, var) = (
            mean.to_dtype(dtype)?.detach().flatten_all()?,
            var.to_dtype(dtype)?.detach().flatten_all()?,
        );
        self.update_running(norm, &mean, &var, count)?;
        Ok(y)
    }

    /// Move BatchNorm `norm`'s running statistics towards a batch's mean and biased variance
    /// (per channel) over `count` values, as PyTorch does: momentum 0.1, the variance unbiased.
    fn update_running(&self, norm: usize, mean: &Tensor, var: &Tensor, count: f64) -> Result<()> {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let (rm, rv) = &running[norm];
        let unbiased = (var * (count / (count - 1.0).max(1.0)))?;
        let next_mean = ((rm * (1.0 - BN_MOMENTUM))? + (mean * BN_MOMENTUM)?)?;
        let next_var = ((rv * (1.0 - BN_MOMENTUM))? + (unbiased * BN_MOMENTUM)?)?;
        running[norm] = (next_mean, next_var);
        Ok(())
    }
}

/// A convolution with candle's layers: on CUDA through cuDNN once it loaded and passed its
/// check, else candle's own.
fn conv2d(x: &Tensor, w: &Tensor, padding: usize, stride: usize) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    if let Some(y) = super::cuda::conv::conv2d(x, w, padding, stride)? {
        return Ok(y);
    }
    x.conv2d(w, padding, stride, 1, 1)
}

/// Max pooling with `k`×`k` windows and stride 2 (2×2, or ResNet's 3×3 with padding 1): on
/// CUDA through loaderlab's kernels once they passed their check, else candle's path below.
fn max_pool(x: &Tensor, k: usize) -> Result<Tensor> {
    #[cfg(feature = "cuda")]
    {
        let pad = i32::from(k == 3);
        let window = super::cuda::pool::Window { k: k as i32, pad };
        if let Some(y) = super::cuda::pool::max_pool(x, window)? {
            return Ok(y);
        }
    }
    if k == 2 {
        max_pool_2x2(x)
    } else {
        max_pool_3x3_s2(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kernels/pool.cu`, statement for statement on the host: the forward with its argmax,
    /// then the backward's gather over the outputs whose window holds each input.
    fn emulate(x: &[f32], h: i32, w: i32, k: i32, pad: i32, gy: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let s = 2;
        let (oh, ow) = ((h + 2 * pad - k) / s + 1, (w + 2 * pad - k) / s + 1);
        let planes = x.len() as i32 / (h * w);
        let mut y = vec![0f32; (planes * oh * ow) as usize];
        let mut arg = vec![0u32; y.len()];
        for o in 0..planes * oh * ow {
            let (ox, oy, plane) = (o % ow, (o / ow) % oh, o / (ow * oh));
            let (mut best, mut at) = (f32::NEG_INFINITY, -1i32);
            for dy in 0..k {
                let iy = oy * s - pad + dy;
                for dx in 0..k {
                    let ix = ox * s - pad + dx;
                    if iy < 0 || iy >= h || ix < 0 || ix >= w {
                        continue;
                    }
                    let v = x[(plane * h * w + iy * w + ix) as usize];
                    if v > best {
                        (best, at) = (v, iy * w + ix);
                    }
                }
            }
            y[o as usize] = best;
            arg[o as usize] = at as u32;
        }
        let mut gx = vec![0f32; x.len()];
        for i in 0..x.len() as i32 {
            let (ix, iy, plane) = (i % w, (i / w) % h, i / (w * h));
            let (lo_y, lo_x) = (iy + pad - k + 1, ix + pad - k + 1);
            let oy0 = if lo_y <= 0 { 0 } else { (lo_y + s - 1) / s };
            let ox0 = if lo_x <= 0 { 0 } else { (lo_x + s - 1) / s };
            let (oy1, ox1) = ((oh - 1).min((iy + pad) / s), (ow - 1).min((ix + pad) / s));
            let mut sum = 0f32;
            for oy in oy0..=oy1 {
                for ox in ox0..=ox1 {
                    let o = (plane * oh * ow + oy * ow + ox) as usize;
                    if arg[o] == (iy * w + ix) as u32 {
                        sum += gy[o];
                    }
                }
            }
            gx[i as usize] = sum;
        }
        (y, gx)
    }

    /// The CUDA pooling kernels' index arithmetic (emulated) against candle's path on the CPU:
    /// values and input gradients, both windows, even and odd sides.
    #[test]
    fn the_pooling_kernels_arithmetic_is_candle_s_path() {
        for (k, pad) in [(2, 0), (3, 1)] {
            for (h, w) in [(8usize, 8usize), (7, 9), (5, 4)] {
                let n = 2 * 3 * h * w;
                let v: Vec<f32> = (0..n).map(|i| ((i * 7919) % n + 1) as f32 * 0.01).collect();
                let x = Var::from_vec(v.clone(), (2, 3, h, w), &Device::Cpu).unwrap();
                let y = if k == 2 {
                    max_pool_2x2(x.as_tensor())
                } else {
                    max_pool_3x3_s2(x.as_tensor())
                }
                .unwrap();
                let weights = Tensor::arange(0f32, y.elem_count() as f32, &Device::Cpu)
                    .unwrap()
                    .reshape(y.shape())
                    .unwrap();
                let grads = (&y * &weights)
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .backward()
                    .unwrap();
                let gx = grads.get(x.as_tensor()).unwrap();
                let gy = weights.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                let (ey, egx) = emulate(&v, h as i32, w as i32, k, pad, &gy);
                let what = format!("{k}×{k} on {h}×{w}");
                assert_eq!(
                    y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    ey,
                    "{what}"
                );
                assert_eq!(
                    gx.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                    egx,
                    "{what}"
                );
            }
        }
    }
}
