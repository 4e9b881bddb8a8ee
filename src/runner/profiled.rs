//! A profiled run: its own loader and warm-up, then a short window recorded as a Chrome trace
//! (and, on CUDA, a GPU track from the device's events). Never part of the speed figures.

use super::outcome::Profiled;
use super::session::Session;
use super::setup::Setup;
use super::{Outputs, RunError};
use crate::config::ProtocolSection;
use crate::results::ComputeDevice;
use crate::results::{TRACES_DIR, trace_file_name};
use crate::trace::{self, Recording};
use crate::train::DeviceStep;

/// The profiled run of `condition` under the experiment's `protocol`.
pub(super) fn run(
    condition: &str,
    p: &ProtocolSection,
    setup: &Setup,
    trainer: &mut DeviceStep,
    out: &Outputs,
) -> Result<Profiled, RunError> {
    let file = format!("{TRACES_DIR}/{}", trace_file_name(condition));
    let path = out.partial.join(&file);
    let recording = Recording::create(&path)?;
    let mut session = Session::start(setup, trainer, "profiled".into(), condition)?;
    session.warm_up(p.warmup_steps, &indicatif::ProgressBar::hidden())?;
    let mut clock = session.clock();
    recording.start();
    if clock.on_device() {
        // The anchor event's device time is this span's host time: the GPU track is placed
        // relative to it.
        let _span = tracing::info_span!(trace::GPU_CLOCK_ANCHOR).entered();
        clock.anchor()?;
    }
    for _ in 0..p.profile_steps {
        let batch = {
            let _span = tracing::info_span!(trace::BATCH_WAIT).entered();
            session.next_batch()?
        };
        let on = {
            let _span = tracing::info_span!(trace::H2D_TRANSFER).entered();
            clock.mark()?;
            batch.upload()?
        };
        let _span = tracing::info_span!(trace::FORWARD_BACKWARD_ADAM).entered();
        clock.mark()?;
        session.step(&on)?;
        clock.mark()?;
    }
    session.synchronize()?;
    recording.stop();
    let startup_ms = session.startup_ms;
    let stages = session.stage_totals().filter(|s| s.batches > 0);
    drop(session);
    recording.finish()?;
    if clock.on_device() {
        let track = match setup.workload.device {
            ComputeDevice::Emulated => trace::EMULATED_TRACK,
            _ => trace::GPU_TRACK,
        };
        trace::add_gpu_track(&path, &clock.read()?, track)?;
    }
    Ok(Profiled {
        trace: file,
        startup_ms,
        stages,
    })
}
