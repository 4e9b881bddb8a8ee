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
/// GPU span: the step's host-to-device copy as the device ran it.
pub const GPU_H2D: &str = "gpu_h2d_copy";
/// GPU span: the step's kernels (forward, backward, Adam) as the device ran them.
pub const GPU_STEP: &str = "gpu_step_kernels";
/// The training-step spans, in step order.
pub const STEP_SPANS: [&str; 3] = [BATCH_WAIT, H2D_TRANSFER, FORWARD_BACKWARD_ADAM];
