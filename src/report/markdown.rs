//! `report.md`, one function per section over one table helper. Renders what analysis
//! computed and judged; decides nothing.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::charts::CHARTS;
use super::sections::{headroom, model_scale, profiles, search};
use super::table::{Align, Table, speedup_header};
use super::verdict::{speedup_cell, verdict};
use crate::analysis::Analysis;
use crate::format::{ms, pct, rate, ratio};
use crate::results::{CHARTS_DIR, CONFIG_TOML, Raw};

use Align::{Left, Right};

/// The whole report: title, verdict, setup, results, charts, profiles, warnings, method and
/// how to reproduce it.
pub fn markdown(raw: &Raw, a: &Analysis, charts: &[(String, Vec<PathBuf>)]) -> String {
    let watched = super::watched::is_watched(raw);
    [
        title(raw),
        super::headline::markdown(a, &raw.meta.notices),
        format!("## Verdict\n\n{}\n\n", verdict(a, &raw.meta)),
        super::headline::adopt(a),
        search(raw),
        if watched {
            super::watched::setup(raw)
        } else {
            setup(raw)
        },
        results(a),
        if watched {
            super::watched::over_time(raw)
        } else {
            String::new()
        },
        super::resources::section(a, raw.meta.environment.cores),
        headroom(a),
        model_scale(a),
        runs(a),
        if watched {
            String::new()
        } else {
            order_and_determinism(a)
        },
        super::node::section(a, raw.meta.environment.cores),
        charts_section(charts, watched),
        profiles(raw, a),
        warnings(raw, a),
        super::verdict::how_to_read(a, &raw.meta),
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

/// Whose loader built each condition's batches: one line when every condition used the same
/// engine, else one per engine with its conditions, and what the pytorch engine's profiled runs
/// hold.
fn engines(raw: &Raw) -> String {
    let mut by: Vec<(String, Vec<&str>)> = Vec::new();
    for c in &raw.meta.conditions {
        let e = c.engine.describe();
        match by.iter_mut().find(|(d, _)| *d == e) {
            Some((_, names)) => names.push(&c.name),
            None => by.push((e, vec![&c.name])),
        }
    }
    let notes: Vec<&str> = raw
        .meta
        .conditions
        .iter()
        .filter_map(|c| c.engine.profile_note())
        .collect();
    let pytorch_note = notes.first().map_or(String::new(), |n| format!(" — {n}"));
    match by.as_slice() {
        [(e, _)] => format!("{e}{pytorch_note}"),
        _ => {
            let listed: Vec<String> = by
                .iter()
                .map(|(e, names)| {
                    let names: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
                    format!("{e} for {}", names.join(", "))
                })
                .collect();
            format!("{}{pytorch_note}", listed.join("; "))
        }
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
            ("loader", engines(raw)),
            ("batch size", s.loader.batch_size.to_string()),
            ("model", models(raw)),
            (
                "optimizer",
                if p.conditions.iter().all(|c| c.config.model.is_stand_in()) {
                    "none (a stand-in step trains nothing)".to_string()
                } else {
                    s.optimizer.describe()
                },
            ),
            ("seed", e.seed.to_string()),
            (
                "steps per run",
                format!(
                    "{} warm-up (untimed) + {} timed",
                    e.protocol.warmup_steps, e.protocol.timed_steps
                ),
            ),
            (
                "rounds, order",
                format!("{}, {:?}", e.protocol.rounds, e.protocol.order).to_lowercase(),
            ),
            (
                "profiled run",
                if e.protocol.profile {
                    format!(
                        "{} steps per condition, separate from the timed runs",
                        e.protocol.profile_steps
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
        (speedup_header(a, "speed-up", " (95 % CI)"), Right),
        ("batch_wait p50 / p95 / max".into(), Right),
        ("compute median".into(), Right),
        ("step median".into(), Right),
        ("waiting share".into(), Right),
        ("input-bound".into(), Left),
        ("device idle".into(), Right),
        ("worker start-up".into(), Right),
    ]);
    for c in &a.conditions {
        t.row([
            format!("`{}`", c.condition),
            c.runs.to_string(),
            rate(c.img_per_s.point),
            format!("{}–{}", rate(c.img_per_s_min), rate(c.img_per_s_max)),
            speedup_cell(c),
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
    format!("## Results\n\n{}\n{}", t.render(), paired(a))
}

/// Each condition's ratio to its group's baseline in each round (both ran once per round, so
/// the machine's drift within a round cancels): rounds as columns.
fn paired(a: &Analysis) -> String {
    let rounds: Vec<i64> = {
        let mut r: Vec<i64> = (a.conditions.iter())
            .filter_map(|c| c.speedup.as_ref())
            .flat_map(|s| s.paired.iter().map(|(r, _)| *r))
            .collect();
        r.sort_unstable();
        r.dedup();
        r
    };
    if rounds.is_empty() {
        return String::new();
    }
    let mut t = Table::new(
        [("condition".to_string(), Left), ("vs".into(), Left)]
            .into_iter()
            .chain(rounds.iter().map(|r| (format!("round {r}"), Right))),
    );
    for c in &a.conditions {
        let Some(s) = &c.speedup else { continue };
        let cells = rounds.iter().map(|r| {
            s.paired
                .iter()
                .find(|(pr, _)| pr == r)
                .map_or("–".into(), |(_, x)| ratio(*x))
        });
        t.row(
            [format!("`{}`", c.condition), format!("`{}`", s.against)]
                .into_iter()
                .chain(cells),
        );
    }
    format!(
        "Speed-up paired by round (each round ran every condition once):\n\n{}\n",
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
        ("batch_wait median / p95", Right),
        ("step median", Right),
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

fn charts_section(charts: &[(String, Vec<PathBuf>)], watched: bool) -> String {
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
        let caption = match CHARTS.iter().find(|c| c.name == name) {
            // A watched job's stage clocks ran through the whole job, on its own sample.
            Some(c) if watched && c.name == "stages" => {
                "Your loader's work per image by stage over the whole watched run (each \
                 transform timed on one item in `every`; per-batch stages divided by the batch \
                 size; `hand_off` from a worker's ready batch to the loop holding it)."
            }
            Some(c) => c.caption,
            None => "",
        };
        let _ = writeln!(md, "![{name}]({CHARTS_DIR}/{file})\n\n{caption}\n");
    }
    md
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
