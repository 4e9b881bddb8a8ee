//! Training: the model, the optimizer, the device, and one step.
//!
//! The runner only sees [`Trainer`]: `reset` to the common initial state, `step` on a batch
//! already on the device. A faster CPU implementation of the layers slots in behind it.

mod device;
mod model;

pub use device::{Chosen, DeviceError, cores, select, synchronize};
pub use model::{InitialWeights, PARAMS, SmallCnn};

use candle_core::{Device, Result, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};

use crate::config::OptimizerSection;

/// Model + Adam, restartable from the same initial state.
pub struct Trainer {
    init: InitialWeights,
    params: ParamsAdamW,
    device: Device,
    model: SmallCnn,
    optimizer: AdamW,
}

impl Trainer {
    pub fn new(init: InitialWeights, opt: &OptimizerSection, device: Device) -> Result<Self> {
        // AdamW with weight decay 0 is Adam with bias correction (PyTorch's Adam).
        let params = ParamsAdamW {
            lr: opt.lr,
            beta1: opt.betas[0],
            beta2: opt.betas[1],
            eps: opt.eps,
            weight_decay: 0.0,
        };
        let model = SmallCnn::new(&init, &device)?;
        let optimizer = AdamW::new(model.vars().to_vec(), params.clone())?;
        Ok(Trainer {
            init,
            params,
            device,
            model,
            optimizer,
        })
    }

    /// Back to the initial weights and a fresh optimizer state (zero moments, step 0).
    pub fn reset(&mut self) -> Result<()> {
        self.model = SmallCnn::new(&self.init, &self.device)?;
        self.optimizer = AdamW::new(self.model.vars().to_vec(), self.params.clone())?;
        Ok(())
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn model(&self) -> &SmallCnn {
        &self.model
    }

    /// Forward, cross-entropy loss, backward and one Adam step. Returns the loss tensor
    /// (read it after timing: on CUDA reading it waits for the device).
    pub fn step(&mut self, images: &Tensor, labels: &Tensor) -> Result<Tensor> {
        let logits = self.model.forward(images)?;
        let loss = candle_nn::loss::cross_entropy(&logits, labels)?;
        self.optimizer.backward_step(&loss)?;
        Ok(loss)
    }
}
