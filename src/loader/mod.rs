//! The data loader: a seeded sampler, batching, and N persistent worker threads that build
//! batches ahead of the training thread.
//!
//! Invariants: batches are delivered strictly in order, whichever worker built them (each
//! worker takes the next index when it has a free buffer); at most
//! `prefetch_factor × N` batches exist at once (a fixed pool of reusable buffers, so no
//! allocation per batch after warm-up); a batch's content depends only on (seed, k), never on
//! N. A worker that panics or fails surfaces as an error naming the worker and batch, never a
//! hang; dropping the loader stops and joins its threads.

mod batch;
mod pool;
mod sampler;
mod stages;

pub use batch::{Batch, HostBlock, HostMemory};
use pool::Pool;
pub(crate) use pool::panic_message;
use sampler::Sampler;
pub use sampler::{Shard, epoch_order};
pub use stages::StageTotals;
use stages::{LocalStages, STAGE_SAMPLE, StageClock};

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Settings;
use crate::data::{DataError, Dataset};
use crate::hash::Fingerprint;
use crate::spans;
use crate::transforms::{Input, Observe, Pipeline, Scratch, Target};

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
    /// Emulated-storage requests a builder keeps outstanding (`loader.read_ahead`).
    pub read_ahead: usize,
    /// The share of every epoch this loader serves (one rank's of several).
    pub shard: Shard,
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
            read_ahead: s.loader.read_ahead.max(1) as usize,
            shard: Shard::WHOLE,
        }
    }

    /// The batch buffers a loader with these settings cycles through — the one place this is
    /// derived: `prefetch_factor` per worker (every batch in flight has its own), or on the
    /// training thread one, two with page-locked memory (the device copies from one while the
    /// next is built).
    pub fn buffers(&self, pinned: bool) -> usize {
        match self.workers {
            0 => 1 + pinned as usize,
            n => n * self.prefetch_factor,
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
    /// A sample could not be read (a corrupt or missing image, with `on_error = "fail"`).
    #[error("{} could not read a sample of batch {batch}: {message}", match worker {
        Some(w) => format!("loader worker {w}"),
        None => "the training thread (workers = 0)".to_string(),
    })]
    Sample {
        worker: Option<usize>,
        batch: u64,
        message: String,
    },
    #[error("loader worker {worker} stopped without delivering batch {batch}")]
    WorkerGone { worker: usize, batch: u64 },
    #[error("every loader worker stopped before batch {batch} was delivered")]
    WorkersGone { batch: u64 },
    /// The training thread could not wait for its batch (the pipe it sleeps on failed).
    #[error("cannot wait for the loader workers: {message}")]
    Wait { message: String },
    #[error("cannot start loader worker {worker}: {message}")]
    Spawn { worker: usize, message: String },
    #[error("the dataset ({len} images) holds no batch of {batch_size} with drop_last = true")]
    NoBatch { len: usize, batch_size: usize },
    /// A batch was asked of a loader that had been stopped (a bug of the caller).
    #[error("the loader was already stopped")]
    Stopped,
}

/// Everything a batch builder needs; shared by the workers.
struct Source {
    dataset: Arc<dyn Dataset>,
    pipeline: Arc<Pipeline>,
    cfg: LoaderConfig,
    memory: Option<Arc<dyn HostMemory>>,
    /// Stage times of profiled runs, from every thread that builds batches.
    stages: StageClock,
    /// The stage clocks run outside a profiled run too (a watched loader).
    clocked: std::sync::atomic::AtomicBool,
}

impl Source {
    fn new(
        dataset: Arc<dyn Dataset>,
        pipeline: Arc<Pipeline>,
        cfg: LoaderConfig,
        memory: Option<Arc<dyn HostMemory>>,
    ) -> Source {
        Source {
            stages: StageClock::new(pipeline.op_names()),
            dataset,
            pipeline,
            cfg,
            memory,
            clocked: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// Per-thread state of a batch builder.
struct Builder {
    sampler: Sampler,
    scratch: Scratch,
    pixels: Vec<u8>,
    /// This batch's stage times (profiled runs).
    stages: LocalStages,
    /// This reader's emulated-storage requests in flight, in read order: (image, when its
    /// bytes arrive).
    reads: VecDeque<(u32, Instant)>,
    /// The batch this builder most likely builds after batch k is k + `stride`: the next one
    /// for the training thread at 0 workers (and a single worker), k + N for one of N workers
    /// (they claim batches as they free buffers, mostly in turn). Its read-ahead runs on into
    /// that batch; requests for a batch another worker claimed after all are dropped.
    stride: u64,
    /// The indices of the batch being built (kept to reuse its allocation).
    indices: Vec<u32>,
}

impl Builder {
    /// A builder on this thread, with no storage stream open (see `data::storage`).
    fn new(source: &Source) -> Self {
        crate::data::storage::close_streams();
        Builder {
            sampler: Sampler::new(
                source.dataset.len(),
                &source.cfg,
                Some(Arc::clone(&source.dataset)),
            ),
            scratch: Scratch::default(),
            pixels: Vec::new(),
            stages: LocalStages::default(),
            reads: VecDeque::new(),
            stride: source.cfg.workers.max(1) as u64,
            indices: Vec::new(),
        }
    }

    /// Wait until image `indices[slot]`'s bytes have arrived from emulated storage, keeping
    /// `read_ahead` requests in flight: this image's and the next ones' — of this batch, then of
    /// the batch this builder builds next (k + `stride`). The time it took (asking, and asleep
    /// until the bytes arrived); None without emulated storage.
    fn read(&mut self, source: &Source, k: u64, indices: &[u32], slot: usize) -> Option<Duration> {
        let started = Instant::now();
        let storage = source.dataset.storage();
        let depth = source.cfg.read_ahead.max(1);
        if self.reads.front().is_some_and(|&(i, _)| i != indices[slot]) {
            // Requests for other images than these (a batch not built after all): dropped.
            self.reads.clear();
        }
        let mut next_batch: Option<Vec<u32>> = None;
        while self.reads.len() < depth {
            // The request's place in the reading order from this image on.
            let at = slot + self.reads.len();
            let image = match indices.get(at) {
                Some(&i) => i,
                None => {
                    let stride = self.stride;
                    let next =
                        next_batch.get_or_insert_with(|| self.sampler.batch(k + stride).1.to_vec());
                    match next.get(at - indices.len()) {
                        Some(&i) => i,
                        None => break,
                    }
                }
            };
            let arrives = storage.request(image)?;
            self.reads.push_back((image, arrives));
        }
        let (_, arrives) = self.reads.pop_front()?;
        crate::data::storage::sleep_until(arrives);
        Some(started.elapsed())
    }

    /// Build batch `k`; `profiling` (a profiled run only): one image in [`STAGE_SAMPLE`] is
    /// timed stage by stage, the first one drawn as trace spans, and the whole build is timed,
    /// into the loader's [`StageClock`].
    fn build(
        &mut self,
        source: &Source,
        k: u64,
        batch: &mut Batch,
        profiling: bool,
    ) -> Result<(), DataError> {
        // The scheduler's split of the build (read outside the timed build).
        let sched_start = profiling.then(stages::thread_sched).flatten();
        let build_start = profiling.then(Instant::now);
        let ops = source.pipeline.op_names().len();
        // Stage slots: read_decode, the ops, to_tensor, the fingerprint.
        let (to_tensor, fingerprint) = (ops + 1, ops + 2);
        if profiling {
            self.stages.reset(ops + 3);
        }
        let shape = source.pipeline.output_shape();
        let plane = shape.len();
        let (epoch, indices) = self.sampler.batch(k);
        batch.index = k;
        batch.epoch = epoch;
        batch.len = indices.len();
        batch.shape = shape;
        if let Err(e) = batch
            .images
            .ensure(source.cfg.batch_size * plane, source.memory.as_deref())
        {
            panic!("cannot allocate a batch buffer: {e}");
        }
        batch.labels.resize(source.cfg.batch_size, 0);
        // Emulated storage delivers each image before it is decoded (one request at a time, or
        // `loader.read_ahead` kept in flight); a sleep, timed on every batch.
        // The batch's indices, in a buffer of the builder's own (no allocation per batch), so
        // the read-ahead may ask the sampler for the next batch's.
        let mut mine = std::mem::take(&mut self.indices);
        mine.clear();
        mine.extend_from_slice(indices);
        let indices = mine;
        let mut asleep = Duration::ZERO;
        let mut stored = false;
        let images = batch.images.as_mut_slice();
        for (slot, &i) in indices.iter().enumerate() {
            if let Some(slept) = self.read(source, k, &indices, slot) {
                stored = true;
                asleep += slept;
            }
            // The next image's bytes are on their way while this one is transformed (a random
            // read from a dataset of tens of MB misses every cache).
            if let Some(&next) = indices.get(slot + 1) {
                source.dataset.storage().prefetch(next as usize);
            }
            // The traced image (the first) is never a timed one: its spans wake the trace's
            // writer thread, which competes for the core during the next stages.
            let timed = profiling && slot % STAGE_SAMPLE == STAGE_SAMPLE / 2;
            let traced = profiling && slot == 0;
            let i = i as usize;
            let input = {
                let _span = traced.then(|| spans::stage_span(spans::READ_DECODE).entered());
                let start = timed.then(Instant::now);
                let crop = |shape| source.pipeline.leading_crop(shape, epoch, i as u64);
                let input = source.dataset.read_region(i, &mut self.pixels, &crop)?;
                if let Some(start) = start {
                    self.stages.add(0, start);
                }
                input
            };
            batch.labels[slot] = source.dataset.label(i) as u32;
            source.pipeline.apply(
                Input::new(&self.pixels, input.shape, epoch, i as u64).region(input.region),
                &mut self.scratch,
                Target::Tensor(&mut images[slot * plane..(slot + 1) * plane]),
                Observe {
                    ns: timed.then(|| &mut self.stages.ns[1..=to_tensor]),
                    traced,
                },
            );
            if timed {
                for c in &mut self.stages.count[1..=to_tensor] {
                    *c += 1;
                }
            }
        }
        self.indices = indices;
        if profiling && stored {
            self.stages.storage_ns = Some(asleep.as_nanos() as u64);
        }
        {
            let _span = profiling.then(|| spans::stage_span(spans::FINGERPRINT).entered());
            let start = profiling.then(Instant::now);
            let mut fp = Fingerprint::default();
            fp.floats(batch.images());
            fp.labels(batch.labels());
            batch.fingerprint = fp.finish();
            if let Some(start) = start {
                self.stages.add(fingerprint, start);
            }
        }
        if let Some(start) = build_start {
            let build_ns = start.elapsed().as_nanos() as u64;
            let sched = sched_start
                .zip(stages::thread_sched())
                .map(|(a, b)| (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1)));
            source.stages.add_batch(&self.stages, build_ns, sched);
        }
        Ok(())
    }

    /// [`Builder::build`] as worker `worker` does it (`None`: the training thread, with
    /// `workers = 0`): inside a `build_batch` trace span, with an unreadable sample or a panic
    /// (a bad dataset, a failed allocation) turned into an error naming who built which batch.
    fn build_caught(
        &mut self,
        source: &Source,
        worker: Option<usize>,
        k: u64,
        batch: &mut Batch,
    ) -> Result<(), LoaderError> {
        let built = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let span = tracing::info_span!(spans::BUILD_BATCH, batch = k);
            // Only a profiled run records spans: then a sample of images is timed by stage.
            let profiling =
                !span.is_disabled() || source.clocked.load(std::sync::atomic::Ordering::Relaxed);
            let _span = span.entered();
            self.build(source, k, batch, profiling)
        }));
        match built {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(LoaderError::Sample {
                worker,
                batch: k,
                message: e.to_string(),
            }),
            Err(panic) => {
                let message = panic_message(&panic);
                Err(match worker {
                    Some(worker) => LoaderError::WorkerPanicked {
                        worker,
                        batch: k,
                        message,
                    },
                    None => LoaderError::BuildPanicked { batch: k, message },
                })
            }
        }
    }
}

/// Builds batch *k* exactly as a loader worker does, on the calling thread: the loader's unit
/// of work, for measurements that need it without the hand-off (`bench`'s ceiling).
pub struct BatchBuilder {
    source: Source,
    builder: Builder,
}

impl BatchBuilder {
    pub fn new(dataset: Arc<dyn Dataset>, pipeline: Arc<Pipeline>, cfg: LoaderConfig) -> Self {
        let source = Source::new(dataset, pipeline, cfg, None);
        BatchBuilder {
            builder: Builder::new(&source),
            source,
        }
    }

    /// Build batch `k` into `batch`; a panic is an error naming `thread` and the batch.
    pub fn build(&mut self, thread: usize, k: u64, batch: &mut Batch) -> Result<(), LoaderError> {
        self.builder
            .build_caught(&self.source, Some(thread), k, batch)
    }
}

enum Mode {
    /// workers = 0: the calling thread builds each batch.
    /// With page-locked memory (CUDA) two buffers take turns, so building batch k+1 never
    /// waits for the device to finish copying batch k (PyTorch's pin_memory at 0 workers does
    /// not wait either); in ordinary memory one buffer is enough.
    Serial {
        builder: Box<Builder>,
        buffers: Vec<Batch>,
        next: u64,
    },
    Parallel(Box<Pool>),
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
        if cfg.batch_size == 0
            || (cfg.drop_last && cfg.shard.len(len, true) < cfg.batch_size)
            || len == 0
        {
            return Err(LoaderError::NoBatch {
                len,
                batch_size: cfg.batch_size,
            });
        }
        let source = Arc::new(Source::new(dataset, pipeline, cfg, memory));
        let batches_per_epoch = Sampler::new(len, &source.cfg, None).batches_per_epoch;
        let mode = if source.cfg.workers == 0 {
            let buffers = source.cfg.buffers(source.memory.is_some());
            Mode::Serial {
                builder: Box::new(Builder::new(&source)),
                buffers: (0..buffers).map(|_| Batch::default()).collect(),
                next: 0,
            }
        } else {
            let end = (!source.cfg.persistent_workers).then_some(batches_per_epoch);
            Mode::Parallel(Box::new(Pool::start(&source, 0, end)?))
        };
        Ok(Loader {
            source,
            mode,
            batches_per_epoch,
            startup: started.elapsed(),
            restarts: 0,
        })
    }

    /// Run the stage clocks outside a profiled run too (a watched loader: one image in
    /// [`STAGE_SAMPLE`] timed stage by stage, every batch's build), from the next batch a
    /// builder starts.
    pub fn clock_stages(&self, on: bool) {
        self.source
            .clocked
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Start the stage clocks' counts afresh.
    pub fn reset_stage_clocks(&self) {
        self.source.stages.reset();
    }

    /// What the stage clocks measured so far (profiled runs only; zeros otherwise).
    pub fn stage_totals(&self) -> StageTotals {
        self.source.stages.snapshot()
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
        if let Mode::Parallel(_) = self.mode {
            return self.pool_for_next()?.next();
        }
        match &mut self.mode {
            Mode::Serial {
                builder,
                buffers,
                next,
            } => {
                let k = *next;
                *next += 1;
                let n = buffers.len() as u64;
                let batch = &mut buffers[(k % n) as usize];
                builder.build_caught(&self.source, None, k, batch)?;
                Ok(batch)
            }
            Mode::Parallel(_) => unreachable!("handled above"),
        }
    }

    /// The next batch, in order, taken out of the loader: its buffer travels with it (to a
    /// tensor that shares its memory, in the Python module) and `spare` takes its place in the
    /// loader, so a batch kept for any time never holds the loader up. Pass a batch given back
    /// earlier as `spare` to reuse its buffer (a default `Batch` allocates at its first build).
    pub fn next_owned(&mut self, spare: Batch) -> Result<Batch, LoaderError> {
        match &mut self.mode {
            Mode::Serial { builder, next, .. } => {
                let mut batch = spare;
                builder.build_caught(&self.source, None, *next, &mut batch)?;
                *next += 1;
                Ok(batch)
            }
            Mode::Parallel(_) => self.pool_for_next()?.next_owned(spare),
        }
    }

    /// The batch [`Loader::next_batch`] gives next (counting across epochs from 0).
    pub fn position(&self) -> u64 {
        match &self.mode {
            Mode::Serial { next, .. } => *next,
            Mode::Parallel(pool) => pool.next,
        }
    }

    /// Go on from batch `first` (the first of an epoch, to set the epoch): the workers are
    /// stopped and started again there; batches already built are dropped.
    pub fn restart_at(&mut self, first: u64) -> Result<(), LoaderError> {
        match &mut self.mode {
            Mode::Serial { next, .. } => *next = first,
            Mode::Parallel(pool) => {
                let end = (!self.source.cfg.persistent_workers)
                    .then(|| (first / self.batches_per_epoch + 1) * self.batches_per_epoch);
                // The old workers stop before the new ones start (two pools never compete).
                pool.stop();
                **pool = Pool::start(&self.source, first, end)?;
            }
        }
        Ok(())
    }

    /// The worker pool, started afresh at an epoch boundary for non-persistent workers (as
    /// PyTorch does).
    fn pool_for_next(&mut self) -> Result<&mut Pool, LoaderError> {
        let Mode::Parallel(pool) = &mut self.mode else {
            unreachable!("only a loader with workers has a pool")
        };
        if pool.end == Some(pool.next) {
            let first = pool.next;
            let end = first + self.batches_per_epoch;
            **pool = Pool::start(&self.source, first, Some(end))?;
            self.restarts += 1;
        }
        Ok(pool)
    }
}

#[cfg(test)]
mod tests;
