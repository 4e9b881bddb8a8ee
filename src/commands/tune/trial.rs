//! A `tune` trial measured for real: the tuned condition's settings with the knob over the
//! trial's values, built as an [`Experiment`] value (never through TOML text), run into a
//! results folder of its own by [`execute::run_to_folder`] — the same path `loaderlab run`
//! takes — and read back as each setting's figures and paired ratio to the trial's best.

use std::path::PathBuf;
use std::time::Instant;

use crate::analysis::{Analysis, paired_ratio};
use crate::commands::execute::{self, ExecuteError};
use crate::config::{Condition, Experiment, ReportSection, RunOrder, Settings, check_settings};
use crate::plan;
use crate::results::{Raw, TrialSetting};
use crate::runner::{Reporter, RunOptions};

use super::TuneError;
use super::search::{Knob, Measured, Trials};

/// Each trial's short protocol.
#[derive(Debug, Clone, Copy)]
pub struct TrialProtocol {
    pub warmup_steps: u64,
    pub timed_steps: u64,
    pub rounds: u64,
}

/// Trials of one condition of `exp`, each into `<trials_dir>/trial-K`.
pub struct ExperimentTrials<'a> {
    pub exp: &'a Experiment,
    pub condition: &'a Condition,
    pub knob: Knob,
    pub protocol: TrialProtocol,
    pub trials_dir: PathBuf,
    /// The command line, for the reports.
    pub command: String,
    pub reporter: &'static dyn Reporter,
    pub started: Instant,
}

impl Trials for ExperimentTrials<'_> {
    fn measure(
        &mut self,
        k: usize,
        values: &[u64],
        probe: bool,
    ) -> Result<Option<Measured>, TuneError> {
        let exp = trial_experiment(
            self.exp,
            &self.condition.settings,
            self.knob,
            values,
            probe,
            self.protocol,
        )
        .map_err(|message| TuneError::Invalid(format!("trial {k}: {message}")))?;
        let folder = self.trials_dir.join(format!("trial-{k}"));
        let opts = RunOptions {
            out: folder.clone(),
            command: self.command.clone(),
            only_runs: None,
            profile_conditions: None,
        };
        let analysis = match execute::run_to_folder(&exp, &plan::build(&exp), &opts, self.reporter)
        {
            Ok(a) => a,
            Err(ExecuteError::Interrupted { .. }) => return Ok(None),
            Err(source) => return Err(TuneError::Execute { trial: k, source }),
        };
        let raw = Raw::load(&folder)?;
        let first = raw.meta.conditions.first();
        // Relative to the final folder's report: <out>/../<out name>.trials/trial-K.
        let label = PathBuf::from("..")
            .join(self.trials_dir.file_name().unwrap_or_default())
            .join(format!("trial-{k}"));
        Ok(Some(Measured {
            settings: trial_settings(&exp, self.knob, &analysis, k as u64),
            prediction: analysis.prediction.clone(),
            step_threads: first.map_or(1, |c| c.step_threads()),
            ranks: exp
                .conditions
                .first()
                .map_or(1, |c| c.settings.distributed.ranks),
            folder,
            folder_label: label.display().to_string(),
        }))
    }

    fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// The trial's experiment: `settings` with the trial's short protocol and one condition per
/// value of the knob (named as a matrix over the knob names them; one value: `default`), every
/// condition checked as a loaded file's would be.
pub fn trial_experiment(
    exp: &Experiment,
    settings: &Settings,
    knob: Knob,
    values: &[u64],
    probe: bool,
    protocol: TrialProtocol,
) -> Result<Experiment, String> {
    let mut base = settings.clone();
    let mut p = exp.protocol.clone();
    p.warmup_steps = protocol.warmup_steps;
    p.timed_steps = protocol.timed_steps;
    p.rounds = if probe { 1 } else { protocol.rounds };
    p.order = RunOrder::Alternate;
    p.profile = probe;
    p.profile_steps = p.profile_steps.clamp(1, 10);
    p.headroom = probe;
    let report = ReportSection {
        baseline: String::new(),
        ..exp.report.clone()
    };
    let label = knob.key().rsplit('.').next().unwrap_or(knob.key());
    let mut conditions = Vec::new();
    for &v in values {
        let mut s = base.clone();
        knob.set(&mut s, v);
        if let Some((key, message)) = check_settings(&s).into_iter().next() {
            return Err(format!("{} = {v}: {key}: {message}", knob.key()));
        }
        let (name, overrides) = if values.len() > 1 {
            let mut t = toml::Table::new();
            t.insert(knob.key().into(), toml::Value::Integer(v as i64));
            (format!("{label}={v}"), t)
        } else {
            ("default".to_string(), toml::Table::new())
        };
        conditions.push(Condition {
            name,
            overrides,
            settings: s,
        });
    }
    knob.set(&mut base, values.first().copied().unwrap_or(0));
    Ok(Experiment {
        file: exp.file.clone(),
        base,
        protocol: p,
        report,
        conditions,
    })
}

/// Each setting's figures and its ratio to the trial's best: the median of the ratios paired
/// by round, with a bootstrap CI over rounds ([`paired_ratio`]).
fn trial_settings(exp: &Experiment, knob: Knob, a: &Analysis, seed: u64) -> Vec<TrialSetting> {
    let runs_of = |name: &str| -> Vec<(i64, f64)> {
        a.runs
            .iter()
            .filter(|r| r.condition == name && !r.interrupted)
            .map(|r| (r.round, r.img_per_s))
            .collect()
    };
    let best = a
        .conditions
        .iter()
        .max_by(|x, y| x.img_per_s.point.total_cmp(&y.img_per_s.point));
    let best_runs = best.map(|b| runs_of(&b.condition)).unwrap_or_default();
    a.conditions
        .iter()
        .filter_map(|c| {
            let settings = &exp
                .conditions
                .iter()
                .find(|x| x.name == c.condition)?
                .settings;
            let ratio = paired_ratio(&runs_of(&c.condition), &best_runs, seed ^ 0x7e57);
            Some(TrialSetting {
                value: knob.get(settings),
                condition: c.condition.clone(),
                img_per_s: c.img_per_s.point,
                wait_share: c.judgement.share,
                input_bound: c.judgement.input_bound,
                ratio_to_best: ratio.point,
                ratio_low: ratio.low,
                ratio_high: ratio.high,
            })
        })
        .collect()
}
