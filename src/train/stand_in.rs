//! The stand-in step: an emulated device that stays busy for a declared time per batch, so a
//! run answers for the user's own step time (`model.kind = "stand_in"`, `model.step_ms`)
//! instead of a network trained on the cores the loader needs.
//!
//! What the emulation assumes, as the report and the README state it:
//! - The batch reaches the device as on candle's CPU path: the host copies it into device
//!   memory (`h2d_ms`, host time). The device reads every byte of it at the start of the step
//!   (a checksum), so the copy cannot be skipped.
//! - Then the host only enqueues the step and goes on, as a CUDA host does. It waits only where
//!   a CUDA host would: when [`QUEUE_DEPTH`] steps already wait behind the running one, and at
//!   a synchronisation (the end of a timed window, before a reset).
//! - A device thread runs the steps in order and sleeps while busy: it holds no core, so the
//!   loader's workers have every core the machine has.
//! - Time follows the device's own schedule, not the thread's wake-ups: a step begins when it
//!   was enqueued or when the previous one ended, whichever is later, and ends `step_ms` after
//!   that (or when the read finished, if that is later) — as a GPU starts the next kernel the
//!   moment the last one retires. The thread's wake-up latency (tens of µs) only delays when
//!   the host learns that a step finished.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use candle_core::{Error, Result};

use super::marks::StepMarks;
use crate::loader::Batch;

/// Steps that may wait behind the running one before the host's enqueue blocks.
pub const QUEUE_DEPTH: usize = 2;

/// A batch in the emulated device's memory.
#[derive(Clone)]
pub struct DeviceBatch {
    images: Arc<[f32]>,
    labels: Arc<[u32]>,
}

impl DeviceBatch {
    /// The host's copy of `batch` into device memory.
    pub fn upload(batch: &Batch) -> DeviceBatch {
        DeviceBatch {
            images: Arc::from(batch.images()),
            labels: Arc::from(batch.labels()),
        }
    }

    /// What the device computes from every byte it reads.
    fn checksum(&self) -> u32 {
        let images = self
            .images
            .iter()
            .fold(0u32, |a, x| a.wrapping_add(x.to_bits()));
        self.labels.iter().fold(images, |a, &l| a.wrapping_add(l))
    }
}

struct Job {
    batch: DeviceBatch,
    enqueued: Instant,
}

/// When the device ran one step (host instants).
#[derive(Clone, Copy)]
struct Ran {
    start: Instant,
    read: Instant,
    end: Instant,
}

#[derive(Default)]
struct State {
    enqueued: u64,
    done: u64,
    /// Every finished step's times since [`Clock::anchor`], while recording.
    recording: bool,
    ran: Vec<Ran>,
    /// Folded over every batch read, so the reads have an observable result.
    checksum: u32,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The device thread never panics while holding the lock (it only adds numbers), so a
        // poisoned lock still holds consistent counts.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The emulated device: its queue and its thread.
pub struct StandIn {
    step: Duration,
    queue: Option<SyncSender<Job>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl StandIn {
    /// A device busy for `step_ms` per step; `step_ms` is validated positive and finite.
    pub fn new(step_ms: f64) -> Result<StandIn> {
        let step = Duration::try_from_secs_f64(step_ms / 1e3)
            .map_err(|e| Error::Msg(format!("model.step_ms = {step_ms}: {e}")))?;
        let shared = Arc::new(Shared::default());
        let (queue, jobs) = sync_channel(QUEUE_DEPTH);
        let device = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("stand-in device".into())
            .spawn(move || run_device(jobs, step, &device))
            .map_err(|e| Error::Msg(format!("cannot start the emulated device's thread: {e}")))?;
        Ok(StandIn {
            step,
            queue: Some(queue),
            shared,
            thread: Some(thread),
        })
    }

    /// The declared device time of one step.
    pub fn step_time(&self) -> Duration {
        self.step
    }

    /// Enqueue one step on `batch`; blocks only while [`QUEUE_DEPTH`] steps wait.
    pub fn enqueue(&self, batch: &DeviceBatch) -> Result<()> {
        let job = Job {
            batch: batch.clone(),
            enqueued: Instant::now(),
        };
        self.shared.lock().enqueued += 1;
        let sent = self.queue.as_ref().map(|q| q.send(job));
        if !matches!(sent, Some(Ok(()))) {
            self.shared.lock().enqueued -= 1;
            return Err(Error::Msg("the emulated device has stopped".into()));
        }
        Ok(())
    }

    /// Wait until every enqueued step has finished.
    pub fn synchronize(&self) -> Result<()> {
        let mut state = self.shared.lock();
        while state.done < state.enqueued {
            if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
                return Err(Error::Msg("the emulated device has stopped".into()));
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, Duration::from_millis(100))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        Ok(())
    }

    /// The device's own record of when each step ran.
    pub fn clock(&self) -> Clock {
        Clock {
            shared: Arc::clone(&self.shared),
            anchor: Instant::now(),
        }
    }

    /// What the device read, folded into one number (a test's proof that it read).
    pub fn checksum(&self) -> u32 {
        self.shared.lock().checksum
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        // Closing the queue ends the thread once it has run what was enqueued.
        self.queue = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run_device(jobs: Receiver<Job>, step: Duration, shared: &Shared) {
    let mut free_at: Option<Instant> = None;
    while let Ok(job) = jobs.recv() {
        let start = free_at.map_or(job.enqueued, |t| t.max(job.enqueued));
        let sum = std::hint::black_box(job.batch.checksum());
        let read = Instant::now();
        let end = (start + step).max(read);
        let now = Instant::now();
        if end > now {
            std::thread::sleep(end - now);
        }
        free_at = Some(end);
        drop(job);
        let mut state = shared.lock();
        state.done += 1;
        state.checksum = state.checksum.wrapping_add(sum);
        if state.recording {
            state.ran.push(Ran { start, read, end });
        }
        drop(state);
        shared.changed.notify_all();
    }
}

/// The emulated device's step marks, relative to an anchor taken while it is idle.
pub struct Clock {
    shared: Arc<Shared>,
    anchor: Instant,
}

impl Clock {
    /// Start recording; the device must be idle (synchronised).
    pub fn anchor(&mut self) {
        let mut state = self.shared.lock();
        state.ran.clear();
        state.recording = true;
        self.anchor = Instant::now();
    }

    /// Every step finished since the anchor; call after synchronising. Stops recording.
    pub fn read(&mut self) -> Vec<StepMarks> {
        let mut state = self.shared.lock();
        state.recording = false;
        let ms = |t: Instant| t.saturating_duration_since(self.anchor).as_secs_f64() * 1e3;
        std::mem::take(&mut state.ran)
            .into_iter()
            .map(|r| StepMarks {
                copy_start_ms: ms(r.start),
                compute_start_ms: ms(r.read),
                end_ms: ms(r.end),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> DeviceBatch {
        DeviceBatch {
            images: (0..n).map(|i| i as f32).collect(),
            labels: (0..16).collect(),
        }
    }

    /// CPU time of the calling thread.
    fn thread_cpu() -> Duration {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid, writable timespec for the call's duration.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        assert_eq!(rc, 0);
        Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
    }

    #[test]
    fn steps_follow_the_declared_time_and_the_host_holds_no_core_while_it_waits() {
        let device = StandIn::new(20.0).unwrap();
        let b = batch(200_000);
        let mut clock = device.clock();
        clock.anchor();
        let (wall, cpu) = (Instant::now(), thread_cpu());
        for _ in 0..10 {
            device.enqueue(&b).unwrap();
        }
        device.synchronize().unwrap();
        let (wall, cpu) = (wall.elapsed(), thread_cpu() - cpu);
        // 10 steps of 20 ms back to back: 200 ms on the device's schedule.
        let ms = wall.as_secs_f64() * 1e3;
        assert!(
            (199.0..215.0).contains(&ms),
            "{ms} ms for 10 steps of 20 ms"
        );
        // The host blocked in the queue and at the synchronisation without spinning.
        assert!(cpu < Duration::from_millis(10), "host thread used {cpu:?}");
        let marks = clock.read();
        assert_eq!(marks.len(), 10);
        for (k, m) in marks.iter().enumerate() {
            assert!(
                (m.busy_ms() - 20.0).abs() < 0.5,
                "step {k}: {:?}",
                m.busy_ms()
            );
            if k > 0 {
                // Back to back: each step starts when the last one ended.
                assert_eq!(m.copy_start_ms, marks[k - 1].end_ms);
            }
        }
        assert_eq!(device.checksum(), b.checksum().wrapping_mul(10));
    }

    #[test]
    #[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
    fn the_host_waits_only_when_the_queue_is_full() {
        let device = StandIn::new(30.0).unwrap();
        let b = batch(16);
        let t = Instant::now();
        // One runs, QUEUE_DEPTH wait: all enqueued at once.
        for _ in 0..=QUEUE_DEPTH {
            device.enqueue(&b).unwrap();
        }
        let free = t.elapsed();
        assert!(free < Duration::from_millis(15), "{free:?}");
        // The next waits for the first to finish (30 ms after it began).
        device.enqueue(&b).unwrap();
        let blocked = t.elapsed();
        assert!(blocked >= Duration::from_millis(29), "{blocked:?}");
        device.synchronize().unwrap();
        assert!(t.elapsed() >= Duration::from_millis(119));
    }

    #[test]
    #[ignore = "validation run: planted timing on real clocks (.ci/run: cargo test -- --ignored)"]
    fn an_idle_device_starts_a_step_when_it_is_enqueued() {
        let device = StandIn::new(5.0).unwrap();
        let mut clock = device.clock();
        clock.anchor();
        device.enqueue(&batch(16)).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        device.enqueue(&batch(16)).unwrap();
        device.synchronize().unwrap();
        let marks = clock.read();
        assert_eq!(marks.len(), 2);
        let gap = marks[1].copy_start_ms - marks[0].end_ms;
        assert!((14.0..30.0).contains(&gap), "idle gap {gap} ms");
    }
}
