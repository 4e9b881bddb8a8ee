//! `loaderlab._loaderlab`: the native half of the Python package. It runs the `loaderlab`
//! command in-process ([`main`]), serves one condition's batches from our loader
//! ([`NativeLoader`]), and fingerprints a batch as steps.csv does ([`fingerprint`]).
//!
//! Batches cross into torch without a copy, as DLPack capsules (`dlpack.rs`): the capsule owns
//! the batch, and the batch's buffer goes back to the loader only when torch frees the tensor.
//! The GIL is released while a batch is built or awaited, and while the workers are joined.

mod dlpack;

use std::path::Path;
use std::sync::{Arc, Mutex};

use clap::Parser;
use pyo3::create_exception;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use loaderlab::config::{ConfigError, Overrides, Settings, load, load_str};
use loaderlab::hash::Fingerprint;
use loaderlab::loader::{Batch, Loader, LoaderConfig};
use loaderlab::runner::DataSetup;

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

/// A batch as `NativeLoader::next` hands it over: (images, labels, index, epoch, fingerprint).
type Handed = (Py<PyAny>, Py<PyAny>, u64, u64, String);

/// One condition's batches from our loader, each handed over as a pair of DLPack capsules.
#[pyclass(module = "loaderlab._loaderlab")]
struct NativeLoader {
    /// None once closed. (A mutex only to make the class `Sync`, as PyO3 asks: every method
    /// takes `&mut self`, so it is never locked.)
    loader: Mutex<Option<Loader>>,
    /// Buffers whose tensors torch has freed, waiting to be built into again.
    returned: Arc<Mutex<Vec<Batch>>>,
    /// The most returned buffers kept (the loader's own plus two the caller may still hold).
    keep: usize,
    /// The buffers the Python side page-locked, by address: always kept (see `pin`).
    pinned: Arc<Mutex<Vec<usize>>>,
    /// Every image buffer a batch has been handed over in, as (address, bytes).
    buffers: Vec<(usize, usize)>,
    batches_per_epoch: u64,
    batch_size: usize,
    images: usize,
    /// The condition's resolved settings (shown as TOML by the `settings` getter).
    settings: Settings,
    condition: String,
}

#[pymethods]
impl NativeLoader {
    /// Load an experiment (`file`, or `text` named `file`), layer `set` over it as `--set`
    /// does, and start the loader of `condition` (None: the first).
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
        if settings.users_dataset().is_some() {
            return Err(PyValueError::new_err(format!(
                "pytorch.dataset: condition {:?} reads your own Dataset ({}), which only \
                 PyTorch's DataLoader runs; loaderlab.Loader builds the batches of a declared \
                 [dataset] and [[transforms]]",
                chosen.name, settings.pytorch.dataset
            )));
        }
        let (setup, loader) = py
            .detach(|| {
                let setup = DataSetup::open(&settings, true).map_err(|e| e.to_string())?;
                let loader = setup.loader().map_err(|e| e.to_string())?;
                Ok::<_, String>((setup, loader))
            })
            .map_err(LoaderError::new_err)?;
        let cfg = LoaderConfig::from_settings(&settings);
        Ok(NativeLoader {
            batches_per_epoch: loader.batches_per_epoch(),
            keep: cfg.buffers(false) + 2,
            loader: Mutex::new(Some(loader)),
            returned: Arc::default(),
            pinned: Arc::default(),
            buffers: Vec::new(),
            batch_size: cfg.batch_size,
            images: setup.dataset.len(),
            settings,
            condition: chosen.name.clone(),
        })
    }

    /// The next batch: (images, labels, index, epoch, fingerprint), the first two DLPack
    /// capsules (float32 N×C×H×W and int64 N) that torch.from_dlpack takes without a copy.
    fn next(&mut self, py: Python<'_>) -> PyResult<Handed> {
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
        Ok((images, labels, index, epoch, fingerprint))
    }

    /// The batch the next call of `next` builds, counting across epochs from 0.
    fn position(&mut self) -> PyResult<u64> {
        Ok(self.loader()?.position())
    }

    /// Go on from batch `first` (the first batch of an epoch, for `set_epoch`).
    fn restart_at(&mut self, py: Python<'_>, first: u64) -> PyResult<()> {
        let loader = self.loader()?;
        py.detach(|| loader.restart_at(first))
            .map_err(|e| LoaderError::new_err(e.to_string()))
    }

    /// Stop the workers and join them (also on `del` and at interpreter exit). Tensors
    /// already handed out stay valid: each owns its buffer.
    fn close(&mut self, py: Python<'_>) {
        if let Some(loader) = self
            .loader
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            py.detach(|| drop(loader));
        }
        self.returned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    #[getter]
    fn batches_per_epoch(&self) -> u64 {
        self.batches_per_epoch
    }

    #[getter]
    fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// `loader.pin_memory`: the Python side page-locks each buffer once, where torch has CUDA.
    #[getter]
    fn pin_memory(&self) -> bool {
        self.settings.loader.pin_memory
    }

    /// Images in the dataset.
    #[getter]
    fn dataset_len(&self) -> usize {
        self.images
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

    /// Every image buffer a batch has been handed over in so far, as (address, bytes): a
    /// tensor from this loader points inside one of them.
    fn buffers(&self) -> Vec<(usize, usize)> {
        self.buffers.clone()
    }

    /// Record that the Python side page-locked the buffer at `start` (cudaHostRegister): it is
    /// kept, never freed, until `pinned` has been unregistered and the loader closed.
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

impl NativeLoader {
    fn loader(&mut self) -> PyResult<&mut Loader> {
        let loader = self.loader.get_mut().unwrap_or_else(|p| p.into_inner());
        loader
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("the loader is closed"))
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
    m.add("LoaderError", m.py().get_type::<LoaderError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
