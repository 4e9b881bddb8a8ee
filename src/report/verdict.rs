//! The plain-words answer: the judgements analysis made, rendered with their figures.

use std::fmt::Write as _;

use crate::analysis::{Analysis, ClassifiedBy, ConditionSummary, InputBound, LoaderVerdict};
use crate::format::{ms, pct, rate, ratio};
use crate::results::RunMeta;

/// One sentence per condition: its speed-up against the baseline, or no difference beyond
/// noise.
fn speedups(out: &mut String, a: &Analysis, base: &ConditionSummary) {
    for c in a.conditions.iter().filter(|c| c.condition != a.baseline) {
        let Some(s) = &c.speedup else { continue };
        let r = &s.ratio;
        if s.beyond_noise {
            let (word, factor) = if r.point >= 1.0 {
                ("faster", r.point)
            } else {
                ("slower", 1.0 / r.point)
            };
            let _ = write!(
                out,
                "With {} the model trained {} {word} than with {} ({} vs {} img/s; 95 % CI of the ratio {}–{}, {} vs {} runs). ",
                c.condition,
                ratio(factor),
                base.condition,
                rate(c.img_per_s.point),
                rate(base.img_per_s.point),
                ratio(r.low),
                ratio(r.high),
                c.runs,
                base.runs
            );
        } else {
            let _ = write!(
                out,
                "{} against {}: no difference beyond noise ({}; the 95 % CI {}–{} includes 1). ",
                c.condition,
                base.condition,
                ratio(r.point),
                ratio(r.low),
                ratio(r.high)
            );
        }
    }
}

/// Every condition's input-bound class, with the thresholds it was judged against and the
/// share it was judged on.
fn input_bound(out: &mut String, a: &Analysis) {
    let Some(first) = a.conditions.first().map(|c| &c.judgement) else {
        return;
    };
    let (t, by) = (first.thresholds, first.classified_by);
    let mixed = a.conditions.iter().any(|c| c.judgement.classified_by != by);
    let classes: Vec<String> = a
        .conditions
        .iter()
        .map(|c| {
            let j = &c.judgement;
            let of = if mixed { j.classified_by.name() } else { "" };
            format!(
                "{} {} ({}{}{of})",
                c.condition,
                j.input_bound.word(),
                pct(j.share),
                if mixed { " " } else { "" },
            )
        })
        .collect();
    let what = if mixed {
        "of the judged share".to_string()
    } else {
        by.what().to_string()
    };
    let _ = write!(
        out,
        " Input-bound (TensorFlow Profiler's classes: highly at {} or more {what}, moderately \
         at {} or more): {}.",
        threshold(t.highly_input_bound),
        threshold(t.moderately_input_bound),
        classes.join(", ")
    );
    if a.conditions
        .iter()
        .any(|c| c.judgement.classified_by == ClassifiedBy::DeviceIdle)
    {
        out.push_str(
            " The device ran asynchronously (the host only enqueued each step), so the host's \
             waiting overlapped device work: the classes, the loader verdict and the bound on \
             any loader speed-up are judged on the device's idle share, not the waiting share.",
        );
    }
}

/// The baseline's ceiling if data were free, and what it reached of it.
fn headroom(out: &mut String, base: &ConditionSummary) {
    let Some(h) = &base.headroom else { return };
    let _ = write!(
        out,
        " If data were free (batches already on the device, replayed), {} would train at {} img/s; \
         it reached {} of that ceiling, and its {} bounds any loader speed-up at {}.",
        base.condition,
        rate(h.img_per_s),
        pct(h.share_of_ceiling),
        base.judgement.classified_by.name(),
        ratio(base.speedup_bound)
    );
}

/// This run's step beside the user's framework's (`[report] framework_step_ms`), next to the
/// ceiling it qualifies.
fn framework(out: &mut String, a: &Analysis) {
    let Some(f) = &a.framework else { return };
    if f.bound() {
        let _ = write!(
            out,
            " This trainer's step took {} ms on the device against {} ms for the same step in \
             your framework (`[report] framework_step_ms`): the trainer is framework-bound, {} \
             slower, so the ceiling above understates your job's by about as much and every \
             verdict here leans towards \"not input-bound\". For your job's answer run the \
             stand-in step with its time (`model.kind = \"stand_in\"`, `model.step_ms = {}`).",
            ms(f.ours_ms),
            ms(f.framework_ms),
            ratio(f.ratio),
            f.framework_ms
        );
    } else {
        let _ = write!(
            out,
            " This trainer's step took {} ms on the device against {} ms for the same step in \
             your framework (`[report] framework_step_ms`; {} as long): the ceiling and the \
             verdicts stand for your job's.",
            ms(f.ours_ms),
            ms(f.framework_ms),
            ratio(f.ratio)
        );
    }
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

/// What a stand-in run's emulated device assumes, as the verdict states it.
pub const STAND_IN_ASSUMES: &str = " The step is a stand-in of declared device time, on an \
emulated device: the host copies each batch into device memory (h2d), enqueues the step and goes \
on; a device thread reads every byte of the batch, then sleeps until the step's time has passed \
(holding no core, so the loader's workers have every core), starting each step when it was \
enqueued or when the previous one ended; the host waits only when two steps already wait behind \
the running one and at the end of the window — as a CUDA host does with one kernel per step. \
What it does not model: the copy's PCIe time, and the real step's own host work (its Python and \
kernel launches), which would compete with the workers for the cores.";

/// Which share `condition` was judged on.
fn judged_by(a: &Analysis, condition: &str) -> ClassifiedBy {
    a.conditions
        .iter()
        .find(|c| c.condition == condition)
        .map_or(ClassifiedBy::Waiting, |c| c.judgement.classified_by)
}

/// The predicted worker count and what the matrix says of it.
fn prediction(out: &mut String, a: &Analysis) {
    let Some(p) = &a.prediction else { return };
    let cores = p.cap_rule.describe();
    let asleep = p.asleep();
    let slept_on = if p.storage_share >= asleep {
        "waiting for storage"
    } else {
        "off the CPU (asleep: storage, disk reads)"
    };
    let cap = p.cap;
    let capped = match p.capped {
        true if asleep > 0.0 => format!(
            " (cut to {cap}: {cores}, stretched by the {} of the loader's time spent {slept_on})",
            pct(asleep)
        ),
        true => format!(" (cut to {cap}: {cores})"),
        false => String::new(),
    };
    let waits_for_storage = if asleep > 0.0 {
        format!(
            " The loader spent {} of its time {slept_on}: workers beyond the cores pay, so the \
             prediction and `tune` allow {} worker(s) per core the loader may use.",
            pct(asleep),
            crate::format::sig(p.cap_rule.per_core())
        )
    } else {
        String::new()
    };
    let _ = write!(
        out,
        " Prediction: {} ms of loader work per batch (one thread, from {}'s profiled run) over a \
         {} ms step without waiting (its headroom run) calls for {} workers, so {}{capped}.\
         {waits_for_storage}",
        ms(p.loader_ms_per_batch),
        p.from,
        ms(p.step_ms),
        ms(p.workers_exact),
        p.workers
    );
    if p.workers == 0 && p.queued {
        let _ = write!(
            out,
            " (Loading on the training thread takes {} of the step, and the emulated device's \
             queue runs the step while the next batch is built: it idles only for a build \
             longer than the step.)",
            pct(p.workers_exact)
        );
    } else if p.workers == 0 {
        let _ = write!(
            out,
            " (Loading on the training thread costs about {} of the step, under the moderately \
             input-bound threshold.)",
            pct(p.workers_exact / (1.0 + p.workers_exact))
        );
    }
    if p.measured.len() > 1 {
        let seen: Vec<String> = p
            .measured
            .iter()
            .map(|m| {
                let by = judged_by(a, &m.condition);
                format!("{} {}", m.condition, waits(m.wait_share, m.input_bound, by))
            })
            .collect();
        let outcome = match p.confirmed {
            Some(true) => "; the prediction holds",
            Some(false) => "; the measurements do not bear the prediction out",
            None => "",
        };
        let _ = write!(out, " Measured: {}{outcome}.", seen.join(", "));
    }
}

/// Where extra workers stopped paying as the model's compute grew.
fn model_scale(out: &mut String, a: &Analysis) {
    let Some(m) = &a.model_scale else { return };
    let best = |g: &crate::analysis::ScaleGroup| {
        g.points
            .iter()
            .filter_map(|p| p.speedup.as_ref().map(|r| (p, r)))
            .max_by(|x, y| x.1.point.total_cmp(&y.1.point))
            .map(|(p, r)| {
                format!(
                    "{} is {} ({}–{})",
                    p.condition,
                    ratio(r.point),
                    ratio(r.low),
                    ratio(r.high)
                )
            })
            .unwrap_or_default()
    };
    if let Some(k) = m.hidden_from {
        let g = &m.groups[k];
        let first = &g.points[0];
        let _ = write!(
            out,
            " Model compute against workers: from {} ({} ms of compute per step) the step's \
             compute hides the loader: with {} worker(s) it {}, and {}.",
            g.label,
            ms(g.compute_ms),
            first.workers,
            waits(
                first.wait_share,
                g.input_bound,
                judged_by(a, &first.condition)
            ),
            best(g)
        );
    }
    match m.stops_paying_from {
        Some(k) => {
            let g = &m.groups[k];
            let _ = write!(
                out,
                " Extra workers paid beyond noise up to the model setting before {}, not from \
                 it on ({} ms of compute per step: {}).",
                g.label,
                ms(g.compute_ms),
                best(g)
            );
        }
        None if m.groups.iter().all(|g| g.workers_pay) => {
            let _ = write!(
                out,
                " Extra workers paid beyond noise at every model size measured (up to {}, {} ms \
                 of compute per step: {}).",
                m.groups.last().map_or("", |g| g.label.as_str()),
                ms(m.groups.last().map_or(f64::NAN, |g| g.compute_ms)),
                m.groups.last().map(best).unwrap_or_default()
            );
        }
        None => {
            let widest = m
                .groups
                .iter()
                .filter_map(|g| {
                    g.points
                        .get(1)
                        .and_then(|p| p.speedup.as_ref())
                        .map(|r| (g, r))
                })
                .map(|(g, r)| {
                    format!(
                        "{} {} ({}–{})",
                        g.label,
                        ratio(r.point),
                        ratio(r.low),
                        ratio(r.high)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            let _ = write!(
                out,
                " No speed-up from extra workers was beyond noise at any model size ({widest}); \
                 more rounds narrow these intervals."
            );
        }
    }
}

/// A threshold as the setting reads: 0.5 → "50 %" (a set value, not a measured figure).
fn threshold(share: f64) -> String {
    // Rounded to a millionth of a percent, so 0.07 reads "7 %", not "7.000000000000001 %".
    format!("{} %", (share * 1e8).round() / 1e6)
}

/// Each condition's share of the timed window with the device idle.
fn idle_shares(out: &mut String, a: &Analysis, meta: &RunMeta) {
    let idle: Vec<String> = a
        .conditions
        .iter()
        .filter(|c| c.device_idle_median.is_finite())
        .map(|c| format!("{} at {}", pct(c.device_idle_median), c.condition))
        .collect();
    if idle.is_empty() {
        return;
    }
    let device = if meta.all_on_cpu() {
        "training step"
    } else if meta.any_stand_in() {
        "device"
    } else {
        "GPU"
    };
    let clock = a.conditions.first().map_or("", |c| c.device_clock.as_str());
    let _ = write!(
        out,
        " Share of the timed window in which the {device} sat idle: {} (median over runs; busy time from {clock}).",
        idle.join(", ")
    );
}

pub fn verdict(a: &Analysis, meta: &RunMeta) -> String {
    let on_cpu = meta.all_on_cpu();
    let mut out = String::new();
    let Some(base) = a.conditions.iter().find(|c| c.condition == a.baseline) else {
        return "No completed timed run: nothing to compare.".into();
    };
    speedups(&mut out, a, base);
    let t = &base.judgement.thresholds;
    let judged = match base.judgement.classified_by {
        ClassifiedBy::Waiting => String::new(),
        ClassifiedBy::DeviceIdle => format!(
            "; the device sat idle {} of the timed window",
            pct(base.judgement.share)
        ),
    };
    let waiting = match base.judgement.classified_by {
        ClassifiedBy::Waiting => "waiting",
        ClassifiedBy::DeviceIdle => "device idle",
    };
    let _ = write!(
        out,
        "At {} the training thread waited a median {} ms of a median {} ms step for data ({} of all step time{judged}): {}.",
        base.condition,
        ms(base.batch_wait_p50_ms),
        ms(base.step_median_ms),
        pct(base.wait_share),
        match base.judgement.loader {
            LoaderVerdict::Bottleneck => format!(
                "the loader was the bottleneck (at least {} {waiting})",
                threshold(t.bottleneck_wait_share)
            ),
            LoaderVerdict::PartialBottleneck => format!(
                "the loader was a partial bottleneck ({} to {} {waiting})",
                threshold(t.partial_wait_share),
                threshold(t.bottleneck_wait_share)
            ),
            LoaderVerdict::KeptUp => format!(
                "the loader kept up (under {} {waiting})",
                threshold(t.partial_wait_share)
            ),
        }
    );
    if let Some(best) = a
        .conditions
        .iter()
        .filter(|c| c.condition != base.condition)
        .min_by(|x, y| x.judgement.share.total_cmp(&y.judgement.share))
    {
        let stalls = if best.judgement.stalls {
            format!(
                "; its 95th percentile, {} ms, shows stalls remain",
                ms(best.batch_wait_p95_ms)
            )
        } else {
            String::new()
        };
        let _ = write!(
            out,
            " With {} the wait was {} ms per step at the median ({} of step time{stalls}).",
            best.condition,
            ms(best.batch_wait_p50_ms),
            pct(best.wait_share),
        );
    }
    input_bound(&mut out, a);
    headroom(&mut out, base);
    framework(&mut out, a);
    prediction(&mut out, a);
    model_scale(&mut out, a);
    idle_shares(&mut out, a, meta);
    if meta.any_stand_in() {
        out.push_str(STAND_IN_ASSUMES);
    }
    if on_cpu {
        out.push_str(
            " Training ran on the CPU, so \"waiting for data\" here means the training thread sat idle \
             in the loader; loader workers also compete with training for the same cores.",
        );
    }
    out
}
