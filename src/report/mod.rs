//! The human-readable answer: `report.md` with a verdict computed from the numbers, tables,
//! charts and the profile summary, plus `result.json` for machines. Works from a results folder
//! alone (see [`crate::analysis`]), so `loaderlab report <dir>` and the end of a run share it.

pub mod charts;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::analysis::{self, Analysis, AnalysisError};
use crate::results::{
    CHARTS_DIR, CONFIG_TOML, Environment, REPORT_MD, RESULT_JSON, Raw, RunMeta, write_atomic,
};

/// Everything `result.json` holds.
#[derive(Serialize)]
struct ResultFile<'a> {
    loaderlab_version: &'static str,
    environment: &'a Environment,
    config: serde_json::Value,
    plan: &'a crate::plan::Plan,
    run: &'a RunMeta,
    analysis: &'a Analysis,
}

/// Rebuild analysis tables, charts, `result.json` and `report.md` in `dir`.
pub fn build(dir: &Path) -> Result<Analysis, AnalysisError> {
    let raw = Raw::load(dir)?;
    let analysis = analysis::analyse(&raw)?;
    analysis::write_tables(&raw, &analysis)?;
    let formats = raw
        .plan
        .conditions
        .first()
        .map(|c| c.config.report.clone())
        .unwrap_or_default();
    let charts = if formats.charts && !analysis.conditions.is_empty() {
        let data = charts::ChartData::new(&raw, &analysis).map_err(AnalysisError::Data)?;
        charts::draw_all(&dir.join(CHARTS_DIR), &formats.formats, &data)
            .map_err(|m| AnalysisError::Data(format!("drawing charts: {m}")))?
    } else {
        Vec::new()
    };
    let config_text = std::fs::read_to_string(dir.join(CONFIG_TOML)).unwrap_or_default();
    let config: serde_json::Value = toml::from_str::<toml::Value>(&config_text)
        .ok()
        .and_then(|v| serde_json::to_value(v).ok())
        .unwrap_or(serde_json::Value::Null);
    let result = ResultFile {
        loaderlab_version: env!("CARGO_PKG_VERSION"),
        environment: &raw.meta.environment,
        config,
        plan: &raw.plan,
        run: &raw.meta,
        analysis: &analysis,
    };
    let json =
        serde_json::to_vec_pretty(&result).map_err(|e| AnalysisError::Data(e.to_string()))?;
    let path = dir.join(RESULT_JSON);
    write_atomic(&path, &json).map_err(|e| AnalysisError::File {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let md = markdown(&raw, &analysis, &charts);
    let path = dir.join(REPORT_MD);
    write_atomic(&path, md.as_bytes()).map_err(|e| AnalysisError::File {
        path,
        message: e.to_string(),
    })?;
    Ok(analysis)
}

/// 42921.3 → "42,921".
pub fn thousands(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let s = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

fn ms(v: f64) -> String {
    if !v.is_finite() {
        "–".into()
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:.0} %", v * 100.0)
    } else {
        "–".into()
    }
}

/// The plain-words answer, computed from the numbers.
pub fn verdict(a: &Analysis, on_cpu: bool) -> String {
    let mut out = String::new();
    let Some(base) = a.conditions.iter().find(|c| c.condition == a.baseline) else {
        return "No completed timed run: nothing to compare.".into();
    };
    for c in a.conditions.iter().filter(|c| c.condition != a.baseline) {
        let Some(s) = &c.speedup else { continue };
        if s.beyond_noise {
            let (word, factor) = if s.ratio >= 1.0 {
                ("faster", s.ratio)
            } else {
                ("slower", 1.0 / s.ratio)
            };
            let _ = write!(
                out,
                "With {} the model trained {factor:.1}× {word} than with {} ({} vs {} img/s; 95 % CI of the ratio {:.2}–{:.2}×, {} vs {} runs). ",
                c.condition,
                base.condition,
                thousands(c.img_per_s_median),
                thousands(base.img_per_s_median),
                s.ci_low,
                s.ci_high,
                c.runs,
                base.runs
            );
        } else {
            let _ = write!(
                out,
                "{} against {}: no difference beyond noise ({:.2}×; the 95 % CI {:.2}–{:.2}× includes 1). ",
                c.condition, base.condition, s.ratio, s.ci_low, s.ci_high
            );
        }
    }
    let _ = write!(
        out,
        "At {} the training thread waited a median {} ms of a median {} ms step for data ({} of all step time)",
        base.condition,
        ms(base.batch_wait_p50_ms),
        ms(base.step_median_ms),
        pct(base.wait_share)
    );
    if base.wait_share >= 0.5 {
        out.push_str(": the loader was the bottleneck.");
    } else if base.wait_share >= 0.1 {
        out.push_str(": the loader was a partial bottleneck.");
    } else {
        out.push_str(": the loader kept up.");
    }
    if let Some(best) = a
        .conditions
        .iter()
        .filter(|c| c.condition != base.condition)
        .min_by(|x, y| x.wait_share.total_cmp(&y.wait_share))
    {
        let _ = write!(
            out,
            " With {} the wait was {} ms per step at the median ({} of step time{}).",
            best.condition,
            ms(best.batch_wait_p50_ms),
            pct(best.wait_share),
            if best.batch_wait_p95_ms > 5.0 * best.batch_wait_p50_ms.max(1e-3)
                && best.batch_wait_p95_ms > 1.0
            {
                format!(
                    "; its 95th percentile, {} ms, shows stalls remain",
                    ms(best.batch_wait_p95_ms)
                )
            } else {
                String::new()
            }
        );
    }
    let idle: Vec<String> = a
        .conditions
        .iter()
        .filter(|c| c.device_idle_median.is_finite())
        .map(|c| format!("{} at {}", pct(c.device_idle_median), c.condition))
        .collect();
    if !idle.is_empty() {
        let device = if on_cpu { "training step" } else { "GPU" };
        let clock = a.conditions.first().map_or("", |c| c.device_clock.as_str());
        let _ = write!(
            out,
            " Share of the timed window in which the {device} sat idle: {} (median over runs; busy time from {clock}).",
            idle.join(", ")
        );
    }
    if on_cpu {
        out.push_str(
            " Training ran on the CPU, so \"waiting for data\" here means the training thread sat idle \
             in the loader; loader workers also compete with training for the same cores.",
        );
    }
    out
}

fn markdown(raw: &Raw, a: &Analysis, charts: &[(String, Vec<PathBuf>)]) -> String {
    let mut md = String::new();
    let p = &raw.plan;
    let e = &p.experiment;
    let meta = &raw.meta;
    let on_cpu = meta.conditions.iter().all(|c| c.device.starts_with("cpu"));
    let _ = writeln!(md, "# {}: is the training step waiting for data?\n", e.name);
    if !e.description.is_empty() {
        let _ = writeln!(md, "{}\n", e.description);
    }
    if meta.interrupted {
        let _ = writeln!(
            md,
            "> **Interrupted run**: only the measurements taken before the interruption are here.\n"
        );
    }
    let _ = writeln!(md, "## Verdict\n\n{}\n", verdict(a, on_cpu));

    // Setup.
    let _ = writeln!(md, "## Setup\n");
    let _ = writeln!(md, "| setting | value |\n|---|---|");
    let base = p.conditions.first().map(|c| &c.config);
    if let Some(s) = base {
        let transforms: Vec<String> = s
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
        let dataset = meta
            .conditions
            .first()
            .map(|c| c.dataset.clone())
            .unwrap_or_default();
        let rows = [
            ("dataset", dataset),
            ("transforms (per sample, CPU)", transforms.join(" → ")),
            ("batch size", s.loader.batch_size.to_string()),
            (
                "model / optimizer",
                format!(
                    "SmallCNN / Adam (lr {}, betas {:?}, eps {})",
                    s.optimizer.lr, s.optimizer.betas, s.optimizer.eps
                ),
            ),
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
                    meta.conditions
                        .first()
                        .map(|c| c.pin_memory.as_str())
                        .unwrap_or("")
                ),
            ),
        ];
        for (k, v) in rows {
            let _ = writeln!(md, "| {k} | {v} |");
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
            .unwrap_or_default();
        let _ = writeln!(
            md,
            "| condition `{}` | {} on {} |",
            c.name,
            if overrides.is_empty() {
                "base settings".into()
            } else {
                overrides
            },
            c.device
        );
    }
    if let Some(tasks) = &meta.tasks {
        let list: Vec<String> = tasks
            .iter()
            .map(|t| {
                let runs: Vec<String> = t.runs.iter().map(|r| r.to_string()).collect();
                format!(
                    "`{}` ran {} on {}",
                    t.dir,
                    runs.join(", "),
                    if t.host.is_empty() { "?" } else { &t.host }
                )
            })
            .collect();
        let _ = writeln!(
            md,
            "| execution | {} separate tasks (Slurm job array), merged: {} |",
            tasks.len(),
            list.join("; ")
        );
    }
    let _ = writeln!(md);

    // Results.
    let _ = writeln!(md, "## Results\n");
    let _ = writeln!(
        md,
        "| condition | runs | img/s (median) | img/s min–max | speed-up vs `{}` (95 % CI) | batch_wait p50 / p95 / max, ms | compute median, ms | step median, ms | waiting share | device idle | worker start-up, ms |",
        a.baseline
    );
    let _ = writeln!(
        md,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for c in &a.conditions {
        let speed = match &c.speedup {
            Some(s) => format!("{:.2}× ({:.2}–{:.2})", s.ratio, s.ci_low, s.ci_high),
            None => "baseline".into(),
        };
        let _ = writeln!(
            md,
            "| `{}` | {} | {} | {}–{} | {} | {} / {} / {} | {} | {} | {} | {} | {} |",
            c.condition,
            c.runs,
            thousands(c.img_per_s_median),
            thousands(c.img_per_s_min),
            thousands(c.img_per_s_max),
            speed,
            ms(c.batch_wait_p50_ms),
            ms(c.batch_wait_p95_ms),
            ms(c.batch_wait_max_ms),
            ms(c.compute_median_ms),
            ms(c.step_median_ms),
            pct(c.wait_share),
            pct(c.device_idle_median),
            ms(c.startup_ms_median)
        );
    }
    let _ = writeln!(md);
    let paired: Vec<String> = a
        .conditions
        .iter()
        .filter_map(|c| {
            let s = c.speedup.as_ref()?;
            let rounds: Vec<String> = s
                .paired
                .iter()
                .map(|(r, x)| format!("round {r}: {x:.2}×"))
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
    let _ = writeln!(md, "Every timed run, round by round:\n");
    let _ = writeln!(
        md,
        "| run | round | position | condition | img/s | batch_wait median / p95, ms | step median, ms | waiting share | device idle |"
    );
    let _ = writeln!(md, "|---:|---:|---:|---|---:|---:|---:|---:|---:|");
    for r in &a.runs {
        let _ = writeln!(
            md,
            "| {} | {} | {} | `{}` | {}{} | {} / {} | {} | {} | {} |",
            r.run,
            r.round,
            r.position,
            r.condition,
            thousands(r.img_per_s),
            if r.interrupted { " (interrupted)" } else { "" },
            ms(r.batch_wait_median_ms),
            ms(r.batch_wait_p95_ms),
            ms(r.step_median_ms),
            pct(r.wait_share),
            pct(r.device_idle)
        );
    }
    let _ = writeln!(md);
    let order: Vec<String> = a
        .conditions
        .iter()
        .filter_map(|c| {
            let o = &c.order_effect;
            Some(format!(
                "`{}` first {} vs later {} img/s{}",
                c.condition,
                thousands(o.first_median_img_per_s?),
                thousands(o.later_median_img_per_s?),
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

    // Charts.
    if !charts.is_empty() {
        let _ = writeln!(md, "## Charts\n");
        let titles = [
            (
                "throughput",
                "Throughput per condition: bar = median of rounds, dots = runs, whisker = 95 % bootstrap CI of the median.",
            ),
            (
                "batch_wait",
                "Time spent waiting for each batch, every timed step (log scale); the bar marks the median.",
            ),
            (
                "timeline",
                "The first five timed steps of each condition's first run: batch_wait, h2d and compute segments.",
            ),
            ("step_time", "Step time over each timed run."),
        ];
        for (name, files) in charts {
            let file = files
                .iter()
                .find(|f| f.extension().is_some_and(|x| x == "svg"))
                .or(files.first())
                .and_then(|f| f.file_name())
                .map(|f| f.to_string_lossy().to_string())
                .unwrap_or_default();
            let title = titles
                .iter()
                .find(|(n, _)| n == name)
                .map_or("", |(_, t)| *t);
            let _ = writeln!(md, "![{name}]({CHARTS_DIR}/{file})\n\n{title}\n");
        }
    }

    // Profile.
    if !a.profiles.is_empty() {
        let _ = writeln!(md, "## Profiled runs\n");
        let _ = writeln!(
            md,
            "One separate run per condition of {} steps after its own warm-up, recorded as a Chrome trace. \
             Recording adds overhead, so these numbers never enter the speed figures above. Open a file in \
             [Perfetto](https://ui.perfetto.dev) (\"Open trace file\") or `chrome://tracing`: the training \
             thread (`main`) shows `batch_wait`, `h2d_transfer` and `forward_backward_adam` for each step, \
             and each loader worker has its own `loader-worker-N` track with one `build_batch` span per batch.\n",
            e.profile_steps
        );
        for prof in &a.profiles {
            let _ = writeln!(
                md,
                "**`{}`** — [`{}`]({}) ({} KiB), profiled window {} ms\n",
                prof.condition,
                prof.file,
                prof.file,
                prof.bytes.div_ceil(1024),
                ms(prof.window_ms)
            );
            let _ = writeln!(
                md,
                "| track | span | count | total, ms | mean, ms | share of window |\n|---|---|---:|---:|---:|---:|"
            );
            for r in &prof.rows {
                let _ = writeln!(
                    md,
                    "| {} | `{}` | {} | {} | {} | {} |",
                    r.track,
                    r.span,
                    r.count,
                    ms(r.total_ms),
                    ms(r.mean_ms),
                    pct(r.share)
                );
            }
            let _ = writeln!(md);
        }
    }

    // Warnings.
    let mut warnings = a.warnings.clone();
    warnings.extend(meta.notices.iter().map(|n| format!("note: {n}")));
    if !warnings.is_empty() {
        let _ = writeln!(md, "## Warnings\n");
        for w in &warnings {
            let _ = writeln!(md, "- {w}");
        }
        let _ = writeln!(md);
    }

    let _ = writeln!(md, "## How this was measured\n\n{}\n", meta.timing_note);
    let env = &meta.environment;
    let _ = writeln!(md, "## Reproduce\n\n```\n{}\n```\n", meta.command);
    let _ = writeln!(
        md,
        "Machine: {} ({} cores, {} GiB), {}; devices: {}. Built with {} ({} profile, opt-level {}), loaderlab {}{}.\n",
        env.cpu_model,
        env.cores,
        env.memory_gib,
        env.os,
        env.devices.join(", "),
        meta.rustc,
        meta.build_profile,
        meta.build_opt_level,
        meta.loaderlab_version,
        env.git_commit
            .as_ref()
            .map(|c| format!(" at commit {c}"))
            .unwrap_or_default()
    );
    let _ = writeln!(
        md,
        "Raw data: `steps.csv` (one row per timed step), `runs.csv` (one row per timed run), `steps.parquet`, \
         `summary.csv`, `result.json`; configuration as run: `{CONFIG_TOML}`. Rebuild this report with \
         `loaderlab report <this folder>`; check it with `loaderlab verify <this folder>`."
    );
    md
}
