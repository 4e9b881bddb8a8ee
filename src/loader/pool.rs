//! The worker threads. Every worker takes the next batch index as soon as it has a free
//! buffer, so a worker slowed down (a costly batch, a core taken by another thread) never
//! holds the others back: at most `prefetch_factor × N` buffers exist, batches are delivered
//! strictly in order through a small reorder map, and a panic or a vanished worker is an error
//! naming worker and batch; dropping the pool stops and joins its threads.
//!
//! The first version gave batch *k* to worker *k mod N* (PyTorch's round robin) with
//! `prefetch_factor` buffers per worker: a worker that drew a slow batch held up delivery while
//! the other sat on its full queue. On the seed's chain its 2-worker speed-up reached 0.86 of
//! the no-hand-off ceiling on a 16-core machine and 0.91 on 2 cores (`loaderlab bench`).
//! Which worker builds a batch does not change the batch: its content depends on (seed, k).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, unbounded};

use super::{Batch, Builder, LoaderError, Source};
use crate::spans;

/// A built batch (or the reason it is not), with its index.
type Delivery = (u64, Result<Batch, LoaderError>);

/// A set of worker threads building batches `first..end`.
pub(super) struct Pool {
    /// Buffers handed back for reuse; closing it ends workers waiting for one.
    free: Option<Sender<Batch>>,
    done: Receiver<Delivery>,
    threads: Vec<JoinHandle<()>>,
    /// Batches built ahead of their turn.
    early: BTreeMap<u64, Result<Batch, LoaderError>>,
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
        let (ready_tx, ready_rx) = unbounded::<()>();
        let (free_tx, free_rx) = unbounded::<Batch>();
        let (done_tx, done_rx) = unbounded::<Delivery>();
        for _ in 0..n * source.cfg.prefetch_factor {
            let _ = free_tx.send(Batch::default());
        }
        let claims = Arc::new(AtomicU64::new(first));
        let mut threads = Vec::with_capacity(n);
        for w in 0..n {
            let (source, claims) = (Arc::clone(source), Arc::clone(&claims));
            let (free, done, ready) = (free_rx.clone(), done_tx.clone(), ready_tx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("loader-worker-{w}"))
                .spawn(move || worker_main(w, end, &source, &claims, free, done, ready))
                .map_err(|e| LoaderError::Spawn {
                    worker: w,
                    message: e.to_string(),
                })?;
            threads.push(thread);
        }
        drop((ready_tx, done_tx));
        for _ in 0..n {
            // A worker that dies before it is ready shows up on its first batch.
            if ready_rx.recv_timeout(Duration::from_secs(60)).is_err() {
                break;
            }
        }
        Ok(Pool {
            free: Some(free_tx),
            done: done_rx,
            threads,
            early: BTreeMap::new(),
            next: first,
            end,
            lent: None,
            failed: None,
        })
    }

    fn give_back(&mut self) {
        if let (Some(b), Some(free)) = (self.lent.take(), &self.free) {
            let _ = free.send(b);
        }
    }

    pub(super) fn next(&mut self) -> Result<&Batch, LoaderError> {
        self.give_back();
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let k = self.next;
        let result = loop {
            if let Some(result) = self.early.remove(&k) {
                break result;
            }
            match self.done.recv() {
                Ok((i, result)) if i == k => break result,
                Ok((i, result)) => {
                    self.early.insert(i, result);
                }
                Err(_) => break Err(LoaderError::WorkersGone { batch: k }),
            }
        };
        let batch = result.inspect_err(|e| self.failed = Some(e.clone()))?;
        debug_assert_eq!(batch.index, k);
        self.next += 1;
        Ok(self.lent.insert(batch))
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing the free channel ends workers waiting for a buffer; dropping the done
        // receiver ends workers delivering.
        self.free = None;
        let threads = std::mem::take(&mut self.threads);
        let (_, dead) = unbounded();
        drop(std::mem::replace(&mut self.done, dead));
        for t in threads {
            let _ = t.join();
        }
    }
}

/// Sends "worker gone" for a claimed batch if the worker unwinds before delivering it, so the
/// training thread never waits for a batch nobody builds.
struct Claim<'a> {
    worker: usize,
    batch: Option<u64>,
    done: &'a Sender<Delivery>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if let Some(batch) = self.batch {
            let gone = LoaderError::WorkerGone {
                worker: self.worker,
                batch,
            };
            let _ = self.done.send((batch, Err(gone)));
        }
    }
}

pub(super) fn worker_main(
    w: usize,
    end: Option<u64>,
    source: &Source,
    claims: &AtomicU64,
    free: Receiver<Batch>,
    done: Sender<Delivery>,
    ready: Sender<()>,
) {
    let mut builder = Builder::new(source);
    let _ = ready.send(());
    drop(ready);
    loop {
        let free_buffer = {
            // Blocks while every buffer of the pool is built and not yet consumed.
            let span = tracing::info_span!(spans::QUEUE_FULL);
            let profiling = !span.is_disabled();
            let _span = span.entered();
            let start = profiling.then(Instant::now);
            let free_buffer = free.recv();
            if let Some(start) = start {
                source
                    .stages
                    .add_queue_wait(start.elapsed().as_nanos() as u64);
            }
            free_buffer
        };
        let Ok(mut batch) = free_buffer else { return };
        // Taken only with a buffer in hand, so whoever holds batch k can always build it.
        let k = claims.fetch_add(1, Ordering::Relaxed);
        if end.is_some_and(|e| k >= e) {
            return;
        }
        let mut claim = Claim {
            worker: w,
            batch: Some(k),
            done: &done,
        };
        let message = builder
            .build_caught(source, Some(w), k, &mut batch)
            .map(|()| batch);
        claim.batch = None;
        let failed = message.is_err();
        if done.send((k, message)).is_err() || failed {
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
