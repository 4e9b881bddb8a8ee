//! A timed run of a node (`[distributed] ranks = R`): R ranks in one process, each on its own
//! host thread with its own loader (its own workers and buffers, over its own share of every
//! epoch) and its own device — an emulated one on the CPU, on CUDA its own GPU (rank r on
//! ordinal `device.ordinal + r`, with its own pinned buffers) — meeting at a barrier after every
//! step: the stand-in for the gradient all-reduce, which on a real node holds every rank's step
//! until the slowest rank's has arrived. A real network on GPUs trains one copy per rank, all
//! from the same initial weights; no gradients are exchanged.
//!
//! Each rank's step is timed as a single process's is ([`super::timed::one_step`]); its wait
//! at the barrier after the step is `sync_ms`, inside its `step_ms`. The window opens on every
//! rank at once (two barrier crossings around rank 0's page-cache work and meter start) and
//! closes when every rank's device has finished. On a real node the fast ranks' lost time
//! lands wherever their host first synchronises with the device (a full launch queue, a
//! `loss.item()`); here it is collected at the barrier, so that it is told apart from the
//! waiting for data.

use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

use indicatif::ProgressBar;

use super::outcome::{Timed, Window, finish};
use super::resources::{Meter, Used};
use super::session::Session;
use super::setup::Setup;
use super::timed::{ms, one_step, prepare_page_cache};
use super::{INTERRUPTED, Outputs, RunError};
use crate::config::ProtocolSection;
use crate::plan::PlannedRun;
use crate::results::StepRecord;
use crate::train::{DeviceStep, Loss};

/// The barrier after every step. The last rank to arrive decides whether the run stops (a
/// Ctrl-C), so every rank leaves at the same step; a rank that fails breaks the barrier, which
/// releases the others instead of leaving them waiting for ever.
struct StepBarrier {
    ranks: usize,
    state: Mutex<BarrierState>,
    turned: Condvar,
}

#[derive(Default)]
struct BarrierState {
    arrived: usize,
    generation: u64,
    stop: bool,
    broken: bool,
}

impl StepBarrier {
    fn new(ranks: usize) -> Self {
        StepBarrier {
            ranks,
            state: Mutex::new(BarrierState::default()),
            turned: Condvar::new(),
        }
    }

    /// Wait for every rank; true when the run stops here (interrupted, or a rank failed).
    fn wait(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if s.broken {
            return true;
        }
        s.arrived += 1;
        if s.arrived == self.ranks {
            s.arrived = 0;
            s.generation += 1;
            s.stop = INTERRUPTED.load(Ordering::SeqCst);
            self.turned.notify_all();
            return s.stop;
        }
        let generation = s.generation;
        while s.generation == generation && !s.broken {
            s = self.turned.wait(s).unwrap_or_else(PoisonError::into_inner);
        }
        s.stop || s.broken
    }

    /// Release every rank waiting now or later: one has failed.
    fn breaks(&self) {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .broken = true;
        self.turned.notify_all();
    }
}

/// What one rank measured.
struct RankDone {
    rows: Vec<StepRecord>,
    images: u64,
    startup_ms: f64,
    interrupted: bool,
    /// Rank 0's: the window's elapsed time, resources and page-cache residency.
    window: Option<(f64, Used, f64)>,
}

/// What every rank's thread shares.
struct Shared<'a> {
    planned: &'a PlannedRun,
    p: &'a ProtocolSection,
    setup: &'a Setup,
    label: String,
    barrier: StepBarrier,
    bar: &'a ProgressBar,
}

/// One timed run of `planned` on a node of `devices.len()` ranks.
pub(super) fn run(
    planned: &PlannedRun,
    total_runs: usize,
    p: &ProtocolSection,
    setup: &Setup,
    devices: &mut [DeviceStep],
    out: &mut Outputs,
) -> Result<Timed, RunError> {
    let label = format!("run {}/{total_runs}", planned.index + 1);
    let bar = out.reporter.progress(p.warmup_steps + p.timed_steps);
    bar.set_message(format!(
        "{label} {} (round {}, {} ranks)",
        planned.condition,
        planned.round,
        devices.len()
    ));
    let shared = Shared {
        planned,
        p,
        setup,
        label,
        barrier: StepBarrier::new(devices.len()),
        bar: &bar,
    };
    let done: Vec<Result<RankDone, RunError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter_mut()
            .enumerate()
            .map(|(rank, device)| {
                let shared = &shared;
                std::thread::Builder::new()
                    .name(format!("rank-{rank}"))
                    .spawn_scoped(scope, move || {
                        let done = rank_run(shared, rank, device);
                        if done.is_err() {
                            shared.barrier.breaks();
                        }
                        done
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or_else(|_| {
                    shared.barrier.breaks();
                    Err(RunError::Rank("a rank's thread panicked".into()))
                }),
                Err(e) => {
                    shared.barrier.breaks();
                    Err(RunError::Rank(format!("cannot start a rank's thread: {e}")))
                }
            })
            .collect()
    });
    bar.finish_and_clear();
    let done: Vec<RankDone> = done.into_iter().collect::<Result<_, _>>()?;
    // Rows by step, then rank.
    let mut rows: Vec<&StepRecord> = done.iter().flat_map(|d| &d.rows).collect();
    rows.sort_by_key(|r| (r.step, r.rank));
    for row in rows {
        out.step(row)?;
    }
    let (elapsed_s, used, resident) = done[0].window.unwrap_or((0.0, Used::NONE, f64::NAN));
    let window = Window {
        startup_ms: done.iter().map(|d| d.startup_ms).fold(0.0, f64::max),
        elapsed_s,
        images: done.iter().map(|d| d.images).sum(),
        interrupted: done.iter().any(|d| d.interrupted),
        used,
        resident,
    };
    finish(planned, setup, window, out)
}

/// Rank `rank`'s part of the run: its warm-up, then its timed steps, each followed by the
/// barrier; rank 0 also opens and closes the window.
fn rank_run(sh: &Shared, rank: usize, device: &mut DeviceStep) -> Result<RankDone, RunError> {
    let (planned, p) = (sh.planned, sh.p);
    let run = format!("{} rank {rank}", sh.label);
    let mut session = Session::start_rank(sh.setup, rank, device, run, &planned.condition)?;
    let hidden = ProgressBar::hidden();
    let bar = if rank == 0 { sh.bar } else { &hidden };
    let mut interrupted = false;
    for _ in 0..p.warmup_steps {
        let on = session.upload_next()?;
        session.step(&on)?;
        bar.inc(1);
        if sh.barrier.wait() {
            interrupted = true;
            break;
        }
    }
    session.synchronize()?;
    // Every rank warm; rank 0 prepares the page cache and starts the meter; all start at once.
    interrupted |= sh.barrier.wait();
    let (resident, meter) = if rank == 0 {
        (prepare_page_cache(sh.setup), Some(Meter::start()))
    } else {
        (f64::NAN, None)
    };
    let mut clock = session.clock();
    clock.anchor()?;
    interrupted |= sh.barrier.wait();
    let window = Instant::now();
    let mut rows = Vec::with_capacity(p.timed_steps as usize);
    let mut losses: Vec<Loss> = Vec::new();
    let mut images = 0u64;
    for step in 0..p.timed_steps as usize {
        if interrupted {
            break;
        }
        let (mut row, loss, n) = one_step(&mut session, &mut clock, planned, step)?;
        let arrived = Instant::now();
        interrupted = sh.barrier.wait();
        row.sync_ms = ms(arrived, Instant::now());
        row.step_ms += row.sync_ms;
        row.rank = rank;
        images += n as u64;
        rows.push(row);
        losses.push(loss);
        bar.inc(1);
    }
    session.synchronize()?;
    // The window closes when every rank's device has finished.
    sh.barrier.wait();
    let elapsed_s = window.elapsed().as_secs_f64();
    let used = meter.map(Meter::stop);
    let marks = clock.read()?;
    for (k, (row, loss)) in rows.iter_mut().zip(&losses).enumerate() {
        row.loss = loss.read()?;
        if clock.on_device() {
            row.device_ms = marks.get(k).map_or(f64::NAN, |m| m.busy_ms());
        }
    }
    Ok(RankDone {
        rows,
        images,
        startup_ms: session.startup_ms,
        interrupted,
        window: used.map(|used| (elapsed_s, used, resident)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn the_barrier_holds_every_rank_until_the_last_and_a_failure_releases_them() {
        let barrier = StepBarrier::new(3);
        let passed = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    assert!(!barrier.wait());
                    passed.fetch_add(1, Ordering::SeqCst);
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(30));
            assert_eq!(passed.load(Ordering::SeqCst), 0, "two of three arrived");
            assert!(!barrier.wait());
        });
        assert_eq!(passed.load(Ordering::SeqCst), 2);
        // A broken barrier releases a waiting rank, and every later wait, with "stop".
        std::thread::scope(|s| {
            let waiting = s.spawn(|| barrier.wait());
            std::thread::sleep(std::time::Duration::from_millis(30));
            barrier.breaks();
            assert!(waiting.join().unwrap());
        });
        assert!(barrier.wait());
    }
}
