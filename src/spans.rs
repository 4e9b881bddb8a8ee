//! The names of the trace spans, shared by the loader (which opens `build_batch`), the runner
//! (the training thread's spans) and the trace reader; they sit low so that the loader needs
//! nothing from the trace recorder above it.

/// Training-thread span: time inside the loader's next.
pub const BATCH_WAIT: &str = "batch_wait";
/// Training-thread span: host-to-device copy (submission on CUDA).
pub const H2D_TRANSFER: &str = "h2d_transfer";
/// Training-thread span: forward, loss, backward and optimizer step.
pub const FORWARD_BACKWARD_ADAM: &str = "forward_backward_adam";
/// Loader span: building one batch (on a worker's track, or inside batch_wait when workers = 0).
pub const BUILD_BATCH: &str = "build_batch";
/// Training-thread span around recording the CUDA anchor event: the GPU track is placed
/// relative to its start.
pub const GPU_CLOCK_ANCHOR: &str = "gpu_clock_anchor";
/// The track name of the GPU spans added from CUDA events.
pub const GPU_TRACK: &str = "GPU stream (CUDA events)";
/// The track name of the same spans from the stand-in step's emulated device (its own marks:
/// `gpu_h2d_copy` is its read of the batch, `gpu_step_kernels` its busy time).
pub const EMULATED_TRACK: &str = "emulated device (stand-in step)";
/// Every name a device track may have.
pub const DEVICE_TRACKS: [&str; 2] = [GPU_TRACK, EMULATED_TRACK];
/// GPU span: the step's host-to-device copy as the device ran it.
pub const GPU_H2D: &str = "gpu_h2d_copy";
/// GPU span: the step's kernels (forward, backward, Adam) as the device ran them.
pub const GPU_STEP: &str = "gpu_step_kernels";
/// The training-step spans, in step order.
pub const STEP_SPANS: [&str; 3] = [BATCH_WAIT, H2D_TRANSFER, FORWARD_BACKWARD_ADAM];

/// Loader span on a worker's track: waiting for a free batch buffer, i.e. every batch it may
/// have in flight is built and waiting to be consumed (its queue is full).
pub const QUEUE_FULL: &str = "queue_full";
/// Loader stage: a batch's wait for emulated storage (`[dataset.storage]`), timed on every
/// batch.
pub const STORAGE: &str = "storage";
/// Loader stage span: reading one image (and decoding it, for encoded data).
pub const READ_DECODE: &str = "read_decode";
/// Loader stage span: to_tensor and normalize, writing the image into the batch buffer.
pub const TO_TENSOR_INTO_BATCH: &str = "to_tensor_into_batch";
/// Loader stage span: the batch's fingerprint (once per batch).
pub const FINGERPRINT: &str = "fingerprint";
/// In a profiled run, one image in this many gets a span per stage (timing every image would
/// cost more than the small stages it times).
pub const STAGE_SAMPLE: usize = 8;

/// The span of one of the loader's own stages: reading, to_tensor into the batch, or the
/// fingerprint. (Each transform op opens its own, named after it: `PixelOp::span`.) tracing
/// names spans at compile time, so each stage has its own call site here.
pub fn stage_span(stage: &'static str) -> tracing::Span {
    match stage {
        READ_DECODE => tracing::info_span!("read_decode"),
        TO_TENSOR_INTO_BATCH => tracing::info_span!("to_tensor_into_batch"),
        FINGERPRINT => tracing::info_span!("fingerprint"),
        _ => tracing::info_span!("stage", name = stage),
    }
}

/// The loader's own stage spans besides the ops' (read, to_tensor, fingerprint) and the queue
/// wait.
pub const LOADER_STAGES: [&str; 4] = [READ_DECODE, TO_TENSOR_INTO_BATCH, FINGERPRINT, QUEUE_FULL];
