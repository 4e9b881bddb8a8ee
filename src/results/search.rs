//! The search a `loaderlab tune` folder records (`search.json`): every trial, why it was
//! tried, each setting's figures and its ratio to the trial's best, and the choice. Plain data:
//! `tune` writes it, the report renders it.

use serde::{Deserialize, Serialize};

/// How far the input pipeline held the step up, in the classes of TensorFlow Profiler's
/// input-pipeline analyzer (torch-tb-profiler advises more workers above the lower one).
/// Judged by analysis (`Thresholds::judge`); here because search.json records it too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputBound {
    /// At least `highly_input_bound` of step time waiting for a batch.
    Highly,
    /// At least `moderately_input_bound`.
    Moderately,
    /// Below that.
    Not,
}

impl InputBound {
    /// How far it held the step up: 0 not, 1 moderately, 2 highly.
    pub fn severity(self) -> u8 {
        match self {
            InputBound::Not => 0,
            InputBound::Moderately => 1,
            InputBound::Highly => 2,
        }
    }

    /// The word result.json and summary.csv use.
    pub fn word(self) -> &'static str {
        match self {
            InputBound::Highly => "highly",
            InputBound::Moderately => "moderately",
            InputBound::Not => "not",
        }
    }
}

/// One setting as a trial measured it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrialSetting {
    pub value: u64,
    pub condition: String,
    /// Median img/s over the trial's rounds.
    pub img_per_s: f64,
    /// The share its class was judged on: waiting, or device idle on an asynchronous device
    /// (the condition's `judgement.classified_by`).
    pub wait_share: f64,
    pub input_bound: InputBound,
    /// Against the trial's best: the median of the per-round paired ratios of img/s, with
    /// its 95 % bootstrap CI over rounds.
    pub ratio_to_best: f64,
    pub ratio_low: f64,
    pub ratio_high: f64,
}

/// One trial: settings measured in interleaved rounds, in a results folder of its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub trial: usize,
    /// The trial's results folder, relative to the tune folder (`../<name>.trials/trial-K`).
    pub folder: String,
    /// Why these settings were tried.
    pub why: String,
    pub settings: Vec<TrialSetting>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchRecord {
    /// The setting tuned, e.g. "loader.workers".
    pub knob: String,
    /// The values it was allowed to take, inclusive.
    pub allowed: [u64; 2],
    /// Where the search started and why.
    pub start: String,
    pub trials: Vec<Trial>,
    /// The setting chosen, when a trial finished.
    pub chosen: Option<u64>,
    /// Why it was chosen.
    pub reason: String,
    /// The experiment file with the chosen setting, relative to the folder.
    pub tuned_toml: Option<String>,
    pub interrupted: bool,
    /// Seconds the search took.
    pub elapsed_s: f64,
}
