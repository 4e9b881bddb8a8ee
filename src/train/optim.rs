//! The optimizers, with PyTorch's update rules (its single-tensor implementations, in its order
//! of operations), on candle tensors so the same code runs on every device; on CUDA one fused
//! kernel per step does the same arithmetic (`cuda/optim.rs`), when it passed its check.

use candle_core::backprop::GradStore;
use candle_core::{Result, Tensor, Var};

use crate::config::{OptimizerKind, OptimizerSection};

/// One parameter and its optimizer state.
struct Slot {
    var: Var,
    /// Adam's first moment or SGD's momentum buffer (None until the first step, as PyTorch).
    first: Option<Tensor>,
    /// Adam's second moment.
    second: Option<Tensor>,
}

pub struct Optimizer {
    settings: OptimizerSection,
    slots: Vec<Slot>,
    step: i32,
    /// The fused kernel of the parameters' CUDA device (None: candle's path).
    #[cfg(feature = "cuda")]
    fused: Option<std::sync::Arc<super::cuda::optim::Fused>>,
}

impl Optimizer {
    pub fn new(vars: &[Var], settings: &OptimizerSection) -> Self {
        #[cfg(feature = "cuda")]
        {
            let mut o = Self::unfused(vars, settings);
            o.fused = vars
                .first()
                .and_then(|v| super::cuda::optim::Fused::for_device(v.device(), Self::agreement));
            o
        }
        #[cfg(not(feature = "cuda"))]
        Self::unfused(vars, settings)
    }

    /// candle's path on every device.
    fn unfused(vars: &[Var], settings: &OptimizerSection) -> Self {
        Optimizer {
            settings: settings.clone(),
            slots: vars
                .iter()
                .map(|v| Slot {
                    var: v.clone(),
                    first: None,
                    second: None,
                })
                .collect(),
            step: 0,
            #[cfg(feature = "cuda")]
            fused: None,
        }
    }

    /// What updates the weights, for the results.
    pub fn path(&self) -> &'static str {
        #[cfg(feature = "cuda")]
        if self.fused.is_some() {
            return "one fused multi-tensor kernel per step";
        }
        "candle tensor ops"
    }

    /// Backward from `loss`, then one update of every parameter that received a gradient.
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        let grads = loss.backward()?;
        self.apply(&grads)
    }

    fn apply(&mut self, grads: &GradStore) -> Result<()> {
        let grads: Vec<Option<Tensor>> = (self.slots.iter())
            .map(|s| grads.get(s.var.as_tensor()).cloned())
            .collect();
        self.update(&grads)
    }

    /// One step: each parameter by its gradient (`grads[i]` for the i-th; None: left alone).
    fn update(&mut self, grads: &[Option<Tensor>]) -> Result<()> {
        self.step += 1;
        #[cfg(feature = "cuda")]
        if let Some(fused) = self.fused.clone() {
            return self.update_fused(&fused, grads);
        }
        let o = &self.settings;
        let (lr, wd) = (o.lr, o.weight_decay);
        for (slot, g) in self.slots.iter_mut().zip(grads) {
            let Some(g) = g else {
                continue;
            };
            let p = slot.var.as_tensor();
            let next = match o.kind {
                OptimizerKind::Adam | OptimizerKind::Adamw => {
                    let [b1, b2] = o.betas;
                    // Adam: L2 added to the gradient; AdamW: the weights decay first.
                    let (g, p) = match o.kind {
                        OptimizerKind::Adam if wd != 0.0 => ((g + (p * wd)?)?, p.clone()),
                        OptimizerKind::Adamw if wd != 0.0 => (g.clone(), (p * (1.0 - lr * wd))?),
                        _ => (g.clone(), p.clone()),
                    };
                    let m = match &slot.first {
                        Some(m) => ((m * b1)? + (&g * (1.0 - b1))?)?,
                        None => (&g * (1.0 - b1))?,
                    };
                    let v = match &slot.second {
                        Some(v) => ((v * b2)? + (g.sqr()? * (1.0 - b2))?)?,
                        None => (g.sqr()? * (1.0 - b2))?,
                    };
                    let bc1 = 1.0 - b1.powi(self.step);
                    let bc2_sqrt = (1.0 - b2.powi(self.step)).sqrt();
                    let denom = ((v.sqrt()? / bc2_sqrt)? + o.eps)?;
                    let next = (p - ((&m / denom)? * (lr / bc1))?)?;
                    slot.first = Some(m);
                    slot.second = Some(v);
                    next
                }
                OptimizerKind::Sgd => {
                    let mut g = if wd != 0.0 {
                        (g + (p * wd)?)?
                    } else {
                        g.clone()
                    };
                    if o.momentum != 0.0 {
                        let buf = match &slot.first {
                            Some(b) => ((b * o.momentum)? + &g)?,
                            None => g.clone(),
                        };
                        g = if o.nesterov {
                            (g + (&buf * o.momentum)?)?
                        } else {
                            buf.clone()
                        };
                        slot.first = Some(buf);
                    }
                    (p - (g * lr)?)?
                }
            };
            slot.var.set(&next)?;
        }
        Ok(())
    }
}

#[cfg(feature = "cuda")]
impl Optimizer {
    /// The fused kernel's step: state buffers are zeroed on first use, which gives exactly
    /// PyTorch's first step (0 · β + x = x).
    fn update_fused(
        &mut self,
        fused: &super::cuda::optim::Fused,
        grads: &[Option<Tensor>],
    ) -> Result<()> {
        use super::cuda::optim::Update;
        use super::fused::Rule;
        let (first, second) = Rule::buffers(&self.settings);
        for (slot, g) in self.slots.iter_mut().zip(grads) {
            if g.is_none() {
                continue;
            }
            let p = slot.var.as_tensor();
            if first && slot.first.is_none() {
                slot.first = Some(p.zeros_like()?);
            }
            if second && slot.second.is_none() {
                slot.second = Some(p.zeros_like()?);
            }
        }
        let updates: Vec<Update> = (self.slots.iter().zip(grads))
            .filter_map(|(slot, g)| {
                Some(Update {
                    p: slot.var.as_tensor(),
                    g: g.as_ref()?,
                    m: slot.first.as_ref(),
                    v: slot.second.as_ref(),
                })
            })
            .collect();
        fused.step(&updates, Rule::at(&self.settings, self.step))
    }

    /// The largest relative difference between candle's path and `fused` after two steps of
    /// `settings` on parameters of `sizes` on `device` (the fused kernel's check).
    pub(super) fn agreement(
        device: &candle_core::Device,
        settings: &OptimizerSection,
        sizes: &[usize],
        fused: &super::cuda::optim::Fused,
    ) -> Result<f64> {
        let ramp = |n: usize, seed: f32| {
            let v: Vec<f32> = (0..n)
                .map(|i| ((i as f32 * 0.618 + seed).fract() - 0.5) * 0.2)
                .collect();
            Tensor::from_vec(v, n, device)
        };
        let vars = |seed: f32| -> Result<Vec<Var>> {
            sizes
                .iter()
                .map(|&n| Var::from_tensor(&ramp(n, seed)?))
                .collect()
        };
        let mut reference = Optimizer::unfused(&vars(0.1)?, settings);
        let mut candidate = Optimizer::unfused(&vars(0.1)?, settings);
        candidate.fused = Some(std::sync::Arc::new(fused.clone()));
        for step in 0..2 {
            let grads: Vec<Option<Tensor>> = (sizes.iter())
                .map(|&n| ramp(n, 0.3 + step as f32).map(Some))
                .collect::<Result<_>>()?;
            reference.update(&grads)?;
            candidate.update(&grads)?;
        }
        let mut worst = 0f64;
        for (a, b) in reference.slots.iter().zip(&candidate.slots) {
            let pairs = [
                (
                    Some(a.var.as_tensor().clone()),
                    Some(b.var.as_tensor().clone()),
                ),
                (a.first.clone(), b.first.clone()),
                (a.second.clone(), b.second.clone()),
            ];
            for (x, y) in pairs {
                let (Some(x), Some(y)) = (x, y) else {
                    continue;
                };
                let (x, y) = (x.to_vec1::<f32>()?, y.to_vec1::<f32>()?);
                for (x, y) in x.iter().zip(&y) {
                    let d = f64::from((x - y).abs()) / (1e-3 + f64::from(x.abs()));
                    worst = if d.is_nan() {
                        f64::INFINITY
                    } else {
                        worst.max(d)
                    };
                }
            }
        }
        Ok(worst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::fused::{Rule, emulate};
    use candle_core::Device;

    fn ramp(n: usize, seed: f32) -> Vec<f32> {
        (0..n)
            .map(|i| ((i as f32 * 0.618 + seed).fract() - 0.5) * 0.2)
            .collect()
    }

    /// The fused kernel's arithmetic (emulated on the host) against candle's path on the CPU:
    /// three steps of every rule, parameters and state alike, to the last bit.
    #[test]
    fn the_fused_kernel_s_arithmetic_is_candle_s_path_bit_for_bit() {
        let n = 1000;
        let rules = [
            (OptimizerKind::Adam, 0.0, 0.0, false),
            (OptimizerKind::Adam, 0.01, 0.0, false),
            (OptimizerKind::Adamw, 0.01, 0.0, false),
            (OptimizerKind::Sgd, 0.0, 0.0, false),
            (OptimizerKind::Sgd, 0.01, 0.9, false),
            (OptimizerKind::Sgd, 0.01, 0.9, true),
        ];
        for (kind, weight_decay, momentum, nesterov) in rules {
            let settings = OptimizerSection {
                kind,
                lr: 0.01,
                weight_decay,
                momentum,
                nesterov,
                ..OptimizerSection::default()
            };
            let var = Var::from_vec(ramp(n, 0.1), n, &Device::Cpu).unwrap();
            let mut o = Optimizer::unfused(std::slice::from_ref(&var), &settings);
            let (mut p, mut m, mut v) = (ramp(n, 0.1), vec![0f32; n], vec![0f32; n]);
            for step in 1..=3 {
                let g = ramp(n, 0.3 * step as f32);
                let gt = Tensor::from_vec(g.clone(), n, &Device::Cpu).unwrap();
                o.update(&[Some(gt)]).unwrap();
                emulate(Rule::at(&settings, step), &mut p, &g, &mut m, &mut v);
            }
            let what = format!("{kind:?} wd {weight_decay} momentum {momentum} {nesterov}");
            let got = var.as_tensor().to_vec1::<f32>().unwrap();
            assert_eq!(got, p, "{what}: parameters");
            let slot = &o.slots[0];
            if let Some(first) = &slot.first {
                assert_eq!(first.to_vec1::<f32>().unwrap(), m, "{what}: first buffer");
            }
            if let Some(second) = &slot.second {
                assert_eq!(second.to_vec1::<f32>().unwrap(), v, "{what}: second moment");
            }
        }
    }
}
