//! The search policy, apart from how a trial is measured: where to start (the prediction, or
//! the file's value), which neighbourhood to measure next, when to stop; [`super::choose`]
//! picks the setting. It sees trials only through [`Trials`], so its choices are tested exactly against a
//! fake trial runner with planted figures (hyperfine's `MockExecutor`), with no clock.

use std::path::PathBuf;

use crate::analysis::WorkerPrediction;
use crate::config::Settings;
use crate::format;
use crate::results::{InputBound, SearchRecord, Trial, TrialSetting};
use crate::train::{CoreBudget, WorkerCap};

use super::TuneError;
pub use super::choose::choose;
pub use super::knob::Knob;

/// One measured trial, as the search needs it.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Each setting's figures and its paired ratio to the trial's best.
    pub settings: Vec<TrialSetting>,
    /// A probe's worker prediction (None when it had no profiled build or headroom run).
    pub prediction: Option<WorkerPrediction>,
    /// The cores the training step keeps busy, as the trial's set-up resolved them
    /// ([`crate::results::ConditionMeta::step_threads`]): a CPU step's compute threads, a
    /// stand-in's host side's, none for a step that only enqueues on a device.
    pub step_threads: u64,
    /// Ranks on the node.
    pub ranks: u64,
    /// The trial's results folder, and how the final report names it.
    pub folder: PathBuf,
    pub folder_label: String,
}

impl Measured {
    /// The most workers worth running: the prediction's cap when the trial made one (it knows
    /// the loader's time asleep), else the same rule from the trial's device, threads and ranks.
    pub fn worker_cap(&self, cores: CoreBudget) -> WorkerCap {
        match &self.prediction {
            Some(p) if p.cap_rule.cores > 0 => p.cap_rule,
            _ => WorkerCap {
                cores: cores.cores,
                ranks: self.ranks,
                step_threads: self.step_threads,
                asleep_share: self.prediction.as_ref().map_or(0.0, |p| p.asleep()),
            },
        }
    }
}

/// How trials are measured, and the clock the budget is read from.
pub trait Trials {
    /// Measure `values` of the knob in one trial of interleaved rounds (a probe: one value,
    /// with a profiled and a headroom run); None when interrupted.
    fn measure(
        &mut self,
        trial: usize,
        values: &[u64],
        probe: bool,
    ) -> Result<Option<Measured>, TuneError>;

    /// Seconds since the search began.
    fn elapsed_s(&self) -> f64;
}

/// What bounds the search.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Start no new trial after this many seconds.
    pub budget_s: f64,
    /// The most workers to try (default: the probe's [`WorkerCap`]).
    pub max_workers: Option<u64>,
    /// The machine's cores.
    pub cores: CoreBudget,
    /// `[report] min_effect`: a setting this close to the best is as good as the best.
    pub min_effect: f64,
}

/// The search's record and the last trial measured (whose folder becomes the result).
pub struct Outcome {
    pub search: SearchRecord,
    pub last: Option<Measured>,
}

/// A search in progress: its record so far and the last trial measured.
struct Climb<'a> {
    trials: &'a mut dyn Trials,
    note: &'a mut dyn FnMut(&str),
    knob: Knob,
    search: SearchRecord,
    last: Option<Measured>,
}

impl Climb<'_> {
    /// Measure one trial; false when it was interrupted.
    fn trial(&mut self, values: &[u64], why: String, probe: bool) -> Result<bool, TuneError> {
        let k = self.search.trials.len() + 1;
        (self.note)(&format!(
            "tune trial {k}: {} = {values:?} ({why})",
            self.knob.key()
        ));
        match self.trials.measure(k, values, probe)? {
            Some(m) => {
                self.search.trials.push(Trial {
                    trial: k,
                    folder: m.folder_label.clone(),
                    why,
                    settings: m.settings.clone(),
                });
                self.last = Some(m);
                Ok(true)
            }
            None => {
                self.search.interrupted = true;
                Ok(false)
            }
        }
    }

    /// Where the climb starts: for workers the probe's prediction (after a probe trial at 0
    /// workers), otherwise the file's value; sets the allowed range and says why.
    fn start(&mut self, base: &Settings, limits: Limits) -> Result<u64, TuneError> {
        let knob = self.knob;
        let current = knob.get(base);
        let mut center = current;
        if knob == Knob::Workers {
            let why = "probe: 0 workers with a profiled and a headroom run, for the prediction";
            if self.trial(&[0], why.into(), true)? {
                let hi = workers_cap(limits, self.last());
                self.search.allowed = [0, hi];
                self.search.start = match &self.last().prediction {
                    Some(p) => {
                        center = p.workers.min(hi);
                        format!(
                            "Started from the prediction: {} of loader work per batch ÷ a {} \
                             step without waiting ≈ {} workers → {center}.",
                            format::ms(p.loader_ms_per_batch),
                            format::ms(p.step_ms),
                            format::sig(p.workers_exact)
                        )
                    }
                    None => {
                        center = current.min(hi).max(1);
                        format!(
                            "No prediction (the probe had no profiled build or headroom run); \
                             started from {center}."
                        )
                    }
                };
            }
        } else {
            self.search.allowed = match knob {
                Knob::PrefetchFactor => [1, 8],
                _ => [1, limits.cores.left_beside(base.loader.workers)],
            };
            if knob == Knob::Threads {
                center = limits.cores.compute_threads(center) as u64;
            }
            center = center.clamp(self.search.allowed[0], self.search.allowed[1]);
            self.search.start = format!("Started from the file's value, {center}.");
        }
        Ok(center)
    }

    fn last(&self) -> &Measured {
        self.last.as_ref().expect("a trial was measured")
    }
}

/// Search `knob` from the settings `base`.
pub fn search(
    trials: &mut dyn Trials,
    knob: Knob,
    base: &Settings,
    limits: Limits,
    note: &mut dyn FnMut(&str),
) -> Result<Outcome, TuneError> {
    let mut c = Climb {
        trials,
        note,
        knob,
        search: SearchRecord {
            knob: knob.key().into(),
            allowed: [0, 0],
            start: String::new(),
            trials: Vec::new(),
            chosen: None,
            reason: String::new(),
            tuned_toml: None,
            interrupted: false,
            elapsed_s: 0.0,
        },
        last: None,
    };

    let mut center = c.start(base, limits)?;

    // Climb until the best is surrounded.
    let [lo, hi] = c.search.allowed;
    let mut why = "the start and its neighbours".to_string();
    let mut centers = vec![center];
    while !c.search.interrupted {
        if c.trials.elapsed_s() >= limits.budget_s {
            c.search.reason = format!("the budget of {} s ran out; ", limits.budget_s);
            break;
        }
        let values: Vec<u64> = (center.saturating_sub(1).max(lo)..=(center + 1).min(hi)).collect();
        if values.len() < 2 || !c.trial(&values, why.clone(), false)? {
            break;
        }
        match next_center(
            &values,
            best_of(&c.last().settings),
            [lo, hi],
            &centers,
            knob,
        ) {
            Some((next, reason)) => {
                center = next;
                why = reason;
                centers.push(next);
            }
            None => break,
        }
    }

    let mut search = c.search;
    if let Some(m) = &c.last {
        let (chosen, reason) = choose(&m.settings, knob, limits.min_effect);
        if search.interrupted {
            search
                .reason
                .push_str("interrupted: chosen from the trials that finished; ");
        }
        search.reason.push_str(&reason);
        search.chosen = chosen;
    }
    search.elapsed_s = c.trials.elapsed_s();
    Ok(Outcome {
        search,
        last: c.last,
    })
}

/// The most workers to try: `--max-workers`, else the worker cap of the probe (the
/// prediction's own, so the prediction never lies outside the search's bounds).
fn workers_cap(limits: Limits, probe: &Measured) -> u64 {
    if let Some(m) = limits.max_workers {
        return m;
    }
    probe.worker_cap(limits.cores).workers()
}

/// Where the next trial centres, and why; None when the best is surrounded, at a bound, no
/// longer input-bound at the upper edge, or the move would revisit a centre (noise could make
/// two neighbourhoods send the search back and forth).
fn next_center(
    values: &[u64],
    best: &TrialSetting,
    [lo, hi]: [u64; 2],
    visited: &[u64],
    knob: Knob,
) -> Option<(u64, String)> {
    let (min, max) = (*values.first()?, *values.last()?);
    let (next, why) = if best.value == max && max < hi && best.input_bound != InputBound::Not {
        (
            max + 1,
            format!(
                "{} = {max} was the best tried and still {} input-bound: try above",
                knob.key(),
                best.input_bound.word()
            ),
        )
    } else if best.value == min && min > lo {
        (
            min - 1,
            format!("{} = {min} was the best tried: try below", knob.key()),
        )
    } else {
        return None;
    };
    (!visited.contains(&next)).then_some((next, why))
}

/// The trial's setting with the highest median img/s.
fn best_of(settings: &[TrialSetting]) -> &TrialSetting {
    super::choose::best(settings).expect("a trial measures at least one setting")
}

#[cfg(test)]
mod tests {
    use super::super::choose::tests::setting;
    use super::*;
    use crate::results::ComputeDevice;

    #[test]
    fn the_climb_moves_towards_the_best_and_never_back() {
        let mut best = setting(3, 100.0, 1.0, 1.0);
        best.input_bound = InputBound::Moderately;
        let up = next_center(&[1, 2, 3], &best, [0, 8], &[2], Knob::Workers);
        assert_eq!(up.map(|u| u.0), Some(4));
        // Still best at the lower edge of the next neighbourhood: back to 2 was visited.
        assert_eq!(
            next_center(&[3, 4, 5], &best, [0, 8], &[2, 4], Knob::Workers),
            None
        );
        // At the top of the range, or no longer input-bound: stop.
        assert_eq!(
            next_center(&[2, 3], &best, [0, 3], &[2], Knob::Workers),
            None
        );
        best.input_bound = InputBound::Not;
        assert_eq!(
            next_center(&[1, 2, 3], &best, [0, 8], &[2], Knob::Workers),
            None
        );
        // The best at the bottom edge: try below.
        let low = setting(1, 100.0, 1.0, 1.0);
        let down = next_center(&[1, 2, 3], &low, [0, 8], &[2], Knob::Workers);
        assert_eq!(down.map(|d| d.0), Some(0));
        // Surrounded: stop.
        let mid = setting(2, 100.0, 1.0, 1.0);
        assert_eq!(
            next_center(&[1, 2, 3], &mid, [0, 8], &[2], Knob::Workers),
            None
        );
    }

    /// A trial runner with planted figures: a batch takes `loader_ms` on one worker (inline on
    /// the training thread at 0 workers), a step `step_ms`; workers overlap loading with the
    /// step. No clock: each trial advances a counter by `s_per_trial`.
    struct Planted {
        loader_ms: f64,
        step_ms: f64,
        predicted: Option<u64>,
        s_per_trial: f64,
        elapsed: f64,
        interrupt_at: Option<usize>,
        tried: Vec<Vec<u64>>,
        /// The probe's share of loader time spent waiting for storage.
        storage_share: f64,
    }

    impl Planted {
        fn new(loader_ms: f64, step_ms: f64, predicted: Option<u64>) -> Planted {
            Planted {
                loader_ms,
                step_ms,
                predicted,
                s_per_trial: 10.0,
                elapsed: 0.0,
                interrupt_at: None,
                tried: Vec::new(),
                storage_share: 0.0,
            }
        }

        /// Step time and waiting share at `workers`.
        fn at(&self, workers: u64) -> (f64, f64) {
            let step = if workers == 0 {
                self.loader_ms + self.step_ms
            } else {
                self.step_ms.max(self.loader_ms / workers as f64)
            };
            (step, 1.0 - self.step_ms / step)
        }
    }

    impl Trials for Planted {
        fn measure(
            &mut self,
            k: usize,
            values: &[u64],
            probe: bool,
        ) -> Result<Option<Measured>, TuneError> {
            self.elapsed += self.s_per_trial;
            if self.interrupt_at == Some(k) {
                return Ok(None);
            }
            self.tried.push(values.to_vec());
            let rate = |v: u64| 256_000.0 / self.at(v).0;
            let best = values.iter().map(|&v| rate(v)).fold(0.0, f64::max);
            let settings = values
                .iter()
                .map(|&v| {
                    let (ratio, wait) = (rate(v) / best, self.at(v).1);
                    TrialSetting {
                        value: v,
                        condition: format!("workers={v}"),
                        img_per_s: rate(v),
                        wait_share: wait,
                        input_bound: match wait {
                            w if w >= 0.2 => InputBound::Highly,
                            w if w >= 0.05 => InputBound::Moderately,
                            _ => InputBound::Not,
                        },
                        ratio_to_best: ratio,
                        ratio_low: ratio - 0.02,
                        ratio_high: ratio + 0.02,
                    }
                })
                .collect();
            let prediction = self.predicted.filter(|_| probe).map(|w| WorkerPrediction {
                from: "default".into(),
                loader_ms_per_batch: self.loader_ms,
                step_ms: self.step_ms,
                workers_exact: self.loader_ms / self.step_ms,
                workers: w,
                storage_share: self.storage_share,
                ..WorkerPrediction::default()
            });
            Ok(Some(Measured {
                settings,
                prediction,
                step_threads: 0,
                ranks: 1,
                folder: PathBuf::from(format!("trial-{k}")),
                folder_label: format!("trial-{k}"),
            }))
        }

        fn elapsed_s(&self) -> f64 {
            self.elapsed
        }
    }

    fn limits(budget_s: f64, max_workers: Option<u64>) -> Limits {
        Limits {
            budget_s,
            max_workers,
            cores: CoreBudget { cores: 2 },
            min_effect: 0.02,
        }
    }

    fn run(t: &mut Planted, knob: Knob, limits: Limits) -> Outcome {
        search(t, knob, &Settings::default(), limits, &mut |_| {}).unwrap()
    }

    #[test]
    fn a_planted_cost_is_found_from_the_prediction() {
        // 30 ms of loading per batch, a 20 ms step: 2 workers keep up, 1 does not.
        let mut t = Planted::new(30.0, 20.0, Some(2));
        let out = run(&mut t, Knob::Workers, limits(600.0, Some(4)));
        assert_eq!(t.tried, vec![vec![0], vec![1, 2, 3]]);
        assert_eq!(out.search.chosen, Some(2), "{}", out.search.reason);
        assert_eq!(out.search.allowed, [0, 4]);
        assert!(out.search.start.starts_with("Started from the prediction"));
        assert!(!out.search.interrupted);
    }

    #[test]
    fn a_low_prediction_is_climbed_past_while_the_best_still_waits() {
        // 80 ms of loading, a 20 ms step: 4 workers are needed; the prediction says 2.
        let mut t = Planted::new(80.0, 20.0, Some(2));
        let out = run(&mut t, Knob::Workers, limits(600.0, Some(8)));
        assert_eq!(t.tried, vec![vec![0], vec![1, 2, 3], vec![3, 4, 5]]);
        assert_eq!(out.search.chosen, Some(4), "{}", out.search.reason);
        assert!(
            out.search.trials[2]
                .why
                .contains("still highly input-bound")
        );
    }

    #[test]
    fn a_loader_waiting_for_storage_may_have_more_workers_than_cores() {
        // 160 ms per batch, a 20 ms step: 8 workers needed. On 2 cores (a GPU step: one worker
        // per core) the climb stops at 2; when the loader waits for storage 3/4 of its time,
        // 8 fit, and the climb reaches 8.
        let mut t = Planted::new(160.0, 20.0, Some(2));
        let out = run(&mut t, Knob::Workers, limits(600.0, None));
        assert_eq!(out.search.allowed, [0, 2]);
        assert_eq!(out.search.chosen, Some(2));
        let mut t = Planted::new(160.0, 20.0, Some(8));
        t.storage_share = 0.75;
        let out = run(&mut t, Knob::Workers, limits(600.0, None));
        assert_eq!(out.search.allowed, [0, 8]);
        assert_eq!(out.search.chosen, Some(8), "{}", out.search.reason);
    }

    /// The prediction and `tune`'s bounds ask one rule: for every device, thread count, rank
    /// count, share asleep and planted cost, the predicted workers lie within the bounds the
    /// search allows for the same condition, whether the probe made a prediction or not.
    #[test]
    fn the_prediction_never_lies_outside_the_search_bounds() {
        use crate::results::ConditionMeta;
        let mut cases = 0;
        for compute_device in [
            ComputeDevice::Cpu,
            ComputeDevice::Cuda,
            ComputeDevice::Emulated,
        ] {
            for cores in [1, 2, 3, 16] {
                for cpu_threads in [1, 2, 4] {
                    for ranks in [1, 2, 8] {
                        for asleep in [0.0, 0.3, 0.75, 0.99] {
                            for loader_ms in [0.5, 30.0, 400.0] {
                                let cm = ConditionMeta {
                                    compute_device,
                                    cpu_threads,
                                    ..ConditionMeta::default()
                                };
                                let rule = crate::analysis::worker_cap(cores, ranks, &cm, asleep);
                                let (_, wanted) = crate::analysis::workers_wanted(
                                    loader_ms,
                                    20.0,
                                    0.05,
                                    compute_device == ComputeDevice::Emulated,
                                    0.0,
                                );
                                let predicted = wanted.min(rule.workers());
                                let mut probe = Measured {
                                    settings: vec![],
                                    prediction: Some(WorkerPrediction {
                                        workers: predicted,
                                        cap: rule.workers(),
                                        cap_rule: rule,
                                        ..WorkerPrediction::default()
                                    }),
                                    step_threads: cm.step_threads(),
                                    ranks,
                                    folder: PathBuf::new(),
                                    folder_label: String::new(),
                                };
                                let hi = workers_cap(limits(1.0, None), &probe);
                                let budget = CoreBudget { cores };
                                assert!(
                                    predicted <= probe.worker_cap(budget).workers(),
                                    "{compute_device:?} {cores} cores {ranks} ranks"
                                );
                                assert!(hi >= 1 || cores == 0);
                                // Without a prediction the same rule, with nothing asleep.
                                probe.prediction = None;
                                let bare = probe.worker_cap(budget);
                                assert_eq!(
                                    bare,
                                    WorkerCap {
                                        asleep_share: 0.0,
                                        ..rule
                                    },
                                    "{compute_device:?} {cores} cores {ranks} ranks"
                                );
                                assert!(bare.workers() <= rule.workers());
                                cases += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(cases, 3 * 4 * 3 * 3 * 4 * 3);
    }

    #[test]
    fn the_cap_bounds_the_climb_and_the_budget_ends_it() {
        let mut t = Planted::new(80.0, 20.0, Some(2));
        let out = run(&mut t, Knob::Workers, limits(600.0, Some(3)));
        assert_eq!(t.tried, vec![vec![0], vec![1, 2, 3]]);
        assert_eq!(out.search.chosen, Some(3));
        // The budget is read before each trial: spent after the probe and one trial.
        let mut t = Planted::new(80.0, 20.0, Some(2));
        let out = run(&mut t, Knob::Workers, limits(15.0, Some(8)));
        assert_eq!(t.tried, vec![vec![0], vec![1, 2, 3]]);
        assert!(
            out.search
                .reason
                .starts_with("the budget of 15 s ran out; ")
        );
        assert_eq!(out.search.elapsed_s, 20.0);
    }

    #[test]
    fn an_interrupted_search_chooses_from_the_trials_that_finished() {
        let mut t = Planted::new(30.0, 20.0, Some(2));
        t.interrupt_at = Some(2);
        let out = run(&mut t, Knob::Workers, limits(600.0, Some(4)));
        assert!(out.search.interrupted);
        assert_eq!(out.search.chosen, Some(0));
        assert!(out.search.reason.starts_with("interrupted: chosen from"));
        // Interrupted during the probe: nothing measured, nothing chosen.
        let mut t = Planted::new(30.0, 20.0, Some(2));
        t.interrupt_at = Some(1);
        let out = run(&mut t, Knob::Workers, limits(600.0, Some(4)));
        assert!(out.last.is_none() && out.search.chosen.is_none());
    }

    #[test]
    fn without_a_prediction_or_for_another_knob_the_file_is_the_start() {
        let mut t = Planted::new(30.0, 20.0, None);
        let out = run(&mut t, Knob::Workers, limits(600.0, Some(4)));
        // The file's default workers, within [1, cap].
        let start = Settings::default().loader.workers.clamp(1, 4);
        assert_eq!(t.tried[1], (start - 1..=start + 1).collect::<Vec<_>>());
        assert!(out.search.start.starts_with("No prediction"));
        // device.threads = 0 starts from every core, within the cores beside the workers.
        let mut t = Planted::new(30.0, 20.0, None);
        let out = run(&mut t, Knob::Threads, limits(600.0, None));
        let workers = Settings::default().loader.workers;
        assert_eq!(
            out.search.allowed,
            [1, CoreBudget { cores: 2 }.left_beside(workers)]
        );
        assert!(t.tried.iter().all(|v| v.len() >= 2));
    }
}
