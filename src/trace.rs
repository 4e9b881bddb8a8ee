//! Chrome traces: the span names shared by the runner, the loader and the analysis, and the
//! recorder that writes one trace file per profiled run.
//!
//! Invariant: spans are recorded only between `Recording::start` and `stop`, so timed runs pay
//! nothing, and a trace file is complete JSON once `finish` returns (or the recording drops).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tracing_chrome::{ChromeLayerBuilder, FlushGuard};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, filter};

/// Training-thread span: time inside the loader's next.
pub const BATCH_WAIT: &str = "batch_wait";
/// Training-thread span: host-to-device copy (submission on CUDA).
pub const H2D_TRANSFER: &str = "h2d_transfer";
/// Training-thread span: forward, loss, backward and optimizer step.
pub const FORWARD_BACKWARD_ADAM: &str = "forward_backward_adam";
/// Loader span: building one batch (on a worker's track, or inside batch_wait when workers = 0).
pub const BUILD_BATCH: &str = "build_batch";
/// The training-step spans, in step order.
pub const STEP_SPANS: [&str; 3] = [BATCH_WAIT, H2D_TRANSFER, FORWARD_BACKWARD_ADAM];

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
