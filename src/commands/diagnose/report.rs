//! What `diagnose` writes: report.md and result.json (atomically), a chart of every step's
//! time and wait, and on request a stand-in experiment to run the user's pipeline against.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Diagnosis, RankDiagnosis};
use crate::analysis::ClassifiedBy;
use crate::format::{ms, pct, ratio};
use crate::report::charts::style::{self, DrawResult, Mark, color, legend, step_chart};
use crate::results::write_atomic;

/// The chart's file, relative to the folder (and a PNG beside it).
pub const CHART: &str = "charts/steps.svg";
const CHART_SIZE: (u32, u32) = (1100, 480);

/// Write report.md, result.json and the chart into `dir`; returns report.md's path.
pub fn write_folder(d: &Diagnosis, dir: &Path) -> Result<PathBuf, String> {
    let fail = |what: &str, err: &dyn std::fmt::Display| {
        format!("cannot write {}: {err}", dir.join(what).display())
    };
    std::fs::create_dir_all(dir.join("charts")).map_err(|err| fail("charts", &err))?;
    style::register_font();
    let chart = dir.join(CHART);
    {
        let root = SVGBackend::new(&chart, CHART_SIZE).into_drawing_area();
        draw(&root, d).map_err(|err| fail(CHART, &err))?;
        root.present().map_err(|err| fail(CHART, &err))?;
    }
    let png = chart.with_extension("png");
    {
        let root = BitMapBackend::new(&png, CHART_SIZE).into_drawing_area();
        draw(&root, d).map_err(|err| fail("charts/steps.png", &err))?;
        root.present()
            .map_err(|err| fail("charts/steps.png", &err))?;
    }
    let json = serde_json::to_vec_pretty(d).map_err(|err| fail("result.json", &err))?;
    write_atomic(&dir.join("result.json"), &json).map_err(|err| fail("result.json", &err))?;
    let report = dir.join("report.md");
    write_atomic(&report, markdown(d).as_bytes()).map_err(|err| fail("report.md", &err))?;
    Ok(report)
}

/// The answer for one rank, in one sentence.
pub fn headline(r: &RankDiagnosis) -> String {
    let judged = match r.classified_by {
        ClassifiedBy::DeviceIdle => format!(
            "the GPU sat idle {} of step time (95 % CI {}–{}) while the host waited for data {} of it",
            pct(r.share),
            pct(r.device_idle.as_ref().map_or(f64::NAN, |c| c.low)),
            pct(r.device_idle.as_ref().map_or(f64::NAN, |c| c.high)),
            pct(r.waiting_share.point),
        ),
        ClassifiedBy::Waiting => format!(
            "it waited for data {} of step time (95 % CI {}–{})",
            pct(r.share),
            pct(r.waiting_share.low),
            pct(r.waiting_share.high),
        ),
    };
    let who = r.rank[..1].to_uppercase() + &r.rank[1..];
    format!(
        "{who}: {} input-bound — {judged}; no loader change can speed it up more than {}.",
        r.input_bound.word(),
        ratio(r.bound)
    )
}

fn markdown(d: &Diagnosis) -> String {
    let t = &d.thresholds;
    let mut out = format!("# Is this job waiting for data? `{}`\n\n", d.trace);
    for r in &d.ranks {
        let _ = writeln!(out, "**{}**\n", headline(r));
    }
    if let Some(slowest) = &d.slowest {
        let _ = writeln!(
            out,
            "The slowest rank (longest median step) is **{slowest}**: every rank waits for it at \
             each gradient all-reduce.\n"
        );
    }
    let _ = write!(
        out,
        "Classes are TensorFlow Profiler's: highly input-bound at {} % or more, moderately at {} % \
         or more. Where the trace has device work (kernels, copies, memsets on device streams) the \
         class is judged on the device's idle share — the host's waiting overlaps device work on \
         an asynchronous device — and otherwise on the waiting share. Shares are Σ over steps \
         (time idle or waiting / step time), their 95 % CIs from {} bootstrap resamples of the \
         steps.\n\n",
        t.highly_input_bound * 100.0,
        t.moderately_input_bound * 100.0,
        crate::analysis::BOOTSTRAP_RESAMPLES
    );
    out.push_str(
        "## Per rank\n\n| rank | steps | wait span | waiting share (95 % CI) | device idle (95 % CI) | \
         class | bound | step p50 / p95 / max | wait p50 / p95 / max | step without \
         waiting | host p50 / p95 | device busy per step | batch |\n|---|---:|---|---:|---:|---|\
         ---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in &d.ranks {
        let ci = |c: &crate::analysis::Estimate| {
            format!("{} ({}–{})", pct(c.point), pct(c.low), pct(c.high))
        };
        let _ = writeln!(
            out,
            "| {} | {} | `{}` | {} | {} | {} | {} | {} / {} / {} | {} / {} / {} | {} | {} / {} | {} \
             | {} |",
            r.rank,
            r.steps,
            r.wait_span,
            ci(&r.waiting_share),
            r.device_idle
                .as_ref()
                .map_or("– (no device work)".into(), ci),
            r.input_bound.word(),
            ratio(r.bound),
            ms(r.step_ms.p50),
            ms(r.step_ms.p95),
            ms(r.step_ms.max),
            ms(r.wait_ms.p50),
            ms(r.wait_ms.p95),
            ms(r.wait_ms.max),
            ms(r.step_without_wait_ms),
            ms(r.host_ms.p50),
            ms(r.host_ms.p95),
            r.device_busy_ms.map_or("0 (no device work)".into(), ms),
            r.batch_size.map_or("–".into(), |b| b.to_string()),
        );
    }
    let first = d.ranks.first();
    let _ = write!(
        out,
        "\n**Host time** is the step outside the wait for data and outside the CUDA calls that \
         block on the device (synchronisations, device-to-host copies): the training thread's own \
         time, during which it holds a core and does not ask for the next batch. On a trace with \
         no device work it is the whole step outside the wait, and the device's time is 0.\n\n\
         ![Every step's time and wait]({CHART})\n\n*Every profiled step: its time (solid) and \
         its wait for data (dashed), per rank.*\n\n## Next: replay this step against your \
         pipeline\n\n`loaderlab diagnose TRACE --emit stand_in.toml` writes an experiment whose \
         step is a stand-in of {} on the host (the median host time per step), then {} on the \
         device (the median device busy time per step; 0 on a trace without device work: the \
         step is all host). Point it at your Dataset (its `[pytorch] dataset` line) or put your \
         transforms and dataset in it and run it: the report predicts the workers your pipeline \
         needs for this step, and `loaderlab tune` finds them.\n",
        first.map_or("–".into(), |r| ms(r.stand_in_host_ms)),
        first.map_or("–".into(), |r| ms(r.stand_in_step_ms)),
    );
    out
}

/// A ready-to-edit experiment with the trace's step as a stand-in (its host side and its
/// device side), for the file `file` it is written to.
pub fn emit_experiment(d: &Diagnosis, file: &Path) -> String {
    let r = d.ranks.iter().max_by(|a, b| {
        (a.stand_in_step_ms + a.stand_in_host_ms)
            .total_cmp(&(b.stand_in_step_ms + b.stand_in_host_ms))
    });
    let gpu = r.is_some_and(|r| r.device_busy_ms.is_some());
    // Rounded to the µs: a step time, not a float's last digits.
    let round = |v: f64| (v * 1e3).round() / 1e3;
    let host = round(r.map_or(f64::NAN, |r| r.stand_in_host_ms));
    let step = round(r.map_or(f64::NAN, |r| r.stand_in_step_ms));
    let batch = match r.and_then(|r| r.batch_size.zip(r.batch_from.as_deref())) {
        Some((b, from)) if r.is_some_and(|r| r.watched) => {
            format!("batch_size = {b}          # from {from}")
        }
        Some((b, from)) => format!(
            "batch_size = {b}          # from the trace: {from}, the first operator after the wait \
             to take a batch"
        ),
        None => "batch_size = 256          # PLACEHOLDER: the trace does not show the batch size \
                 (record it with record_shapes=True); set yours"
            .to_string(),
    };
    let sides = if gpu {
        format!(
            "host_ms = {host}          # the median step time outside the wait for data and the \
             CUDA calls that block\n                          # on the device: the training thread's own \
             time per step (Python, autograd, launches)\nstep_ms = {step}          # the median \
             device busy time per step in the trace\nhost_threads = 1          # the cores the host \
             side holds (one training thread)"
        )
    } else {
        format!(
            "host_ms = {host}          # the median step time outside the wait for data in the \
             trace: the training\n                          # thread's own time per step (the \
             trace has no device work: a CPU job)\nstep_ms = 0               # no device: the \
             step is all host, synchronous, as a CPU job's is\nhost_threads = 1          # SET: \
             your job's torch.get_num_threads(), the cores its step holds"
        )
    };
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    format!(
        r#"# A stand-in for the job in {trace}: its step replayed — the host's own time per step on
# a core, then the device's — against your pipeline in a real PyTorch DataLoader, so the report
# answers for that job and the worker count it reads is your DataLoader's.
# Written by `loaderlab diagnose --emit`.
# Run: loaderlab {name}   (then: loaderlab tune {name})

[experiment]
name = "stand_in"
description = "The traced job's step ({host} ms on the host, then {step} ms on the device) against this pipeline"
seed = 42

[dataset]
# PLACEHOLDER: your data. These synthetic JPEGs need nothing; for your own images:
#   kind = "image_folder"
#   root = "/path/to/train"    (ImageFolder's layout: one folder per class)
# or your own Dataset, as your job builds it: the [pytorch] dataset line below.
kind = "synthetic"
synthetic_size = 4096
size = [375, 500]
channels = 3
encoding = "jpeg"

[loader]
{batch}
workers = 0
# Your DataLoader: a real torch.utils.data.DataLoader in a Python child ([pytorch] python, else
# LOADERLAB_PYTHON, else python3 on PATH; it needs torch and torchvision), over torchvision's
# twins of the transforms below. "native" is loaderlab's own loader: the matrix's commented
# "loader.engine" line sets both side by side.
engine = "pytorch"

# [pytorch]
# python = "/path/to/venv/bin/python"
# Your own Dataset in place of [dataset] and [[transforms]]: "file.py:function" (the file
# relative to this one), a function that returns your torch Dataset, whose items are (image
# tensor, label). The DataLoader then runs your own code, your transforms included.
# dataset = "my_data.py:make_dataset"

[model]
kind = "stand_in"
{sides}

[device]
kind = "cpu"              # the emulated device holds no core while busy; the host side holds its cores

# PLACEHOLDER: replace this chain with your own transforms (torchvision semantics).
[[transforms]]
op = "random_resized_crop"
size = 224
scale = [0.08, 1.0]

[[transforms]]
op = "random_horizontal_flip"

[[transforms]]
op = "to_tensor"

[[transforms]]
op = "normalize"
mean = [0.485, 0.456, 0.406]
std = [0.229, 0.224, 0.225]

[protocol]
warmup_steps = 10
timed_steps = 50
rounds = 3

[matrix]
"loader.workers" = [0, 2, 4]
# "loader.engine" = ["pytorch", "native"]   # what loaderlab's own loader would give

# To run this pipeline with a real network of loaderlab's instead (model.kind = "small_cnn",
# "resnet", …), keep the traced step as the yardstick: the report then says whether
# loaderlab's own step is slower than yours (framework-bound) next to its ceiling.
# [report]
# framework_step_ms = {total}
"#,
        trace = d.trace,
        total = round(host + step),
    )
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &Diagnosis) -> DrawResult {
    let (mut chart, panel) = step_chart(
        root,
        "Every profiled step: step time and wait for data",
        "profiled step",
        "ms",
        d.ranks.iter().map(|r| r.rows.len()),
        d.ranks
            .iter()
            .flat_map(|r| r.rows.iter().map(|s| s.step_ms)),
    )?;
    let mut entries = Vec::new();
    for (k, r) in d.ranks.iter().enumerate() {
        let c = color(k);
        chart.draw_series(LineSeries::new(
            r.rows
                .iter()
                .enumerate()
                .map(|(i, s)| (i as f64, s.step_ms)),
            c.mix(0.9).stroke_width(2),
        ))?;
        // The wait, dashed: short segments every other half step.
        for (i, s) in r.rows.iter().enumerate() {
            let x = i as f64;
            chart.draw_series(LineSeries::new(
                [(x - 0.25, s.wait_ms), (x + 0.25, s.wait_ms)],
                c.mix(0.9).stroke_width(3),
            ))?;
        }
        entries.push((Mark::Line(c.mix(0.9)), format!("{}: step", r.rank)));
        entries.push((Mark::Bar(c.mix(0.9)), format!("{}: wait (dashes)", r.rank)));
    }
    legend(&panel, &entries)
}
