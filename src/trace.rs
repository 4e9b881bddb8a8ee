//! Chrome traces: the span names shared by the runner, the loader and the analysis, the
//! recorder that writes one trace file per profiled run, and the reader analysis and verify use.
//!
//! Invariant: spans are recorded only between `Recording::start` and `stop`, so timed runs pay
//! nothing, and a trace file is complete JSON once `finish` returns (or the recording drops).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tracing_chrome::{ChromeLayerBuilder, FlushGuard};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, filter};

use crate::results::{ResultsError, write_atomic};
pub use crate::spans::*;

/// Thread id of the GPU track (tracing-chrome numbers host threads from 1).
const GPU_TID: u64 = 1_000_000;

/// Spans are recorded only while this is set, so warm-up and timed runs cost nothing.
static RECORDING: AtomicBool = AtomicBool::new(false);
static TRACER: OnceLock<Option<Mutex<FlushGuard>>> = OnceLock::new();

fn tracer() -> Option<&'static Mutex<FlushGuard>> {
    TRACER
        .get_or_init(|| {
            let (layer, guard) = ChromeLayerBuilder::new()
                .writer(std::io::sink())
                .include_args(true)
                .build();
            // Dynamic: a static filter would cache "never" for callsites first hit while
            // recording was off (the loader's spans during the timed runs).
            let only_ours = filter::dynamic_filter_fn(|meta, _| {
                RECORDING.load(Ordering::Relaxed) && meta.target().starts_with("loaderlab")
            });
            let subscriber = tracing_subscriber::registry().with(layer.with_filter(only_ours));
            tracing::subscriber::set_global_default(subscriber)
                .ok()
                .map(|()| Mutex::new(guard))
        })
        .as_ref()
}

/// A file that says when it has been closed, so a trace is complete before we go on.
struct Closing {
    out: BufWriter<File>,
    closed: crossbeam_channel::Sender<()>,
}

impl Write for Closing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        let _ = self.out.flush();
        let _ = self.closed.send(());
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot create trace file {path}: {source}")]
    Create {
        path: String,
        source: std::io::Error,
    },
    #[error("tracing is already set up by something else in this process")]
    Unavailable,
    #[error("the trace writer did not finish {0} in time")]
    Timeout(String),
}

/// One Chrome trace file being recorded. Recording stops and the file is completed when
/// [`Recording::finish`] is called or the value is dropped (also on error paths).
pub struct Recording {
    closed: Option<crossbeam_channel::Receiver<()>>,
    path: String,
}

impl Recording {
    /// Route spans to a new file at `path`; nothing is recorded until [`Recording::start`].
    pub fn create(path: &Path) -> Result<Recording, TraceError> {
        let guard = tracer().ok_or(TraceError::Unavailable)?;
        let file = File::create(path).map_err(|source| TraceError::Create {
            path: path.display().to_string(),
            source,
        })?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let writer = Closing {
            out: BufWriter::new(file),
            closed: tx,
        };
        if let Ok(g) = guard.lock() {
            g.start_new(Some(Box::new(writer)));
        }
        Ok(Recording {
            closed: Some(rx),
            path: path.display().to_string(),
        })
    }

    pub fn start(&self) {
        RECORDING.store(true, Ordering::SeqCst);
    }

    /// Stop recording new spans (spans already open still close in the file).
    pub fn stop(&self) {
        RECORDING.store(false, Ordering::SeqCst);
    }

    /// Stop, close the file and wait until it is complete JSON on disk.
    pub fn finish(mut self) -> Result<(), TraceError> {
        self.close()
    }

    fn close(&mut self) -> Result<(), TraceError> {
        self.stop();
        let Some(closed) = self.closed.take() else {
            return Ok(());
        };
        if let Some(Ok(g)) = tracer().map(|guard| guard.lock()) {
            g.start_new(Some(Box::new(std::io::sink())));
        }
        closed
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| TraceError::Timeout(self.path.clone()))
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GpuTrackError {
    #[error("cannot read trace {path}: {message}")]
    Read { path: String, message: String },
    #[error("trace {0} has no {GPU_CLOCK_ANCHOR} span to align the GPU track with")]
    NoAnchor(String),
    #[error("cannot write trace {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
}

/// Add a GPU track to a finished Chrome trace: for each step, the copy and the kernels as the
/// device ran them (`marks`, ms after the anchor event), placed at the host time of the
/// [`GPU_CLOCK_ANCHOR`] span so GPU and CPU spans line up. The file is replaced atomically.
pub fn add_gpu_track(
    path: &Path,
    marks: &[crate::train::StepMarks],
    track: &str,
) -> Result<(), GpuTrackError> {
    let shown = path.display().to_string();
    let read_err = |message: String| GpuTrackError::Read {
        path: shown.clone(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| read_err(e.to_string()))?;
    let mut events: Vec<serde_json::Value> =
        serde_json::from_str(&text).map_err(|e| read_err(e.to_string()))?;
    let anchor = events
        .iter()
        .find(|e| e["name"] == GPU_CLOCK_ANCHOR && e["ph"] == "B")
        .ok_or_else(|| GpuTrackError::NoAnchor(shown.clone()))?;
    let (origin_us, pid) = (anchor["ts"].as_f64().unwrap_or(0.0), anchor["pid"].clone());
    events.push(serde_json::json!({
        "ph": "M", "name": "thread_name", "pid": pid, "tid": GPU_TID,
        "args": { "name": track },
    }));
    let at = |ms: f64| origin_us + ms * 1e3;
    for (step, m) in marks.iter().enumerate() {
        for (name, start, end) in [
            (GPU_H2D, m.copy_start_ms, m.compute_start_ms),
            (GPU_STEP, m.compute_start_ms, m.end_ms),
        ] {
            events.push(serde_json::json!({
                "ph": "B", "name": name, "cat": "gpu", "pid": pid, "tid": GPU_TID,
                "ts": at(start), "args": { "step": step },
            }));
            events.push(serde_json::json!({
                "ph": "E", "name": name, "cat": "gpu", "pid": pid, "tid": GPU_TID,
                "ts": at(end.max(start)),
            }));
        }
    }
    let bytes = serde_json::to_vec(&events).map_err(|e| read_err(e.to_string()))?;
    write_atomic(path, &bytes).map_err(|source| GpuTrackError::Write {
        path: shown.clone(),
        source,
    })
}

fn unreadable(path: &Path, message: String) -> ResultsError {
    ResultsError::Read {
        path: path.to_path_buf(),
        message,
    }
}

/// A complete span of a trace, on the trace's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The thread (track) it ran on.
    pub tid: u64,
    pub name: String,
    pub start_us: f64,
    pub end_us: f64,
}

impl Span {
    pub fn duration_ms(&self) -> f64 {
        (self.end_us - self.start_us) / 1e3
    }
}

/// Parse a Chrome trace into complete spans and the thread names; an error names what is
/// wrong (not JSON, unbalanced begin/end). Both forms are read: tracing-chrome's array of
/// begin/end events, and torch.profiler's object whose `traceEvents` hold complete (`X`) events
/// with their durations (the pytorch engine's profiled runs).
pub fn read_trace(path: &Path) -> Result<(Vec<Span>, HashMap<u64, String>), ResultsError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| unreadable(path, format!("cannot read: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| unreadable(path, format!("not valid trace JSON: {e}")))?;
    let events = match value {
        serde_json::Value::Array(events) => events,
        serde_json::Value::Object(mut o) => match o.remove("traceEvents") {
            Some(serde_json::Value::Array(events)) => events,
            _ => {
                return Err(unreadable(
                    path,
                    "a trace object without traceEvents".into(),
                ));
            }
        },
        _ => return Err(unreadable(path, "not a list of trace events".into())),
    };
    let mut names = HashMap::new();
    let mut open: HashMap<u64, Vec<(String, f64)>> = HashMap::new();
    let mut spans = Vec::new();
    for e in &events {
        let tid = e["tid"].as_u64().unwrap_or(0);
        let name = e["name"].as_str().unwrap_or("").to_string();
        match e["ph"].as_str() {
            Some("M") if name == "thread_name" => {
                names.insert(tid, e["args"]["name"].as_str().unwrap_or("").to_string());
            }
            Some("B") => open
                .entry(tid)
                .or_default()
                .push((name, e["ts"].as_f64().unwrap_or(0.0))),
            Some("E") => {
                let Some((begin_name, ts)) = open.entry(tid).or_default().pop() else {
                    return Err(unreadable(
                        path,
                        format!("end of {name} without a begin on thread {tid}"),
                    ));
                };
                spans.push(Span {
                    tid,
                    name: begin_name,
                    start_us: ts,
                    end_us: e["ts"].as_f64().unwrap_or(ts),
                });
            }
            Some("X") => {
                let ts = e["ts"].as_f64().unwrap_or(0.0);
                spans.push(Span {
                    tid,
                    name,
                    start_us: ts,
                    end_us: ts + e["dur"].as_f64().unwrap_or(0.0),
                });
            }
            _ => {}
        }
    }
    if let Some((tid, stack)) = open.iter().find(|(_, s)| !s.is_empty()) {
        return Err(unreadable(
            path,
            format!(
                "{} span(s) never ended on thread {tid} (truncated trace?)",
                stack.len()
            ),
        ));
    }
    Ok((spans, names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::StepMarks;

    #[test]
    fn gpu_track_lines_up_with_the_anchor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(
            &path,
            r#"[{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"main"}},
{"ph":"B","name":"gpu_clock_anchor","pid":1,"tid":1,"ts":1500.0},
{"ph":"E","name":"gpu_clock_anchor","pid":1,"tid":1,"ts":1510.0},
{"ph":"B","name":"batch_wait","pid":1,"tid":1,"ts":1520.0},
{"ph":"E","name":"batch_wait","pid":1,"tid":1,"ts":1600.0}]"#,
        )
        .unwrap();
        let marks = [StepMarks {
            copy_start_ms: 0.25,
            compute_start_ms: 0.5,
            end_ms: 2.0,
        }];
        add_gpu_track(&path, &marks, GPU_TRACK).unwrap();
        let (spans, names) = read_trace(&path).unwrap();
        assert_eq!(names[&GPU_TID], GPU_TRACK);
        let gpu: Vec<_> = spans.iter().filter(|s| s.tid == GPU_TID).collect();
        assert_eq!(gpu.len(), 2);
        assert_eq!(
            (gpu[0].name.as_str(), gpu[0].start_us, gpu[0].end_us),
            (GPU_H2D, 1750.0, 2000.0)
        );
        assert_eq!(
            (gpu[1].name.as_str(), gpu[1].start_us, gpu[1].end_us),
            (GPU_STEP, 2000.0, 3500.0)
        );

        std::fs::write(&path, "[]").unwrap();
        assert!(matches!(
            add_gpu_track(&path, &marks, GPU_TRACK),
            Err(GpuTrackError::NoAnchor(_))
        ));
    }
}
