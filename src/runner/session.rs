//! What every run kind begins with: the condition's loader started, the model and optimizer
//! reset to the common initial state, and the untimed warm-up.

use std::sync::atomic::Ordering;

use indicatif::ProgressBar;

use super::setup::Setup;
use super::{INTERRUPTED, RunError};
use crate::loader::{Batch, Loader, LoaderError};
use crate::train::{DeviceClock, DeviceStep, Loss, OnDevice};

/// A run in progress: one condition's loader and trainer.
pub(super) struct Session<'a> {
    pub setup: &'a Setup,
    /// None once stopped ([`Session::stop_loader`]).
    loader: Option<Loader>,
    trainer: &'a mut DeviceStep,
    /// Worker start-up, measured apart from every step.
    pub startup_ms: f64,
    /// Names the run in a loader error ("3/6", or "profiled").
    run: String,
    condition: String,
}

impl<'a> Session<'a> {
    /// Start rank 0's loader (the only rank without `[distributed]`) and reset the trainer.
    pub fn start(
        setup: &'a Setup,
        trainer: &'a mut DeviceStep,
        run: String,
        condition: &str,
    ) -> Result<Session<'a>, RunError> {
        Self::start_rank(setup, 0, trainer, run, condition)
    }

    /// Start rank `rank`'s loader and reset its device's trainer.
    pub fn start_rank(
        setup: &'a Setup,
        rank: usize,
        trainer: &'a mut DeviceStep,
        run: String,
        condition: &str,
    ) -> Result<Session<'a>, RunError> {
        crate::train::set_tf32(setup.settings().device.tf32);
        let loader = setup
            .loader(rank)
            .map_err(|source| loader_error(&run, condition, source))?;
        let startup_ms = loader.startup().as_secs_f64() * 1e3;
        trainer.reset()?;
        Ok(Session {
            setup,
            loader: Some(loader),
            trainer,
            startup_ms,
            run,
            condition: condition.to_string(),
        })
    }

    /// The next batch, ready to upload; a loader failure names the run and condition.
    pub fn next_batch(&mut self) -> Result<Next<'_>, RunError> {
        let (run, condition) = (&self.run, &self.condition);
        let Some(loader) = self.loader.as_mut() else {
            return Err(loader_error(run, condition, LoaderError::Stopped));
        };
        let batch = loader
            .next_batch()
            .map_err(|source| loader_error(run, condition, source))?;
        Ok(Next {
            batch,
            device: self.trainer,
        })
    }

    /// What the loader's stage clocks measured (a profiled run's window).
    pub fn stage_totals(&self) -> Option<crate::loader::StageTotals> {
        self.loader.as_ref().map(Loader::stage_totals)
    }

    /// Stop the loader and join its workers (the headroom run replays batches without it).
    pub fn stop_loader(&mut self) {
        self.loader = None;
    }

    /// One training step on a batch already on the device. A network's CPU step runs on the
    /// condition's compute pool; on CUDA on this thread, which holds the device's context;
    /// the stand-in's is only enqueued.
    pub fn step(&mut self, on: &OnDevice) -> Result<Loss, RunError> {
        let pool = (self.setup.workload.device.holds_cores()).then_some(&*self.setup.pool);
        Ok(self.trainer.step(on, pool)?)
    }

    /// Wait until the device has finished every step enqueued.
    pub fn synchronize(&self) -> Result<(), RunError> {
        Ok(self.trainer.synchronize()?)
    }

    /// Per-step device marks where the device keeps its own clock.
    pub fn clock(&self) -> DeviceClock {
        self.trainer.clock()
    }

    /// The untimed warm-up: `steps` full steps (stopping early on Ctrl-C), then wait until the
    /// device is idle so the timed window starts clean.
    pub fn warm_up(&mut self, steps: u64, bar: &ProgressBar) -> Result<(), RunError> {
        for _ in 0..steps {
            let on = self.upload_next()?;
            self.step(&on)?;
            bar.inc(1);
            if INTERRUPTED.load(Ordering::SeqCst) {
                break;
            }
        }
        self.synchronize()
    }

    /// The next batch, copied to the device.
    pub fn upload_next(&mut self) -> Result<OnDevice, RunError> {
        self.next_batch()?.upload()
    }
}

/// A batch from the loader and the device it goes to.
pub(super) struct Next<'a> {
    pub batch: &'a Batch,
    device: &'a DeviceStep,
}

impl Next<'_> {
    /// The batch copied to the device.
    pub fn upload(&self) -> Result<OnDevice, RunError> {
        Ok(self.device.upload(self.batch)?)
    }
}

fn loader_error(run: &str, condition: &str, source: LoaderError) -> RunError {
    RunError::Loader {
        run: run.to_string(),
        condition: condition.to_string(),
        source,
    }
}
