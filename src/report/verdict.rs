//! The answer as a person scans it: per group of the matrix one table (each condition's
//! throughput, its speed-up over the group's baseline with its CI and whether the difference
//! matters, its input-bound class by the share that classifies, the most any loader change
//! could give it and the loader's verdict), then at most one short bullet per finding. What
//! the classes, the effects and the emulated device mean is in "How to read this" at the end.

use std::fmt::Write as _;

use super::table::{Align, Table};
use crate::analysis::{
    Analysis, ClassifiedBy, ConditionSummary, Group, InputBound, LoaderVerdict, ScaleGroup,
};
use crate::format::{ms, pct, rate, ratio};
use crate::results::RunMeta;

use Align::{Left, Right};

/// "1.50× (1.41×–1.62×)", or "baseline".
pub fn speedup_cell(c: &ConditionSummary) -> String {
    match &c.speedup {
        Some(s) => format!(
            "{} ({}–{})",
            ratio(s.ratio.point),
            ratio(s.ratio.low),
            ratio(s.ratio.high)
        ),
        None => "baseline".into(),
    }
}

/// "highly (32 % waiting share)".
pub fn class_cell(c: &ConditionSummary) -> String {
    let j = &c.judgement;
    format!(
        "{} ({} {})",
        j.input_bound.word(),
        pct(j.share),
        j.classified_by.name()
    )
}

fn loader_word(v: LoaderVerdict) -> &'static str {
    match v {
        LoaderVerdict::Bottleneck => "bottleneck",
        LoaderVerdict::PartialBottleneck => "partial bottleneck",
        LoaderVerdict::KeptUp => "kept up",
    }
}

/// One group's table.
fn group_table(a: &Analysis, g: &Group) -> String {
    let mut t = Table::new([
        ("condition".to_string(), Left),
        ("img/s (median)".into(), Right),
        (format!("speed-up vs `{}` (95 % CI)", g.baseline), Right),
        ("difference".into(), Left),
        ("input-bound".into(), Left),
        ("loader".into(), Left),
        ("any loader change at most".into(), Right),
    ]);
    for c in g.conditions.iter().filter_map(|n| a.summary(n)) {
        t.row([
            format!("`{}`", c.condition),
            rate(c.img_per_s.point),
            speedup_cell(c),
            c.speedup
                .as_ref()
                .map_or("–".into(), |s| s.effect.words().to_string()),
            class_cell(c),
            loader_word(c.judgement.loader).to_string(),
            ratio(c.speedup_bound),
        ]);
    }
    t.render()
}

/// Conditions where a few batches still kept the step waiting far longer than the median one.
fn stalls(a: &Analysis) -> Option<String> {
    let stalled: Vec<String> = a
        .conditions
        .iter()
        .filter(|c| c.judgement.stalls)
        .map(|c| {
            format!(
                "`{}` (p95 {}, median {})",
                c.condition,
                ms(c.batch_wait_p95_ms),
                ms(c.batch_wait_p50_ms)
            )
        })
        .collect();
    (!stalled.is_empty()).then(|| {
        format!(
            "Stalls: a few batches kept the step waiting far longer than the median one at {}.",
            stalled.join(", ")
        )
    })
}

/// This run's step beside the user's framework's (`[report] framework_step_ms`).
fn framework(a: &Analysis) -> Option<String> {
    let f = a.framework.as_ref()?;
    Some(if f.bound() {
        format!(
            "Framework: this trainer's step took {} on the device against {} for the same step \
             in your framework (`[report] framework_step_ms`): the trainer is framework-bound, \
             {} slower, so the ceiling understates your job's and every verdict here leans \
             towards \"not input-bound\". For your job's answer run the stand-in step \
             (`model.kind = \"stand_in\"`, `model.step_ms = {}`).",
            ms(f.ours_ms),
            ms(f.framework_ms),
            ratio(f.ratio),
            f.framework_ms
        )
    } else {
        format!(
            "Framework: this trainer's step took {} on the device against {} for the same step \
             in your framework (`[report] framework_step_ms`; {} as long): the ceiling and the \
             verdicts stand for your job's.",
            ms(f.ours_ms),
            ms(f.framework_ms),
            ratio(f.ratio)
        )
    })
}

/// The predicted worker count and whether the matrix bears it out.
fn prediction(a: &Analysis) -> Option<String> {
    let p = a.prediction.as_ref()?;
    let asleep = p.asleep();
    let slept_on = if p.storage_share >= asleep {
        "waiting for storage"
    } else {
        "asleep (storage, disk reads)"
    };
    let cap = p.cap;
    let capped = match p.capped {
        true if asleep > 0.0 => format!(
            ", cut to {cap} ({}, stretched by the {} of the loader's time {slept_on})",
            p.cap_rule.describe(),
            pct(asleep)
        ),
        true => format!(", cut to {cap} ({})", p.cap_rule.describe()),
        false => String::new(),
    };
    let why = if p.workers == 0 && p.queued {
        format!(
            "; building on the training thread takes {} of the step, and the emulated \
             device's queue hides a build shorter than the step",
            pct(p.workers_exact)
        )
    } else if p.workers == 0 {
        format!(
            "; building on the training thread costs about {} of the step",
            pct(p.workers_exact / (1.0 + p.workers_exact))
        )
    } else {
        String::new()
    };
    let outcome = match p.confirmed {
        Some(true) => " The matrix bears it out.",
        Some(false) => " The matrix does not bear it out.",
        None => "",
    };
    let (build_from, step_from) = if p.watched {
        (
            "stage clocks over the watched run",
            "the step between batches",
        )
    } else {
        ("profiled run", "its headroom run")
    };
    Some(format!(
        "Prediction: **{} worker(s)**{capped}: {} of loader work per batch (`{}`'s {build_from}) \
         over a {} step without waiting ({step_from}) = {}{why}.{outcome}",
        p.workers,
        ms(p.loader_ms_per_batch),
        p.from,
        ms(p.step_ms),
        crate::format::sig(p.workers_exact),
    ))
}

/// "waits 12 % of step time (highly input-bound)" for a measured neighbour.
fn waits(share: f64, class: InputBound, by: ClassifiedBy) -> String {
    match by {
        ClassifiedBy::Waiting => format!(
            "waits {} of step time ({} input-bound)",
            pct(share),
            class.word()
        ),
        ClassifiedBy::DeviceIdle => format!(
            "leaves the device idle {} of the time ({} input-bound)",
            pct(share),
            class.word()
        ),
    }
}

/// Which share `condition` was judged on.
fn judged_by(a: &Analysis, condition: &str) -> ClassifiedBy {
    a.summary(condition)
        .map_or(ClassifiedBy::Waiting, |c| c.judgement.classified_by)
}

/// A scale group's fastest extra worker count: "`w=2` is 1.50× (1.41×–1.62×)".
fn best_of(g: &ScaleGroup) -> String {
    g.points
        .iter()
        .filter_map(|p| p.speedup.as_ref().map(|r| (p, r)))
        .max_by(|x, y| x.1.point.total_cmp(&y.1.point))
        .map(|(p, r)| {
            format!(
                "`{}` is {} ({}–{})",
                p.condition,
                ratio(r.point),
                ratio(r.low),
                ratio(r.high)
            )
        })
        .unwrap_or_default()
}

/// Where the step's compute hid the loader, and where extra workers stopped paying, as the
/// model's compute grew: two findings.
fn model_scale(a: &Analysis) -> Vec<String> {
    let Some(m) = &a.model_scale else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(k) = m.hidden_from {
        let g = &m.groups[k];
        let first = &g.points[0];
        out.push(format!(
            "Compute hides the loader from {} ({} of compute per step): with {} worker(s) it {}.",
            g.label,
            ms(g.compute_ms),
            first.workers,
            waits(
                first.wait_share,
                g.input_bound,
                judged_by(a, &first.condition)
            ),
        ));
    }
    let matters = pct(a.min_effect);
    out.push(match m.stops_paying_from {
        Some(k) => {
            let g = &m.groups[k];
            format!(
                "Extra workers paid (faster by more than {matters}) up to the model setting \
                 before {}, not from it on ({} of compute per step: {}).",
                g.label,
                ms(g.compute_ms),
                best_of(g)
            )
        }
        None if m.groups.iter().all(|g| g.workers_pay) => {
            let last = m.groups.last();
            format!(
                "Extra workers paid (faster by more than {matters}) at every model size measured \
                 (up to {}, {} of compute per step: {}).",
                last.map_or("", |g| g.label.as_str()),
                ms(last.map_or(f64::NAN, |g| g.compute_ms)),
                last.map(best_of).unwrap_or_default()
            )
        }
        None => format!(
            "Extra workers paid (faster by more than {matters}) at no model size measured; the \
             Model compute section lists each speed-up with its CI."
        ),
    });
    out
}

/// The Verdict section's body: a table per group (with its label and baseline where the
/// matrix has several), then one bullet per finding.
pub fn verdict(a: &Analysis, _meta: &RunMeta) -> String {
    if a.conditions.is_empty() {
        return "No completed timed run: nothing to compare.".into();
    }
    let groups = a.comparison_groups();
    let mut out = String::new();
    for g in &groups {
        if groups.len() > 1 {
            let _ = writeln!(out, "**{}** (baseline `{}`)\n", g.label, g.baseline);
        }
        out.push_str(&group_table(a, g));
        out.push('\n');
    }
    let bullets: Vec<String> = [stalls(a), framework(a), prediction(a)]
        .into_iter()
        .flatten()
        .chain(model_scale(a))
        .collect();
    for b in bullets {
        let _ = writeln!(out, "- {b}");
    }
    out.trim_end().to_string()
}

/// What a stand-in run's emulated device assumes.
pub const STAND_IN_ASSUMES: &str = "The step is a stand-in of declared times, in two sides. \
Its host side (`model.host_ms`): the training thread spends that much of its own CPU time on a \
core each step (and `model.host_threads` − 1 helpers as much on theirs), as a real step's Python, \
autograd and kernel launches do — on a CPU job the whole step — and asks for no batch meanwhile. \
Its device side (`model.step_ms`), on an emulated device: the host copies each batch into device \
memory (h2d), enqueues the step and goes on; a device thread reads every byte of the batch, then \
sleeps until the step's time has passed (holding no core), starting each step when it was \
enqueued or when the previous one ended; the host waits only when two steps already wait behind \
the running one and at the end of the window — as a CUDA host does with one kernel per step. \
With `step_ms = 0` there is no device: the step is all host and synchronous, and the class is \
judged on the training thread's waiting share. What it does not model: the copy's PCIe time.";

/// A threshold as the setting reads: 0.5 → "50 %" (a set value, not a measured figure).
fn threshold(share: f64) -> String {
    // Rounded to a millionth of a percent, so 0.07 reads "7 %", not "7.000000000000001 %".
    format!("{} %", (share * 1e8).round() / 1e6)
}

/// "How to read this": the rules behind the Verdict's words, one paragraph each.
pub fn how_to_read(a: &Analysis, meta: &RunMeta) -> String {
    let Some(first) = a.conditions.first() else {
        return String::new();
    };
    let t = &first.judgement.thresholds;
    let mut parts = vec![
        format!(
            "**Groups.** Conditions that share every setting but the loader's own (workers, \
             prefetch, pinned memory, persistent workers, read-ahead, engine) are compared \
             within their group, against the group's baseline: the condition with the \
             `[report] baseline` condition's loader settings, else the group's first{}.",
            if a.comparison_groups().len() > 1 {
                ""
            } else {
                " (this matrix is one group)"
            }
        ),
        format!(
            "**Differences.** A speed-up is the ratio of median img/s over the rounds, with a \
             95 % bootstrap CI. It is *faster* or *slower* when its CI excludes 1 and does not \
             lie within ±{} of 1 (`[report] min_effect`); *no practical difference* when its \
             whole CI lies within that band, even if it excludes 1; *no difference beyond \
             noise* when its CI includes 1 and reaches past the band (more rounds narrow it).",
            pct(a.min_effect)
        ),
        format!(
            "**Input-bound** (TensorFlow Profiler's classes): *highly* at {} or more of the \
             share that classifies, *moderately* at {} or more. The loader is the *bottleneck* \
             at {} or more, a *partial bottleneck* from {}, and *kept up* below. \"Any loader \
             change at most\" is 1 / (1 − that share): the speed-up if every wait vanished.",
            threshold(t.highly_input_bound),
            threshold(t.moderately_input_bound),
            threshold(t.bottleneck_wait_share),
            threshold(t.partial_wait_share),
        ),
    ];
    let device = if meta.all_on_cpu() {
        "training step"
    } else if meta.any_stand_in() {
        "device"
    } else {
        "GPU"
    };
    parts.push(format!(
        "**Device idle** is the share of the timed window in which the {device} did no step \
         work (median over runs; busy time from {}).",
        first.device_clock
    ));
    if a.conditions
        .iter()
        .any(|c| c.judgement.classified_by == ClassifiedBy::DeviceIdle)
    {
        parts.push(
            "**The share that classifies.** The device ran asynchronously (the host only \
             enqueued each step), so the host's waiting overlapped device work: classes, the \
             loader's verdict and the bound are judged on the device's idle share of the timed \
             window, not the waiting share."
                .into(),
        );
    }
    if meta.any_stand_in() {
        parts.push(format!("**The stand-in step.** {STAND_IN_ASSUMES}"));
    }
    if meta.all_on_cpu() {
        parts.push(
            "**On the CPU.** Training ran on the CPU, so \"waiting for data\" means the training \
             thread sat idle in the loader; the loader's workers also compete with training \
             for the same cores."
                .into(),
        );
    }
    format!("## How to read this\n\n{}\n\n", parts.join("\n\n"))
}
