//! `report.md`, one function per section over one table helper. Renders what analysis
//! computed and judged; decides nothing.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::charts::CHARTS;
use super::table::{Align, Table};
use super::verdict::verdict;
use crate::analysis::Analysis;
use crate::format::{ms, pct, rate, ratio, thousands};
use crate::results::{CHARTS_DIR, CONFIG_TOML, Raw};

use Align::{Left, Right};

/// The whole report: title, verdict, setup, results, charts, profiles, warnings, method and
/// how to reproduce it.
pub fn markdown(raw: &Raw, a: &Analysis, charts: &[(String, Vec<PathBuf>)]) -> String {
    [
        title(raw),
        format!("## Verdict\n\n{}\n\n", verdict(a, raw.meta.all_on_cpu())),
        search(raw),
        setup(raw),
        results(a),
        headroom(a),
        model_scale(a),
        runs(a),
        order_and_determinism(a),
        charts_section(charts),
        profiles(raw, a),
        warnings(raw, a),
        format!("## How this was measured\n\n{}\n\n", raw.meta.timing_note),
        reproduce(raw),
    ]
    .concat()
}

fn title(raw: &Raw) -> String {
    let e = &raw.plan.experiment;
    let mut md = format!("# {}: is the training step waiting for data?\n\n", e.name);
    if !e.description.is_empty() {
        let _ = writeln!(md, "{}\n", e.description);
    }
    if raw.meta.interrupted {
        md.push_str(
            "> **Interrupted run**: only the measurements taken before the interruption are here.\n\n",
        );
    }
    md
}

/// `name(param=value, …)` for each transform, in order.
fn transforms(s: &crate::config::Settings) -> String {
    let ops: Vec<String> = s
        .transforms
        .iter()
        .map(|t| {
            let v = serde_json::to_value(t).unwrap_or_default();
            let params: Vec<String> = v
                .as_object()
                .map(|o| {
                    o.iter()
                        .filter(|(k, _)| *k != "op")
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect()
                })
                .unwrap_or_default();
            format!("{}({})", t.op_name(), params.join(", "))
        })
        .collect();
    ops.join(" → ")
}

/// The model as built (name, input, parameter count): one line when every condition trains
/// the same, else one per condition.
fn models(raw: &Raw) -> String {
    let described: Vec<(&str, String)> = raw
        .meta
        .conditions
        .iter()
        .map(|c| {
            (
                c.name.as_str(),
                c.model.clone().unwrap_or_else(|| "SmallCNN".into()),
            )
        })
        .collect();
    match described.first() {
        Some((_, m)) if described.iter().all(|(_, d)| d == m) => m.clone(),
        Some(_) => described
            .iter()
            .map(|(n, d)| format!("`{n}`: {d}"))
            .collect::<Vec<_>>()
            .join("; "),
        None => "SmallCNN".into(),
    }
}

fn setup(raw: &Raw) -> String {
    let (p, meta) = (&raw.plan, &raw.meta);
    let e = &p.experiment;
    let mut t = Table::new([("setting", Left), ("value", Left)]);
    if let Some(s) = p.conditions.first().map(|c| &c.config) {
        let first = meta.conditions.first();
        let rows = [
            (
                "dataset",
                first.map(|c| c.dataset.clone()).unwrap_or_default(),
            ),
            ("transforms (per sample, CPU)", transforms(s)),
            ("batch size", s.loader.batch_size.to_string()),
            ("model", models(raw)),
            ("optimizer", s.optimizer.describe()),
            ("seed", e.seed.to_string()),
            (
                "steps per run",
                format!(
                    "{} warm-up (untimed) + {} timed",
                    e.warmup_steps, e.timed_steps
                ),
            ),
            (
                "rounds, order",
                format!("{}, {:?}", e.rounds, e.order).to_lowercase(),
            ),
            (
                "profiled run",
                if e.profile {
                    format!(
                        "{} steps per condition, separate from the timed runs",
                        e.profile_steps
                    )
                } else {
                    "off".into()
                },
            ),
            (
                "prefetch / persistent workers / pin memory",
                format!(
                    "{} / {} / {}",
                    s.loader.prefetch_factor,
                    s.loader.persistent_workers,
                    first.map(|c| c.pin_memory.as_str()).unwrap_or("")
                ),
            ),
        ];
        for (k, v) in rows {
            t.row([k.to_string(), v]);
        }
    }
    for c in &meta.conditions {
        let overrides = p
            .conditions
            .iter()
            .find(|pc| pc.name == c.name)
            .map(|pc| {
                pc.overrides
                    .iter()
                    .map(|(k, v)| format!("{k} = {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .filter(|o| !o.is_empty())
            .unwrap_or_else(|| "base settings".into());
        t.row([
            format!("condition `{}`", c.name),
            format!("{overrides} on {}", c.device),
        ]);
    }
    if let Some(tasks) = &meta.tasks {
        let list: Vec<String> = tasks
            .iter()
            .map(|t| {
                let runs: Vec<String> = t.runs.iter().map(|r| r.to_string()).collect();
                let host = if t.host.is_empty() { "?" } else { &t.host };
                format!("`{}` ran {} on {host}", t.dir, runs.join(", "))
            })
            .collect();
        t.row([
            "execution".to_string(),
            format!(
                "{} separate tasks (Slurm job array), merged: {}",
                tasks.len(),
                list.join("; ")
            ),
        ]);
    }
    format!("## Setup\n\n{}\n", t.render())
}

fn results(a: &Analysis) -> String {
    let mut t = Table::new([
        ("condition".to_string(), Left),
        ("runs".into(), Right),
        ("img/s (median)".into(), Right),
        ("img/s min–max".into(), Right),
        (format!("speed-up vs `{}` (95 % CI)", a.baseline), Right),
        ("batch_wait p50 / p95 / max, ms".into(), Right),
        ("compute median, ms".into(), Right),
        ("step median, ms".into(), Right),
        ("waiting share".into(), Right),
        ("input-bound".into(), Left),
        ("device idle".into(), Right),
        ("worker start-up, ms".into(), Right),
    ]);
    for c in &a.conditions {
        let speed = match &c.speedup {
            Some(s) => format!(
                "{} ({}–{})",
                ratio(s.ratio.point),
                ratio(s.ratio.low),
                ratio(s.ratio.high)
            ),
            None => "baseline".into(),
        };
        t.row([
            format!("`{}`", c.condition),
            c.runs.to_string(),
            rate(c.img_per_s.point),
            format!("{}–{}", rate(c.img_per_s_min), rate(c.img_per_s_max)),
            speed,
            format!(
                "{} / {} / {}",
                ms(c.batch_wait_p50_ms),
                ms(c.batch_wait_p95_ms),
                ms(c.batch_wait_max_ms)
            ),
            ms(c.compute_median_ms),
            ms(c.step_median_ms),
            pct(c.wait_share),
            c.judgement.input_bound.word().to_string(),
            pct(c.device_idle_median),
            ms(c.startup_ms_median),
        ]);
    }
    let mut md = format!("## Results\n\n{}\n", t.render());
    let paired: Vec<String> = a
        .conditions
        .iter()
        .filter_map(|c| {
            let rounds: Vec<String> = c
                .speedup
                .as_ref()?
                .paired
                .iter()
                .map(|(r, x)| format!("round {r}: {}", ratio(*x)))
                .collect();
            Some(format!("`{}`: {}", c.condition, rounds.join(", ")))
        })
        .collect();
    if !paired.is_empty() {
        let _ = writeln!(
            md,
            "Speed-up paired by round (each round ran every condition once): {}.\n",
            paired.join("; ")
        );
    }
    md
}

/// Per condition: measured img/s beside the ceiling if data were free, and the waiting share's
/// bound beside the speed-up actually measured; then the worker prediction.
fn headroom(a: &Analysis) -> String {
    if a.conditions.iter().all(|c| c.headroom.is_none()) {
        return String::new();
    }
    let mut t = Table::new([
        ("condition".to_string(), Left),
        ("img/s (median)".into(), Right),
        ("ceiling if data were free, img/s".into(), Right),
        ("share of the ceiling".into(), Right),
        ("step without waiting, ms".into(), Right),
        ("bound 1 / (1 − waiting share)".into(), Right),
        (format!("speed-up measured vs `{}`", a.baseline), Right),
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
            "Workers needed ≈ loader time per batch ÷ step time without waiting = {} ms ÷ {} ms = \
             {} → **{}**{} (loader time: one batch's build on the stage clocks of `{}`'s profiled \
             run; step time: its headroom run).\n",
            ms(p.loader_ms_per_batch),
            ms(p.step_ms),
            ms(p.workers_exact),
            p.workers,
            match p.cap {
                Some(cap) => format!(", at most {cap} beside the compute threads on this CPU"),
                None => String::new(),
            },
            p.from
        );
    }
    md
}

/// The model-compute axis: per group, its compute and each worker count's figures.
fn model_scale(a: &Analysis) -> String {
    let Some(m) = &a.model_scale else {
        return String::new();
    };
    let mut t = Table::new([
        ("model setting", Left),
        ("model", Left),
        ("compute per step, ms", Right),
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

fn runs(a: &Analysis) -> String {
    let mut t = Table::new([
        ("run", Right),
        ("round", Right),
        ("position", Right),
        ("condition", Left),
        ("img/s", Right),
        ("batch_wait median / p95, ms", Right),
        ("step median, ms", Right),
        ("waiting share", Right),
        ("device idle", Right),
    ]);
    for r in &a.runs {
        t.row([
            r.run.to_string(),
            r.round.to_string(),
            r.position.to_string(),
            format!("`{}`", r.condition),
            format!(
                "{}{}",
                rate(r.img_per_s),
                if r.interrupted { " (interrupted)" } else { "" }
            ),
            format!(
                "{} / {}",
                ms(r.batch_wait_median_ms),
                ms(r.batch_wait_p95_ms)
            ),
            ms(r.step_median_ms),
            pct(r.wait_share),
            pct(r.device_idle),
        ]);
    }
    format!("Every timed run, round by round:\n\n{}\n", t.render())
}

fn order_and_determinism(a: &Analysis) -> String {
    let mut md = String::new();
    let order: Vec<String> = a
        .conditions
        .iter()
        .filter_map(|c| {
            let o = &c.order_effect;
            Some(format!(
                "`{}` first {} vs later {} img/s{}",
                c.condition,
                rate(o.first_median_img_per_s?),
                rate(o.later_median_img_per_s?),
                if o.flagged {
                    " (**flagged**: the gap exceeds the spread within positions)"
                } else {
                    ""
                }
            ))
        })
        .collect();
    if !order.is_empty() {
        let _ = writeln!(
            md,
            "Order effect (median img/s of runs in first vs later positions): {}.\n",
            order.join("; ")
        );
    }
    let d = &a.determinism;
    let det = if d.identical {
        "every timed run of every condition saw bit-identical batches (same fingerprint sequence)."
            .to_string()
    } else if d.inconsistent_conditions.is_empty() {
        let groups: Vec<String> = d
            .groups
            .iter()
            .map(|g| {
                g.iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect();
        format!(
            "rounds of each condition saw identical batches; conditions fall into groups with different data settings: {}.",
            groups.join(" | ")
        )
    } else {
        format!(
            "**batches differed between rounds of {}**.",
            d.inconsistent_conditions.join(", ")
        )
    };
    let _ = writeln!(md, "Determinism: {det}\n");
    md
}

fn charts_section(charts: &[(String, Vec<PathBuf>)]) -> String {
    if charts.is_empty() {
        return String::new();
    }
    let mut md = "## Charts\n\n".to_string();
    for (name, files) in charts {
        let file = files
            .iter()
            .find(|f| f.extension().is_some_and(|x| x == "svg"))
            .or(files.first())
            .and_then(|f| f.file_name())
            .map(|f| f.to_string_lossy().to_string())
            .unwrap_or_default();
        let caption = CHARTS
            .iter()
            .find(|c| c.name == name)
            .map_or("", |c| c.caption);
        let _ = writeln!(md, "![{name}]({CHARTS_DIR}/{file})\n\n{caption}\n");
    }
    md
}

fn profiles(raw: &Raw, a: &Analysis) -> String {
    if a.profiles.is_empty() {
        return String::new();
    }
    let mut md = format!(
        "## Profiled runs\n\nOne separate run per condition of {} steps after its own warm-up, recorded as a Chrome trace. \
         Recording adds overhead, so these numbers never enter the speed figures above. Open a file in \
         [Perfetto](https://ui.perfetto.dev) (\"Open trace file\") or `chrome://tracing`: the training \
         thread (`main`) shows `batch_wait`, `h2d_transfer` and `forward_backward_adam` for each step, \
         and each loader worker has its own `loader-worker-N` track with one `build_batch` span per batch.\n\n",
        raw.plan.experiment.profile_steps
    );
    md.push_str(&stages(a));
    for prof in &a.profiles {
        let _ = writeln!(
            md,
            "**`{}`** — [`{}`]({}) ({} KiB), profiled window {} ms\n",
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
            ("total, ms", Right),
            ("mean, ms", Right),
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
fn search(raw: &Raw) -> String {
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

/// The loader's cost per stage, every profiled condition side by side.
fn stages(a: &Analysis) -> String {
    let profiled: Vec<_> = a.profiles.iter().filter(|p| !p.stages.is_empty()).collect();
    if profiled.is_empty() {
        return String::new();
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
                        format!("{} ({})", ms(s.us_per_image), pct(s.share))
                    }),
            );
        }
        t.row(row);
    }
    format!(
        "### Loader stages\n\nWhere the loader's time goes, per image: reading and decoding, \
         each transform op, `to_tensor` (with `normalize`) into the batch buffer, the batch's \
         fingerprint, the rest of `build_batch` (`other`), and `queue_full`, the time a worker \
         sat blocked because every buffer of the loader held a batch waiting to be consumed. Shares \
         are of the loader's time per batch (the build + `queue_full`). Timed on the monotonic \
         clock: per-image stages on one image in {}, the rest on every batch. The trace draws \
         the first image of each batch as spans inside `build_batch`; a span costs about as \
         much as a whole stage, so the figures never come from spans.\n\n{}\n",
        crate::spans::STAGE_SAMPLE,
        t.render()
    )
}

fn warnings(raw: &Raw, a: &Analysis) -> String {
    let notices = raw.meta.notices.iter().map(|n| format!("note: {n}"));
    let all: Vec<String> = a.warnings.iter().cloned().chain(notices).collect();
    if all.is_empty() {
        return String::new();
    }
    let items: Vec<String> = all.iter().map(|w| format!("- {w}\n")).collect();
    format!("## Warnings\n\n{}\n", items.concat())
}

fn reproduce(raw: &Raw) -> String {
    let (meta, env) = (&raw.meta, &raw.meta.environment);
    let commit = env
        .git_commit
        .as_ref()
        .map(|c| {
            let dirty = if env.git_dirty == Some(true) {
                " with uncommitted changes"
            } else {
                ""
            };
            format!(" at commit {c}{dirty}")
        })
        .unwrap_or_default();
    format!(
        "## Reproduce\n\n```\n{}\n```\n\n\
         Machine: {} ({} cores, {} GiB), {}; devices: {}. Built with {} ({} profile, opt-level {}), loaderlab {}{commit}.\n\n\
         Raw data: `steps.csv` (one row per timed step), `runs.csv` (one row per timed run), `steps.parquet`, \
         `summary.csv`, `result.json`; configuration as run: `{CONFIG_TOML}`. Rebuild this report with \
         `loaderlab report <this folder>`; check it with `loaderlab verify <this folder>`.\n",
        meta.command,
        env.cpu_model,
        env.cores,
        env.memory_gib,
        env.os,
        env.devices.join(", "),
        meta.rustc,
        meta.build_profile,
        meta.build_opt_level,
        meta.loaderlab_version,
    )
}

/// Every stage span name: the loader's own and the transform ops'.
fn is_stage(name: &str) -> bool {
    crate::spans::LOADER_STAGES.contains(&name)
        || crate::transforms::TransformSpec::ops().contains(&name)
}
