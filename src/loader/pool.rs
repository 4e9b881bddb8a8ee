//! The worker threads. Every worker takes the next batch index as soon as it has a free
//! buffer, so a worker slowed down (a costly batch, a core taken by another thread) never
//! holds the others back: at most `prefetch_factor × N` buffers exist, batches are delivered
//! strictly in order, and a panic or a vanished worker is an error naming worker and batch;
//! dropping the pool stops and joins its threads.
//!
//! The first version gave batch *k* to worker *k mod N* (PyTorch's round robin) with
//! `prefetch_factor` buffers per worker: a worker that drew a slow batch held up delivery while
//! the other sat on its full queue. On the seed's chain its 2-worker speed-up reached 0.86 of
//! the no-hand-off ceiling on a 16-core machine and 0.91 on 2 cores (`loaderlab bench`).
//! The second handed batches and buffers over through two channels. Three costs of that design
//! showed on 2 cores with `perf sched` (three threads on two cores is the usual case there:
//! the training thread and two workers):
//! - the training thread was woken for every delivered batch, in order or not, and the
//!   channel's receive spun and yielded before it slept;
//! - a futex wake-up placed it on the core it last ran on: half the time the *other* worker's
//!   core, which it interrupted mid-batch through a cross-core interrupt (a round trip costs
//!   42 µs across cores on this VM against 5 µs on one, `perf bench sched pipe -T`);
//! - freed buffers went to the back of a queue but were taken from wherever the channel kept
//!   them, so some buffers were first touched (page faults, zeroing: 2.6 % of samples) inside
//!   the timed steps instead of the warm-up.
//!
//! Now one lock guards the shared state (held for a few instructions, never while building);
//! the training thread sleeps on a pipe and is woken only by the delivery of the batch it
//! waits for. A pipe write is a *synchronous* wake-up on Linux, which places the sleeper on
//! the waker's core, where the waker is about to take the next batch anyway. Free buffers
//! cycle first in, first out, so every one is touched while warming up.
//!
//! Which worker builds a batch does not change the batch: its content depends on (seed, k).

use std::collections::{BTreeMap, VecDeque};
use std::io::{PipeReader, PipeWriter, Read, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, unbounded};

use super::{Batch, Builder, LoaderError, Source};
use crate::spans;

/// What the workers and the training thread share.
struct Shared {
    state: Mutex<State>,
    /// One byte per wake-up of the training thread (see [`State::awaited`]).
    wake: PipeWriter,
    /// Workers sleep here while every buffer holds a batch not yet consumed.
    freed: Condvar,
}

struct State {
    /// Built batches (or the reasons they are not) not yet delivered, by index.
    built: BTreeMap<u64, Result<Batch, LoaderError>>,
    /// Buffers no batch occupies, in the order they were freed.
    free: VecDeque<Batch>,
    /// The next batch index a worker claims.
    claims: u64,
    /// The batch the training thread sleeps for. Whoever takes it out writes the one byte
    /// that wakes it, so each sleep gets exactly one wake-up.
    awaited: Option<u64>,
    /// Workers asleep on `freed`.
    starved: usize,
    /// Workers that have not returned.
    running: usize,
    /// Set when the pool is dropped: workers stop at their next look.
    closed: bool,
}

/// What a worker gets when it asks for work.
enum Claimable {
    /// The next batch index, and a free buffer to build it in.
    Claimed(u64, Batch),
    /// Every buffer holds a batch not yet consumed: sleep until one is freed.
    Wait,
    /// The pool is closed or past its end.
    Stop,
}

impl State {
    /// The policy, apart from the threads: any worker takes the next batch index as soon as a
    /// buffer is free (the index is taken only with a buffer in hand, so whoever holds batch k
    /// can always build it), whichever worker still holds an earlier one.
    fn try_claim(&mut self, end: Option<u64>) -> Claimable {
        if self.closed {
            return Claimable::Stop;
        }
        let Some(batch) = self.free.pop_front() else {
            return Claimable::Wait;
        };
        let k = self.claims;
        if end.is_some_and(|e| k >= e) {
            return Claimable::Stop;
        }
        self.claims += 1;
        Claimable::Claimed(k, batch)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing is built or called under the lock, so a poisoned lock still holds
        // consistent state (a panic elsewhere in the thread that held it).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self) {
        // The pipe cannot fill: one byte per sleep, read by the sleeper (a read interrupted by
        // a signal may leave one behind, which costs one extra turn of its loop).
        let _ = (&self.wake).write(&[1]);
    }

    /// Store batch `k` (or its failure); wakes the training thread if it sleeps for `k`.
    fn deliver(&self, k: u64, result: Result<Batch, LoaderError>) {
        let wake = {
            let mut state = self.lock();
            state.built.insert(k, result);
            let waited_for = state.awaited == Some(k);
            if waited_for {
                state.awaited = None;
            }
            waited_for
        };
        if wake {
            self.wake();
        }
    }

    /// A worker returns; the last one wakes the training thread, which then finds nothing
    /// left to wait for.
    fn leave(&self) {
        let wake = {
            let mut state = self.lock();
            state.running -= 1;
            state.running == 0 && state.awaited.take().is_some()
        };
        if wake {
            self.wake();
        }
    }
}

/// A set of worker threads building batches `first..end`.
pub(super) struct Pool {
    shared: Arc<Shared>,
    /// Where the training thread sleeps until its batch is built.
    woken: PipeReader,
    threads: Vec<JoinHandle<()>>,
    /// The next batch to deliver.
    pub(super) next: u64,
    /// One past the last batch this pool builds (None: persistent workers, no end).
    pub(super) end: Option<u64>,
    lent: Option<Batch>,
    /// The error already returned: asked again, the pool says the same rather than wait for
    /// a batch its failed worker will never build.
    failed: Option<LoaderError>,
}

impl Pool {
    pub(super) fn start(
        source: &Arc<Source>,
        first: u64,
        end: Option<u64>,
    ) -> Result<Pool, LoaderError> {
        let n = source.cfg.workers;
        let (woken, wake) = std::io::pipe().map_err(|e| LoaderError::Wait {
            message: e.to_string(),
        })?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                built: BTreeMap::new(),
                free: (0..source.cfg.buffers(source.memory.is_some()))
                    .map(|_| Batch::default())
                    .collect(),
                claims: first,
                awaited: None,
                starved: 0,
                running: n,
                closed: false,
            }),
            wake,
            freed: Condvar::new(),
        });
        let (ready_tx, ready_rx) = unbounded::<()>();
        let mut pool = Pool {
            shared: Arc::clone(&shared),
            woken,
            threads: Vec::with_capacity(n),
            next: first,
            end,
            lent: None,
            failed: None,
        };
        for w in 0..n {
            let (source, shared, ready) =
                (Arc::clone(source), Arc::clone(&shared), ready_tx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("loader-worker-{w}"))
                .spawn(move || worker_main(w, end, &source, &shared, ready));
            match thread {
                Ok(thread) => pool.threads.push(thread),
                Err(e) => {
                    // Dropping the pool stops and joins the workers already started.
                    pool.shared.lock().running -= n - w;
                    return Err(LoaderError::Spawn {
                        worker: w,
                        message: e.to_string(),
                    });
                }
            }
        }
        drop(ready_tx);
        for _ in 0..n {
            // A worker that dies before it is ready shows up on its first batch.
            if ready_rx.recv_timeout(Duration::from_secs(60)).is_err() {
                break;
            }
        }
        Ok(pool)
    }

    /// The next batch, lent until the next call (its buffer then goes back to the workers).
    pub(super) fn next(&mut self) -> Result<&Batch, LoaderError> {
        let freed = self.lent.take();
        let batch = self.receive(freed)?;
        Ok(self.lent.insert(batch))
    }

    /// The next batch, given away; `spare` joins the free buffers in its place (with the
    /// batch lent by `next`, if any).
    pub(super) fn next_owned(&mut self, spare: Batch) -> Result<Batch, LoaderError> {
        let freed = self.lent.take().into_iter().chain([spare]);
        self.receive(freed)
    }

    /// Wait for the next batch in order, first putting `freed` (buffers) back in the pool.
    fn receive(&mut self, freed: impl IntoIterator<Item = Batch>) -> Result<Batch, LoaderError> {
        let k = self.next;
        let mut state = self.shared.lock();
        for b in freed {
            state.free.push_back(b);
            if state.starved > 0 {
                self.shared.freed.notify_one();
            }
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = loop {
            if let Some(result) = state.built.remove(&k) {
                break result;
            }
            if state.running == 0 {
                break Err(LoaderError::WorkersGone { batch: k });
            }
            state.awaited = Some(k);
            drop(state);
            let mut byte = [0];
            match self.woken.read(&mut byte) {
                Ok(1) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                // The write end lives as long as the pool: neither can happen.
                Ok(_) => unreachable!("the wake-up pipe closed"),
                Err(e) => {
                    return Err(LoaderError::Wait {
                        message: e.to_string(),
                    });
                }
            }
            state = self.shared.lock();
        };
        drop(state);
        let batch = result.inspect_err(|e| self.failed = Some(e.clone()))?;
        debug_assert_eq!(batch.index, k);
        self.next += 1;
        Ok(batch)
    }
}

impl Pool {
    /// Stop and join the workers. Workers waiting for a buffer return at once; a worker
    /// building finishes its batch and returns at its next look.
    pub(super) fn stop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.freed.notify_all();
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Delivers "worker gone" for a claimed batch if the worker unwinds before delivering it, and
/// counts the worker out when it returns, so the training thread never waits for a batch
/// nobody builds.
struct Claim<'a> {
    worker: usize,
    batch: Option<u64>,
    shared: &'a Shared,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(batch) = self.batch {
            let gone = LoaderError::WorkerGone {
                worker: self.worker,
                batch,
            };
            self.shared.deliver(batch, Err(gone));
        }
        self.shared.leave();
    }
}

/// A free buffer and the batch index it is for, or None when the pool is closed or past its
/// end. The time spent getting the buffer is the queue-full stage of a profiled run.
fn claim(shared: &Shared, end: Option<u64>, source: &Source) -> Option<(u64, Batch)> {
    // Blocks while every buffer of the pool is built and not yet consumed.
    let span = tracing::info_span!(spans::QUEUE_FULL);
    let profiling = !span.is_disabled();
    let _span = span.entered();
    let start = profiling.then(Instant::now);
    let mut state = shared.lock();
    let (k, batch) = loop {
        match state.try_claim(end) {
            Claimable::Claimed(k, batch) => break (k, batch),
            Claimable::Stop => return None,
            Claimable::Wait => {
                state.starved += 1;
                state = shared
                    .freed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                state.starved -= 1;
            }
        }
    };
    drop(state);
    if let Some(start) = start {
        source
            .stages
            .add_queue_wait(start.elapsed().as_nanos() as u64);
    }
    Some((k, batch))
}

fn worker_main(w: usize, end: Option<u64>, source: &Source, shared: &Shared, ready: Sender<()>) {
    // Made first, so a worker that fails even before its first batch is counted out.
    let mut claimed = Claim {
        worker: w,
        batch: None,
        shared,
    };
    let mut builder = Builder::new(source);
    let _ = ready.send(());
    drop(ready);
    while let Some((k, mut batch)) = claim(shared, end, source) {
        claimed.batch = Some(k);
        let result = builder
            .build_caught(source, Some(w), k, &mut batch)
            .map(|()| batch);
        claimed.batch = None;
        let failed = result.is_err();
        shared.deliver(k, result);
        if failed {
            return;
        }
    }
}

pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(buffers: usize) -> State {
        State {
            built: BTreeMap::new(),
            free: (0..buffers).map(|_| Batch::default()).collect(),
            claims: 0,
            awaited: None,
            starved: 0,
            running: 2,
            closed: false,
        }
    }

    fn claimed(c: Claimable) -> Option<u64> {
        match c {
            Claimable::Claimed(k, _) => Some(k),
            _ => None,
        }
    }

    /// The deterministic core of tests/loader.rs's `a_slow_batch_does_not_stop_the_other_workers`
    /// (which measures it with a stalled first image): with 2 workers × prefetch 2, while one
    /// worker holds batch 0 the other builds batches 1, 2 and 3 — every other buffer — and only
    /// then waits; under the old batch-k-to-worker-k-mod-N rule it would have built 1 and 3.
    #[test]
    fn a_held_batch_leaves_every_other_buffer_to_the_other_workers() {
        let mut s = state(4);
        assert_eq!(claimed(s.try_claim(None)), Some(0)); // worker A, slow
        let others: Vec<u64> = std::iter::from_fn(|| claimed(s.try_claim(None))).collect();
        assert_eq!(others, [1, 2, 3]);
        assert!(matches!(s.try_claim(None), Claimable::Wait));
        // A buffer freed (batch 0 delivered and consumed): the next index, 4.
        s.free.push_back(Batch::default());
        assert_eq!(claimed(s.try_claim(None)), Some(4));
    }

    #[test]
    fn claims_stop_at_the_end_and_when_closed() {
        let mut s = state(4);
        assert_eq!(claimed(s.try_claim(Some(2))), Some(0));
        assert_eq!(claimed(s.try_claim(Some(2))), Some(1));
        assert!(matches!(s.try_claim(Some(2)), Claimable::Stop));
        let mut s = state(4);
        s.closed = true;
        assert!(matches!(s.try_claim(None), Claimable::Stop));
    }
}
