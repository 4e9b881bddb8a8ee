//! A headroom run (SPDL's "headspace analysis"): the condition's step trained on batches that
//! are already on the device, built once by its own loader and replayed, so the loop does no
//! loader work at all. Its throughput is the ceiling the condition would reach if data were
//! free. Never part of the speed figures. The runner runs one per round per condition, each
//! with its share of `protocol.headroom_steps`, and joins them into one record.
//!
//! Invariant: it starts from the common initial state like every run, and nothing it times
//! touches the loader: the batches are built, copied and the device synchronised first.

use std::sync::atomic::Ordering;
use std::time::Instant;

use super::session::Session;
use super::setup::Setup;
use super::{INTERRUPTED, RunError};
use crate::results::HeadroomRecord;
use crate::train::{DeviceStep, OnDevice};

/// At most this many distinct batches are built and replayed (memory stays small; one batch
/// would do, a few keep the step from seeing one batch only).
pub const HEADROOM_BATCHES: u64 = 4;

/// The timed steps are timed in this many segments; the ceiling is their median rate.
pub const HEADROOM_SEGMENTS: u64 = 3;

/// Untimed replayed steps before the timed ones (the model is warm from the timed runs; these
/// only settle the replay loop itself).
pub const HEADROOM_WARMUP: u64 = 3;

/// Run `steps` headroom steps (a round's share of `protocol.headroom_steps`); `None` when
/// interrupted before it finished.
pub(super) fn run(
    condition: &str,
    setup: &Setup,
    trainer: &mut DeviceStep,
    steps: u64,
) -> Result<Option<HeadroomRecord>, RunError> {
    let mut session = Session::start(setup, trainer, "headroom".into(), condition)?;
    let mut batches: Vec<(OnDevice, usize)> = Vec::new();
    for _ in 0..steps.clamp(1, HEADROOM_BATCHES) {
        let next = session.next_batch()?;
        let (n, on) = (next.batch.len, next.upload()?);
        // The copy must have landed before the loader reuses its (possibly pinned) buffer.
        session.synchronize()?;
        batches.push((on, n));
    }
    // Stop the loader: the replay must not share the cores with its workers.
    session.stop_loader();
    for k in 0..HEADROOM_WARMUP {
        session.step(&batches[k as usize % batches.len()].0)?;
    }
    session.synchronize()?;
    let mut step_ms = Vec::with_capacity(steps as usize);
    let mut segments = Vec::new();
    let mut images = 0u64;
    let window = Instant::now();
    let mut k = 0u64;
    for segment in 0..HEADROOM_SEGMENTS.min(steps) {
        // Steps split as evenly as the count allows.
        let end = steps * (segment + 1) / HEADROOM_SEGMENTS.min(steps);
        let (start, first_step, first_images) = (Instant::now(), k, images);
        while k < end {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Ok(None);
            }
            let (on, n) = &batches[k as usize % batches.len()];
            let t0 = Instant::now();
            session.step(on)?;
            step_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            images += *n as u64;
            k += 1;
        }
        session.synchronize()?;
        segments.push((
            end - first_step,
            images - first_images,
            start.elapsed().as_secs_f64(),
        ));
    }
    let elapsed_s = window.elapsed().as_secs_f64();
    Ok(Some(HeadroomRecord {
        batches: batches.len(),
        steps,
        images,
        elapsed_s,
        step_ms,
        segments,
    }))
}
