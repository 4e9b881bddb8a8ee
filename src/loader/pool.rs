//! The worker threads: batch *k* built by worker *k mod N*, at most `prefetch_factor` buffers
//! per worker in flight, delivered strictly in order; a panic or a vanished worker is an error
//! naming worker and batch, and dropping the pool stops and joins its threads.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};

use super::{Batch, Builder, LoaderError, Source};
use crate::spans;

pub(super) struct Worker {
    free: Option<Sender<Batch>>,
    done: Receiver<Result<Batch, LoaderError>>,
    thread: Option<JoinHandle<()>>,
}

/// A set of worker threads building batches `first..end`.
pub(super) struct Pool {
    workers: Vec<Worker>,
    /// The next batch to deliver.
    pub(super) next: u64,
    /// One past the last batch this pool builds (None: persistent workers, no end).
    pub(super) end: Option<u64>,
    lent: Option<Batch>,
}

impl Pool {
    pub(super) fn start(
        source: &Arc<Source>,
        first: u64,
        end: Option<u64>,
    ) -> Result<Pool, LoaderError> {
        let n = source.cfg.workers;
        let (ready_tx, ready_rx) = unbounded::<()>();
        let mut workers = Vec::with_capacity(n);
        for w in 0..n {
            let (free_tx, free_rx) = unbounded::<Batch>();
            let (done_tx, done_rx) =
                bounded::<Result<Batch, LoaderError>>(source.cfg.prefetch_factor);
            for _ in 0..source.cfg.prefetch_factor {
                let _ = free_tx.send(Batch::default());
            }
            let source = Arc::clone(source);
            let ready = ready_tx.clone();
            let thread = std::thread::Builder::new()
                .name(format!("loader-worker-{w}"))
                .spawn(move || worker_main(w, n, first, end, &source, free_rx, done_tx, ready))
                .map_err(|e| LoaderError::Spawn {
                    worker: w,
                    message: e.to_string(),
                })?;
            workers.push(Worker {
                free: Some(free_tx),
                done: done_rx,
                thread: Some(thread),
            });
        }
        drop(ready_tx);
        for _ in 0..n {
            // A worker that dies before it is ready shows up on its first batch.
            if ready_rx.recv_timeout(Duration::from_secs(60)).is_err() {
                break;
            }
        }
        Ok(Pool {
            workers,
            next: first,
            end,
            lent: None,
        })
    }

    fn give_back(&mut self) {
        if let Some(b) = self.lent.take() {
            let w = (b.index % self.workers.len() as u64) as usize;
            if let Some(free) = &self.workers[w].free {
                let _ = free.send(b);
            }
        }
    }

    pub(super) fn next(&mut self) -> Result<&Batch, LoaderError> {
        self.give_back();
        let k = self.next;
        let w = (k % self.workers.len() as u64) as usize;
        match self.workers[w].done.recv() {
            Ok(Ok(batch)) => {
                debug_assert_eq!(batch.index, k);
                self.next += 1;
                Ok(self.lent.insert(batch))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(LoaderError::WorkerGone {
                worker: w,
                batch: k,
            }),
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Closing the free channels ends workers waiting for a buffer; dropping the done
        // receivers ends workers waiting to deliver.
        for w in &mut self.workers {
            w.free = None;
        }
        let threads: Vec<JoinHandle<()>> = self
            .workers
            .iter_mut()
            .filter_map(|w| w.thread.take())
            .collect();
        self.workers.clear();
        for t in threads {
            let _ = t.join();
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn worker_main(
    w: usize,
    n: usize,
    first: u64,
    end: Option<u64>,
    source: &Source,
    free: Receiver<Batch>,
    done: Sender<Result<Batch, LoaderError>>,
    ready: Sender<()>,
) {
    let mut builder = Builder::new(source);
    let _ = ready.send(());
    drop(ready);
    // The first batch of ours at or after `first`.
    let mut k = first + ((w as u64 + n as u64 - first % n as u64) % n as u64);
    loop {
        if end.is_some_and(|e| k >= e) {
            return;
        }
        let free_buffer = {
            // Blocks while every buffer this worker may fill is built and not yet consumed.
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
        let message = builder
            .build_caught(source, Some(w), k, &mut batch)
            .map(|()| batch);
        let failed = message.is_err();
        if done.send(message).is_err() || failed {
            return;
        }
        k += n as u64;
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
