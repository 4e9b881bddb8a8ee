//! The data loader: a seeded sampler, batching, and N persistent worker threads that build
//! batches ahead of the training thread.
//!
//! Invariants: batch *k* is built by worker *k mod N* and delivered strictly in order; at most
//! `prefetch_factor × N` batches exist at once (a fixed pool of reusable buffers, so no
//! allocation per batch after warm-up); a batch's content depends only on (seed, k), never on
//! N. A worker that panics or fails surfaces as an error naming the worker and batch, never a
//! hang; dropping the loader stops and joins its threads.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded, unbounded};
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

use crate::config::Settings;
use crate::data::{Dataset, IMAGE_PIXELS};
use crate::hash::{Fingerprint, splitmix};
use crate::trace;
use crate::transforms::{Pipeline, Scratch};

/// Loader settings, resolved.
#[derive(Debug, Clone)]
pub struct LoaderConfig {
    pub batch_size: usize,
    pub workers: usize,
    pub prefetch_factor: usize,
    pub shuffle: bool,
    pub drop_last: bool,
    pub persistent_workers: bool,
    pub seed: u64,
}

impl LoaderConfig {
    pub fn from_settings(s: &Settings) -> Self {
        LoaderConfig {
            batch_size: s.loader.batch_size as usize,
            workers: s.loader.workers as usize,
            prefetch_factor: s.loader.prefetch_factor.max(1) as usize,
            shuffle: s.loader.shuffle,
            drop_last: s.loader.drop_last,
            persistent_workers: s.loader.persistent_workers,
            seed: s.experiment.seed,
        }
    }
}

/// Where batch images live when not in an ordinary `Vec`: page-locked (pinned) host memory a
/// CUDA device can copy from asynchronously. The loader knows nothing about CUDA; a `cuda`
/// build passes an implementation to [`Loader::with_memory`].
pub trait HostMemory: Send + Sync {
    /// A block of `len` floats, zeroed. Called once per reusable batch buffer.
    fn alloc(&self, len: usize) -> Result<Box<dyn HostBlock>, String>;
}

/// One block from a [`HostMemory`].
pub trait HostBlock: Send + std::any::Any {
    fn as_slice(&self) -> &[f32];
    /// Waits for any device copy still reading the block before handing it out.
    fn as_mut_slice(&mut self) -> &mut [f32];
    fn as_any(&self) -> &dyn std::any::Any;
}

#[derive(Default)]
enum Images {
    #[default]
    Empty,
    Heap(Vec<f32>),
    Block(Box<dyn HostBlock>),
}

impl Images {
    /// Make room for `len` floats, allocating only when the size changes.
    fn ensure(&mut self, len: usize, memory: Option<&dyn HostMemory>) -> Result<(), String> {
        let have = match self {
            Images::Empty => None,
            Images::Heap(v) => Some(v.len()),
            Images::Block(b) => Some(b.as_slice().len()),
        };
        if have != Some(len) {
            *self = match memory {
                Some(m) => Images::Block(m.alloc(len)?),
                None => Images::Heap(vec![0.0; len]),
            };
        }
        Ok(())
    }

    fn as_slice(&self) -> &[f32] {
        match self {
            Images::Empty => &[],
            Images::Heap(v) => v,
            Images::Block(b) => b.as_slice(),
        }
    }

    fn as_mut_slice(&mut self) -> &mut [f32] {
        match self {
            Images::Empty => &mut [],
            Images::Heap(v) => v,
            Images::Block(b) => b.as_mut_slice(),
        }
    }
}

/// One batch: images as NCHW float32 (C = 1), labels, and a fingerprint of both.
#[derive(Default)]
pub struct Batch {
    /// Global batch number, counting across epochs from 0.
    pub index: u64,
    pub epoch: u64,
    /// Number of samples (smaller than batch_size only for a last partial batch).
    pub len: usize,
    /// Side of each image.
    pub side: usize,
    images: Images,
    labels: Vec<u32>,
    pub fingerprint: u64,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("index", &self.index)
            .field("epoch", &self.epoch)
            .field("len", &self.len)
            .field("side", &self.side)
            .field("pinned", &matches!(self.images, Images::Block(_)))
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

impl Batch {
    pub fn images(&self) -> &[f32] {
        &self.images.as_slice()[..self.len * self.side * self.side]
    }
    pub fn labels(&self) -> &[u32] {
        &self.labels[..self.len]
    }
    /// The whole reusable image buffer (room for a full batch) when it came from a
    /// [`HostMemory`]; `None` for ordinary memory.
    pub fn host_block(&self) -> Option<&dyn HostBlock> {
        match &self.images {
            Images::Block(b) => Some(b.as_ref()),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LoaderError {
    #[error("loader worker {worker} panicked while building batch {batch}: {message}")]
    WorkerPanicked {
        worker: usize,
        batch: u64,
        message: String,
    },
    /// With `workers = 0` the training thread builds each batch itself.
    #[error("the training thread panicked while building batch {batch} (workers = 0): {message}")]
    BuildPanicked { batch: u64, message: String },
    #[error("loader worker {worker} stopped without delivering batch {batch}")]
    WorkerGone { worker: usize, batch: u64 },
    #[error("cannot start loader worker {worker}: {message}")]
    Spawn { worker: usize, message: String },
    #[error("the dataset ({len} images) holds no batch of {batch_size} with drop_last = true")]
    NoBatch { len: usize, batch_size: usize },
}

/// The order in which an epoch visits the dataset: a permutation drawn from (seed, epoch), or
/// the identity without shuffling.
pub fn epoch_order(len: usize, shuffle: bool, seed: u64, epoch: u64, order: &mut Vec<u32>) {
    order.clear();
    order.extend(0..len as u32);
    if shuffle {
        let mut rng =
            ChaCha8Rng::seed_from_u64(splitmix(seed ^ 0x0073_6875_6666_6c65 ^ splitmix(epoch)));
        order.shuffle(&mut rng);
    }
}

/// Which samples make up each batch.
#[derive(Debug, Clone)]
struct Sampler {
    len: usize,
    batch_size: usize,
    shuffle: bool,
    seed: u64,
    batches_per_epoch: u64,
    epoch: Option<u64>,
    order: Vec<u32>,
}

impl Sampler {
    fn new(len: usize, cfg: &LoaderConfig) -> Self {
        let full = len / cfg.batch_size;
        let batches = if cfg.drop_last || len.is_multiple_of(cfg.batch_size) {
            full
        } else {
            full + 1
        };
        Sampler {
            len,
            batch_size: cfg.batch_size,
            shuffle: cfg.shuffle,
            seed: cfg.seed,
            batches_per_epoch: batches as u64,
            epoch: None,
            order: Vec::new(),
        }
    }

    /// (epoch, dataset indices) of global batch `k`.
    fn batch(&mut self, k: u64) -> (u64, &[u32]) {
        let epoch = k / self.batches_per_epoch;
        let b = (k % self.batches_per_epoch) as usize;
        if self.epoch != Some(epoch) {
            epoch_order(self.len, self.shuffle, self.seed, epoch, &mut self.order);
            self.epoch = Some(epoch);
        }
        let start = b * self.batch_size;
        let end = (start + self.batch_size).min(self.len);
        (epoch, &self.order[start..end])
    }
}

/// Everything a batch builder needs; shared by the workers.
struct Source {
    dataset: Arc<dyn Dataset>,
    pipeline: Arc<Pipeline>,
    cfg: LoaderConfig,
    memory: Option<Arc<dyn HostMemory>>,
}

/// Per-thread state of a batch builder.
struct Builder {
    sampler: Sampler,
    scratch: Scratch,
    pixels: Vec<u8>,
}

impl Builder {
    fn new(source: &Source) -> Self {
        Builder {
            sampler: Sampler::new(source.dataset.len(), &source.cfg),
            scratch: Scratch::default(),
            pixels: vec![0; IMAGE_PIXELS],
        }
    }

    fn build(&mut self, source: &Source, k: u64, batch: &mut Batch) {
        let side = source.pipeline.out_side();
        let plane = side * side;
        let (epoch, indices) = self.sampler.batch(k);
        batch.index = k;
        batch.epoch = epoch;
        batch.len = indices.len();
        batch.side = side;
        if let Err(e) = batch
            .images
            .ensure(source.cfg.batch_size * plane, source.memory.as_deref())
        {
            panic!("cannot allocate a batch buffer: {e}");
        }
        batch.labels.resize(source.cfg.batch_size, 0);
        let images = batch.images.as_mut_slice();
        for (slot, &i) in indices.iter().enumerate() {
            // The next image's bytes are on their way while this one is transformed (a random
            // read from a dataset of tens of MB misses every cache).
            if let Some(&next) = indices.get(slot + 1) {
                source.dataset.prefetch(next as usize);
            }
            let i = i as usize;
            source.dataset.image_into(i, &mut self.pixels);
            batch.labels[slot] = source.dataset.label(i) as u32;
            source.pipeline.apply(
                &self.pixels,
                epoch,
                i as u64,
                &mut self.scratch,
                &mut images[slot * plane..(slot + 1) * plane],
            );
        }
        let mut fp = Fingerprint::default();
        fp.floats(batch.images());
        fp.labels(batch.labels());
        batch.fingerprint = fp.finish();
    }

    /// [`Builder::build`] as worker `worker` does it (`None`: the training thread, with
    /// `workers = 0`): inside a `build_batch` trace span, with a panic (a bad dataset, a failed
    /// allocation) turned into an error naming who built which batch.
    fn build_caught(
        &mut self,
        source: &Source,
        worker: Option<usize>,
        k: u64,
        batch: &mut Batch,
    ) -> Result<(), LoaderError> {
        std::panic::catch_unwind(AssertUnwindSafe(|| {
            let _span = tracing::info_span!(trace::BUILD_BATCH, batch = k).entered();
            self.build(source, k, batch);
        }))
        .map_err(|panic| {
            let message = panic_message(&panic);
            match worker {
                Some(worker) => LoaderError::WorkerPanicked {
                    worker,
                    batch: k,
                    message,
                },
                None => LoaderError::BuildPanicked { batch: k, message },
            }
        })
    }
}

struct Worker {
    free: Option<Sender<Batch>>,
    done: Receiver<Result<Batch, LoaderError>>,
    thread: Option<JoinHandle<()>>,
}

/// A set of worker threads building batches `first..end`.
struct Pool {
    workers: Vec<Worker>,
    next: u64,
    end: Option<u64>,
    lent: Option<Batch>,
}

impl Pool {
    fn start(source: &Arc<Source>, first: u64, end: Option<u64>) -> Result<Pool, LoaderError> {
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

    fn next(&mut self) -> Result<&Batch, LoaderError> {
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
fn worker_main(
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
        let Ok(mut batch) = free.recv() else { return };
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

/// The loader's batch work with the hand-off taken away: `threads` threads each build every
/// `threads`-th of `batches` batches into a private ring of `buffers` batch buffers, with no
/// channels, no ordering and no consumer; timed until the last thread is done. Returns images
/// per second, or the first builder's failure (a panic names thread and batch, as a worker's).
///
/// With one buffer on one thread this is the serial loader's work (workers = 0); with
/// `prefetch_factor` buffers on N threads, N workers' work. The ratio of the two is the ceiling
/// of the loader's speed-up on this machine: equal shares, as round-robin assignment gives
/// each worker, so a slower core holds the total back just as it holds back in-order delivery,
/// but nothing ever waits for anything else. `bench` sets the loader's speed-up beside it, so a
/// loader shortfall can be told apart from a machine that does not scale (shared caches and
/// memory, cores of unequal speed on a busy host).
pub fn independent_rate(
    dataset: Arc<dyn Dataset>,
    pipeline: Arc<Pipeline>,
    cfg: LoaderConfig,
    threads: usize,
    buffers: usize,
    batches: u64,
) -> Result<f64, LoaderError> {
    let (threads, buffers) = (threads.max(1), buffers.max(1));
    let source = Source {
        dataset,
        pipeline,
        cfg,
        memory: None,
    };
    let start = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (source, start) = (&source, &start);
                scope.spawn(move || {
                    let mut builder = Builder::new(source);
                    let mut ring: Vec<Batch> = (0..buffers).map(|_| Batch::default()).collect();
                    // Every buffer of the ring is built into once before the clock starts, as
                    // the loader's warm-up does; a failure still reaches the barrier (no hang).
                    let warm = ring.iter_mut().enumerate().try_for_each(|(i, batch)| {
                        builder.build_caught(source, Some(t), (t + i * threads) as u64, batch)
                    });
                    start.wait();
                    warm?;
                    let mut images = 0;
                    for (i, k) in (t as u64..batches).step_by(threads).enumerate() {
                        let batch = &mut ring[i % buffers];
                        builder.build_caught(source, Some(t), k, batch)?;
                        images += batch.len;
                    }
                    Ok::<usize, LoaderError>(images)
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        let mut images = 0;
        for h in handles {
            // Builders catch their own panics; anything else is a bug, passed on as a panic.
            images += h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        Ok(images as f64 / started.elapsed().as_secs_f64())
    })
}

enum Mode {
    /// workers = 0: the calling thread builds each batch.
    Serial {
        builder: Box<Builder>,
        batch: Batch,
        next: u64,
    },
    Parallel(Pool),
}

/// The loader a run pulls batches from.
pub struct Loader {
    source: Arc<Source>,
    mode: Mode,
    batches_per_epoch: u64,
    startup: Duration,
    restarts: u64,
}

impl Loader {
    /// Start the loader (and its workers); the time this takes is [`Loader::startup`].
    pub fn new(
        dataset: Arc<dyn Dataset>,
        pipeline: Arc<Pipeline>,
        cfg: LoaderConfig,
    ) -> Result<Loader, LoaderError> {
        Self::with_memory(dataset, pipeline, cfg, None)
    }

    /// As [`Loader::new`], with batch images in `memory` (pinned host memory on CUDA).
    pub fn with_memory(
        dataset: Arc<dyn Dataset>,
        pipeline: Arc<Pipeline>,
        cfg: LoaderConfig,
        memory: Option<Arc<dyn HostMemory>>,
    ) -> Result<Loader, LoaderError> {
        let started = Instant::now();
        let len = dataset.len();
        if cfg.batch_size == 0 || (cfg.drop_last && len < cfg.batch_size) || len == 0 {
            return Err(LoaderError::NoBatch {
                len,
                batch_size: cfg.batch_size,
            });
        }
        let source = Arc::new(Source {
            dataset,
            pipeline,
            cfg,
            memory,
        });
        let batches_per_epoch = Sampler::new(len, &source.cfg).batches_per_epoch;
        let mode = if source.cfg.workers == 0 {
            Mode::Serial {
                builder: Box::new(Builder::new(&source)),
                batch: Batch::default(),
                next: 0,
            }
        } else {
            let end = (!source.cfg.persistent_workers).then_some(batches_per_epoch);
            Mode::Parallel(Pool::start(&source, 0, end)?)
        };
        Ok(Loader {
            source,
            mode,
            batches_per_epoch,
            startup: started.elapsed(),
            restarts: 0,
        })
    }

    /// Time to start the workers (or set up the serial builder).
    pub fn startup(&self) -> Duration {
        self.startup
    }

    /// Times the workers were restarted at an epoch boundary (persistent_workers = false).
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    pub fn batches_per_epoch(&self) -> u64 {
        self.batches_per_epoch
    }

    /// The next batch, in order. The reference is valid until the next call.
    pub fn next_batch(&mut self) -> Result<&Batch, LoaderError> {
        match &mut self.mode {
            Mode::Serial {
                builder,
                batch,
                next,
            } => {
                let k = *next;
                *next += 1;
                builder.build_caught(&self.source, None, k, batch)?;
                Ok(batch)
            }
            Mode::Parallel(pool) => {
                if pool.end == Some(pool.next) {
                    // Non-persistent workers: a fresh pool for the next epoch, as PyTorch does.
                    let first = pool.next;
                    let end = first + self.batches_per_epoch;
                    *pool = Pool::start(&self.source, first, Some(end))?;
                    self.restarts += 1;
                }
                pool.next()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::seed_transforms;
    use crate::data::Synthetic;

    fn loader(workers: usize, persistent: bool, len: usize) -> Loader {
        loader_in(workers, persistent, len, None)
    }

    fn loader_in(
        workers: usize,
        persistent: bool,
        len: usize,
        memory: Option<Arc<dyn HostMemory>>,
    ) -> Loader {
        let cfg = LoaderConfig {
            batch_size: 16,
            workers,
            prefetch_factor: 2,
            shuffle: true,
            drop_last: true,
            persistent_workers: persistent,
            seed: 9,
        };
        Loader::with_memory(
            Arc::new(Synthetic::new(len, 10, 9)),
            Arc::new(Pipeline::new(&seed_transforms(), 9, 28)),
            cfg,
            memory,
        )
        .unwrap()
    }

    fn fingerprints(mut l: Loader, n: usize) -> Vec<(u64, u64, u64)> {
        (0..n)
            .map(|_| {
                let b = l.next_batch().unwrap();
                (b.index, b.epoch, b.fingerprint)
            })
            .collect()
    }

    #[test]
    fn same_batches_for_any_worker_count_across_epochs() {
        // 100 images / 16 = 6 batches per epoch: 20 batches cross three epoch boundaries.
        let serial = fingerprints(loader(0, true, 100), 20);
        assert_eq!(serial[6].1, 1);
        for workers in [1, 3] {
            assert_eq!(
                fingerprints(loader(workers, true, 100), 20),
                serial,
                "workers={workers}"
            );
        }
        assert_eq!(
            fingerprints(loader(2, false, 100), 20),
            serial,
            "non-persistent"
        );
        let distinct: std::collections::HashSet<u64> = serial.iter().map(|s| s.2).collect();
        assert_eq!(distinct.len(), 20);
    }

    /// Host memory that counts its allocations, standing in for CUDA's pinned memory.
    struct Counting(std::sync::atomic::AtomicUsize);
    struct Block(Vec<f32>);
    impl HostBlock for Block {
        fn as_slice(&self) -> &[f32] {
            &self.0
        }
        fn as_mut_slice(&mut self) -> &mut [f32] {
            &mut self.0
        }
        fn as_any(&self) -> &dyn std::any::Any {
            self
        }
    }
    impl HostMemory for Counting {
        fn alloc(&self, len: usize) -> Result<Box<dyn HostBlock>, String> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Box::new(Block(vec![0.0; len])))
        }
    }

    #[test]
    fn host_memory_holds_the_same_batches_and_is_reused() {
        let serial = fingerprints(loader(0, true, 100), 20);
        for workers in [0, 2] {
            let memory = Arc::new(Counting(Default::default()));
            let mut l = loader_in(workers, true, 100, Some(memory.clone()));
            for want in &serial {
                let b = l.next_batch().unwrap();
                assert!(b.host_block().is_some());
                assert_eq!(
                    (b.index, b.epoch, b.fingerprint),
                    *want,
                    "workers={workers}"
                );
            }
            drop(l);
            // One buffer per slot in flight (prefetch x workers, or one serial), never per batch.
            let slots = if workers == 0 { 1 } else { 2 * workers };
            assert_eq!(memory.0.load(std::sync::atomic::Ordering::SeqCst), slots);
        }
    }

    #[test]
    fn epochs_reshuffle() {
        let mut s = Sampler::new(
            10,
            &LoaderConfig {
                batch_size: 10,
                workers: 0,
                prefetch_factor: 1,
                shuffle: true,
                drop_last: true,
                persistent_workers: true,
                seed: 1,
            },
        );
        let a = s.batch(0).1.to_vec();
        let b = s.batch(1).1.to_vec();
        assert_ne!(a, b);
        let mut sorted = b.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<u32>>());
    }

    #[test]
    fn partial_last_batch_without_drop_last() {
        let cfg = LoaderConfig {
            batch_size: 16,
            workers: 2,
            prefetch_factor: 2,
            shuffle: false,
            drop_last: false,
            persistent_workers: true,
            seed: 1,
        };
        let mut l = Loader::new(
            Arc::new(Synthetic::new(40, 10, 1)),
            Arc::new(Pipeline::new(&seed_transforms(), 1, 28)),
            cfg,
        )
        .unwrap();
        let lens: Vec<usize> = (0..4).map(|_| l.next_batch().unwrap().len).collect();
        assert_eq!(lens, [16, 16, 8, 16]);
    }
}
