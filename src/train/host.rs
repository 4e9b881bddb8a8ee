//! The stand-in's host side (`model.host_ms`, `model.host_threads`): the training thread's own
//! CPU time per step — on a GPU job the Python, the autograd bookkeeping and the kernel
//! launches; on a CPU job the whole step — during which it holds a core and does not ask for
//! the next batch.
//!
//! Each step, the training thread and `host_threads − 1` helpers each spin until their own
//! thread has used `host_ms` more of CPU time (its thread CPU clock, as `cpu_work` does), and
//! the step goes on when all of them are done — as a CPU job's step waits for its intra-op
//! threads. Spinning on the CPU clock, not the wall clock: where the loader's workers take the
//! cores, the host side takes longer, as a real step does. And through memory, as a real step
//! does: each spinning thread streams through a buffer of its own ([`HOST_BUFFER`] bytes, past
//! a core's own caches), so the host side evicts what a worker beside it caches as a real step's
//! activations do. (A spin in registers alone left a worker beside it about 5 % faster than
//! beside a real CNN step here, and a replay's waiting share 4–6 points under the job's.)

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use candle_core::{Error, Result};

use crate::transforms::thread_cpu_ns;

/// The bytes each spinning thread streams through (the child's spin reads as many).
pub const HOST_BUFFER: usize = 8 << 20;

/// Words read between two reads of the thread's CPU clock (64 KiB).
const CHUNK: usize = 8 << 10;

/// A spinning thread's buffer: [`HOST_BUFFER`] bytes of nonzero words.
fn buffer() -> Vec<u64> {
    (0..HOST_BUFFER / 8)
        .map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
        .collect()
}

/// Spin until this thread has used `ns` more ns of CPU time, reading `buf` 64 KiB at a time.
fn spin_cpu(ns: u64, buf: &[u64]) {
    let start = thread_cpu_ns();
    let mut x = 0u64;
    let mut at = 0;
    while thread_cpu_ns().saturating_sub(start) < ns {
        for &w in &buf[at..at + CHUNK] {
            x = (x ^ w).wrapping_mul(0x2545_f491_4f6c_dd1d);
        }
        at = (at + CHUNK) % buf.len();
        std::hint::black_box(x);
    }
}

#[derive(Default)]
struct Round {
    /// Rounds asked for so far; a helper runs each one once.
    asked: u64,
    /// Helpers done with the current round.
    done: usize,
    stop: bool,
    /// CPU ns the helpers have spent, all rounds together.
    helpers_ns: u64,
}

#[derive(Default)]
struct Shared {
    round: Mutex<Round>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Round> {
        // Nothing panics while holding the lock (it only counts), so a poisoned lock still holds
        // consistent counts.
        self.round.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The host side of a stand-in step: `ms` of CPU time on each of `threads` cores per step.
pub struct HostWork {
    ns: u64,
    threads: usize,
    /// The training thread's own buffer (empty without a host side).
    buf: Vec<u64>,
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
}

impl HostWork {
    /// `ms` of CPU time on the calling thread and on `threads − 1` helpers per step (none
    /// started for one thread or no time). `ms` is validated finite and ≥ 0.
    pub fn new(ms: f64, threads: usize) -> Result<HostWork> {
        let ns = (ms.max(0.0) * 1e6).round() as u64;
        let threads = threads.max(1);
        let shared = Arc::new(Shared::default());
        let mut helpers = Vec::new();
        if ns > 0 {
            for k in 1..threads {
                let shared = Arc::clone(&shared);
                let helper = std::thread::Builder::new()
                    .name(format!("stand-in host {k}"))
                    .spawn(move || help(ns, &buffer(), &shared))
                    .map_err(|e| {
                        Error::Msg(format!("cannot start the host side's thread {k}: {e}"))
                    })?;
                helpers.push(helper);
            }
        }
        Ok(HostWork {
            ns,
            threads,
            buf: if ns > 0 { buffer() } else { Vec::new() },
            shared,
            helpers,
        })
    }

    /// No host side.
    pub fn none() -> HostWork {
        HostWork {
            ns: 0,
            threads: 1,
            buf: Vec::new(),
            shared: Arc::default(),
            helpers: Vec::new(),
        }
    }

    /// CPU ms per thread per step.
    pub fn ms(&self) -> f64 {
        self.ns as f64 / 1e6
    }

    /// The cores it holds while it runs.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// CPU ms the helpers have spent so far (all steps).
    pub fn helpers_ms(&self) -> f64 {
        self.shared.lock().helpers_ns as f64 / 1e6
    }

    /// One step's host side: returns when this thread and every helper has spent its time.
    pub fn spend(&self) {
        if self.ns == 0 {
            return;
        }
        if self.helpers.is_empty() {
            spin_cpu(self.ns, &self.buf);
            return;
        }
        {
            let mut round = self.shared.lock();
            round.asked += 1;
            round.done = 0;
        }
        self.shared.changed.notify_all();
        spin_cpu(self.ns, &self.buf);
        let mut round = self.shared.lock();
        while round.done < self.helpers.len() {
            round = self
                .shared
                .changed
                .wait(round)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A helper: one spin per round asked, until stopped.
fn help(ns: u64, buf: &[u64], shared: &Shared) {
    let mut seen = 0u64;
    loop {
        {
            let mut round = shared.lock();
            while round.asked == seen && !round.stop {
                round = shared
                    .changed
                    .wait(round)
                    .unwrap_or_else(|e| e.into_inner());
            }
            if round.stop {
                return;
            }
            seen = round.asked;
        }
        let start = thread_cpu_ns();
        spin_cpu(ns, buf);
        let spent = thread_cpu_ns().saturating_sub(start);
        let mut round = shared.lock();
        round.done += 1;
        round.helpers_ns += spent;
        drop(round);
        shared.changed.notify_all();
    }
}

impl Drop for HostWork {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_all();
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn each_thread_spends_its_cpu_time_every_step() {
        for threads in [1, 2, 3] {
            let host = HostWork::new(4.0, threads).unwrap();
            let own = thread_cpu_ns();
            for _ in 0..5 {
                host.spend();
            }
            let own_ms = (thread_cpu_ns() - own) as f64 / 1e6;
            // This thread spent 5 × 4 ms, each helper as much, and the step waited for them.
            assert!((20.0..26.0).contains(&own_ms), "{threads}: own {own_ms} ms");
            let helpers = host.helpers_ms();
            let want = 20.0 * (threads - 1) as f64;
            assert!(
                helpers >= want && helpers < want * 1.3 + 1.0,
                "{threads} threads: the helpers used {helpers} ms, want {want}"
            );
        }
    }

    #[test]
    fn no_host_side_costs_nothing_and_stops_its_helpers() {
        let none = HostWork::none();
        let t = Instant::now();
        none.spend();
        assert!(t.elapsed().as_micros() < 1_000);
        assert_eq!(none.ms(), 0.0);
        // Dropping joins the helpers (a helper left behind would hang the join).
        let host = HostWork::new(1.0, 3).unwrap();
        host.spend();
        drop(host);
    }
}
