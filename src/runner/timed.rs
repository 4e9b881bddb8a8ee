//! A timed run: warm-up, then every step timed on a monotonic clock and written to `steps.csv`
//! as it is measured (on the CPU; on CUDA after the window, once the device's events are read).

use crate::config::{PageCache, ProtocolSection};
use crate::data::page_cache;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::outcome::{Timed, Window, finish};
use super::resources::Meter;
use super::session::Session;
use super::setup::Setup;
use super::{INTERRUPTED, Outputs, RunError};
use crate::plan::PlannedRun;
use crate::results::StepRecord;
use crate::train::{DeviceClock, DeviceStep, Loss};

pub(super) fn ms(a: Instant, b: Instant) -> f64 {
    (b - a).as_secs_f64() * 1e3
}

/// One timed run of `planned` under the experiment's `protocol`.
pub(super) fn run(
    planned: &PlannedRun,
    total_runs: usize,
    p: &ProtocolSection,
    setup: &Setup,
    trainer: &mut DeviceStep,
    out: &mut Outputs,
) -> Result<Timed, RunError> {
    let label = format!("run {}/{total_runs}", planned.index + 1);
    let mut session = Session::start(setup, trainer, label.clone(), &planned.condition)?;
    let bar = out.reporter.progress(p.warmup_steps + p.timed_steps);
    let title = format!("{label} {} (round {})", planned.condition, planned.round);
    bar.set_message(format!("{title} warm-up"));
    session.warm_up(p.warmup_steps, &bar)?;

    // The timed window: from the first timed batch request to the device being idle.
    let mut rows: Vec<StepRecord> = Vec::with_capacity(p.timed_steps as usize);
    let mut losses: Vec<Loss> = Vec::new();
    let mut images: u64 = 0;
    let mut interrupted = false;
    let resident = prepare_page_cache(setup);
    let mut clock = session.clock();
    clock.anchor()?;
    let meter = Meter::start();
    let window = Instant::now();
    let stream_now = !clock.on_device();
    for step in 0..p.timed_steps as usize {
        if INTERRUPTED.load(Ordering::SeqCst) {
            interrupted = true;
            break;
        }
        let (mut row, loss, n) = one_step(&mut session, &mut clock, planned, step)?;
        images += n as u64;
        if stream_now {
            // On the CPU the loss is already computed: reading it costs nothing.
            row.loss = loss.read()?;
            out.step(&row)?;
        } else {
            losses.push(loss);
        }
        rows.push(row);
        bar.inc(1);
        // The message is formatted inside the timed window: only every tenth step, and not at
        // all when the bar is hidden (--quiet).
        let so_far = window.elapsed().as_secs_f64();
        if step % 10 == 0 && !bar.is_hidden() && so_far > 0.0 {
            bar.set_message(format!("{title} {:.0} img/s", images as f64 / so_far));
        }
    }
    session.synchronize()?;
    let elapsed_s = window.elapsed().as_secs_f64();
    let used = meter.stop();
    bar.finish_and_clear();
    if !stream_now {
        // On CUDA the rows wait for the device's event times and the losses, read only now
        // (the stand-in's device keeps its own times too).
        let marks = clock.read()?;
        for (k, (row, loss)) in rows.iter_mut().zip(&losses).enumerate() {
            row.loss = loss.read()?;
            row.device_ms = marks.get(k).map_or(f64::NAN, |m| m.busy_ms());
            out.step(row)?;
        }
    }
    let window = Window {
        startup_ms: session.startup_ms,
        elapsed_s,
        images,
        interrupted,
        used,
        resident,
    };
    finish(planned, setup, window, out)
}

/// The page cache under the dataset's files as a window opens: dropped first when
/// `dataset.page_cache = "cold"`, filled first when "warm" (the workers may already be reading
/// ahead meanwhile); the share resident then (NaN for a dataset held in memory).
pub(super) fn prepare_page_cache(setup: &Setup) -> f64 {
    let files = setup.data.dataset.storage().files();
    match setup.settings().dataset.page_cache {
        PageCache::Cold => {
            page_cache::evict(&files);
        }
        PageCache::Warm => page_cache::warm(&files),
        PageCache::AsIs => {}
    }
    page_cache::resident(&files).unwrap_or(f64::NAN)
}

/// One timed step: the batch request, the copy to the device and the training step, each on
/// the monotonic clock (and marked on the device's clock where it has one).
pub(super) fn one_step(
    session: &mut Session,
    clock: &mut DeviceClock,
    planned: &PlannedRun,
    step: usize,
) -> Result<(StepRecord, Loss, usize), RunError> {
    let t0 = Instant::now();
    let next = session.next_batch()?;
    let t1 = Instant::now();
    let batch = next.batch;
    let (fingerprint, epoch, n) = (batch.fingerprint, batch.epoch, batch.len);
    clock.mark()?;
    let on = next.upload()?;
    let t2 = Instant::now();
    clock.mark()?;
    let loss = session.step(&on)?;
    clock.mark()?;
    let t3 = Instant::now();
    let row = StepRecord {
        batch_wait_ms: ms(t0, t1),
        h2d_ms: ms(t1, t2),
        compute_ms: ms(t2, t3),
        step_ms: ms(t0, t3),
        fingerprint,
        epoch,
        // Replaced by the device's own figure after the window where it has a clock.
        device_ms: ms(t1, t3),
        ..StepRecord::unmeasured(planned, step)
    };
    Ok((row, loss, n))
}
