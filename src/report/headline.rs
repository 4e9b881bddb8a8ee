//! The answer at a glance: one sentence with a clause per group of the matrix (its baseline
//! and its fastest other condition), then one short finding per judgement (headroom,
//! prediction, order effect, warnings), each with its figure. Rendered from the analysis like
//! every other figure, so `verify` can rebuild it from the raw rows and find it in report.md.

use crate::analysis::{Analysis, ClassifiedBy, ConditionSummary, Effect, Group};
use crate::format::{pct, rate, ratio};

/// "is highly input-bound (32 % of step time waiting for a batch)".
fn class_of(c: &ConditionSummary) -> String {
    let j = &c.judgement;
    let what = match j.classified_by {
        ClassifiedBy::Waiting => "of step time waiting for a batch",
        ClassifiedBy::DeviceIdle => "of the window with the device idle",
    };
    format!(
        "is {} input-bound ({} {what})",
        j.input_bound.word(),
        pct(j.share)
    )
}

/// The headline names at most this many groups; the others get a finding each.
const HEADLINE_GROUPS: usize = 3;

/// One group's answer: its baseline's class, then its fastest other condition against it
/// ("trains 1.50× faster", "shows no practical difference", "shows no difference beyond
/// noise"), each with its CI.
fn clause(a: &Analysis, g: &Group) -> Option<String> {
    let base = a.summary(&g.baseline)?;
    let best = (g.conditions.iter())
        .filter(|n| **n != g.baseline)
        .filter_map(|n| a.summary(n))
        .max_by(|x, y| x.img_per_s.point.total_cmp(&y.img_per_s.point));
    let Some(best) = best else {
        return Some(format!("{} {}", base.condition, class_of(base)));
    };
    let against = match &best.speedup {
        Some(s) if s.effect.matters() => {
            let r = &s.ratio;
            let factor = if s.effect == Effect::Faster {
                r.point
            } else {
                1.0 / r.point
            };
            format!(
                "{} trains {} {} ({} vs {} img/s, 95 % CI of the ratio {}–{}), and {}",
                best.condition,
                ratio(factor),
                s.effect.words(),
                rate(best.img_per_s.point),
                rate(base.img_per_s.point),
                ratio(r.low),
                ratio(r.high),
                class_of(best)
            )
        }
        Some(s) => format!(
            "{}, the fastest other condition, shows {} ({}, 95 % CI {}–{})",
            best.condition,
            s.effect.words(),
            ratio(s.ratio.point),
            ratio(s.ratio.low),
            ratio(s.ratio.high)
        ),
        None => format!("{} has no speed-up measured", best.condition),
    };
    Some(format!("{} {}; {against}", base.condition, class_of(base)))
}

/// The one sentence that answers the experiment's question, without markup: one clause per
/// group (at most [`HEADLINE_GROUPS`]), then what switching engines would buy.
pub fn headline(a: &Analysis) -> String {
    let groups = a.comparison_groups();
    let clauses: Vec<String> = match groups.as_slice() {
        [one] => clause(a, one).into_iter().collect(),
        many => many
            .iter()
            .take(HEADLINE_GROUPS)
            .filter_map(|g| Some(format!("At {}: {}", g.label, clause(a, g)?)))
            .collect(),
    };
    if clauses.is_empty() {
        return "No completed timed run: nothing to answer.".into();
    }
    format!("{}.{}", clauses.join(". "), switching(a))
}

/// Groups past the headline's first [`HEADLINE_GROUPS`]: one finding each.
fn other_groups(a: &Analysis) -> Vec<String> {
    let groups = a.comparison_groups();
    (groups.iter().skip(HEADLINE_GROUPS))
        .filter_map(|g| Some(format!("At {}: {}.", g.label, clause(a, g)?)))
        .collect()
}

/// " Switching to loaderlab's loader: …", where the matrix holds both engines.
fn switching(a: &Analysis) -> String {
    let Some(s) = &a.engine_switch else {
        return String::new();
    };
    let same = match (&s.native_same_workers, &s.speedup_same_workers) {
        (Some(native), Some(r)) => format!(
            "at the same {} workers, {native} trains {} as fast as the PyTorch DataLoader's \
             best, {} at {} img/s (95 % CI {}–{})",
            s.pytorch_best_workers,
            ratio(r.point),
            s.pytorch_best,
            rate(s.pytorch_best_img_per_s),
            ratio(r.low),
            ratio(r.high)
        ),
        _ => format!(
            "no native condition runs {} workers to set beside the PyTorch DataLoader's best, {}",
            s.pytorch_best_workers, s.pytorch_best
        ),
    };
    let fewest = match (&s.fewest_native, s.fewest_native_workers) {
        (Some(native), Some(w)) => {
            format!("; {w} native workers already keep up with it ({native})")
        }
        _ => "; no native condition measured keeps up with it".into(),
    };
    let code = match &s.adopt {
        Some(a) => format!(
            " In code: replace your DataLoader with {} (Adopt loaderlab's loader, below).",
            a.from_experiment.trim_start_matches("loader = ")
        ),
        None => String::new(),
    };
    format!(" Switching to loaderlab's loader: {same}{fewest}.{code}")
}

/// "## Adopt loaderlab's loader": the baseline's DataLoader line and its replacement, as code.
pub fn adopt(a: &Analysis) -> String {
    let Some(code) = a.engine_switch.as_ref().and_then(|s| s.adopt.as_ref()) else {
        return String::new();
    };
    // The one-line form takes the DataLoader's own dataset object.
    let object = if code
        .loader
        .starts_with("loader = loaderlab.Loader(dataset,")
    {
        " over the same `dataset` object (your torchvision dataset; its transform is translated \
         op by op into loaderlab's, and `loader.check()` compares each op with torchvision's on \
         your images)"
    } else {
        ""
    };
    format!(
        "## Adopt loaderlab's loader\n\n\
         Your DataLoader, as `{yours}` ran it, and loaderlab's loader{object} with the same \
         dataset, transforms and DataLoader arguments at the workers of `{native}` \
         (`pip install loaderlab`; with this seed the batches are those of `{native}`, \
         fingerprint for fingerprint; each comes as float32 N×C×H×W and int64 tensors, handed \
         to torch without a copy):\n\n\
         ```python\n# yours\n{dataloader}\n\n# loaderlab's\nimport loaderlab\n\n{loader}\n\n\
         # or the same, read from this experiment file\n{from_experiment}\n```\n\n",
        yours = code.yours,
        native = code.native,
        dataloader = code.dataloader,
        loader = code.loader,
        from_experiment = code.from_experiment,
    )
}

/// One sentence per finding, each with its figure.
pub fn findings(a: &Analysis, notices: &[String]) -> Vec<String> {
    let mut out = other_groups(a);
    let base = a.conditions.iter().find(|c| c.condition == a.baseline);
    if let Some((base, h)) = base.and_then(|b| b.headroom.as_ref().map(|h| (b, h))) {
        out.push(format!(
            "Headroom: if data were free {} would train at {} img/s; it reached {} of that \
             ceiling, and no loader change can speed it up more than {}.",
            base.condition,
            rate(h.img_per_s),
            pct(h.share_of_ceiling),
            ratio(base.speedup_bound)
        ));
    }
    if let Some(p) = &a.prediction {
        let outcome = match p.confirmed {
            Some(true) => "the matrix bears it out",
            Some(false) => "the matrix does not bear it out",
            None => "no neighbouring worker counts were measured to check it",
        };
        out.push(format!(
            "Prediction: {} worker(s) ({} of loader work per batch over a {} step); {outcome}.",
            p.workers,
            crate::format::ms(p.loader_ms_per_batch),
            crate::format::ms(p.step_ms)
        ));
    }
    // Every node with a straggler, else the baseline's node.
    let nodes: Vec<_> = a
        .conditions
        .iter()
        .filter_map(|c| c.node.as_ref().map(|n| (c, n)))
        .collect();
    let stragglers: Vec<_> = nodes
        .iter()
        .filter(|(_, n)| n.straggler.is_some())
        .collect();
    if stragglers.is_empty() {
        if let Some((c, n)) = nodes.iter().find(|(c, _)| c.condition == a.baseline) {
            out.push(super::node::straggler(c, n));
        }
    } else {
        out.extend(stragglers.iter().map(|(c, n)| super::node::straggler(c, n)));
    }
    let flagged: Vec<&ConditionSummary> = a
        .conditions
        .iter()
        .filter(|c| c.order_effect.flagged)
        .collect();
    let positions = a
        .conditions
        .iter()
        .any(|c| c.order_effect.later_median_img_per_s.is_some());
    if flagged.is_empty() && positions {
        out.push(
            "Order effect: none beyond the spread of runs in the same position (no condition \
             ran faster or slower for going first)."
                .into(),
        );
    } else if !flagged.is_empty() {
        let list: Vec<String> = flagged
            .iter()
            .map(|c| {
                format!(
                    "{} (runs in later positions {} img/s from those in first position)",
                    c.condition,
                    c.order_effect
                        .difference
                        .map_or("–".to_string(), crate::format::sig)
                )
            })
            .collect();
        out.push(format!(
            "Order effect: flagged for {}; compare within rounds (the paired ratios) rather than \
             across positions.",
            list.join(", ")
        ));
    }
    // The order effect's own warnings are the finding above.
    let others: Vec<&String> = a
        .warnings
        .iter()
        .filter(|w| !w.starts_with("order effect"))
        .chain(notices)
        .collect();
    if let Some(first) = others.first() {
        out.push(format!(
            "Warnings: {} more, listed under Warnings below; the first: {first}",
            others.len()
        ));
    }
    out
}

/// The markdown block that opens the report: the headline in bold, then the findings.
pub fn markdown(a: &Analysis, notices: &[String]) -> String {
    let mut md = format!("**{}**\n\n", headline(a));
    for f in findings(a, notices) {
        md.push_str(&format!("- {f}\n"));
    }
    md.push('\n');
    md
}
