//! The report's sections on where the time goes and what to change: the headroom ceiling, the
//! model-compute crossover, the profiled runs and their stage costs, and `tune`'s search.
//! Like the rest of the report, they render what analysis computed and judged.

use std::fmt::Write as _;

use super::table::{Align, Table};
use crate::analysis::Analysis;
use crate::format::{ms, pct, rate, ratio, sig, thousands};
use crate::results::Raw;

use Align::{Left, Right};

/// Per condition: measured img/s beside the ceiling if data were free, and the waiting share's
/// bound beside the speed-up actually measured; then the worker prediction.
pub(super) fn headroom(a: &Analysis) -> String {
    if a.conditions.iter().all(|c| c.headroom.is_none()) {
        return String::new();
    }
    let mut t = Table::new([
        ("condition".to_string(), Left),
        ("img/s (median)".into(), Right),
        ("ceiling if data were free, img/s".into(), Right),
        ("share of the ceiling".into(), Right),
        ("step without waiting".into(), Right),
        (
            format!(
                "bound 1 / (1 − {})",
                a.conditions
                    .first()
                    .map_or("waiting share", |c| c.judgement.classified_by.name())
            ),
            Right,
        ),
        (
            super::table::speedup_header(a, "speed-up measured", ""),
            Right,
        ),
    ]);
    for c in &a.conditions {
        let h = c.headroom.as_ref();
        t.row([
            format!("`{}`", c.condition),
            rate(c.img_per_s.point),
            h.map_or("–".into(), |h| rate(h.img_per_s)),
            h.map_or("–".into(), |h| pct(h.share_of_ceiling)),
            h.map_or("–".into(), |h| ms(h.step_ms)),
            ratio(c.speedup_bound),
            c.speedup
                .as_ref()
                .map_or("baseline".into(), |s| ratio(s.ratio.point)),
        ]);
    }
    let mut md = format!(
        "## Headroom: the throughput if data were free

Each condition's headroom run trains \
         on batches built once by its loader, copied to the device and replayed, so no loader \
         work happens in the loop (SPDL's headspace analysis). Its steps are split over the rounds, \
         each share run after its round's timed runs, so it meets the machine's drift as they do; \
         it never enters their figures. The bound is the most that removing every wait could \
         give the condition.\n\n{}\n",
        t.render()
    );
    if let Some(p) = &a.prediction {
        let _ = writeln!(
            md,
            "Workers needed ≈ loader time per batch ÷ step time without waiting = {} ÷ {} = \
             {} → **{}**, at most {}: {} (loader time: one batch's build on the stage clocks of \
             `{}`'s profiled run; step time: its headroom run).\n",
            ms(p.loader_ms_per_batch),
            ms(p.step_ms),
            sig(p.workers_exact),
            p.workers,
            p.cap,
            p.cap_rule.describe(),
            p.from
        );
    }
    md
}

/// The model-compute axis: per group, its compute and each worker count's figures.
pub(super) fn model_scale(a: &Analysis) -> String {
    let Some(m) = &a.model_scale else {
        return String::new();
    };
    let mut t = Table::new([
        ("model setting", Left),
        ("model", Left),
        ("compute per step", Right),
        (
            "workers: waiting share, speed-up over the fewest (95 % CI)",
            Left,
        ),
    ]);
    for g in &m.groups {
        let points: Vec<String> = g
            .points
            .iter()
            .map(|p| {
                let speed = p.speedup.as_ref().map_or("reference".to_string(), |r| {
                    format!("{} ({}–{})", ratio(r.point), ratio(r.low), ratio(r.high))
                });
                format!("{}: {}, {speed}", p.workers, pct(p.wait_share))
            })
            .collect();
        t.row([
            format!("`{}`", g.label),
            g.model.clone().unwrap_or_default(),
            ms(g.compute_ms),
            points.join("; "),
        ]);
    }
    format!(
        "## Model compute against workers\n\nConditions grouped by everything but the worker \
         count, in order of compute per step (the fewest-workers condition's median).\n\n{}\n",
        t.render()
    )
}

pub(super) fn profiles(raw: &Raw, a: &Analysis) -> String {
    if a.profiles.is_empty() {
        return String::new();
    }
    if a.profiles.iter().all(|p| p.file.is_empty()) {
        // A watched job: its stage clocks ran through the whole job; there is no trace.
        let Some(table) = stage_table(a) else {
            return String::new();
        };
        return format!(
            "## Inside your loader\n\nWhere your loader's time goes, per image, over the whole \
             watched run: your dataset's `__getitem__` less its transforms (its own code: \
             reading, decoding, whatever it does), each transform of its `Compose` by class \
             name, the `collate` per batch, the rest of the build (`other`), and with workers \
             `hand_off`, from a worker's batch being ready (or the loop asking for it, if later) \
             to the loop holding it (pickling, the queue, pinning). Every item's fetch and every \
             collate are timed; the transforms on one item in `every` (What was watched), in \
             each worker process, the clocks travelling back with the batch. Shares are of the \
             loader's time per batch. For `loaderlab.Loader`, its own stage clocks (one image \
             in 8).\n\n{table}\n"
        );
    }
    let mut md = format!(
        "## Profiled runs\n\nOne separate run per condition of {} steps after its own warm-up, recorded as a Chrome trace. \
         Recording adds overhead, so these numbers never enter the speed figures above. Open a file in \
         [Perfetto](https://ui.perfetto.dev) (\"Open trace file\") or `chrome://tracing`: the training \
         thread (`main`) shows `batch_wait`, `h2d_transfer` and `forward_backward_adam` for each step, \
         and each loader worker has its own `loader-worker-N` track with one `build_batch` span per batch.\n\n",
        raw.plan.protocol().profile_steps
    );
    md.push_str(&stages(a));
    for prof in &a.profiles {
        let _ = writeln!(
            md,
            "**`{}`** — [`{}`]({}) ({} KiB), profiled window {}\n",
            prof.condition,
            prof.file,
            prof.file,
            thousands(prof.bytes.div_ceil(1024) as f64),
            ms(prof.window_ms)
        );
        let mut t = Table::new([
            ("track", Left),
            ("span", Left),
            ("count", Right),
            ("total", Right),
            ("mean", Right),
            ("share of window", Right),
        ]);
        // The per-image stage spans are in the stage table above.
        let listed = |r: &&crate::analysis::SpanRow| {
            !is_stage(&r.span) || r.span == crate::spans::QUEUE_FULL
        };
        for r in prof.rows.iter().filter(listed) {
            t.row([
                r.track.clone(),
                format!("`{}`", r.span),
                r.count.to_string(),
                ms(r.total_ms),
                ms(r.mean_ms),
                pct(r.share),
            ]);
        }
        let _ = writeln!(md, "{}", t.render());
    }
    md
}

/// `tune`'s search: every trial, why it was tried, each setting's ratio to the trial's best.
pub(super) fn search(raw: &Raw) -> String {
    let Some(s) = &raw.search else {
        return String::new();
    };
    let mut md = format!(
        "## Search (`loaderlab tune`)\n\nTuned `{}` within {}–{}. {}\n\n",
        s.knob, s.allowed[0], s.allowed[1], s.start
    );
    let mut t = Table::new([
        ("trial", Right),
        ("why", Left),
        ("setting", Left),
        ("img/s (median)", Right),
        ("waiting share", Right),
        ("input-bound", Left),
        ("ratio to the trial's best (95 % CI)", Right),
    ]);
    for trial in &s.trials {
        for (k, x) in trial.settings.iter().enumerate() {
            t.row([
                if k == 0 {
                    trial.trial.to_string()
                } else {
                    String::new()
                },
                if k == 0 {
                    format!("{} ([folder]({}))", trial.why, trial.folder)
                } else {
                    String::new()
                },
                format!("`{}`", x.condition),
                rate(x.img_per_s),
                pct(x.wait_share),
                x.input_bound.word().to_string(),
                format!(
                    "{} ({}–{})",
                    ratio(x.ratio_to_best),
                    ratio(x.ratio_low),
                    ratio(x.ratio_high)
                ),
            ]);
        }
    }
    let _ = writeln!(md, "{}", t.render());
    match (s.chosen, &s.tuned_toml) {
        (Some(v), Some(file)) => {
            let _ = writeln!(
                md,
                "**Chosen: `{} = {v}`**: {} Ready to run: [`{file}`]({file}). The figures below \
                 are those of the last trial.\n",
                s.knob, s.reason
            );
        }
        _ => {
            let _ = writeln!(md, "No setting chosen: {}\n", s.reason);
        }
    }
    if s.interrupted {
        md.push_str("> The search was interrupted; the trials above are those that finished.\n\n");
    }
    md
}

/// The loader's cost per stage, every profiled condition side by side (None without stage
/// clocks).
fn stage_table(a: &Analysis) -> Option<String> {
    let profiled: Vec<_> = a.profiles.iter().filter(|p| !p.stages.is_empty()).collect();
    if profiled.is_empty() {
        return None;
    }
    let mut names: Vec<&str> = Vec::new();
    for p in &profiled {
        for s in &p.stages {
            if !names.contains(&s.stage.as_str()) {
                names.push(&s.stage);
            }
        }
    }
    let mut columns = vec![("stage".to_string(), Left)];
    columns.extend(
        profiled
            .iter()
            .map(|p| (format!("`{}`: µs per image (share)", p.condition), Right)),
    );
    let mut t = Table::new(columns);
    for name in names {
        let mut row = vec![format!("`{name}`")];
        for p in &profiled {
            row.push(
                p.stages
                    .iter()
                    .find(|s| s.stage == name)
                    .map_or("–".into(), |s| {
                        format!("{} ({})", sig(s.us_per_image), pct(s.share))
                    }),
            );
        }
        t.row(row);
    }
    // The build's wall time as the scheduler saw it, one row across the conditions.
    if profiled.iter().any(|p| p.build_split.is_some()) {
        let mut row = vec!["build: on a CPU / waiting for one / off it".to_string()];
        for p in &profiled {
            row.push(p.build_split.map_or("–".into(), |b| {
                format!(
                    "{} / {} / {}",
                    pct(b.on_cpu),
                    pct(b.waiting_for_cpu),
                    pct(b.off_cpu)
                )
            }));
        }
        t.row(row);
    }
    Some(t.render())
}

/// The loader's cost per stage, every profiled condition side by side.
fn stages(a: &Analysis) -> String {
    let Some(table) = stage_table(a) else {
        return String::new();
    };
    format!(
        "### Loader stages\n\nWhere the loader's time goes, per image: reading and decoding, \
         each transform op, `to_tensor` (with `normalize`) into the batch buffer, the batch's \
         fingerprint, the rest of `build_batch` (`other`), and `queue_full`, the time a worker \
         sat blocked because every buffer of the loader held a batch waiting to be consumed. Shares \
         are of the loader's time per batch (the build + `queue_full`). Timed on the monotonic \
         clock: per-image stages on one image in {}, the rest on every batch (where a sampled \
         image was preempted and the sample overshoots the whole build, the per-image stages are \
         scaled down to it). The trace draws \
         the first image of each batch as spans inside `build_batch`; a span costs about as \
         much as a whole stage, so the figures never come from spans. The last row splits the \
         build's wall time by the kernel's scheduler statistics of its thread: on a CPU, \
         runnable but waiting for one (other threads had the cores), and off the CPU (asleep: \
         emulated storage, a disk read) — time off the CPU lets more workers than cores pay.\n\n{}\n",
        crate::spans::STAGE_SAMPLE,
        table
    )
}

/// Every stage span name: the loader's own and the transform ops'.
fn is_stage(name: &str) -> bool {
    crate::spans::LOADER_STAGES.contains(&name)
        || crate::transforms::TransformSpec::ops().contains(&name)
}
