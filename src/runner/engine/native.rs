//! The native engine: loaderlab's own loader (worker threads, its decoders and transforms) over
//! one device step per rank — a network's trainer (every rank from the same initial weights, as
//! DDP broadcasts rank 0's), or the stand-in's host side and device. Each run resets the step
//! to the common initial state.

use super::super::outcome::{Profiled, Timed};
use super::super::setup::{Setup, StandInStep, Step};
use super::super::{Outputs, RunError, headroom, profiled, ranks, timed};
use super::{Engine, Opening};
use crate::config::ProtocolSection;
use crate::plan::PlannedRun;
use crate::results::HeadroomRecord;
use crate::train::{DeviceStep, HostWork, InitialWeights, StandIn, Trainer};

/// One condition on loaderlab's own loader.
pub(crate) struct Native<'a> {
    setup: &'a Setup,
    condition: String,
    /// One device step per rank (rank 0's the only one without `[distributed]`).
    steps: Vec<DeviceStep>,
}

impl<'a> Native<'a> {
    /// The condition's device steps, one per rank, made now. Initial weights come from the
    /// experiment seed and the network alone, so conditions with the same model and input
    /// start from the same weights.
    pub(crate) fn open(o: Opening<'a>) -> Result<Self, RunError> {
        let w = &o.setup.workload;
        let mut steps = Vec::with_capacity(w.ranks());
        for rank in 0..w.ranks() {
            steps.push(match &w.step {
                Step::Network(net) => DeviceStep::Model(Box::new(Trainer::new(
                    InitialWeights::pytorch_default(o.seed, net.clone()),
                    &o.setup.settings().optimizer,
                    o.setup.device(rank).clone(),
                )?)),
                Step::StandIn(st) => stand_in(o.setup, rank, st)?,
            });
        }
        Ok(Native {
            setup: o.setup,
            condition: o.condition.to_string(),
            steps,
        })
    }
}

impl Engine for Native<'_> {
    fn timed(
        &mut self,
        planned: &PlannedRun,
        total_runs: usize,
        p: &ProtocolSection,
        out: &mut Outputs,
    ) -> Result<Timed, RunError> {
        match self.steps.as_mut_slice() {
            [one] => timed::run(planned, total_runs, p, self.setup, one, out),
            ranks => ranks::run(planned, total_runs, p, self.setup, ranks, out),
        }
    }

    fn headroom(&mut self, steps: u64) -> Result<Option<HeadroomRecord>, RunError> {
        headroom::run(&self.condition, self.setup, &mut self.steps[0], steps)
    }

    fn profiled(&mut self, p: &ProtocolSection, out: &Outputs) -> Result<Profiled, RunError> {
        profiled::run(&self.condition, p, self.setup, &mut self.steps[0], out)
    }
}

/// Rank `rank`'s stand-in step: its host side, then its device time (the all-reduce's added)
/// — on CUDA its kernel on the rank's GPU, elsewhere the emulated device, none when the step
/// is all host.
fn stand_in(setup: &Setup, rank: usize, st: &StandInStep) -> Result<DeviceStep, RunError> {
    let host = HostWork::new(st.host_ms, st.host_threads as usize)?;
    #[cfg(feature = "cuda")]
    if setup.workload.device == crate::results::ComputeDevice::Cuda {
        return Ok(DeviceStep::CudaStandIn(
            Box::new(crate::train::CudaStandIn::new(
                setup.device(rank),
                st.device_ms(),
            )?),
            host,
        ));
    }
    let _ = (setup, rank);
    let device = if st.all_host() {
        None
    } else {
        Some(StandIn::new(st.device_ms())?)
    };
    Ok(DeviceStep::StandIn(host, device))
}
