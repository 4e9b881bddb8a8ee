//! A watched job's own files (`loaderlab.watch(loader, out=…)`): `watch.json`, what the job is,
//! written as the watch starts and again as it ends; `stages.json`, the stage clocks sampled
//! inside its loader so far. Its steps stream into `steps.csv` in the contract's columns (plus
//! `images`, the batch's size), and `loaderlab::commands::watch::complete` adds the rest of a
//! results folder from them.

use serde::{Deserialize, Serialize};

/// What a watched job is; written by the watch as it starts, and as it ends (`closed`).
pub const WATCH_JSON: &str = "watch.json";
/// The stage clocks sampled inside the watched loader ([`WatchedStages`]), rewritten as they
/// come.
pub const STAGES_JSON: &str = "stages.json";
/// The one condition of a watched folder: two folders of the same job compare under it.
pub const WATCHED_CONDITION: &str = "job";

/// `watch.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchInfo {
    /// Who is writing the folder (host, process, start): a second watch on it is refused.
    pub id: String,
    /// The job's name in the report (the folder's name unless given).
    pub name: String,
    /// The command line of the watched process.
    pub command: String,
    pub started_unix_s: u64,
    /// Set as the watch ends in order (absent: the process died or is still running).
    #[serde(default)]
    pub finished_unix_s: Option<u64>,
    /// The loader's type, e.g. "torch.utils.data.DataLoader" or "loaderlab.Loader".
    pub loader: String,
    /// The dataset as the report names it (its type, its length).
    pub dataset: String,
    /// The transforms the stage clocks time, by class name, in order.
    #[serde(default)]
    pub transforms: Vec<String>,
    pub batch_size: u64,
    pub workers: u64,
    #[serde(default)]
    pub prefetch_factor: Option<u64>,
    #[serde(default)]
    pub persistent_workers: bool,
    #[serde(default)]
    pub pin_memory: bool,
    /// A person's name for the device the step runs on ("cpu (2 threads)", "cuda:0 (…)").
    pub device: String,
    /// "cpu" or "cuda": on CUDA each step's device time comes from events on the stream.
    pub compute_device: String,
    /// torch's intra-op threads on the training thread's side.
    pub cpu_threads: u64,
    pub python: String,
    pub torch: String,
    /// Steps per block: the folder's runs, over which every CI is taken.
    pub block_steps: u64,
    /// One item in this many is timed transform by transform.
    pub every: u64,
}

/// One stage of [`WatchedStages`]: its name, how often it was timed and the total, ns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchedStage {
    pub name: String,
    pub count: u64,
    pub ns: u64,
}

/// `stages.json`: the stage clocks of the watched loader, summed over its processes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchedStages {
    /// Batches whose build was timed, and that build (every item and the collate), ns.
    pub batches: u64,
    pub build_ns: u64,
    /// The same spans' CPU time in the processes that built them, ns.
    #[serde(default)]
    pub build_cpu_ns: u64,
    /// Per image on sampled items: the item's own code, then each transform; per batch, last:
    /// the collate.
    pub stages: Vec<WatchedStage>,
    /// With workers: batches timed from a worker's ready batch to the loop holding it.
    #[serde(default)]
    pub handoff_batches: u64,
    #[serde(default)]
    pub handoff_ns: u64,
    /// One item in this many was timed transform by transform.
    pub every: u64,
}

impl WatchedStages {
    /// As the loader's stage totals, which the report's stage table reads (None before any
    /// batch was timed).
    pub fn totals(&self) -> Option<crate::loader::StageTotals> {
        (self.batches > 0).then(|| crate::loader::StageTotals {
            batches: self.batches,
            build_ns: self.build_ns,
            sample_every: self.every.max(1),
            stages: self.stages.iter().map(|s| s.name.clone()).collect(),
            count: self.stages.iter().map(|s| s.count).collect(),
            ns: self.stages.iter().map(|s| s.ns).collect(),
            split_batches: if self.build_cpu_ns > 0 {
                self.batches
            } else {
                0
            },
            split_wall_ns: self.build_ns,
            split_cpu_ns: self.build_cpu_ns,
            handoff_batches: self.handoff_batches,
            handoff_ns: self.handoff_ns,
            ..Default::default()
        })
    }
}

/// `stages.json` as either watch writes it: sampled inside a torch DataLoader
/// ([`WatchedStages`]), or loaderlab's own loader's stage totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StagesFile {
    Watched(WatchedStages),
    Native(crate::loader::StageTotals),
}

impl StagesFile {
    /// As the loader's stage totals (None before any batch was timed).
    pub fn totals(&self) -> Option<crate::loader::StageTotals> {
        match self {
            StagesFile::Watched(w) => w.totals(),
            StagesFile::Native(t) => (t.batches > 0).then(|| t.clone()),
        }
    }
}
