//! `loaderlab diagnose`: is the user's own training job waiting for data? Read from a
//! torch.profiler trace of it, in the report's own terms.
//!
//! Steps are the trace's `ProfilerStep#N` spans. The wait is the union, inside each step, of
//! the spans that take a batch: the seed's `record_function("batch_wait")`, else PyTorch
//! DataLoader's `enumerate(DataLoader)#…__next__`, or the span `--wait-span` names. Where the
//! trace has device work (kernels, copies, memsets), the device's busy time inside each step is
//! the union of those intervals, and — as in a run, where the device runs asynchronously — the
//! class is judged on the device's idle share; otherwise on the waiting share. A folder holds
//! one trace per rank.
//!
//! The host's own time per step is the step outside the wait and outside the CUDA runtime
//! calls that block on the device (synchronisations, device-to-host copies): the time the
//! training thread held a core and did not ask for the next batch. On a trace with no device
//! work it is all of the step outside the wait, and the device's time is 0. `--emit` replays
//! both sides: `model.host_ms` and `model.step_ms`.

mod read;
mod report;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use read::{BATCH_WAIT, DATALOADER_NEXT, ReadError, Span, Trace, WaitSpan, read};
pub use report::{emit_experiment, headline, write_folder};

use crate::analysis::{
    ClassifiedBy, Estimate, InputBound, Thresholds, bootstrap, median, quantile, wait_bound,
};

/// p50 / p95 / max of a per-step figure, ms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

impl Distribution {
    fn of(values: &[f64]) -> Distribution {
        Distribution {
            p50: median(values),
            p95: quantile(values, 0.95),
            max: values.iter().copied().fold(f64::NAN, f64::max),
        }
    }
}

/// One step as the trace shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    pub step_ms: f64,
    pub wait_ms: f64,
    /// The step outside the wait and the calls that block on the device: the host's own time.
    pub host_ms: f64,
    /// The device's busy time inside the step (the union of its intervals), when the trace
    /// has device work.
    pub device_busy_ms: Option<f64>,
}

/// One trace (one rank) diagnosed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankDiagnosis {
    /// "rank N" (the trace's `distributedInfo.rank`, else its place in the folder), or "the
    /// job" for a single trace without a rank.
    pub rank: String,
    pub file: String,
    pub events: u64,
    pub steps: usize,
    /// The span that measured the wait.
    pub wait_span: String,
    /// Σ wait / Σ step over the steps, with its 95 % bootstrap CI over steps.
    pub waiting_share: Estimate,
    /// 1 − Σ device busy / Σ step, with its CI, when the trace has device work.
    pub device_idle: Option<Estimate>,
    pub classified_by: ClassifiedBy,
    pub input_bound: InputBound,
    /// The share the class was judged on (the CI's point).
    pub share: f64,
    /// 1 / (1 − share): the most any loader change could speed the job up.
    pub bound: f64,
    pub step_ms: Distribution,
    pub wait_ms: Distribution,
    /// Median step time without its wait.
    pub step_without_wait_ms: f64,
    /// The host's own time per step: outside the wait and the calls that block on the device.
    pub host_ms: Distribution,
    /// Median device busy time per step, when the trace has device work.
    pub device_busy_ms: Option<f64>,
    /// The stand-in's device time this trace calls for (`model.step_ms`): the median device
    /// busy time on a GPU trace, 0 on a trace without device work (the step is all host).
    pub stand_in_step_ms: f64,
    /// The stand-in's host time this trace calls for (`model.host_ms`): the median host time.
    pub stand_in_host_ms: f64,
    pub batch_size: Option<u64>,
    /// Where the batch size was read, e.g. "aten::conv2d's first input [32, 3, 64, 64]".
    #[serde(default)]
    pub batch_from: Option<String>,
    /// Read from a watched job's folder (`loaderlab.watch`), not a trace.
    #[serde(default)]
    pub watched: bool,
    pub rows: Vec<StepRow>,
}

/// Everything `diagnose` found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub trace: String,
    pub ranks: Vec<RankDiagnosis>,
    /// The rank with the longest median step (a folder of several ranks).
    pub slowest: Option<String>,
    pub thresholds: Thresholds,
}

/// Why `diagnose` could not answer (every case exits 2).
#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{0}: no trace files (*.json, *.json.gz) in the folder")]
    EmptyFolder(String),
    #[error("{0}: cannot list the folder: {1}")]
    List(String, std::io::Error),
    #[error(
        "{0}: no ProfilerStep#N spans: record with torch.profiler.profile(schedule=...) and call \
         prof.step() once per training step"
    )]
    NoSteps(String),
    #[error("{0}: a watched job's folder that cannot be read: {1}")]
    Watched(String, String),
    #[error("{path}: no span of waiting for data: looked for {looked}; {hint}")]
    NoWait {
        path: String,
        looked: String,
        hint: String,
    },
}

/// The trace files of `path`: itself, or a folder's `*.json` / `*.json.gz`, sorted by name.
pub fn trace_files(path: &Path) -> Result<Vec<PathBuf>, DiagnoseError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let shown = path.display().to_string();
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| DiagnoseError::List(shown.clone(), e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            p.is_file() && (name.ends_with(".json") || name.ends_with(".json.gz"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(DiagnoseError::EmptyFolder(shown));
    }
    Ok(files)
}

/// Diagnose the trace or folder of traces at `path`.
pub fn diagnose(
    path: &Path,
    wanted: &WaitSpan,
    thresholds: Thresholds,
) -> Result<Diagnosis, DiagnoseError> {
    if path.join(crate::results::WATCH_JSON).is_file() {
        return Ok(Diagnosis {
            trace: path.display().to_string(),
            ranks: vec![watched(path, thresholds)?],
            slowest: None,
            thresholds,
        });
    }
    let files = trace_files(path)?;
    let mut ranks = Vec::new();
    let folder = path.is_dir();
    for (k, file) in files.iter().enumerate() {
        let trace = read(file, wanted)?;
        let mut r = rank(file, k, &trace, wanted, thresholds)?;
        if !folder && trace.rank.is_none() {
            r.rank = "the job".into();
        }
        ranks.push(r);
    }
    let slowest = (ranks.len() > 1)
        .then(|| {
            ranks
                .iter()
                .max_by(|a, b| a.step_ms.p50.total_cmp(&b.step_ms.p50))
                .map(|r| r.rank.clone())
        })
        .flatten();
    Ok(Diagnosis {
        trace: path.display().to_string(),
        ranks,
        slowest,
        thresholds,
    })
}

/// The union length of `spans` (sorted by start) clipped to `within`, µs.
fn covered(spans: &[Span], within: Span, longest: f64) -> f64 {
    // Spans are sorted by start: only those starting after `within.start − longest` reach in.
    let from = spans.partition_point(|s| s.start < within.start - longest);
    let mut total = 0.0;
    let mut reach = within.start;
    for s in &spans[from..] {
        if s.start >= within.end {
            break;
        }
        let (a, b) = (s.start.max(reach), s.end.min(within.end));
        if b > a {
            total += b - a;
            reach = b;
        }
    }
    total
}

/// Sorted by start, with the longest duration (for [`covered`]).
fn sorted(spans: &[Span]) -> (Vec<Span>, f64) {
    let mut v = spans.to_vec();
    v.sort_by(|a, b| a.start.total_cmp(&b.start));
    let longest = v.iter().map(|s| s.end - s.start).fold(0.0, f64::max);
    (v, longest)
}

fn rank(
    file: &Path,
    k: usize,
    trace: &Trace,
    wanted: &WaitSpan,
    thresholds: Thresholds,
) -> Result<RankDiagnosis, DiagnoseError> {
    let shown = file.display().to_string();
    if trace.steps.is_empty() {
        return Err(DiagnoseError::NoSteps(shown));
    }
    let Some((waits, wait_span)) = trace.waits(wanted) else {
        let (looked, hint) = match wanted {
            WaitSpan::Named(n) => (
                format!("spans named {n:?} (--wait-span)"),
                "check the name in the trace (Perfetto or chrome://tracing shows it)".to_string(),
            ),
            WaitSpan::Default => (
                format!(
                    "`{BATCH_WAIT}` (record_function) and `{DATALOADER_NEXT}` (PyTorch's DataLoader)"
                ),
                "wrap the batch fetch in torch.profiler.record_function(\"batch_wait\") or name \
                 your own span with --wait-span NAME"
                    .to_string(),
            ),
        };
        return Err(DiagnoseError::NoWait {
            path: shown,
            looked,
            hint,
        });
    };
    let batch = trace.batch_size(waits);
    let (waits, wait_longest) = sorted(waits);
    let (device, device_longest) = sorted(&trace.device);
    // What is not the host's own time: the wait, and the calls that block on the device.
    let (not_host, not_host_longest) = sorted(&[&waits[..], &trace.blocking[..]].concat());
    let has_device = !device.is_empty();
    let rows: Vec<StepRow> = trace
        .steps
        .iter()
        .map(|&s| StepRow {
            step_ms: (s.end - s.start) / 1e3,
            wait_ms: covered(&waits, s, wait_longest) / 1e3,
            host_ms: ((s.end - s.start) - covered(&not_host, s, not_host_longest)) / 1e3,
            device_busy_ms: has_device.then(|| covered(&device, s, device_longest) / 1e3),
        })
        .collect();
    let batch = batch.map(|(n, op)| (n, format!("{}'s first input {:?}", op.name, op.dims)));
    Ok(from_rows(
        rows,
        Source {
            rank: format!("rank {}", trace.rank.unwrap_or(k as u64)),
            file: shown,
            events: trace.events,
            wait_span,
            batch,
            seed: 0xd1a9 ^ k as u64,
            watched: false,
        },
        thresholds,
    ))
}

/// Where a rank's rows came from.
struct Source {
    rank: String,
    file: String,
    events: u64,
    wait_span: String,
    /// The batch size and what it was read from.
    batch: Option<(u64, String)>,
    seed: u64,
    /// A watched job's folder, not a trace.
    watched: bool,
}

/// A rank's diagnosis from its steps.
fn from_rows(rows: Vec<StepRow>, src: Source, thresholds: Thresholds) -> RankDiagnosis {
    let has_device = rows.iter().any(|r| r.device_busy_ms.is_some());
    let index: Vec<f64> = (0..rows.len()).map(|i| i as f64).collect();
    let seed = src.seed;
    let share_of = |f: &dyn Fn(&StepRow) -> f64| {
        bootstrap(&[&index], seed, |s| {
            let (num, den) = s[0].iter().fold((0.0, 0.0), |(n, d), &i| {
                let r = &rows[i as usize];
                (n + f(r), d + r.step_ms)
            });
            if den > 0.0 { num / den } else { f64::NAN }
        })
    };
    let waiting_share = share_of(&|r| r.wait_ms);
    let device_idle =
        has_device.then(|| share_of(&|r| r.step_ms - r.device_busy_ms.unwrap_or(0.0)));
    let (share, classified_by) = match &device_idle {
        Some(idle) => (idle.point, ClassifiedBy::DeviceIdle),
        None => (waiting_share.point, ClassifiedBy::Waiting),
    };
    let col = |f: fn(&StepRow) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
    let without_wait = median(&col(|r| r.step_ms - r.wait_ms));
    let host_ms = Distribution::of(&col(|r| r.host_ms));
    let device_busy_ms = has_device.then(|| median(&col(|r| r.device_busy_ms.unwrap_or(0.0))));
    RankDiagnosis {
        rank: src.rank,
        file: src.file,
        events: src.events,
        steps: rows.len(),
        wait_span: src.wait_span,
        waiting_share,
        device_idle,
        classified_by,
        input_bound: thresholds.input_bound(share),
        share,
        bound: wait_bound(share),
        step_ms: Distribution::of(&col(|r| r.step_ms)),
        wait_ms: Distribution::of(&col(|r| r.wait_ms)),
        step_without_wait_ms: without_wait,
        host_ms,
        device_busy_ms,
        stand_in_step_ms: device_busy_ms.unwrap_or(0.0),
        stand_in_host_ms: host_ms.p50,
        batch_size: src.batch.as_ref().map(|b| b.0),
        batch_from: src.batch.map(|b| b.1),
        watched: src.watched,
        rows,
    }
}

/// A watched job's folder (`loaderlab.watch`) read as one rank: its steps.csv rows, the wait
/// inside next() as the wait, the rest of each step as the host's own time (on CUDA the
/// device's time from events; the calls that block on it are not told apart there).
fn watched(path: &Path, thresholds: Thresholds) -> Result<RankDiagnosis, DiagnoseError> {
    use crate::results::{WATCH_JSON, WatchInfo, column, f64s, read_csv, read_json};
    let shown = path.display().to_string();
    let bad = |m: String| DiagnoseError::Watched(shown.clone(), m);
    let info: WatchInfo = read_json(&path.join(WATCH_JSON)).map_err(|e| bad(e.to_string()))?;
    let steps = read_csv(
        &path.join(crate::results::STEPS_CSV),
        &[column::CONDITION, column::FINGERPRINT],
    )
    .map_err(|e| bad(e.to_string()))?;
    let get = |c: &str| f64s(&steps, c).map_err(|e| bad(e.to_string()));
    let (step, wait, device) = (
        get(column::STEP_MS)?,
        get(column::BATCH_WAIT_MS)?,
        get(column::DEVICE_MS)?,
    );
    if step.is_empty() {
        return Err(DiagnoseError::NoSteps(shown));
    }
    let cuda = info.compute_device == "cuda";
    let rows = (0..step.len())
        .map(|i| StepRow {
            step_ms: step[i],
            wait_ms: wait[i],
            host_ms: step[i] - wait[i],
            device_busy_ms: (cuda && device[i].is_finite()).then_some(device[i]),
        })
        .collect();
    Ok(from_rows(
        rows,
        Source {
            rank: "the job".into(),
            file: shown,
            events: step.len() as u64,
            wait_span: "loaderlab.watch: the wait inside the loader's next()".into(),
            batch: Some((
                info.batch_size,
                format!("the watched {}'s batch_size", info.loader),
            )),
            seed: 0xd1a9,
            watched: true,
        },
        thresholds,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(start: f64, end: f64) -> Span {
        Span { start, end }
    }

    #[test]
    fn a_gpu_trace_is_judged_on_the_device_idle_share() {
        // Two 10 ms steps; the host waits 1 ms in each, the device is busy 6 ms of the first
        // (two overlapping kernels: 4 + 3 − 1) and 8 ms of the second (a copy and a kernel).
        let trace = Trace {
            steps: vec![span(0.0, 10_000.0), span(10_000.0, 20_000.0)],
            dataloader: vec![span(0.0, 1_000.0), span(10_000.0, 11_000.0)],
            device: vec![
                span(2_000.0, 6_000.0),
                span(5_000.0, 8_000.0),
                span(11_000.0, 15_000.0),
                span(15_000.0, 19_000.0),
            ],
            ..Trace::default()
        };
        let r = rank(
            Path::new("t.json"),
            0,
            &trace,
            &WaitSpan::Default,
            Thresholds::default(),
        )
        .unwrap();
        assert_eq!(r.rows[0].device_busy_ms, Some(6.0));
        assert_eq!(r.rows[1].device_busy_ms, Some(8.0));
        assert!((r.waiting_share.point - 0.1).abs() < 1e-12);
        let idle = r.device_idle.unwrap().point;
        assert!((idle - 0.3).abs() < 1e-12, "{idle}");
        assert_eq!(r.classified_by, ClassifiedBy::DeviceIdle);
        assert_eq!(r.input_bound, InputBound::Highly);
        assert!((r.share - 0.3).abs() < 1e-12);
        // The stand-in step of a GPU trace is its device busy time; its host side the step
        // outside the wait (no blocking calls here).
        assert_eq!(r.stand_in_step_ms, 7.0);
        assert_eq!(r.stand_in_host_ms, 9.0);
    }

    /// A GPU trace whose host blocks on the device: a `cudaStreamSynchronize` and a
    /// device-to-host `cudaMemcpyAsync` are not the host's own time; a host-to-device copy is.
    #[test]
    fn the_host_time_of_a_gpu_trace_leaves_out_the_calls_that_block_on_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gpu.json");
        std::fs::write(
            &path,
            r#"{"traceEvents": [
              {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 10000},
              {"ph": "X", "cat": "user_annotation", "name": "batch_wait", "ts": 0, "dur": 1000},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 1000, "dur": 300,
               "args": {"correlation": 8}},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)",
               "ts": 1100, "dur": 400, "args": {"correlation": 8}},
              {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "ts": 1400, "dur": 50,
               "args": {"Input Dims": [[64, 3, 32, 32], [16, 3, 3, 3]]}},
              {"ph": "X", "cat": "kernel", "name": "void conv()", "ts": 2000, "dur": 5000},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 6000,
               "dur": 2000},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 8000, "dur": 500,
               "args": {"correlation": 7}},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pageable)",
               "ts": 8100, "dur": 300, "args": {"correlation": 7}}
            ]}"#,
        )
        .unwrap();
        let d = diagnose(&path, &WaitSpan::Default, Thresholds::default()).unwrap();
        let r = &d.ranks[0];
        // 10 ms, less the 1 ms wait, the 2 ms synchronisation and the 0.5 ms copy back.
        assert!((r.rows[0].host_ms - 6.5).abs() < 1e-9, "{:?}", r.rows[0]);
        assert!((r.stand_in_host_ms - 6.5).abs() < 1e-9);
        // The device: the HtoD copy, the kernel and the DtoH copy.
        let busy = r.rows[0].device_busy_ms.unwrap();
        assert!((busy - 5.7).abs() < 1e-9, "{busy}");
        assert!((r.stand_in_step_ms - 5.7).abs() < 1e-9);
        // The batch: the first operator after the wait with a 4-D first input.
        assert_eq!(r.batch_size, Some(64));
        assert_eq!(
            r.batch_from.as_deref(),
            Some("aten::conv2d's first input [64, 3, 32, 32]")
        );
    }

    #[test]
    fn covered_time_is_a_union_clipped_to_the_step() {
        let spans = [
            span(0.0, 4.0),
            span(2.0, 6.0),
            span(8.0, 12.0),
            span(20.0, 21.0),
        ];
        assert_eq!(covered(&spans, span(1.0, 10.0), 4.0), 5.0 + 2.0);
        assert_eq!(covered(&spans, span(6.0, 8.0), 4.0), 0.0);
        assert_eq!(covered(&spans, span(0.0, 30.0), 4.0), 6.0 + 4.0 + 1.0);
    }
}
