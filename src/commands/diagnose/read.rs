//! Reading a torch.profiler Chrome trace (`export_chrome_trace`, `tensorboard_trace_handler`),
//! plain or gzipped, as a stream: each event of `traceEvents` is parsed, kept if it is one of
//! the few kinds `diagnose` needs (step spans, wait spans, device work, the batch's shape), and
//! dropped. Memory stays at what is kept, whatever the file's size.

use std::fmt;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A span on the trace's clock, µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    pub start: f64,
    pub end: f64,
}

/// The wait spans `diagnose` looks for, in order of preference.
#[derive(Debug, Clone, PartialEq)]
pub enum WaitSpan {
    /// `--wait-span NAME`: only that name.
    Named(String),
    /// The seed's `record_function("batch_wait")`, else PyTorch DataLoader's
    /// `enumerate(DataLoader)#…__next__`.
    Default,
}

/// What the spans looked for are called, for messages.
pub const DATALOADER_NEXT: &str = "enumerate(DataLoader)#…__next__";
pub const BATCH_WAIT: &str = "batch_wait";

fn is_dataloader_next(name: &str) -> bool {
    name.starts_with("enumerate(DataLoader)#") && name.ends_with("__next__")
}

/// The events of one trace that `diagnose` uses.
#[derive(Debug, Default)]
pub struct Trace {
    /// `ProfilerStep#N` spans, in time order.
    pub steps: Vec<Span>,
    /// The wait spans found under each kind.
    pub batch_wait: Vec<Span>,
    pub dataloader: Vec<Span>,
    pub named: Vec<Span>,
    /// Kernels, copies and memsets on device streams.
    pub device: Vec<Span>,
    /// CUDA runtime calls during which the host blocks on the device
    /// (`cudaStreamSynchronize`, `cudaDeviceSynchronize`, `cudaEventSynchronize`, a synchronous
    /// `cudaMemcpy`, a `cudaMemcpy*` whose copy runs device to host): not the host's own time.
    pub blocking: Vec<Span>,
    /// Operators whose first input is 4-D (N×C×H×W, with `record_shapes=True`): where each
    /// began, its name and that input's dims — the batch's size is read off the first one after
    /// each wait.
    pub batched_ops: Vec<BatchedOp>,
    /// `cudaMemcpy*Async` calls by correlation id, blocking when their copy runs device to host.
    pub async_copies: Vec<(u64, Span)>,
    /// Correlation ids of device-to-host copies on the device.
    pub device_to_host: Vec<u64>,
    /// `distributedInfo.rank`, when the trace has it.
    pub rank: Option<u64>,
    pub events: u64,
}

impl Trace {
    /// The wait spans to use and their name, by preference; None when there are none.
    pub fn waits(&self, wanted: &WaitSpan) -> Option<(&[Span], String)> {
        match wanted {
            WaitSpan::Named(name) => {
                (!self.named.is_empty()).then(|| (&self.named[..], name.clone()))
            }
            WaitSpan::Default if !self.batch_wait.is_empty() => {
                Some((&self.batch_wait[..], BATCH_WAIT.to_string()))
            }
            WaitSpan::Default if !self.dataloader.is_empty() => {
                Some((&self.dataloader[..], DATALOADER_NEXT.to_string()))
            }
            WaitSpan::Default => None,
        }
    }

    /// The batch's size: over the steps, the first input's N of the first operator that starts
    /// after each wait (inside the step) and takes a 4-D input, the most frequent one; with the
    /// operator that showed it first. None without `record_shapes=True`.
    pub fn batch_size(&self, waits: &[Span]) -> Option<(u64, &BatchedOp)> {
        let mut seen: Vec<(u64, u64, &BatchedOp)> = Vec::new();
        for step in &self.steps {
            let Some(wait) = waits
                .iter()
                .filter(|w| w.start >= step.start && w.start < step.end)
                .max_by(|a, b| a.end.total_cmp(&b.end))
            else {
                continue;
            };
            let first = self
                .batched_ops
                .iter()
                .filter(|o| o.start >= wait.end && o.start < step.end)
                .min_by(|a, b| a.start.total_cmp(&b.start));
            if let Some(op) = first {
                let n = op.dims[0];
                match seen.iter_mut().find(|(size, _, _)| *size == n) {
                    Some((_, count, _)) => *count += 1,
                    None => seen.push((n, 1, op)),
                }
            }
        }
        seen.into_iter()
            .max_by_key(|(size, count, _)| (*count, std::cmp::Reverse(*size)))
            .map(|(size, _, op)| (size, op))
    }

    /// Resolve the asynchronous copies that block (device to host) once every event is read.
    fn finish(&mut self) {
        self.device_to_host.sort_unstable();
        let dtoh = std::mem::take(&mut self.device_to_host);
        for (id, span) in std::mem::take(&mut self.async_copies) {
            if dtoh.binary_search(&id).is_ok() {
                self.blocking.push(span);
            }
        }
        self.blocking.sort_by(|a, b| a.start.total_cmp(&b.start));
        self.batched_ops.sort_by(|a, b| a.start.total_cmp(&b.start));
    }

    fn keep(&mut self, e: Event, wanted: &WaitSpan) {
        self.events += 1;
        if e.ph.as_deref() != Some("X") {
            return;
        }
        let (Some(ts), Some(dur)) = (e.ts, e.dur) else {
            return;
        };
        let span = Span {
            start: ts,
            end: ts + dur.max(0.0),
        };
        let name = e.name.as_deref().unwrap_or("");
        let cat = e.cat.as_deref().unwrap_or("");
        let correlation = e
            .args
            .as_ref()
            .and_then(|a| a.correlation.as_ref())
            .and_then(serde_json::Value::as_u64);
        match cat {
            "kernel" | "gpu_memcpy" | "gpu_memset" => {
                if cat == "gpu_memcpy"
                    && name.contains("DtoH")
                    && let Some(id) = correlation
                {
                    self.device_to_host.push(id);
                }
                self.device.push(span);
                return;
            }
            "gpu_user_annotation" => return,
            "cuda_runtime" | "cuda_driver" => {
                match name {
                    "cudaStreamSynchronize"
                    | "cudaDeviceSynchronize"
                    | "cudaEventSynchronize"
                    | "cudaMemcpy"
                    | "cudaMemcpy2D"
                    | "cudaMemcpy3D" => self.blocking.push(span),
                    _ if name.starts_with("cudaMemcpy") => {
                        if let Some(id) = correlation {
                            self.async_copies.push((id, span));
                        }
                    }
                    _ => {}
                }
                return;
            }
            _ => {}
        }
        if name.starts_with("ProfilerStep#") {
            self.steps.push(span);
        } else if let WaitSpan::Named(n) = wanted {
            if name == n {
                self.named.push(span);
            }
        } else if name == BATCH_WAIT {
            self.batch_wait.push(span);
        } else if is_dataloader_next(name) {
            self.dataloader.push(span);
        }
        if cat == "cpu_op"
            && let Some(dims) = e.args.as_ref().and_then(Args::first_input_4d)
        {
            self.batched_ops.push(BatchedOp {
                start: span.start,
                name: name.to_string(),
                dims,
            });
        }
    }
}

/// An operator whose first input is 4-D.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchedOp {
    pub start: f64,
    pub name: String,
    pub dims: Vec<u64>,
}

#[derive(Deserialize)]
struct Event {
    ph: Option<String>,
    name: Option<String>,
    cat: Option<String>,
    ts: Option<f64>,
    dur: Option<f64>,
    args: Option<Args>,
}

#[derive(Deserialize)]
struct Args {
    #[serde(rename = "Input Dims")]
    input_dims: Option<serde_json::Value>,
    /// Any JSON value: a trace whose ids are not numbers still reads (without them).
    correlation: Option<serde_json::Value>,
}

impl Args {
    /// The dims of a first input shaped N×C×H×W.
    fn first_input_4d(&self) -> Option<Vec<u64>> {
        let first = self.input_dims.as_ref()?.as_array()?.first()?.as_array()?;
        let dims: Option<Vec<u64>> = first.iter().map(|d| d.as_u64()).collect();
        dims.filter(|d| d.len() == 4)
    }
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{path}: cannot open: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not a JSON trace: {message}")]
    Json { path: String, message: String },
    #[error("{path}: the gzip stream is truncated or corrupt: {message}")]
    Gzip { path: String, message: String },
    #[error(
        "{path}: no \"traceEvents\" array: not a Chrome trace as torch.profiler writes it \
         (export_chrome_trace or tensorboard_trace_handler)"
    )]
    NoEvents { path: String },
}

/// Read the trace at `path` (`.json`, or gzip by its magic bytes whatever the name).
pub fn read(path: &Path, wanted: &WaitSpan) -> Result<Trace, ReadError> {
    let shown = path.display().to_string();
    let open = |source| ReadError::Open {
        path: shown.clone(),
        source,
    };
    let mut file = BufReader::with_capacity(1 << 20, File::open(path).map_err(open)?);
    let mut magic = [0u8; 2];
    let gz = {
        let buf = std::io::BufRead::fill_buf(&mut file).map_err(open)?;
        if buf.len() >= 2 {
            magic.copy_from_slice(&buf[..2]);
        }
        magic == [0x1f, 0x8b]
    };
    if gz {
        let inner = BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(file));
        parse(inner, &shown, wanted, true)
    } else {
        parse(file, &shown, wanted, false)
    }
}

fn parse<R: Read>(reader: R, path: &str, wanted: &WaitSpan, gz: bool) -> Result<Trace, ReadError> {
    let mut de = serde_json::Deserializer::from_reader(reader);
    let found = de
        .deserialize_map(TopLevel { wanted })
        .and_then(|t| de.end().map(|()| t));
    match found {
        Ok(Some(trace)) => Ok(trace),
        Ok(None) => Err(ReadError::NoEvents { path: path.into() }),
        Err(e) if gz && e.is_io() => Err(ReadError::Gzip {
            path: path.into(),
            message: e.to_string(),
        }),
        Err(e) => Err(ReadError::Json {
            path: path.into(),
            message: if e.is_eof() {
                format!("the file ends early ({e}): is it truncated?")
            } else {
                e.to_string()
            },
        }),
    }
}

/// The top-level object: `traceEvents` streamed, `distributedInfo.rank` kept, the rest skipped.
struct TopLevel<'w> {
    wanted: &'w WaitSpan,
}

impl<'de> Visitor<'de> for TopLevel<'_> {
    type Value = Option<Trace>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object with a \"traceEvents\" array")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut trace = Trace::default();
        let mut seen = false;
        let mut rank = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "traceEvents" => {
                    map.next_value_seed(Events {
                        trace: &mut trace,
                        wanted: self.wanted,
                    })?;
                    seen = true;
                }
                "distributedInfo" => {
                    #[derive(Deserialize)]
                    struct Info {
                        rank: Option<u64>,
                    }
                    rank = map.next_value::<Option<Info>>()?.and_then(|i| i.rank);
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        trace.rank = rank;
        trace.steps.sort_by(|a, b| a.start.total_cmp(&b.start));
        trace.finish();
        Ok(seen.then_some(trace))
    }
}

struct Events<'a> {
    trace: &'a mut Trace,
    wanted: &'a WaitSpan,
}

impl<'de> DeserializeSeed<'de> for Events<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Events<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of trace events")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(e) = seq.next_element::<Event>()? {
            self.trace.keep(e, self.wanted);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_text(text: &str) -> Result<Trace, ReadError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, text).unwrap();
        read(&path, &WaitSpan::Default)
    }

    #[test]
    fn keeps_steps_waits_device_work_and_the_batch() {
        let t = read_text(
            r#"{"schemaVersion": 1, "distributedInfo": {"rank": 3}, "traceEvents": [
              {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 10, "dur": 5},
              {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 10},
              {"ph": "X", "cat": "user_annotation",
               "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ts": 1, "dur": 2},
              {"ph": "X", "cat": "kernel", "name": "void k()", "ts": 4, "dur": 3},
              {"ph": "X", "cat": "cpu_op", "name": "aten::to", "ts": 4, "dur": 1,
               "args": {"Input Dims": [[256, 1, 28, 28], [], []]}},
              {"ph": "M", "name": "process_name", "args": {"name": "x"}}
            ], "deviceProperties": []}"#,
        )
        .unwrap();
        assert_eq!(t.events, 6);
        assert_eq!(t.steps.len(), 2);
        assert_eq!(t.steps[0].start, 0.0, "sorted by time");
        assert_eq!(
            t.dataloader,
            vec![Span {
                start: 1.0,
                end: 3.0
            }]
        );
        assert_eq!(t.device.len(), 1);
        let (n, op) = t.batch_size(&t.dataloader).unwrap();
        assert_eq!((n, op.name.as_str()), (256, "aten::to"));
        assert_eq!(t.rank, Some(3));
        let (_, name) = t.waits(&WaitSpan::Default).unwrap();
        assert_eq!(name, DATALOADER_NEXT);
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let e = read_text("not json").unwrap_err().to_string();
        assert!(e.contains("not a JSON trace"), "{e}");
        let e = read_text(r#"{"other": []}"#).unwrap_err().to_string();
        assert!(e.contains("no \"traceEvents\" array"), "{e}");
        let e = read_text(r#"{"traceEvents": [{"ph": "X""#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncated"), "{e}");
    }

    #[test]
    fn a_truncated_gzip_is_named() {
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let body = format!(
            r#"{{"traceEvents": [{}]}}"#,
            vec![r#"{"ph": "X", "name": "a", "ts": 1, "dur": 1}"#; 2000].join(",")
        );
        gz.write_all(body.as_bytes()).unwrap();
        let bytes = gz.finish().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json.gz");
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let e = read(&path, &WaitSpan::Default).unwrap_err().to_string();
        assert!(e.contains("gzip stream is truncated"), "{e}");
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(&path, &WaitSpan::Default).unwrap().events, 2000);
    }
}
