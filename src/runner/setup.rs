//! One condition resolved once into ready parts (ripgrep's low-args → high-args): the dataset
//! and transform pipeline ([`DataSetup`], all that `bench` and `preview` need), plus the device
//! and compute threads ([`Setup`], what a training run needs).
//!
//! Invariant: conditions with the same dataset section share one opened dataset, and
//! conditions on the same device share one device, so every condition sees the same data.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use candle_core::Device;

use crate::config::{DatasetSection, DeviceKind, Settings};
use crate::data::{self, DataError, Dataset};
use crate::loader::{Loader, LoaderConfig, LoaderError, Shard};
use crate::net::Network;
use crate::results::{ComputeDevice, ConditionMeta, EngineRecord};
use crate::train::{self, ComputePool, DeviceError, ModelInput};
use crate::transforms::Pipeline;

/// The data side of a condition: its settings, the opened dataset and the transform pipeline.
pub struct DataSetup {
    pub settings: Settings,
    /// The dataset behind its emulated storage, if any.
    pub dataset: Arc<dyn Dataset>,
    /// The same without the emulated storage (a rank with storage of its own wraps this).
    local: Arc<dyn Dataset>,
    pub pipeline: Arc<Pipeline>,
}

impl DataSetup {
    /// Open the dataset (downloading it if the settings allow) and build the pipeline.
    pub fn open(settings: &Settings, quiet: bool) -> Result<DataSetup, DataError> {
        Ok(Self::with_dataset(
            settings,
            data::open_local(&settings.dataset, settings.experiment.seed, quiet)?,
        ))
    }

    /// The pipeline over `local`, put behind the settings' emulated storage.
    fn with_dataset(settings: &Settings, local: Arc<dyn Dataset>) -> DataSetup {
        DataSetup {
            pipeline: Arc::new(Pipeline::new(
                &settings.transforms,
                settings.experiment.seed,
                local.shape(),
            )),
            settings: settings.clone(),
            dataset: data::stored(Arc::clone(&local), &settings.dataset.storage),
            local,
        }
    }

    /// Rank `rank`'s dataset and pipeline: the condition's, but for what its
    /// `[[distributed.rank]]` table changes (storage of its own, extra CPU work per image).
    pub fn of_rank(&self, rank: usize) -> (Arc<dyn Dataset>, Arc<Pipeline>) {
        let s = &self.settings;
        let Some(o) = s.distributed.of_rank(rank) else {
            return (Arc::clone(&self.dataset), Arc::clone(&self.pipeline));
        };
        let dataset = if o.storage.emulated() {
            data::stored(Arc::clone(&self.local), &o.storage)
        } else {
            Arc::clone(&self.dataset)
        };
        let pipeline = if o.cpu_work_us > 0.0 {
            Arc::new(Pipeline::new(
                &o.transforms(&s.transforms),
                s.experiment.seed,
                self.local.shape(),
            ))
        } else {
            Arc::clone(&self.pipeline)
        };
        (dataset, pipeline)
    }

    /// What the model trains on: the pipeline's output and the dataset's classes.
    pub fn model_input(&self) -> ModelInput {
        // The user's own Dataset declares its items ([pytorch] image_shape, classes).
        if let Some(items) = self
            .settings
            .users_dataset()
            .and(self.settings.pytorch.items())
        {
            return items;
        }
        ModelInput {
            shape: self.pipeline.output_shape(),
            classes: self.dataset.classes(),
        }
    }

    /// The `[model]` network built for this data; none for the stand-in step.
    pub fn network(&self) -> Result<Option<Network>, SetupError> {
        let Some(architecture) = self.settings.model.architecture() else {
            return Ok(None);
        };
        Network::new(&architecture, self.model_input())
            .map(Some)
            .map_err(|e| SetupError::Model {
                key: e.key,
                message: e.message,
            })
    }

    /// A loader over this condition's data with its loader settings.
    pub fn loader(&self) -> Result<Loader, LoaderError> {
        Loader::new(
            Arc::clone(&self.dataset),
            Arc::clone(&self.pipeline),
            LoaderConfig::from_settings(&self.settings),
        )
    }
}

/// What one condition's step runs, resolved once from `[model]`, `[device]`, `[distributed]`
/// and the device chosen: the one answer to "is this a stand-in?", "on what?" and "how many
/// ranks?" that the runner and its records ask.
#[derive(Clone)]
pub struct Workload {
    pub step: Step,
    /// Where the step runs: the CPU, a GPU, or (the stand-in on the CPU) the emulated device.
    pub device: ComputeDevice,
    /// Ranks on the node, one device step and one loader each (1 without `[distributed]`).
    ranks: usize,
}

/// The step itself.
#[derive(Clone)]
pub enum Step {
    /// A network trained with the experiment's optimizer.
    Network(Network),
    /// The user's step replayed: the host's declared CPU time, then the declared device time
    /// (a kernel on CUDA, the emulated device's sleep on the CPU).
    StandIn(StandInStep),
}

/// The stand-in's two sides (`[model]` of `kind = "stand_in"`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StandInStep {
    /// The device's time per step (`model.step_ms`), ms.
    pub step_ms: f64,
    /// The all-reduce's device time added to every step (`distributed.allreduce_ms`).
    pub allreduce_ms: f64,
    /// The host's CPU time per step (`model.host_ms`), ms, on each of `host_threads` cores.
    pub host_ms: f64,
    pub host_threads: u64,
}

impl StandInStep {
    pub fn of(s: &Settings) -> StandInStep {
        StandInStep {
            step_ms: s.model.step_ms,
            allreduce_ms: s.distributed.allreduce_ms,
            host_ms: s.model.host_ms,
            host_threads: s.model.host_threads.max(1),
        }
    }

    /// The device's time per step, the all-reduce's included.
    pub fn device_ms(&self) -> f64 {
        self.step_ms + self.allreduce_ms
    }

    /// No device time: the step is all host, synchronous, as a CPU job's step is.
    pub fn all_host(&self) -> bool {
        self.device_ms() <= 0.0
    }

    /// How the report names it: "stand-in step of 40 ms" (device only), "stand-in step: 12 ms
    /// on the host, then 40 ms on the device", "stand-in step: 30 ms on the host (2 threads),
    /// no device".
    pub fn name(&self) -> String {
        let threads = if self.host_threads > 1 {
            format!(" ({} threads)", self.host_threads)
        } else {
            String::new()
        };
        let host = format!("{} ms on the host{threads}", self.host_ms);
        match (self.host_ms > 0.0, self.step_ms > 0.0) {
            (false, _) => stand_in_name(self.step_ms),
            (true, true) => format!(
                "stand-in step: {host}, then {} ms on the device",
                self.step_ms
            ),
            (true, false) => format!("stand-in step: {host}, no device"),
        }
    }
}

impl Workload {
    /// The network, unless the step is a stand-in.
    pub fn network(&self) -> Option<&Network> {
        match &self.step {
            Step::Network(n) => Some(n),
            Step::StandIn(_) => None,
        }
    }

    /// The stand-in's two sides, when the step is one.
    pub fn stand_in(&self) -> Option<StandInStep> {
        match self.step {
            Step::StandIn(s) => Some(s),
            Step::Network(_) => None,
        }
    }

    /// Ranks on the node (1 without `[distributed]`).
    pub fn ranks(&self) -> usize {
        self.ranks
    }

    /// What trains, as the report names it everywhere a model is named.
    pub fn name(&self) -> String {
        match &self.step {
            Step::Network(net) => net.describe(),
            Step::StandIn(s) => s.name(),
        }
    }
}

/// Everything one condition's training runs need, built once.
pub struct Setup {
    pub data: DataSetup,
    /// Each rank's device (one entry without `[distributed]`): on CUDA one GPU per rank, at
    /// ordinals `device.ordinal`, `device.ordinal + 1`, …; elsewhere the same device for all.
    devices: Vec<Device>,
    /// The step, its device kind and its ranks.
    pub workload: Workload,
    /// A person's name for the device, e.g. "cpu (2 threads)".
    pub device_name: String,
    /// Compute threads of the training step (the CPU's; on CUDA the host side's), resolved
    /// once here from `device.threads` by [`train::CoreBudget`].
    pub threads: usize,
    /// The machine's cores that `threads` was resolved against.
    pub cores: train::CoreBudget,
    pub pool: Arc<ComputePool>,
    /// What was set on the CUDA device's memory pool, for run.json.
    pub memory_pool: Option<String>,
    /// The engine that feeds the step, as the results record it (the pytorch engine's
    /// interpreter and versions probed once here).
    pub engine: EngineRecord,
}

impl Setup {
    pub fn settings(&self) -> &Settings {
        &self.data.settings
    }

    /// Rank `rank`'s device.
    pub fn device(&self, rank: usize) -> &Device {
        &self.devices[rank]
    }

    /// Rank `rank`'s loader (rank 0's is the only one without `[distributed]`): its share of
    /// every epoch, its own workers, batch buffers that suit the device (page-locked on CUDA
    /// when asked for).
    pub fn loader(&self, rank: usize) -> Result<Loader, LoaderError> {
        let s = self.settings();
        let (dataset, pipeline) = self.data.of_rank(rank);
        let mut cfg = LoaderConfig::from_settings(s);
        cfg.shard = Shard {
            rank,
            ranks: self.workload.ranks(),
        };
        Loader::with_memory(
            dataset,
            pipeline,
            cfg,
            train::pinned_memory(self.device(rank), s.loader.pin_memory),
        )
    }

    /// The warning for more loader workers plus the step's threads than cores (a CPU step's
    /// compute threads, a stand-in's host side's).
    pub fn contention(&self, condition: &str) -> Option<String> {
        let workers = self.settings().loader.workers;
        let threads = self.meta(condition).step_threads() as usize;
        let cores = self.cores.cores;
        (threads > 0 && workers as usize + threads > cores).then(|| {
            format!(
                "{condition}: {workers} loader workers + {threads} training-step threads exceed \
                     the {cores} cores of this machine; workers and training compete for cores, \
                     so the comparison measures contention as much as loading"
            )
        })
    }

    /// What `run.json` records of this condition.
    pub fn meta(&self, condition: &str) -> ConditionMeta {
        let s = self.settings();
        let on_cpu = self.workload.device != ComputeDevice::Cuda;
        ConditionMeta {
            name: condition.to_string(),
            device: self.device_name.clone(),
            compute_device: self.workload.device,
            cpu_threads: self.threads,
            workers: s.loader.workers,
            dataset: match s.users_dataset() {
                Some(f) => format!(
                    "your own Dataset, {f} (your code: the declared [dataset] and [[transforms]] \
                     do not apply)"
                ),
                None => self.data.dataset.describe(),
            },
            pin_memory: if !s.loader.pin_memory {
                "off".into()
            } else if on_cpu {
                "not applicable on the CPU (the emulated device's copy is a host copy)".into()
            } else {
                "on: page-locked batch buffers, asynchronous copies".into()
            },
            trace: None,
            profile_startup_ms: None,
            memory_pool: self.memory_pool.clone(),
            model: Some(self.workload.name()),
            engine: self.engine.clone(),
            stages: None,
            headroom: None,
            host: self
                .workload
                .stand_in()
                .filter(|st| st.host_ms > 0.0)
                .map(|st| crate::results::HostSide {
                    ms: st.host_ms,
                    threads: st.host_threads,
                }),
        }
    }
}

/// The settings a condition's dataset is opened with where the user's own Dataset replaces the
/// declared one, which is then never opened (nor downloaded): one synthetic image in its place.
fn placeholder(s: &Settings) -> Settings {
    Settings {
        dataset: DatasetSection {
            kind: crate::config::DatasetKind::Synthetic,
            synthetic_size: 1,
            download: false,
            ..DatasetSection::default()
        },
        ..s.clone()
    }
}

/// The device name of stand-in runs.
pub const EMULATED_DEVICE: &str = "emulated device (a thread that sleeps while busy)";

/// How the report names a stand-in run's model.
pub fn stand_in_name(step_ms: f64) -> String {
    format!("stand-in step of {step_ms} ms")
}

/// Builds [`Setup`]s, opening each distinct dataset, device and compute pool once.
#[derive(Default)]
pub struct Setups {
    datasets: Vec<(DatasetSection, Arc<dyn Dataset>)>,
    devices: HashMap<(DeviceKind, u64), train::Chosen>,
    pools: HashMap<usize, Arc<ComputePool>>,
    /// One line per device that fell back or was chosen with a remark (e.g. CUDA unusable).
    pub notices: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error("model.{key}: {message}")]
    Model { key: &'static str, message: String },
    #[error("{0}")]
    Ranks(String),
    /// The pytorch engine's interpreter lacks Python, torch or torchvision.
    #[error("{0}")]
    Engine(String),
    #[error("cannot start {threads} compute threads: {source}")]
    Pool {
        threads: usize,
        source: rayon::ThreadPoolBuildError,
    },
}

impl Setups {
    /// One line per dataset that served unreadable images as others (`on_error = "skip"`).
    pub fn skipped_images(&self) -> Vec<String> {
        self.datasets
            .iter()
            .filter(|(_, d)| d.storage().skipped() > 0)
            .map(|(_, d)| {
                format!(
                    "{}: {} reads of unreadable images were served as the next readable image \
                     (dataset.on_error = \"skip\")",
                    d.describe(),
                    d.storage().skipped()
                )
            })
            .collect()
    }

    pub fn prepare(&mut self, s: &Settings, quiet: bool) -> Result<Setup, SetupError> {
        // Opened once per dataset; each condition puts its own emulated storage in front.
        let placeholder = s.users_dataset().map(|_| placeholder(s));
        let opened = placeholder.as_ref().unwrap_or(s);
        let local_key = DatasetSection {
            storage: Default::default(),
            ..opened.dataset.clone()
        };
        let dataset = match self.datasets.iter().find(|(d, _)| *d == local_key) {
            Some((_, ds)) => Arc::clone(ds),
            None => {
                let ds = data::open_local(&opened.dataset, opened.experiment.seed, quiet)?;
                self.datasets.push((local_key, Arc::clone(&ds)));
                ds
            }
        };
        let chosen = self.device(s.device.kind, s.device.ordinal)?;
        let (device, mut name) = (chosen.device.clone(), chosen.name.clone());
        let memory_pool = chosen.memory_pool.clone();
        let on_cpu = device.is_cpu();
        let ranks = s.distributed.ranks as usize;
        let devices = if ranks > 1 && !on_cpu {
            let devices = self.rank_gpus(s)?;
            name = format!(
                "{name}, and {} more GPUs: one rank on each of cuda:{} to cuda:{}",
                ranks - 1,
                s.device.ordinal,
                s.device.ordinal + ranks as u64 - 1
            );
            devices
        } else {
            if ranks > 1 && !s.model.is_stand_in() {
                return Err(SetupError::Ranks(format!(
                    "distributed.ranks = {ranks} with a real network needs one GPU per rank, \
                     and device.kind = \"auto\" chose the CPU{}: set model.kind = \"stand_in\" \
                     to emulate the node's devices",
                    chosen
                        .notice
                        .as_deref()
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default()
                )));
            }
            vec![device.clone(); ranks]
        };
        let cores = train::CoreBudget::here();
        let threads = cores.compute_threads(s.device.threads);
        let pool = match self.pools.entry(threads) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(Arc::new(
                ComputePool::new(threads).map_err(|source| SetupError::Pool { threads, source })?,
            )),
        };
        let engine = engine_of(s, on_cpu)?;
        let data = DataSetup::with_dataset(s, dataset);
        let step = match data.network()? {
            Some(net) => Step::Network(net),
            None => Step::StandIn(StandInStep::of(s)),
        };
        // The stand-in step on the CPU is the emulated device; on CUDA, its kernel.
        // An engine whose child runs the stand-in on its own emulated device (the pytorch
        // engine's) does so whatever device `auto` would choose. A stand-in that is all host
        // runs on the CPU's cores, synchronously, as a CPU job's step: its compute threads are
        // the host side's.
        let stand_in = match &step {
            Step::StandIn(st) => Some(*st),
            Step::Network(_) => None,
        };
        let all_host = stand_in.is_some_and(|st| st.all_host());
        let emulated = stand_in.is_some() && !all_host && (on_cpu || engine.emulates_devices());
        let threads = match stand_in {
            Some(st) if all_host => st.host_threads as usize,
            _ => threads,
        };
        Ok(Setup {
            workload: Workload {
                step,
                device: if emulated {
                    ComputeDevice::Emulated
                } else if on_cpu || all_host {
                    ComputeDevice::Cpu
                } else {
                    ComputeDevice::Cuda
                },
                ranks,
            },
            data,
            devices: if all_host {
                vec![Device::Cpu; ranks]
            } else {
                devices
            },
            device_name: if emulated {
                EMULATED_DEVICE.to_string()
            } else if all_host {
                format!("cpu: the stand-in's host side ({threads} threads)")
            } else if on_cpu {
                format!("cpu ({threads} threads)")
            } else {
                name
            },
            threads,
            cores,
            pool: Arc::clone(pool),
            memory_pool,
            engine,
        })
    }

    /// The device `kind` at `ordinal`, chosen once.
    fn device(&mut self, kind: DeviceKind, ordinal: u64) -> Result<&train::Chosen, SetupError> {
        Ok(match self.devices.entry((kind, ordinal)) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => {
                let chosen = train::select(kind, ordinal as usize)?;
                self.notices.extend(chosen.notice.clone());
                e.insert(chosen)
            }
        })
    }

    /// One GPU per rank, rank r on CUDA device `device.ordinal + r`; too few GPUs is an error
    /// that says how many there are.
    fn rank_gpus(&mut self, s: &Settings) -> Result<Vec<Device>, SetupError> {
        let ranks = s.distributed.ranks;
        let first = s.device.ordinal;
        let mut devices = Vec::with_capacity(ranks as usize);
        for rank in 0..ranks {
            let kind = if rank == 0 {
                s.device.kind
            } else {
                DeviceKind::Cuda
            };
            let reason = match self.device(kind, first + rank) {
                Ok(c) if !c.device.is_cpu() => {
                    devices.push(c.device.clone());
                    continue;
                }
                Ok(c) => c
                    .notice
                    .clone()
                    .unwrap_or_else(|| "the CPU was chosen".into()),
                Err(SetupError::Device(DeviceError::Unavailable { reason, .. })) => reason,
                Err(e) => e.to_string(),
            };
            return Err(SetupError::Ranks(too_few_gpus(
                ranks,
                first,
                rank,
                &reason,
                train::cuda_devices(),
            )));
        }
        Ok(devices)
    }

    /// The names of the devices used, for the environment record.
    pub fn device_names(&self) -> Vec<String> {
        self.devices.values().map(|c| c.name.clone()).collect()
    }
}

/// The engine a condition runs on, as the results record it: the pytorch engine's interpreter
/// is probed (it must import torch and torchvision); its networks train on the CPU in this
/// version.
fn engine_of(s: &Settings, on_cpu: bool) -> Result<EngineRecord, SetupError> {
    let record = super::engine::child::record(s).map_err(SetupError::Engine)?;
    if matches!(record, EngineRecord::Pytorch { .. }) && !on_cpu && !s.model.is_stand_in() {
        return Err(SetupError::Engine(
            "the pytorch engine trains networks on the CPU in this version, and device.kind = \
             \"auto\" chose a GPU: set device.kind = \"cpu\""
                .into(),
        ));
    }
    Ok(record)
}

/// The error for a rank without a GPU: which rank, which device, why, and how many GPUs there
/// are when the driver says.
fn too_few_gpus(ranks: u64, first: u64, rank: u64, reason: &str, gpus: Option<usize>) -> String {
    let here = match gpus {
        Some(n) => format!(
            "; this machine has {n} CUDA device{}",
            if n == 1 { "" } else { "s" }
        ),
        None => String::new(),
    };
    format!(
        "distributed.ranks = {ranks} runs one rank per GPU, on CUDA devices {first} to {} \
         (device.ordinal = {first}), but rank {rank}'s device {} is not usable: {reason}{here}; \
         lower distributed.ranks or device.ordinal, or set device.kind = \"cpu\" with \
         model.kind = \"stand_in\" to emulate the node",
        first + ranks - 1,
        first + rank,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn too_few_gpus_names_the_rank_the_device_and_the_count() {
        let m = too_few_gpus(4, 0, 2, "CUDA_ERROR_INVALID_DEVICE", Some(2));
        assert!(m.contains("distributed.ranks = 4"), "{m}");
        assert!(m.contains("CUDA devices 0 to 3"), "{m}");
        assert!(
            m.contains("rank 2's device 2 is not usable: CUDA_ERROR_INVALID_DEVICE"),
            "{m}"
        );
        assert!(m.contains("this machine has 2 CUDA devices"), "{m}");
        let one = too_few_gpus(2, 1, 1, "x", Some(1));
        assert!(
            one.contains("devices 1 to 2") && one.contains("has 1 CUDA device;"),
            "{one}"
        );
        assert!(!too_few_gpus(2, 0, 1, "x", None).contains("this machine has"));
    }
}
