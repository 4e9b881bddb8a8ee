//! `loaderlab tune FILE`: find the cheapest setting of one knob (`loader.workers` by default,
//! or `loader.prefetch_factor`, `device.threads`) whose throughput is within noise of the best.
//!
//! For workers it starts from the prediction (loader time per batch ÷ step time without
//! waiting, from a probe trial at 0 workers with a profiled and a headroom run); otherwise from
//! the file's value. Each trial measures a setting and its neighbours in short interleaved
//! rounds — an ordinary experiment, in a results folder of its own — and the search climbs
//! towards the best until the best is surrounded, waiting falls below the `moderately`
//! threshold, the budget runs out, or Ctrl-C. The choice is the cheapest setting of the last
//! trial whose ratio to that trial's best (paired by round) has a 95 % CI including 1 and
//! which is not input-bound where the best is not.
//!
//! Invariant: every figure comes from a trial's own results folder, and a setting is only
//! compared with settings measured in the same interleaved rounds.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::analysis::{self, Analysis, bootstrap, median};
use crate::config::{self, ConfigError, Experiment, Overrides, Settings};
use crate::plan;
use crate::report;
use crate::results::{
    ComputeDevice, Partial, ResultsError, SEARCH_JSON, SearchRecord, TUNED_TOML, Trial,
    TrialSetting, partial_dir, promote,
};
use crate::runner::{self, Reporter, RunError, RunOptions};

/// The settings `tune` can search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    Workers,
    PrefetchFactor,
    Threads,
}

impl Knob {
    pub const ALL: [Knob; 3] = [Knob::Workers, Knob::PrefetchFactor, Knob::Threads];

    pub fn key(self) -> &'static str {
        match self {
            Knob::Workers => "loader.workers",
            Knob::PrefetchFactor => "loader.prefetch_factor",
            Knob::Threads => "device.threads",
        }
    }

    pub fn parse(text: &str) -> Result<Knob, String> {
        Knob::ALL
            .into_iter()
            .find(|k| k.key() == text)
            .ok_or_else(|| {
                format!(
                    "--knob {text:?}: expected one of {}",
                    Knob::ALL.map(Knob::key).join(", ")
                )
            })
    }

    fn get(self, s: &Settings) -> u64 {
        match self {
            Knob::Workers => s.loader.workers,
            Knob::PrefetchFactor => s.loader.prefetch_factor,
            Knob::Threads => s.device.threads,
        }
    }

    fn set(self, s: &mut Settings, v: u64) {
        match self {
            Knob::Workers => s.loader.workers = v,
            Knob::PrefetchFactor => s.loader.prefetch_factor = v,
            Knob::Threads => s.device.threads = v,
        }
    }
}

pub struct TuneOptions {
    pub knob: Knob,
    /// Start no new trial after this many seconds.
    pub budget_s: f64,
    /// The most workers to try (default: on the CPU the cores left beside the compute
    /// threads, else twice the cores).
    pub max_workers: Option<u64>,
    pub warmup_steps: u64,
    pub timed_steps: u64,
    pub rounds: u64,
    /// The condition of the file to tune (default: the first).
    pub condition: Option<String>,
    /// The command line, for the reports.
    pub command: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TuneError {
    #[error("{0}")]
    Invalid(String),
    #[error("trial {trial}: {source}")]
    Config { trial: usize, source: ConfigError },
    #[error("trial {trial}: {source}")]
    Run { trial: usize, source: RunError },
    #[error("trial {trial}: {source}")]
    Analysis {
        trial: usize,
        source: analysis::AnalysisError,
    },
    #[error("interrupted before any trial finished; the partial trial is in {}", .0.display())]
    Interrupted(PathBuf),
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What a finished (or interrupted) search leaves.
pub struct Tuned {
    pub out: PathBuf,
    pub search: SearchRecord,
    pub analysis: Analysis,
}

/// One trial's outcome.
struct Measured {
    analysis: Analysis,
    folder: PathBuf,
    settings: Vec<TrialSetting>,
    compute_device: ComputeDevice,
    cpu_threads: usize,
    cores: usize,
}

/// Run the search for `exp` (loaded from `file`, whose text `tuned.toml` is made from) into
/// `out`; trials go to `<out>.trials/`.
pub fn tune(
    file: &Path,
    exp: &Experiment,
    opts: &TuneOptions,
    out: &Path,
    reporter: &'static dyn Reporter,
) -> Result<Tuned, TuneError> {
    let started = Instant::now();
    let base = match &opts.condition {
        Some(name) => exp
            .conditions
            .iter()
            .find(|c| &c.name == name)
            .ok_or_else(|| {
                let names: Vec<&str> = exp.conditions.iter().map(|c| c.name.as_str()).collect();
                TuneError::Invalid(format!(
                    "--condition {name:?} names no condition; the conditions are {}",
                    names.join(", ")
                ))
            })?,
        None => exp
            .conditions
            .first()
            .ok_or_else(|| TuneError::Invalid("the experiment has no condition".into()))?,
    }
    .settings
    .clone();
    let trials_dir = PathBuf::from(format!("{}.trials", out.display()));
    std::fs::create_dir_all(&trials_dir).map_err(|source| TuneError::Write {
        path: trials_dir.clone(),
        source,
    })?;
    let knob = opts.knob;
    let mut search = SearchRecord {
        knob: knob.key().into(),
        allowed: [0, 0],
        start: String::new(),
        trials: Vec::new(),
        chosen: None,
        reason: String::new(),
        tuned_toml: None,
        interrupted: false,
        elapsed_s: 0.0,
    };
    let mut measured: Vec<Measured> = Vec::new();
    let trial = |values: &[u64],
                 why: String,
                 probe: bool,
                 search: &mut SearchRecord,
                 measured: &mut Vec<Measured>|
     -> Result<bool, TuneError> {
        let k = search.trials.len() + 1;
        reporter.note(&format!(
            "tune trial {k}: {} = {values:?} ({why})",
            knob.key()
        ));
        match run_trial(&base, knob, values, probe, opts, &trials_dir, k, reporter)? {
            Some(m) => {
                // Relative to the final folder's report: <out>/../<out name>.trials/trial-K.
                let folder = Path::new("..")
                    .join(trials_dir.file_name().unwrap_or_default())
                    .join(format!("trial-{k}"));
                search.trials.push(Trial {
                    trial: k,
                    folder: folder.display().to_string(),
                    why,
                    settings: m.settings.clone(),
                });
                measured.push(m);
                Ok(true)
            }
            None => {
                search.interrupted = true;
                Ok(false)
            }
        }
    };

    // Where to start.
    let current = knob.get(&base);
    let mut center = current;
    if knob == Knob::Workers {
        if trial(
            &[0],
            "probe: 0 workers with a profiled and a headroom run, for the prediction".into(),
            true,
            &mut search,
            &mut measured,
        )? {
            let m = measured.last().expect("just pushed");
            let hi = workers_cap(opts, m);
            search.allowed = [0, hi];
            match &m.analysis.prediction {
                Some(p) => {
                    center = p.workers.min(hi);
                    search.start = format!(
                        "Started from the prediction: {} ms of loader work per batch ÷ a {} ms \
                         step without waiting ≈ {} workers → {center}.",
                        crate::format::ms(p.loader_ms_per_batch),
                        crate::format::ms(p.step_ms),
                        crate::format::ms(p.workers_exact)
                    );
                }
                None => {
                    center = current.min(hi).max(1);
                    search.start = format!(
                        "No prediction (the probe had no profiled build or headroom run); \
                         started from {center}."
                    );
                }
            }
        }
    } else {
        let cores = crate::train::cores() as u64;
        search.allowed = match knob {
            Knob::PrefetchFactor => [1, 8],
            _ => [1, cores.saturating_sub(base.loader.workers).max(1)],
        };
        if knob == Knob::Threads && center == 0 {
            center = cores;
        }
        center = center.clamp(search.allowed[0], search.allowed[1]);
        search.start = format!("Started from the file's value, {center}.");
    }

    // Climb until the best is surrounded.
    let [lo, hi] = search.allowed;
    let mut why = "the start and its neighbours".to_string();
    let mut centers = vec![center];
    while !search.interrupted {
        if started.elapsed().as_secs_f64() >= opts.budget_s {
            search.reason = format!("the budget of {} s ran out; ", opts.budget_s);
            break;
        }
        let values: Vec<u64> = (center.saturating_sub(1).max(lo)..=(center + 1).min(hi)).collect();
        if values.len() < 2 {
            break;
        }
        if !trial(&values, why.clone(), false, &mut search, &mut measured)? {
            break;
        }
        let settings = &measured.last().expect("just pushed").settings;
        match next_center(&values, best_of(settings), [lo, hi], &centers, knob) {
            Some((next, reason)) => {
                center = next;
                why = reason;
                centers.push(next);
            }
            None => break,
        }
    }

    let Some(last) = measured.last() else {
        return Err(TuneError::Interrupted(trials_dir));
    };
    let (chosen, reason) = choose(&last.settings, knob);
    if search.interrupted {
        search
            .reason
            .push_str("interrupted: chosen from the trials that finished; ");
    }
    search.reason.push_str(&reason);
    search.chosen = chosen;
    search.elapsed_s = started.elapsed().as_secs_f64();
    finish(file, knob, &mut search, last, out)?;
    let analysis = report::build(out).map_err(|source| TuneError::Analysis {
        trial: search.trials.len(),
        source,
    })?;
    Ok(Tuned {
        out: out.to_path_buf(),
        search,
        analysis,
    })
}

/// The most workers to try.
fn workers_cap(opts: &TuneOptions, probe: &Measured) -> u64 {
    if let Some(m) = opts.max_workers {
        return m;
    }
    let cores = probe.cores as u64;
    match probe.compute_device {
        // Workers + compute threads within the cores.
        ComputeDevice::Cpu => cores.saturating_sub(probe.cpu_threads as u64).max(1),
        ComputeDevice::Cuda => (2 * cores).max(1),
    }
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
    let (next, why) = if best.value == max && max < hi && best.input_bound != "not" {
        (
            max + 1,
            format!(
                "{} = {max} was the best tried and still {} input-bound: try above",
                knob.key(),
                best.input_bound
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
    settings
        .iter()
        .max_by(|a, b| a.img_per_s.total_cmp(&b.img_per_s))
        .expect("a trial measures at least one setting")
}

/// The cheapest setting within noise of the best (its ratio's CI includes 1), and why.
pub fn choose(settings: &[TrialSetting], knob: Knob) -> (Option<u64>, String) {
    let Some(best) = settings
        .iter()
        .max_by(|a, b| a.img_per_s.total_cmp(&b.img_per_s))
    else {
        return (None, "no setting was measured".into());
    };
    // Within noise: the CI of the paired ratio includes 1 — and the setting is not input-bound
    // where the best is not (its waiting share, measured on every step, is direct evidence
    // that the loader holds it back even when a few rounds' throughput cannot tell).
    let bound_rank = |class: &str| match class {
        "highly" => 2,
        "moderately" => 1,
        _ => 0,
    };
    let within: Vec<&TrialSetting> = settings
        .iter()
        .filter(|s| {
            s.value == best.value
                || (s.ratio_low <= 1.0
                    && 1.0 <= s.ratio_high
                    && bound_rank(&s.input_bound) <= bound_rank(&best.input_bound))
        })
        .collect();
    let cheapest = within
        .iter()
        .min_by_key(|s| s.value)
        .copied()
        .unwrap_or(best);
    let reason = if cheapest.value == best.value {
        format!(
            "{} = {} had the highest throughput ({} img/s), and every cheaper setting was \
             slower beyond noise.",
            knob.key(),
            best.value,
            crate::format::rate(best.img_per_s)
        )
    } else {
        format!(
            "{} = {} is the cheapest setting within noise of the best ({} = {}): ratio {} \
             (95 % CI {}–{}).",
            knob.key(),
            cheapest.value,
            knob.key(),
            best.value,
            crate::format::ratio(cheapest.ratio_to_best),
            crate::format::ratio(cheapest.ratio_low),
            crate::format::ratio(cheapest.ratio_high)
        )
    };
    (Some(cheapest.value), reason)
}

/// The trial's experiment: the base settings with a matrix over the knob's values and the
/// trial's short protocol.
fn trial_toml(
    base: &Settings,
    knob: Knob,
    values: &[u64],
    probe: bool,
    opts: &TuneOptions,
) -> String {
    let mut s = base.clone();
    let p = &mut s.protocol;
    p.warmup_steps = opts.warmup_steps;
    p.timed_steps = opts.timed_steps;
    p.rounds = if probe { 1 } else { opts.rounds };
    p.order = config::RunOrder::Alternate;
    p.profile = probe;
    p.profile_steps = p.profile_steps.clamp(1, 10);
    p.headroom = probe;
    s.report.baseline = String::new();
    knob.set(&mut s, values[0]);
    let mut text = toml::to_string(&s).unwrap_or_default();
    if values.len() > 1 {
        let list: Vec<String> = values.iter().map(u64::to_string).collect();
        text.push_str(&format!(
            "\n[matrix]\n\"{}\" = [{}]\n",
            knob.key(),
            list.join(", ")
        ));
    }
    text
}

/// Run one trial into `<trials_dir>/trial-K`; None when interrupted.
#[allow(clippy::too_many_arguments)]
fn run_trial(
    base: &Settings,
    knob: Knob,
    values: &[u64],
    probe: bool,
    opts: &TuneOptions,
    trials_dir: &Path,
    k: usize,
    reporter: &'static dyn Reporter,
) -> Result<Option<Measured>, TuneError> {
    let folder = trials_dir.join(format!("trial-{k}"));
    let path = trials_dir.join(format!("trial-{k}.toml"));
    let text = trial_toml(base, knob, values, probe, opts);
    std::fs::write(&path, &text).map_err(|source| TuneError::Write {
        path: path.clone(),
        source,
    })?;
    let exp = config::load_str(&path, &text, &Overrides::default())
        .map_err(|source| TuneError::Config { trial: k, source })?;
    let plan = plan::build(&exp);
    let run_opts = RunOptions {
        out: folder.clone(),
        command: opts.command.clone(),
        only_runs: None,
        profile_conditions: None,
    };
    match runner::run(&exp, &plan, &run_opts, reporter) {
        Ok(_) => {}
        Err(RunError::Interrupted { .. }) => return Ok(None),
        Err(source) => return Err(TuneError::Run { trial: k, source }),
    }
    let partial = partial_dir(&folder);
    let analysis =
        report::build(&partial).map_err(|source| TuneError::Analysis { trial: k, source })?;
    promote(&partial, &folder).map_err(|source| TuneError::Write {
        path: folder.clone(),
        source,
    })?;
    let raw = crate::results::Raw::load(&folder)?;
    let first = raw.meta.conditions.first();
    let settings = trial_settings(&exp, knob, &analysis, k as u64);
    Ok(Some(Measured {
        compute_device: first.map_or(ComputeDevice::Cpu, |c| c.compute_device),
        cpu_threads: first.map_or(1, |c| c.cpu_threads),
        cores: raw.meta.environment.cores,
        folder,
        settings,
        analysis,
    }))
}

/// Each setting's figures and its ratio to the trial's best: the median of the ratios paired
/// by round (the rounds interleave the settings, so pairing removes drift between rounds),
/// with a bootstrap CI over rounds.
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
            let paired: Vec<f64> = runs_of(&c.condition)
                .iter()
                .filter_map(|(round, v)| {
                    let (_, b) = best_runs.iter().find(|(r, _)| r == round)?;
                    Some(v / b)
                })
                .collect();
            let ratio = bootstrap(&[&paired], seed ^ 0x7e57, |s| median(&s[0]));
            Some(TrialSetting {
                value: knob.get(settings),
                condition: c.condition.clone(),
                img_per_s: c.img_per_s.point,
                wait_share: c.wait_share,
                input_bound: c.judgement.input_bound.word().into(),
                ratio_to_best: ratio.point,
                ratio_low: ratio.low,
                ratio_high: ratio.high,
            })
        })
        .collect()
}

/// The final folder: the last trial's results with search.json and tuned.toml beside them.
fn finish(
    file: &Path,
    knob: Knob,
    search: &mut SearchRecord,
    last: &Measured,
    out: &Path,
) -> Result<(), TuneError> {
    let partial = Partial::create(out)?;
    copy_dir(&last.folder, partial.dir()).map_err(|source| TuneError::Write {
        path: partial.dir().to_path_buf(),
        source,
    })?;
    if let Some(v) = search.chosen {
        let original = std::fs::read_to_string(file).unwrap_or_default();
        let tuned = tuned_toml(&original, knob, v, &search.reason);
        partial.write(TUNED_TOML, tuned.as_bytes())?;
        search.tuned_toml = Some(TUNED_TOML.into());
    }
    partial.write_json(SEARCH_JSON, search)?;
    partial.promote()?;
    Ok(())
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// The experiment file with the knob set to `value` (and no longer a matrix axis), its
/// comments and layout kept.
pub fn tuned_toml(original: &str, knob: Knob, value: u64, reason: &str) -> String {
    use toml_edit::{DocumentMut, Item, value as v};
    let Ok(mut doc) = original.parse::<DocumentMut>() else {
        return original.to_string();
    };
    let (section, key) = knob.key().split_once('.').expect("knob keys are dotted");
    if let Some(matrix) = doc.get_mut("matrix").and_then(Item::as_table_like_mut) {
        matrix.remove(knob.key());
        if let Some(inner) = matrix.get_mut(section).and_then(Item::as_table_like_mut) {
            inner.remove(key);
        }
    }
    if doc.get(section).is_none() {
        doc[section] = toml_edit::table();
    }
    doc[section][key] = v(value as i64);
    let header = format!(
        "# Tuned by `loaderlab tune`: {} = {value}. {reason}\n",
        knob.key()
    );
    format!("{header}{doc}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting(value: u64, img: f64, low: f64, high: f64) -> TrialSetting {
        TrialSetting {
            value,
            condition: format!("workers={value}"),
            img_per_s: img,
            wait_share: 0.0,
            input_bound: "not".into(),
            ratio_to_best: img / 100.0,
            ratio_low: low,
            ratio_high: high,
        }
    }

    #[test]
    fn the_cheapest_within_noise_of_the_best_is_chosen() {
        let s = [
            setting(1, 60.0, 0.5, 0.7),
            setting(2, 98.0, 0.93, 1.03),
            setting(3, 100.0, 1.0, 1.0),
        ];
        assert_eq!(choose(&s, Knob::Workers).0, Some(2));
        let s = [setting(1, 60.0, 0.5, 0.7), setting(2, 100.0, 1.0, 1.0)];
        assert_eq!(choose(&s, Knob::Workers).0, Some(2));
        // A wide CI does not make an input-bound setting equivalent to one that is not.
        let mut waiting = setting(0, 60.0, 0.55, 1.08);
        waiting.input_bound = "highly".into();
        let s = [waiting, setting(1, 100.0, 1.0, 1.0)];
        assert_eq!(choose(&s, Knob::Workers).0, Some(1));
    }

    #[test]
    fn the_climb_moves_towards_the_best_and_never_back() {
        let mut best = setting(3, 100.0, 1.0, 1.0);
        best.input_bound = "moderately".into();
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
        best.input_bound = "not".into();
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

    #[test]
    fn tuned_toml_sets_the_knob_and_drops_its_axis() {
        let original = "# mine\n[loader]\nbatch_size = 64 # keep\n\n[matrix]\n\"loader.workers\" = [0, 2]\n\"model.width\" = [1, 2]\n";
        let t = tuned_toml(original, Knob::Workers, 3, "because");
        assert!(t.starts_with("# Tuned by `loaderlab tune`: loader.workers = 3. because\n"));
        assert!(t.contains("# mine") && t.contains("batch_size = 64 # keep"));
        assert!(t.contains("workers = 3"));
        assert!(!t.contains("\"loader.workers\""));
        assert!(t.contains("\"model.width\" = [1, 2]"));
        let no_section = tuned_toml("[experiment]\nname = \"x\"\n", Knob::Threads, 1, "r");
        assert!(no_section.contains("[device]\nthreads = 1"), "{no_section}");
    }
}
