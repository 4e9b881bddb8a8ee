//! `loaderlab._loaderlab`: the native half of the Python package. It runs the `loaderlab`
//! command in-process ([`main`]), serves one condition's batches from our loader
//! ([`NativeLoader`]), and fingerprints a batch as steps.csv does ([`fingerprint`]).
//!
//! Batches cross into torch without a copy, as DLPack capsules (`dlpack.rs`): the capsule owns
//! the batch, and the batch's buffer goes back to the loader only when torch frees the tensor.
//! The GIL is released while a batch is built or awaited, and while the workers are joined.

mod dlpack;
mod watch;

use std::path::Path;
use std::sync::{Arc, Mutex};

use clap::Parser;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use loaderlab::config::{ConfigError, Overrides, Settings, load, load_str};
use loaderlab::hash::Fingerprint;
use loaderlab::loader::{Batch, Loader, LoaderConfig, Shard};
use loaderlab::runner::DataSetup;
use loaderlab::shape::ImageShape;
use loaderlab::transforms::{Input, Observe, Pipeline, Scratch, Target};

create_exception!(
    _loaderlab,
    LoaderError,
    PyRuntimeError,
    "A batch could not be built (an unreadable sample, a failed worker) or the dataset could \
     not be opened; the message names the file, worker or batch."
);

/// Run the `loaderlab` command with `argv` (its first item the program's name) and give its
/// exit status: 0 success, 1 a failure while running, 2 an invalid experiment or argument, 130
/// interrupted. The same code as the `loaderlab` binary's `main`, in this process.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> i32 {
    // Output piped into a reader that stops early ends the command quietly, as the binary
    // does (Python ignores SIGPIPE, which would turn it into a panic in `println!`).
    // SAFETY: restoring a signal's default action; nothing of this process relies on
    // SIGPIPE being ignored while the command runs, and it exits when the command ends.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match loaderlab::cli::Cli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version print and succeed; a bad argument prints and fails.
            let _ = e.print();
            return e.exit_code();
        }
    };
    py.detach(|| match loaderlab::cli::run(cli) {
        Ok(()) => 0,
        Err(failure) => {
            let status = failure.status() as i32;
            let _ = failure.exit();
            status
        }
    })
}

/// A batch as `NativePass::next` hands it over: (images, labels, index, epoch, fingerprint).
type Handed = (Py<PyAny>, Py<PyAny>, u64, u64, String);

/// One op of a sample's chain as `NativeLoader::trace` gives it: the op's name, what it drew
/// (JSON, "null" for an op that draws nothing), and its output pixels (channels, height,
/// width, planar bytes).
type Traced = (String, String, Dims, Vec<u8>);
/// [`NativeLoader::trace`]'s answer: the image as read (its dimensions, its bytes), each op
/// traced, and the chain's tensor (its dimensions, its bytes).
type TracedSample = (Dims, Vec<u8>, Vec<Traced>, Dims, Vec<u8>);
/// Channels, height, width.
type Dims = (usize, usize, usize);

/// One condition's dataset and transform chain, opened once. Each pass over it
/// ([`NativeLoader::start`]) has a loader of its own while it runs, so live passes are
/// independent; a pass that ends parks its loader here, and the next pass goes on with it
/// (its buffers, and with `persistent_workers` its workers and the next epoch's batches they
/// built meanwhile, as a DataLoader's persistent workers do).
#[pyclass(module = "loaderlab._loaderlab")]
struct NativeLoader {
    setup: DataSetup,
    /// The condition's resolved settings (shown as TOML by the `settings` getter).
    settings: Settings,
    condition: String,
    /// The loader the last pass ended with, by (rank, ranks), and the buffers torch has freed
    /// (shared by the passes, so one freed after its pass ended serves the next).
    parked: Parked,
}

/// A loader parked between passes, with the (rank, ranks) it serves.
type Parked = Arc<Mutex<Option<((usize, usize), Loader)>>>;

#[pymethods]
impl NativeLoader {
    /// Load an experiment (`file`, or `text` named `file`), layer `set` over it as `--set`
    /// does, and open the dataset of `condition` (None: the first).
    #[new]
    #[pyo3(signature = (file, text=None, condition=None, set=Vec::new()))]
    fn new(
        py: Python<'_>,
        file: &str,
        text: Option<&str>,
        condition: Option<&str>,
        set: Vec<String>,
    ) -> PyResult<Self> {
        let overrides = Overrides::from_process(set);
        let exp = match text {
            Some(text) => load_str(Path::new(file), text, &overrides),
            None => load(Path::new(file), &overrides),
        }
        .map_err(|e| match e {
            ConfigError::Read { .. } => {
                pyo3::exceptions::PyFileNotFoundError::new_err(e.to_string())
            }
            ConfigError::Invalid { .. } => PyValueError::new_err(e.to_string()),
        })?;
        let chosen = exp
            .condition(condition)
            .map_err(|e| PyValueError::new_err(format!("condition: {file}: {e}")))?;
        let settings = chosen.settings.clone();
        // Only what the native engine cannot run is refused: the user's own Dataset.
        if let Some(dataset) = settings.users_dataset() {
            return Err(PyValueError::new_err(format!(
                "pytorch.dataset: condition {:?} reads your own Dataset ({dataset}), which only \
                 PyTorch's DataLoader runs; loaderlab.Loader builds the batches of a declared \
                 [dataset] and [[transforms]]",
                chosen.name
            )));
        }
        let setup = py
            .detach(|| DataSetup::open(&settings, true))
            .map_err(|e| LoaderError::new_err(e.to_string()))?;
        Ok(NativeLoader {
            setup,
            settings,
            condition: chosen.name.clone(),
            parked: Arc::default(),
        })
    }

    /// Batches in an epoch of rank `rank` of `ranks` (a DistributedSampler's share).
    #[pyo3(signature = (rank=0, ranks=1))]
    fn batches_per_epoch(&self, rank: usize, ranks: usize) -> PyResult<u64> {
        let cfg = self.config(rank, ranks)?;
        let share = cfg.shard.len(self.setup.dataset.len(), cfg.drop_last);
        Ok(if cfg.drop_last {
            (share / cfg.batch_size) as u64
        } else {
            share.div_ceil(cfg.batch_size) as u64
        })
    }

    /// A pass over epoch `epoch` of rank `rank` of `ranks`, which ends after the epoch's
    /// batches: the loader the last pass parked where there is one (set to the epoch's first
    /// batch if it is not there already), else a loader of its own.
    #[pyo3(signature = (epoch, rank=0, ranks=1))]
    fn start(&self, py: Python<'_>, epoch: u64, rank: usize, ranks: usize) -> PyResult<NativePass> {
        let empty = self.batches_per_epoch(rank, ranks)? == 0;
        let cfg = self.config(rank, ranks)?;
        let keep = cfg.buffers(false) + 2;
        let batch_size = self.settings.loader.batch_size as usize;
        let pass = |loader: Option<Loader>| NativePass {
            left: loader.as_ref().map_or(0, |l| l.batches_per_epoch()),
            loader: Mutex::new(loader),
            returned: Arc::default(),
            keep,
            pinned: Arc::default(),
            buffers: Vec::new(),
            batch_size,
            clocked: None,
            park: Some((Arc::clone(&self.parked), (rank, ranks))),
        };
        // No whole batch with drop_last: a pass of none, as DataLoader's (no workers started).
        if empty {
            return Ok(pass(None));
        }
        let parked = {
            let mut slot = self.parked.lock().unwrap_or_else(|p| p.into_inner());
            match slot.take() {
                Some((key, loader)) if key == (rank, ranks) => Some(loader),
                other => {
                    *slot = other;
                    None
                }
            }
        };
        let (dataset, pipeline) = (
            Arc::clone(&self.setup.dataset),
            Arc::clone(&self.setup.pipeline),
        );
        let loader = py
            .detach(|| {
                let mut loader = match parked {
                    Some(loader) => loader,
                    None => Loader::new(dataset, pipeline, cfg)?,
                };
                let first = epoch * loader.batches_per_epoch();
                if loader.position() != first {
                    loader.restart_at(first)?;
                }
                Ok::<_, loaderlab::loader::LoaderError>(loader)
            })
            .map_err(|e| LoaderError::new_err(e.to_string()))?;
        Ok(pass(Some(loader)))
    }

    /// Stop the loader parked between passes (its workers joined, its buffers freed).
    fn close(&self, py: Python<'_>) {
        let parked = self.parked.lock().unwrap_or_else(|p| p.into_inner()).take();
        py.detach(|| drop(parked));
    }

    /// Sample `index` of `epoch` through the chain op by op: its image as read (channels,
    /// height, width, planar bytes), then each pixel op's name, what it drew and its output,
    /// and the chain's final tensor (float32, native byte order) with its shape.
    fn trace(&self, py: Python<'_>, index: usize, epoch: u64) -> PyResult<TracedSample> {
        let dataset = &self.setup.dataset;
        if index >= dataset.len() {
            return Err(PyValueError::new_err(format!(
                "index {index}: the dataset holds {} images",
                dataset.len()
            )));
        }
        let specs = self.setup.pipeline.specs().to_vec();
        let seed = self.settings.experiment.seed;
        py.detach(|| {
            let mut pixels = Vec::new();
            let shape = dataset
                .read_image(index, &mut pixels)
                .map_err(|e| LoaderError::new_err(e.to_string()))?;
            let dims = |s: ImageShape| (s.channels, s.height, s.width);
            let mut steps = Vec::new();
            let mut drew = 0;
            for k in 1..=specs.len() {
                let op = specs[k - 1].op();
                if op.compile().is_none() {
                    continue;
                }
                let prefix = Pipeline::new(&specs[..k], seed, shape);
                let mut scratch = Scratch::default();
                let params = prefix.apply(
                    Input::new(&pixels, shape, epoch, index as u64),
                    &mut scratch,
                    Target::Pixels,
                    Observe::default(),
                );
                let new = params.ops.get(drew).filter(|_| params.ops.len() > drew);
                let json = match new {
                    Some(p) => serde_json::to_string(p).unwrap_or_default(),
                    None => "null".into(),
                };
                drew = params.ops.len();
                steps.push((
                    specs[k - 1].op_name().to_string(),
                    json,
                    dims(scratch.shape()),
                    scratch.pixels().to_vec(),
                ));
            }
            let full = Pipeline::new(&specs, seed, shape);
            let out_shape = full.output_shape();
            let mut tensor = vec![0f32; out_shape.len()];
            let mut scratch = Scratch::default();
            full.apply(
                Input::new(&pixels, shape, epoch, index as u64),
                &mut scratch,
                Target::Tensor(&mut tensor),
                Observe::default(),
            );
            let bytes = tensor.iter().flat_map(|v| v.to_ne_bytes()).collect();
            Ok((dims(shape), pixels, steps, dims(out_shape), bytes))
        })
    }

    /// Images in the dataset.
    #[getter]
    fn dataset_len(&self) -> usize {
        self.setup.dataset.len()
    }

    #[getter]
    fn batch_size(&self) -> usize {
        self.settings.loader.batch_size as usize
    }

    /// `loader.pin_memory`: the Python side page-locks each buffer once, where torch has CUDA.
    #[getter]
    fn pin_memory(&self) -> bool {
        self.settings.loader.pin_memory
    }

    /// The experiment's seed (the shuffle order and every random parameter derive from it).
    #[getter]
    fn seed(&self) -> u64 {
        self.settings.experiment.seed
    }

    /// The condition's `[[transforms]]`, as a JSON list of tables (what `check` replays).
    #[getter]
    fn transforms(&self) -> PyResult<String> {
        serde_json::to_string(&self.settings.transforms)
            .map_err(|e| PyValueError::new_err(e.to_string()))
    }

    #[getter]
    fn condition(&self) -> &str {
        &self.condition
    }

    /// The condition's loader, dataset and transform settings, as TOML tables.
    #[getter]
    fn settings(&self) -> PyResult<String> {
        #[derive(serde::Serialize)]
        struct Shown<'a> {
            experiment: &'a loaderlab::config::ExperimentSection,
            dataset: &'a loaderlab::config::DatasetSection,
            transforms: &'a [loaderlab::config::TransformSpec],
            loader: &'a loaderlab::config::LoaderSection,
        }
        let s = &self.settings;
        toml::to_string(&Shown {
            experiment: &s.experiment,
            dataset: &s.dataset,
            transforms: &s.transforms,
            loader: &s.loader,
        })
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }
}

impl NativeLoader {
    /// The loader settings for rank `rank` of `ranks`.
    fn config(&self, rank: usize, ranks: usize) -> PyResult<LoaderConfig> {
        if ranks == 0 || rank >= ranks {
            return Err(PyValueError::new_err(format!(
                "rank {rank} of {ranks}: the rank must be below the number of replicas"
            )));
        }
        let mut cfg = LoaderConfig::from_settings(&self.settings);
        cfg.shard = Shard { rank, ranks };
        Ok(cfg)
    }
}

/// One pass (one epoch) over a condition's batches, each handed over as a pair of DLPack
/// capsules; a loader of its own while it runs, parked for the next pass at the pass's end or
/// on `close` (stopped instead where another is parked already).
#[pyclass(module = "loaderlab._loaderlab")]
struct NativePass {
    /// None once closed. (A mutex only to make the class `Sync`, as PyO3 asks: every method
    /// takes `&mut self`, so it is never locked.)
    loader: Mutex<Option<Loader>>,
    /// Batches left in the pass.
    left: u64,
    /// Buffers whose tensors torch has freed, waiting to be built into again.
    returned: Arc<Mutex<Vec<Batch>>>,
    /// The most returned buffers kept (the loader's own plus two the caller may still hold).
    keep: usize,
    /// The buffers the Python side page-locked, by address: always kept (see `pin`).
    pinned: Arc<Mutex<Vec<usize>>>,
    /// Every image buffer a batch has been handed over in, as (address, bytes).
    buffers: Vec<(usize, usize)>,
    batch_size: usize,
    /// The stage clocks as the pass closed (a watched pass).
    clocked: Option<loaderlab::loader::StageTotals>,
    /// Where the loader is parked when the pass ends, for the next pass (with the (rank,
    /// ranks) it serves).
    park: Option<(Parked, (usize, usize))>,
}

#[pymethods]
impl NativePass {
    /// Run the loader's stage clocks (one image in 8 timed op by op, every batch's build), for
    /// `loaderlab.watch`.
    fn clock_stages(&mut self, on: bool) {
        if let Ok(loader) = self.loader() {
            // This pass's counts only (a parked loader carries the last pass's).
            loader.reset_stage_clocks();
            loader.clock_stages(on);
        }
    }

    /// What the stage clocks measured so far in this pass (JSON), as it closed if closed.
    fn stage_totals(&mut self) -> PyResult<String> {
        let totals = match self.loader() {
            Ok(loader) => loader.stage_totals(),
            Err(_) => self.clocked.clone().unwrap_or_default(),
        };
        serde_json::to_string(&totals).map_err(|e| PyValueError::new_err(e.to_string()))
    }

    /// The next batch: (images, labels, index, epoch, fingerprint), the first two DLPack
    /// capsules (float32 N×C×H×W and int64 N) that torch.from_dlpack takes without a copy;
    /// None after the pass's last batch (the workers then stop).
    fn next(&mut self, py: Python<'_>) -> PyResult<Option<Handed>> {
        if self.left == 0 {
            self.close(py);
            return Ok(None);
        }
        let spare = self
            .returned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()
            .unwrap_or_default();
        let loader = self.loader()?;
        let built = py.detach(|| loader.next_owned(spare));
        // Ctrl-C while the batch was awaited: KeyboardInterrupt, here rather than later; the
        // batch built meanwhile goes back to the loader's buffers, not dropped.
        if let Err(interrupted) = py.check_signals() {
            if let Ok(batch) = built {
                self.returned
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(batch);
            }
            return Err(interrupted);
        }
        let batch = built.map_err(|e| LoaderError::new_err(e.to_string()))?;
        self.left -= 1;
        let buffer = (
            batch.images().as_ptr() as usize,
            self.batch_size * batch.shape.len() * size_of::<f32>(),
        );
        if !self.buffers.contains(&buffer) {
            self.buffers.push(buffer);
        }
        let (index, epoch) = (batch.index, batch.epoch);
        let fingerprint = format!("{:016x}", batch.fingerprint);
        let labels: Vec<i64> = batch.labels().iter().map(|&l| l as i64).collect();
        let labels = dlpack::labels(py, labels)?;
        let images = dlpack::images(
            py,
            batch,
            Arc::clone(&self.returned),
            self.keep,
            Arc::clone(&self.pinned),
        )?;
        Ok(Some((images, labels, index, epoch, fingerprint)))
    }

    /// Batches left in the pass.
    #[getter]
    fn left(&self) -> u64 {
        self.left
    }

    /// Stop the workers and join them (also at the pass's end, on `del` and at interpreter
    /// exit). Tensors already handed out stay valid: each owns its buffer.
    fn close(&mut self, py: Python<'_>) {
        if let Some(loader) = self
            .loader
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            self.clocked = Some(loader.stage_totals());
            loader.clock_stages(false);
            // Parked for the next pass where the slot is free; else stopped here.
            let rest = match &self.park {
                Some((slot, key)) => {
                    let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
                    if slot.is_none() {
                        *slot = Some((*key, loader));
                        None
                    } else {
                        Some(loader)
                    }
                }
                None => Some(loader),
            };
            py.detach(|| drop(rest));
        }
        self.returned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        // The Python side unregistered them before closing.
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Every image buffer a batch has been handed over in so far, as (address, bytes): a
    /// tensor from this pass points inside one of them.
    fn buffers(&self) -> Vec<(usize, usize)> {
        self.buffers.clone()
    }

    /// Record that the Python side page-locked the buffer at `start` (cudaHostRegister): it is
    /// kept, never freed, until `pinned` has been unregistered and the pass closed.
    fn pin(&self, start: usize) {
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        if !pinned.contains(&start) {
            pinned.push(start);
        }
    }

    /// The page-locked buffers, as (address, bytes), for the Python side to unregister
    /// (cudaHostUnregister) before `close` frees them.
    fn pinned(&self) -> Vec<(usize, usize)> {
        let pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        self.buffers
            .iter()
            .copied()
            .filter(|(start, _)| pinned.contains(start))
            .collect()
    }
}

impl NativePass {
    fn loader(&mut self) -> PyResult<&mut Loader> {
        let loader = self.loader.get_mut().unwrap_or_else(|p| p.into_inner());
        loader
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("the pass is closed"))
    }
}

/// The fingerprint steps.csv records for a batch: `images` a DLPack capsule of contiguous
/// float32 on the CPU, `labels` one of integers (any width).
#[pyfunction]
fn fingerprint(images: &Bound<'_, PyAny>, labels: &Bound<'_, PyAny>) -> PyResult<String> {
    let mut fp = Fingerprint::default();
    dlpack::read(images, "images", |view| match view {
        dlpack::View::F32(values) => {
            fp.floats(values);
            Ok(())
        }
        _ => Err(PyTypeError::new_err("images: expected float32 values")),
    })?;
    let labels: Vec<u32> = dlpack::read(labels, "labels", |view| match view {
        dlpack::View::I64(values) => Ok(values.iter().map(|&l| l as u32).collect()),
        dlpack::View::I32(values) => Ok(values.iter().map(|&l| l as u32).collect()),
        _ => Err(PyTypeError::new_err(
            "labels: expected int64 or int32 values",
        )),
    })?;
    fp.labels(&labels);
    Ok(format!("{:016x}", fp.finish()))
}

#[pymodule]
fn _loaderlab(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(fingerprint, m)?)?;
    m.add_class::<NativeLoader>()?;
    m.add_class::<NativePass>()?;
    m.add_class::<watch::Recorder>()?;
    m.add_function(wrap_pyfunction!(watch::complete, m)?)?;
    m.add_function(wrap_pyfunction!(watch::add_stage_totals, m)?)?;
    m.add("LoaderError", m.py().get_type::<LoaderError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
