//! The experiment schema: every setting one condition of an experiment runs with.
//!
//! Each default is the value of the reference protocol (the seed article: FashionMNIST,
//! RandomResizedCrop(28, 0.75–1.0), RandomRotation(15), ToTensor, batch 256, Adam 1e-3,
//! 40 + 100 steps, 3 alternating rounds, 20 profiled steps), so an empty `[section]` means
//! "as the article did it". `Settings::default()` serialised to TOML is also the schema the
//! raw checker walks, so a field added here is known to validation without further work.
//! [`Settings`] holds a condition's sections; the experiment-wide ones (`[protocol]`,
//! `[report]`) are [`ExperimentWide`], held once by the loaded experiment.

use serde::{Deserialize, Serialize};

pub use super::pytorch::PytorchSection;

pub use crate::data::{
    CacheMode, ColorMode, DatasetKind, DatasetSection, Encoding, OnError, PageCache, Split,
    StorageSection,
};

pub use crate::net::Stem;
pub use crate::transforms::ops::{
    CenterCropSpec, ColorJitterSpec, CpuWorkSpec, GrayscaleSpec, NormalizeSpec, PaddingMode,
    RandomCropSpec, RandomGrayscaleSpec, RandomHorizontalFlipSpec, RandomResizedCropSpec,
    RandomRotationSpec, RandomVerticalFlipSpec, ResizeSpec, Size, ToTensorSpec, TransformSpec,
};

/// The resolved settings of one condition: `[experiment]` (its seed drives the condition's
/// data) and the sections a matrix may vary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub experiment: ExperimentSection,
    pub dataset: DatasetSection,
    pub transforms: Vec<TransformSpec>,
    pub loader: LoaderSection,
    pub model: ModelSection,
    pub optimizer: OptimizerSection,
    pub device: DeviceSection,
    pub distributed: DistributedSection,
    pub pytorch: PytorchSection,
}

/// The sections that describe the experiment as a whole: how every condition is measured and
/// reported. Set once; never part of a condition.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExperimentWide {
    pub protocol: ProtocolSection,
    pub report: ReportSection,
}

impl ExperimentWide {
    /// Its sections' names, as the file spells them.
    pub const SECTIONS: [&str; 2] = ["protocol", "report"];
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            experiment: ExperimentSection::default(),
            dataset: DatasetSection::default(),
            transforms: seed_transforms(),
            loader: LoaderSection::default(),
            model: ModelSection::default(),
            optimizer: OptimizerSection::default(),
            device: DeviceSection::default(),
            distributed: DistributedSection::default(),
            pytorch: PytorchSection::default(),
        }
    }
}

/// The seed's CPU chain: RandomResizedCrop(28, scale=(0.75, 1.0)), RandomRotation(15), ToTensor.
pub fn seed_transforms() -> Vec<TransformSpec> {
    vec![
        TransformSpec::RandomResizedCrop(RandomResizedCropSpec {
            size: Size::Side(28),
            scale: [0.75, 1.0],
            ..RandomResizedCropSpec::default()
        }),
        TransformSpec::RandomRotation(RandomRotationSpec {
            degrees: 15.0,
            fill: 0,
        }),
        TransformSpec::ToTensor(ToTensorSpec {}),
    ]
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExperimentSection {
    /// Names the results folder and the report.
    pub name: String,
    pub description: String,
    /// Drives the shuffle order, every random transform parameter, the initial weights and the
    /// `shuffled` run order.
    pub seed: u64,
    /// Results folder; empty means `reports/<name>`.
    pub output: String,
}

impl Default for ExperimentSection {
    fn default() -> Self {
        ExperimentSection {
            name: "experiment".into(),
            description: String::new(),
            seed: 42,
            output: String::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoaderSection {
    pub batch_size: u64,
    /// 0: the training thread builds each batch itself; N: N persistent worker threads.
    pub workers: u64,
    /// Batches in flight per worker.
    pub prefetch_factor: u64,
    /// Page-locked host buffers for asynchronous copies (CUDA builds only).
    pub pin_memory: bool,
    /// Workers survive from one epoch to the next.
    pub persistent_workers: bool,
    pub shuffle: bool,
    pub drop_last: bool,
    /// Storage requests each worker keeps outstanding (emulated storage): 1 reads one image
    /// at a time, as PyTorch's DataLoader does; N asks for N at once, as DALI and SPDL do.
    pub read_ahead: u64,
    /// Whose loader builds the batches: loaderlab's own, or a torch DataLoader in a Python
    /// child (`[pytorch]`).
    pub engine: EngineKind,
}

/// `loader.engine`: whose loader feeds the step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// loaderlab's own: worker threads, its decoders and transforms.
    #[default]
    Native,
    /// A real `torch.utils.data.DataLoader` over torchvision's twins of the declared pipeline
    /// (or the user's own Dataset), in a Python child process.
    Pytorch,
}

impl Default for LoaderSection {
    fn default() -> Self {
        LoaderSection {
            batch_size: 256,
            workers: 0,
            prefetch_factor: 2,
            pin_memory: true,
            persistent_workers: true,
            shuffle: true,
            drop_last: true,
            read_ahead: 1,
            engine: EngineKind::Native,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelKind {
    SmallCnn,
    Cnn,
    Resnet,
    Mlp,
    /// No network: the training thread spends `host_ms` of CPU time per batch (on
    /// `host_threads` cores), then the emulated device stays busy for `step_ms` (the user's own
    /// step, e.g. from `loaderlab diagnose`).
    StandIn,
}

/// The network. Each kind reads only its own keys ([`ModelSection::keys_of`]); a key of
/// another kind set away from its default is an error at validate time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSection {
    pub kind: ModelKind,
    /// small_cnn: multiplier on channels and hidden units (0 = 1); resnet: base channels
    /// (0 = 64).
    pub width: u64,
    /// cnn: output channels of each Conv–ReLU–MaxPool block.
    pub channels: Vec<u64>,
    /// cnn: the convolutions' kernel, 3 or 5 (padding kernel / 2 keeps the size).
    pub kernel: u64,
    /// cnn and mlp: the hidden Linear–ReLU layers before the classifier.
    pub hidden: Vec<u64>,
    /// resnet: 18 or 34.
    pub depth: u64,
    /// resnet: "imagenet" (7×7 stride 2 + max-pool) or "cifar" (3×3 stride 1).
    pub stem: Stem,
    /// stand_in: the device time of one step, ms (0: no device, the step is all host).
    pub step_ms: f64,
    /// stand_in: the host's own time per step, ms of CPU time the training thread spends on a
    /// core before it enqueues the device's step (Python, autograd, kernel launches; on a CPU
    /// job the whole step). 0: the host only enqueues.
    pub host_ms: f64,
    /// stand_in: the cores the host side holds while it spends `host_ms` (a CPU job's torch
    /// intra-op threads), each spinning for `host_ms`.
    pub host_threads: u64,
}

impl Default for ModelSection {
    fn default() -> Self {
        ModelSection {
            kind: ModelKind::SmallCnn,
            width: 0,
            channels: vec![32, 64],
            kernel: 3,
            hidden: vec![128],
            depth: 18,
            stem: Stem::Imagenet,
            step_ms: 0.0,
            host_ms: 0.0,
            host_threads: 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OptimizerKind {
    /// PyTorch's Adam (weight_decay adds weight_decay · w to the gradient).
    Adam,
    /// PyTorch's AdamW (weight decay decoupled: w ← w · (1 − lr · weight_decay)).
    Adamw,
    /// PyTorch's SGD (momentum, nesterov, weight_decay; no dampening).
    Sgd,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimizerSection {
    pub kind: OptimizerKind,
    pub lr: f64,
    /// adam, adamw.
    pub betas: [f64; 2],
    /// adam, adamw.
    pub eps: f64,
    /// All kinds. PyTorch's AdamW defaults to 0.01; here every kind defaults to 0, so set it.
    pub weight_decay: f64,
    /// sgd.
    pub momentum: f64,
    /// sgd: Nesterov momentum (needs momentum > 0).
    pub nesterov: bool,
}

impl OptimizerSection {
    /// PyTorch's spelling with the settings its kind reads, e.g. "Adam (lr 0.001, betas
    /// [0.9, 0.999], eps 1e-8)" or "SGD (lr 0.1, momentum 0.9, nesterov)".
    pub fn describe(&self) -> String {
        let decay = if self.weight_decay > 0.0 {
            format!(", weight_decay {}", self.weight_decay)
        } else {
            String::new()
        };
        match self.kind {
            OptimizerKind::Adam | OptimizerKind::Adamw => format!(
                "{} (lr {}, betas {:?}, eps {}{decay})",
                if self.kind == OptimizerKind::Adam {
                    "Adam"
                } else {
                    "AdamW"
                },
                self.lr,
                self.betas,
                self.eps
            ),
            OptimizerKind::Sgd => format!(
                "SGD (lr {}, momentum {}{}{decay})",
                self.lr,
                self.momentum,
                if self.nesterov { ", nesterov" } else { "" }
            ),
        }
    }
}

impl Default for OptimizerSection {
    fn default() -> Self {
        OptimizerSection {
            kind: OptimizerKind::Adam,
            lr: 1e-3,
            betas: [0.9, 0.999],
            eps: 1e-8,
            weight_decay: 0.0,
            momentum: 0.0,
            nesterov: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// CUDA when this build has it and a GPU answers, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeviceSection {
    pub kind: DeviceKind,
    /// CUDA device ordinal.
    pub ordinal: u64,
    /// CPU compute threads; 0 means all cores.
    pub threads: u64,
    /// Allow TF32 matrix products on CUDA (the seed disabled it).
    pub tf32: bool,
}

impl Default for DeviceSection {
    fn default() -> Self {
        DeviceSection {
            kind: DeviceKind::Auto,
            ordinal: 0,
            threads: 0,
            tf32: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOrder {
    /// The order is reversed in every odd round: (a, b), (b, a), (a, b), …
    Alternate,
    /// The same order every round.
    Fixed,
    /// A permutation per round drawn from the experiment seed.
    Shuffled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProtocolSection {
    /// Untimed steps before the timed window (worker start-up is never timed).
    pub warmup_steps: u64,
    pub timed_steps: u64,
    /// Each round runs every condition once.
    pub rounds: u64,
    pub order: RunOrder,
    /// Record a Chrome trace in a separate, untimed run per condition.
    pub profile: bool,
    pub profile_steps: u64,
    /// A separate run per condition that trains on batches already on the device (built once,
    /// replayed; no loader work in the loop): the throughput if data were free.
    pub headroom: bool,
    /// Timed steps of that run (after a few untimed ones).
    pub headroom_steps: u64,
}

impl Default for ProtocolSection {
    fn default() -> Self {
        ProtocolSection {
            warmup_steps: 40,
            timed_steps: 100,
            rounds: 3,
            order: RunOrder::Alternate,
            profile: true,
            profile_steps: 20,
            headroom: true,
            headroom_steps: 30,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageFormat {
    Svg,
    Png,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportSection {
    /// The condition the others are compared with; empty means the first.
    pub baseline: String,
    pub charts: bool,
    pub formats: Vec<ImageFormat>,
    /// Share of step time waiting for a batch from which a condition is *highly* input-bound
    /// (TensorFlow Profiler's 20 %).
    pub highly_input_bound: f64,
    /// … and *moderately* input-bound (5 %).
    pub moderately_input_bound: f64,
    /// Also write report.html: report.md as one self-contained page (charts inline).
    pub html: bool,
    /// Several ranks: a rank is named the straggler when its median wait is more than this
    /// many times the other ranks' (the 95 % interval's low end above it).
    pub straggler_skew: f64,
    /// The same network's training step in the user's framework on the same device, ms (e.g.
    /// PyTorch's from `loaderlab bench step --device cuda`, or the device time `diagnose`
    /// reads from a trace); 0 = not known. The report sets it beside this run's own step, so
    /// a framework-bound trainer (slower than the framework) is said next to the ceiling.
    pub framework_step_ms: f64,
    /// The smallest speed-up that matters: a ratio whose 95 % CI lies within ±min_effect of 1
    /// is "no practical difference" (verdict, headline, crossover, `tune`; not `compare`).
    pub min_effect: f64,
}

impl Default for ReportSection {
    fn default() -> Self {
        ReportSection {
            baseline: String::new(),
            charts: true,
            formats: vec![ImageFormat::Svg, ImageFormat::Png],
            highly_input_bound: 0.20,
            moderately_input_bound: 0.05,
            html: true,
            straggler_skew: 2.0,
            framework_step_ms: 0.0,
            min_effect: 0.02,
        }
    }
}

/// Settings whose value is a pair `[low, high]`, by their last key.
pub fn is_pair(key: &str) -> bool {
    matches!(key, "scale" | "ratio" | "betas")
}

/// `[distributed]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DistributedSection {
    /// Ranks on the node, one loader and one device each (1: a single process, as without the
    /// section).
    pub ranks: u64,
    /// Device time added to every step for the gradient all-reduce, ms.
    pub allreduce_ms: f64,
    /// `[[distributed.rank]]`: what one rank does differently (a planted straggler).
    pub rank: Vec<RankOverride>,
}

impl Default for DistributedSection {
    fn default() -> Self {
        DistributedSection {
            ranks: 1,
            allreduce_ms: 0.0,
            rank: Vec::new(),
        }
    }
}

/// `[[distributed.rank]]`: one rank's differences from the others.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RankOverride {
    /// Which rank (0-based).
    pub rank: u64,
    /// CPU time burned per image in this rank's loader on top of the transforms, µs (a
    /// `cpu_work` op appended to its chain; no pixel changes).
    pub cpu_work_us: f64,
    /// This rank's storage in place of `[dataset.storage]`, when any of it is set.
    pub storage: StorageSection,
}

impl DistributedSection {
    /// The override of rank `r`, if any.
    pub fn of_rank(&self, r: usize) -> Option<&RankOverride> {
        self.rank.iter().find(|o| o.rank == r as u64)
    }

    /// Several ranks, each its own loader and device.
    pub fn several(&self) -> bool {
        self.ranks > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transforms_round_trip_and_reject_unknown_params() {
        let text = r#"
            [[transforms]]
            op = "random_resized_crop"
            scale = [0.5, 1.0]
            [[transforms]]
            op = "to_tensor"
        "#;
        let s: Settings = toml::from_str(text).unwrap();
        assert_eq!(s.transforms.len(), 2);
        match &s.transforms[0] {
            TransformSpec::RandomResizedCrop(c) => {
                assert_eq!(c.scale, [0.5, 1.0]);
                assert_eq!(c.size, Size::Side(28));
            }
            other => panic!("{other:?}"),
        }
        let bad = "[[transforms]]\nop = \"random_rotation\"\ndegree = 3\n";
        assert!(toml::from_str::<Settings>(bad).is_err());
    }
}
