//! Per-stage loader timing for profiled runs, on the monotonic clock (about 25 ns a reading):
//! reading / decoding, every pixel op, to_tensor into the batch (per image, on one image in
//! [`STAGE_SAMPLE`]), the fingerprint and the whole build (per batch), and a worker's wait for
//! a free buffer (its queue full).
//!
//! Invariant: nothing is timed outside a profiled run, and trace spans never sit inside a
//! timed interval — a tracing-chrome span costs about 2 µs, as much as a whole stage, so the
//! figures come from these clocks and the spans only draw the trace.

use std::sync::Mutex;
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub use crate::spans::STAGE_SAMPLE;
use crate::spans::{FINGERPRINT, READ_DECODE, TO_TENSOR_INTO_BATCH};

/// What the stage clocks measured over a profiled run, all of the loader's threads together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageTotals {
    /// Stage names in order: read_decode, each pixel op, to_tensor_into_batch (per image),
    /// then fingerprint (per batch).
    pub stages: Vec<String>,
    /// Times each stage was timed.
    pub count: Vec<u64>,
    /// Their total, ns.
    pub ns: Vec<u64>,
    /// Batches built while timing, and their whole build time, ns.
    pub batches: u64,
    pub build_ns: u64,
    /// Waits of a worker for a free buffer (workers > 0 only) and their total, ns.
    pub queue_waits: u64,
    pub queue_full_ns: u64,
    /// One image in this many was timed stage by stage.
    pub sample_every: u64,
    /// Batches that waited for emulated storage, and that wait, ns (every batch timed).
    #[serde(default)]
    pub storage_batches: u64,
    #[serde(default)]
    pub storage_ns: u64,
    /// Batches whose build was also split by the kernel's scheduler statistics, and over them
    /// the build's wall time, its time on a CPU and its time runnable but waiting for one, ns
    /// (the rest was off the CPU: asleep on storage, a disk read, a lock).
    #[serde(default)]
    pub split_batches: u64,
    #[serde(default)]
    pub split_wall_ns: u64,
    #[serde(default)]
    pub split_cpu_ns: u64,
    #[serde(default)]
    pub split_runq_ns: u64,
    /// The pytorch engine with workers: batches timed from a worker's collate finishing to the
    /// training loop holding the batch (the pickled hand-off through shared memory, which the
    /// native engine does not have), and that time, ns.
    #[serde(default)]
    pub handoff_batches: u64,
    #[serde(default)]
    pub handoff_ns: u64,
}

impl StageTotals {
    /// Add `other`'s counts and times (a later pass of the same chain); `other`'s stages are
    /// taken where this holds none.
    pub fn absorb(&mut self, other: &StageTotals) {
        if self.stages.is_empty() {
            self.stages = other.stages.clone();
            self.count = vec![0; other.stages.len()];
            self.ns = vec![0; other.stages.len()];
        }
        if self.stages == other.stages {
            for i in 0..self.stages.len() {
                self.count[i] += other.count[i];
                self.ns[i] += other.ns[i];
            }
        }
        self.sample_every = self.sample_every.max(other.sample_every);
        for (a, b) in [
            (&mut self.batches, other.batches),
            (&mut self.build_ns, other.build_ns),
            (&mut self.queue_waits, other.queue_waits),
            (&mut self.queue_full_ns, other.queue_full_ns),
            (&mut self.storage_batches, other.storage_batches),
            (&mut self.storage_ns, other.storage_ns),
            (&mut self.split_batches, other.split_batches),
            (&mut self.split_wall_ns, other.split_wall_ns),
            (&mut self.split_cpu_ns, other.split_cpu_ns),
            (&mut self.split_runq_ns, other.split_runq_ns),
            (&mut self.handoff_batches, other.handoff_batches),
            (&mut self.handoff_ns, other.handoff_ns),
        ] {
            *a += b;
        }
    }

    /// The per-batch stage (the last one).
    pub fn is_per_batch(&self, i: usize) -> bool {
        i + 1 == self.stages.len()
    }
}

/// The totals every builder of one loader adds to (once per batch, so the lock is cold).
pub(super) struct StageClock {
    totals: Mutex<StageTotals>,
}

impl StageClock {
    pub fn new(op_names: &[&'static str]) -> Self {
        let mut stages = vec![READ_DECODE.to_string()];
        stages.extend(op_names.iter().map(|s| s.to_string()));
        stages.extend([TO_TENSOR_INTO_BATCH.to_string(), FINGERPRINT.to_string()]);
        let n = stages.len();
        StageClock {
            totals: Mutex::new(StageTotals {
                stages,
                count: vec![0; n],
                ns: vec![0; n],
                sample_every: STAGE_SAMPLE as u64,
                ..StageTotals::default()
            }),
        }
    }

    pub fn add_batch(&self, local: &LocalStages, build_ns: u64, sched: Option<(u64, u64)>) {
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        for (total, ns) in t.ns.iter_mut().zip(&local.ns) {
            *total += ns;
        }
        for (total, count) in t.count.iter_mut().zip(&local.count) {
            *total += count;
        }
        t.batches += 1;
        t.build_ns += build_ns;
        if let Some(ns) = local.storage_ns {
            t.storage_batches += 1;
            t.storage_ns += ns;
        }
        if let Some((cpu, runq)) = sched {
            t.split_batches += 1;
            t.split_wall_ns += build_ns;
            t.split_cpu_ns += cpu;
            t.split_runq_ns += runq;
        }
    }

    pub fn add_queue_wait(&self, ns: u64) {
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        t.queue_waits += 1;
        t.queue_full_ns += ns;
    }

    /// Start the counts afresh (the stages' names kept).
    pub fn reset(&self) {
        let mut t = self.totals.lock().unwrap_or_else(|e| e.into_inner());
        let n = t.stages.len();
        *t = StageTotals {
            stages: std::mem::take(&mut t.stages),
            count: vec![0; n],
            ns: vec![0; n],
            sample_every: t.sample_every,
            ..StageTotals::default()
        };
    }

    pub fn snapshot(&self) -> StageTotals {
        self.totals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// This thread's time on a CPU and time runnable waiting for one so far, ns
/// (`/proc/thread-self/schedstat`; None where it cannot be read).
pub(super) fn thread_sched() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let mut f = s.split_whitespace().map(|v| v.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// One builder's stage times for the batch being built.
#[derive(Debug, Default)]
pub(super) struct LocalStages {
    pub ns: Vec<u64>,
    pub count: Vec<u64>,
    /// The batch's wait for emulated storage, when it had one.
    pub storage_ns: Option<u64>,
}

impl LocalStages {
    pub fn reset(&mut self, stages: usize) {
        self.ns.clear();
        self.ns.resize(stages, 0);
        self.count.clear();
        self.count.resize(stages, 0);
        self.storage_ns = None;
    }

    /// Stage `i` ran from `start` until now.
    pub fn add(&mut self, i: usize, start: Instant) {
        self.ns[i] += start.elapsed().as_nanos() as u64;
        self.count[i] += 1;
    }
}
