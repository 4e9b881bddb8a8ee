//! `run.json`: what the runner learned besides the raw rows.

use serde::{Deserialize, Serialize};

use super::Environment;

/// What the runner learned besides the raw rows, written to `run.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunMeta {
    pub experiment: String,
    pub file: String,
    pub command: String,
    pub started_unix_s: u64,
    pub finished_unix_s: u64,
    pub loaderlab_version: String,
    pub build_profile: String,
    pub build_opt_level: String,
    pub rustc: String,
    pub conditions: Vec<ConditionMeta>,
    pub warnings: Vec<String>,
    pub notices: Vec<String>,
    pub interrupted: bool,
    pub timing_note: String,
    pub environment: Environment,
    /// Set when the runs were executed as separate tasks (a Slurm job array) and merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<TaskInfo>>,
}

impl RunMeta {
    /// Every condition trained on the CPU.
    pub fn all_on_cpu(&self) -> bool {
        self.conditions
            .iter()
            .all(|c| c.compute_device == ComputeDevice::Cpu)
    }

    /// Some condition ran the stand-in step (on the emulated device, or all on the host).
    pub fn any_stand_in(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.compute_device == ComputeDevice::Emulated || c.host.is_some())
    }

    pub fn condition(&self, name: &str) -> Option<&ConditionMeta> {
        self.conditions.iter().find(|c| c.name == name)
    }
}

/// One task of a distributed run: where it ran and which runs it executed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskInfo {
    pub dir: String,
    pub host: String,
    pub runs: Vec<usize>,
    pub profiled: Vec<String>,
}

/// The kind of device a condition trained on; `device` holds its display name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeDevice {
    #[default]
    Cpu,
    Cuda,
    /// The stand-in step's emulated device (`model.kind = "stand_in"` on the CPU): a thread
    /// that sleeps while busy, asynchronous like CUDA, holding no core. (A stand-in on CUDA is
    /// a kernel on the GPU and records `Cuda`.)
    #[serde(rename = "stand_in")]
    Emulated,
}

impl ComputeDevice {
    /// The host only enqueues the step: its waiting for data overlaps device work.
    pub fn asynchronous(self) -> bool {
        self != ComputeDevice::Cpu
    }

    /// The step keeps the host's cores busy with its compute threads (the CPU); on a device it
    /// holds none.
    pub fn holds_cores(self) -> bool {
        self == ComputeDevice::Cpu
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConditionMeta {
    pub name: String,
    /// A person's name for the device, e.g. "cpu (2 threads)" or "cuda:0 (NVIDIA H200)".
    pub device: String,
    /// What kind of device that is (folders written before this field read as the CPU).
    #[serde(default)]
    pub compute_device: ComputeDevice,
    pub cpu_threads: usize,
    pub workers: u64,
    pub dataset: String,
    pub pin_memory: String,
    pub trace: Option<String>,
    pub profile_startup_ms: Option<f64>,
    /// What was set on the CUDA device's memory pool (absent on the CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_pool: Option<String>,
    /// The model as built for this condition's data, e.g. "SmallCNN, input 3×32×32, 10
    /// classes, 545,098 parameters" (absent in folders written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Whose loader built the batches: loaderlab's own, or the pytorch engine with the
    /// interpreter and the torch and torchvision versions it imported. (Folders written before
    /// this record hold the pytorch engine's description as text, or nothing for the native
    /// engine; both still read.)
    #[serde(default, deserialize_with = "engine_record")]
    pub engine: EngineRecord,
    /// The loader's stage clocks over the profiled run (absent without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<crate::loader::StageTotals>,
    /// The condition's headroom run (`protocol.headroom`), absent when none ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom: Option<HeadroomRecord>,
    /// The stand-in's host side (`model.host_ms` on `model.host_threads` cores), absent when
    /// the step has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostSide>,
}

/// The engine a condition ran on, as the results record it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EngineRecord {
    /// loaderlab's own loader: worker threads, its decoders and transforms.
    #[default]
    Native,
    /// A real `torch.utils.data.DataLoader` in a Python child.
    Pytorch {
        interpreter: String,
        python: String,
        torch: String,
        torchvision: String,
    },
    /// The user's own training loop, watched (`loaderlab.watch`): their loader, their step.
    Watched {
        /// The loader's type.
        loader: String,
        python: String,
        torch: String,
    },
}

impl EngineRecord {
    /// How the report names it.
    pub fn describe(&self) -> String {
        match self {
            EngineRecord::Native => {
                "native: loaderlab's own (worker threads, its decoders and transforms)".into()
            }
            EngineRecord::Pytorch {
                interpreter,
                python,
                torch,
                torchvision,
            } => format!(
                "pytorch: torch.utils.data.DataLoader (torch {torch}, torchvision {torchvision}, \
                 Python {python} at {interpreter})"
            ),
            EngineRecord::Watched {
                loader,
                python,
                torch,
            } => format!(
                "watched: your own training loop over your {loader} (torch {torch}, Python \
                 {python}), timed by loaderlab.watch"
            ),
        }
    }

    /// Whether it runs the stand-in on an emulated device of its own whatever device `auto`
    /// would choose (the pytorch engine's child: its step runs on the CPU in this version).
    pub fn emulates_devices(&self) -> bool {
        matches!(self, EngineRecord::Pytorch { .. })
    }

    /// What its profiled run's trace and stage clocks hold, where that differs from the
    /// native engine's (the report's Setup says it).
    pub fn profile_note(&self) -> Option<&'static str> {
        match self {
            EngineRecord::Native => None,
            EngineRecord::Watched { .. } => Some(
                "a watched job's stage clocks run inside its own loader for the whole run: every \
                 item's fetch and every collate timed, each transform of the Compose on one item \
                 in `every` (by its class name; `__getitem__ (own code)` = the sampled items' \
                 fetch less their transforms), and with workers the hand-off from a worker's \
                 ready batch, or the loop's asking for it if later, to the loop holding it; \
                 there is no trace",
            ),
            EngineRecord::Pytorch { .. } => Some(
                "the pytorch engine's profiled runs are torch.profiler traces (the step's spans; \
                 their per-operator events dropped); the stage table's clocks run in the process \
                 that builds each batch (each op per image, `read_decode` = the item's fetch less \
                 its ops, the collate per batch, and with workers the `hand_off` from a worker's \
                 ready batch, or the loop's asking for it if later, to the loop holding it); at 0 \
                 workers the build per batch, timed on the child's main thread outside the \
                 profiler, feeds the prediction, with workers a worker's own work per batch",
            ),
        }
    }
}

/// An [`EngineRecord`], or the text folders wrote before it: the pytorch engine's description
/// ("pytorch: torch.utils.data.DataLoader (torch X, torchvision Y, Python Z at P)").
fn engine_record<'de, D: serde::Deserializer<'de>>(d: D) -> Result<EngineRecord, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Stored {
        Record(EngineRecord),
        Text(String),
        Nothing(()),
    }
    Ok(match Stored::deserialize(d)? {
        Stored::Record(r) => r,
        Stored::Nothing(()) => EngineRecord::Native,
        Stored::Text(t) => {
            let field = |after: &str, until: char| {
                t.split_once(after)
                    .map(|(_, rest)| rest.split(until).next().unwrap_or("").to_string())
                    .unwrap_or_default()
            };
            EngineRecord::Pytorch {
                torch: field("(torch ", ','),
                torchvision: field("torchvision ", ','),
                python: field("Python ", ' '),
                interpreter: field(" at ", ')'),
            }
        }
    })
}

/// The host's own CPU time per step, on the training thread and its helpers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostSide {
    /// CPU ms per step, on each thread.
    pub ms: f64,
    /// The cores it holds while it runs.
    pub threads: u64,
}

impl ConditionMeta {
    /// The cores the training step keeps busy, which the loader's workers cannot have: a CPU
    /// step's compute threads; on a device (CUDA, the emulated device), the stand-in's host
    /// side's threads, or none when the host only enqueues.
    pub fn step_threads(&self) -> u64 {
        if self.compute_device.holds_cores() {
            self.cpu_threads as u64
        } else {
            self.host.map_or(0, |h| h.threads)
        }
    }
}

/// A headroom run as measured: the step trained on `batches` batches already on the device,
/// replayed for `steps` timed steps; `elapsed_s` runs from the first timed step until the
/// device finished the last (segment boundaries included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadroomRecord {
    /// Distinct batches replayed.
    pub batches: usize,
    pub steps: u64,
    pub images: u64,
    pub elapsed_s: f64,
    /// Every timed step's host time (enqueue time on CUDA), ms.
    pub step_ms: Vec<f64>,
    /// The timed steps in consecutive segments, each timed to the device being idle:
    /// (steps, images, elapsed_s). The ceiling is their median rate, so one slow stretch of a
    /// short run does not set it.
    #[serde(default)]
    pub segments: Vec<(u64, u64, f64)>,
}

impl HeadroomRecord {
    /// The ceiling: the median segment's rate (img/s) and step time (ms), or `None` for an
    /// empty record. Folders written before segments: the whole run as one segment.
    pub fn ceiling(&self) -> Option<(f64, f64)> {
        if self.elapsed_s <= 0.0 || self.steps == 0 {
            return None;
        }
        let whole = [(self.steps, self.images, self.elapsed_s)];
        let segments = if self.segments.is_empty() {
            &whole[..]
        } else {
            &self.segments[..]
        };
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            match v.len() {
                0 => f64::NAN,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            }
        };
        let rates = segments
            .iter()
            .filter(|s| s.2 > 0.0)
            .map(|s| s.1 as f64 / s.2)
            .collect();
        let steps_ms = segments
            .iter()
            .filter(|s| s.0 > 0)
            .map(|s| s.2 * 1e3 / s.0 as f64)
            .collect();
        Some((median(rates), median(steps_ms)))
    }

    /// Add a later part of the same condition's headroom (the runner runs one per round).
    pub fn absorb(&mut self, later: HeadroomRecord) {
        self.batches = self.batches.max(later.batches);
        self.steps += later.steps;
        self.images += later.images;
        self.elapsed_s += later.elapsed_s;
        self.step_ms.extend(later.step_ms);
        self.segments.extend(later.segments);
    }
}
