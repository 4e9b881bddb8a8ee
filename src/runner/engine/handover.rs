//! What the pytorch engine's child is handed: the condition as it builds it (the dataset over
//! the same bytes as the native engine reads, the transforms as loaderlab's specs, which the
//! child maps to their torchvision twins, the loader settings one to one, the step), and the
//! native dataset's images written where the child reads them when they exist only in memory.

use std::path::Path;

use super::super::RunError;
use super::super::headroom::{HEADROOM_BATCHES, HEADROOM_SEGMENTS, HEADROOM_WARMUP};
use super::super::setup::{Setup, StandInStep};
use super::child::protocol::{
    ConditionSpec, HeadroomSpec, LoaderSpec, StepSpec, TransformCall, UserCode,
};
use crate::train::{HOST_BUFFER, QUEUE_DEPTH};

/// The condition as the child builds it ([`ConditionSpec`]): the dataset over the same bytes as
/// the native engine reads, the transforms as loaderlab's specs (the child maps each to its
/// torchvision twin), the loader settings one to one, the step, and the constants the Rust side
/// decides. `experiment` is the experiment file, whose folder the `[pytorch]` references are
/// relative to.
pub(super) fn spec(
    setup: &Setup,
    data_dir: &Path,
    experiment: &Path,
) -> Result<ConditionSpec, RunError> {
    let s = setup.settings();
    let d = &s.dataset;
    let absolute = |reference: &str| {
        let file = crate::config::reference_file(reference, experiment);
        let function = reference.rsplit_once(':').map_or("", |(_, f)| f);
        std::path::absolute(&file)
            .map(|f| format!("{}:{function}", f.display()))
            .unwrap_or_else(|_| reference.to_string())
    };
    let reference = |r: &str| (!r.is_empty()).then(|| absolute(r));
    let users = s.users_dataset();
    let dataset = if let Some(function) = users {
        serde_json::json!({
            "kind": "user",
            "function": absolute(function),
            // What a network was built for: the child checks item 0 against it.
            "items": s.pytorch.items().filter(|_| setup.workload.network().is_some()).map(|i| {
                serde_json::json!({
                    "shape": [i.shape.channels, i.shape.height, i.shape.width],
                    "classes": i.classes,
                })
            }),
        })
    } else if let Some(twin) = d.kind.spec().pytorch_twin(d) {
        twin
    } else {
        raw_images(setup, data_dir)?
    };
    let l = &s.loader;
    Ok(ConditionSpec {
        seed: s.experiment.seed,
        ranks: setup.workload.ranks(),
        dataset,
        storage: (d.storage.emulated() && users.is_none()).then(|| d.storage.clone()),
        user: UserCode {
            collate_fn: reference(&s.pytorch.collate_fn),
            worker_init_fn: reference(&s.pytorch.worker_init_fn),
        },
        // The user's own Dataset is the pipeline: the declared transforms do not apply.
        transforms: if users.is_some() {
            Vec::new()
        } else {
            calls(&s.transforms)?
        },
        loader: LoaderSpec {
            batch_size: l.batch_size,
            workers: l.workers,
            prefetch_factor: l.prefetch_factor,
            persistent_workers: l.persistent_workers,
            pin_memory: l.pin_memory,
            shuffle: l.shuffle,
            drop_last: l.drop_last,
        },
        step: match setup.workload.network() {
            Some(net) => StepSpec::Network {
                layers: net.torch_layers(),
                optimizer: s.optimizer.clone(),
                threads: setup.threads,
            },
            None => {
                let st = StandInStep::of(s);
                StepSpec::StandIn {
                    // The all-reduce is device time added to every step, as on the native
                    // engine; 0: no device, the step is all host.
                    step_ms: st.device_ms(),
                    host_ms: st.host_ms,
                    host_threads: st.host_threads,
                    host_buffer: HOST_BUFFER,
                    queue_depth: QUEUE_DEPTH,
                }
            }
        },
        headroom: HeadroomSpec {
            batches: HEADROOM_BATCHES,
            segments: HEADROOM_SEGMENTS,
            warmup: HEADROOM_WARMUP,
        },
        fingerprint_sample: FINGERPRINT_SAMPLE,
        stall_s: s.pytorch.stall_s,
    })
}

/// The pytorch engine's batch fingerprint reads this many image values, evenly spaced, and
/// every label: a full hash of every batch would cost the training thread, inside the timed
/// window, what a user's loop never spends (tens of ms on a 256×3×224×224 batch).
pub const FINGERPRINT_SAMPLE: usize = 4096;

/// The native dataset's images and labels written for the child (synthetic images exist only in
/// memory): encoded ones as their very files (JPEG, PNG) one after another with their offsets,
/// raw ones as planar bytes — the same bytes both engines read.
/// Each transform as its torchvision call; `validate` has refused an op without a twin on
/// this engine, so one here is a bug, said as an error.
fn calls(transforms: &[crate::config::TransformSpec]) -> Result<Vec<TransformCall>, RunError> {
    transforms
        .iter()
        .map(|t| {
            let twin = t.op().torchvision().ok_or_else(|| RunError::Engine {
                condition: String::new(),
                message: format!("op {} has no torchvision twin", t.op_name()),
            })?;
            Ok(TransformCall {
                op: t.op_name(),
                twin,
            })
        })
        .collect()
}

fn raw_images(setup: &Setup, dir: &Path) -> Result<serde_json::Value, RunError> {
    let d = &setup.data.dataset;
    let shape = d.shape();
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RunError::Output { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let labels = dir.join("labels.u8");
    let l: Vec<u8> = (0..d.len()).map(|i| d.label(i)).collect();
    std::fs::write(&labels, &l).map_err(io(&labels))?;
    if d.storage().decodes() {
        let files = dir.join("encoded.bin");
        let (mut bytes, mut offsets) = (Vec::new(), vec![0u64]);
        for i in 0..d.len() {
            bytes.extend(d.storage().encoded(i).unwrap_or_default());
            offsets.push(bytes.len() as u64);
        }
        std::fs::write(&files, &bytes).map_err(io(&files))?;
        return Ok(serde_json::json!({
            "kind": "encoded",
            "files": files,
            "offsets": offsets,
            "labels": labels,
            "mode": if shape.channels == 1 { "L" } else { "RGB" },
        }));
    }
    let images = dir.join("images.u8");
    let mut pixels = vec![0u8; shape.len() * d.len()];
    for (i, buf) in pixels.chunks_exact_mut(shape.len()).enumerate() {
        d.image_into(i, buf);
    }
    std::fs::write(&images, &pixels).map_err(io(&images))?;
    Ok(serde_json::json!({
        "kind": "raw",
        "images": images,
        "labels": labels,
        "shape": [shape.channels, shape.height, shape.width],
    }))
}
