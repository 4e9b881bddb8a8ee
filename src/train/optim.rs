//! The optimizers, with PyTorch's update rules (its single-tensor implementations, in its order
//! of operations), on candle tensors so the same code runs on every device.

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
}

impl Optimizer {
    pub fn new(vars: &[Var], settings: &OptimizerSection) -> Self {
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
        }
    }

    /// Backward from `loss`, then one update of every parameter that received a gradient.
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        let grads = loss.backward()?;
        self.apply(&grads)
    }

    fn apply(&mut self, grads: &GradStore) -> Result<()> {
        self.step += 1;
        let o = &self.settings;
        let (lr, wd) = (o.lr, o.weight_decay);
        for slot in &mut self.slots {
            let Some(g) = grads.get(slot.var.as_tensor()) else {
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
