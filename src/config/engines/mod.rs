//! What each engine honours. A setting one engine cannot honour is refused for it by
//! `validate`, naming the key and the engine — never silently ignored:
//!
//! | setting | native | pytorch |
//! |---|---|---|
//! | `[pytorch] dataset`, `collate_fn`, `worker_init_fn`, `image_shape`, `classes` | refused (PyTorch code) | used |
//! | `[pytorch] python`, `stall_s` | allowed, unused (where to find torch and how long a batch may take in the child; a matrix over engines shares them) | used |
//! | `device.kind = "cuda"` | used | refused (the step runs on the CPU in this version) |
//! | `[[distributed.rank]]` | used | refused |
//! | `distributed.ranks` > 1 with a network | used (one GPU per rank) | refused |
//! | `dataset.cache` other than `"none"` | used | refused (a torch DataLoader reads each file) |
//! | `dataset.on_error = "skip"` | used | refused (torchvision raises) |
//! | `dataset.page_cache`, `dataset.storage` with your own Dataset | — | refused (its files are its own) |
//! | `loader.read_ahead` > 1 behind emulated storage | used | refused (a worker reads one image at a time) |
//! | `[[transforms]]` op without a torchvision twin | used | refused |
//!
//! Both engines refuse `loader.read_ahead` without `[dataset.storage]` (nothing to read ahead)
//! and `device.threads` with the stand-in step (its host side holds `model.host_threads`).
//! With your own Dataset (`[pytorch] dataset`) the declared `[dataset]` and `[[transforms]]`
//! are replaced by your code, which the report's Setup says. `tests` below walks every key of
//! the schema on both engines.

use super::problem::KeyPath;
use super::schema::{CacheMode, DeviceKind, EngineKind, OnError, PageCache, Settings};
use crate::net;

/// Every refusal of either engine, and the `[pytorch]` references' form.
pub(super) fn check(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let p = &s.pytorch;
    for (name, value) in [
        ("dataset", &p.dataset),
        ("collate_fn", &p.collate_fn),
        ("worker_init_fn", &p.worker_init_fn),
    ] {
        if !value.is_empty() && !python_reference(value) {
            out.push((
                KeyPath::keys(["pytorch", name]),
                format!(
                    "expected \"file.py:function\" (the file relative to the experiment file), \
                     found {value:?}"
                ),
            ));
        }
    }
    if !(p.stall_s.is_finite() && p.stall_s > 0.0 && p.stall_s <= 86_400.0) {
        out.push((
            KeyPath::keys(["pytorch", "stall_s"]),
            format!(
                "expected seconds without a batch before a run ends as stalled, above 0 and at \
                 most 86400, found {}",
                p.stall_s
            ),
        ));
    }
    if s.model.is_stand_in() && s.device.threads != 0 {
        out.push((
            KeyPath::keys(["device", "threads"]),
            "is a network's compute threads: the stand-in step's host side holds \
             model.host_threads cores instead"
                .into(),
        ));
    }
    match s.loader.engine {
        EngineKind::Native => native(s, out),
        EngineKind::Pytorch => pytorch(s, out),
    }
}

/// The native engine runs loaderlab's own pipeline: the user's PyTorch code is not run.
fn native(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let p = &s.pytorch;
    let set = [
        ("dataset", !p.dataset.is_empty()),
        ("collate_fn", !p.collate_fn.is_empty()),
        ("worker_init_fn", !p.worker_init_fn.is_empty()),
        ("image_shape", !p.image_shape.is_empty()),
        ("classes", p.classes != 0),
    ];
    for (name, _) in set.iter().filter(|(_, set)| *set) {
        out.push((
            KeyPath::keys(["pytorch", name]),
            "is read only by the pytorch engine (loader.engine = \"pytorch\"), which runs \
             your own PyTorch code; with loader.engine = \"native\" loaderlab's own loader \
             builds the declared [dataset] and [[transforms]]"
                .to_string(),
        ));
    }
}

/// What the pytorch engine runs in this version, each refusal naming the key and the engine:
/// the step on the CPU (a network, or the stand-in's emulated device), several ranks with the
/// stand-in and no rank of its own differences, the declared dataset read from its files (no
/// cache of loaderlab's, errors raised as torchvision raises them), emulated storage read one
/// image at a time per worker, a network on the user's own Dataset only for the items
/// `[pytorch]` declares.
fn pytorch(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let p = &s.pytorch;
    let engine = "with loader.engine = \"pytorch\"";
    let mut refuse = |path: KeyPath, what: String| out.push((path, format!("{what} {engine}")));
    if s.device.kind == DeviceKind::Cuda {
        refuse(
            KeyPath::keys(["device", "kind"]),
            "the step runs on the CPU in this version (the networks on CUDA and the stand-in's \
             kernel are not built yet)"
                .into(),
        );
    }
    if !s.distributed.rank.is_empty() {
        refuse(
            KeyPath::keys(["distributed", "rank"]),
            "a rank's own differences (storage, CPU work) are not run yet".into(),
        );
    }
    if s.distributed.several() && !s.model.is_stand_in() {
        refuse(
            KeyPath::keys(["distributed", "ranks"]),
            "several ranks train a network on GPUs only (one per rank), which this engine does \
             not run yet; the stand-in step runs a node of ranks on the CPU"
                .into(),
        );
    }
    let declares_items = !p.image_shape.is_empty() || p.classes != 0;
    if declares_items && (!p.names_a_dataset() || s.model.is_stand_in()) {
        let name = if p.image_shape.is_empty() {
            "classes"
        } else {
            "image_shape"
        };
        refuse(
            KeyPath::keys(["pytorch", name]),
            "is read only for a network on your own Dataset ([pytorch] dataset and a model.kind \
             other than \"stand_in\")"
                .into(),
        );
    }
    if p.names_a_dataset() {
        // The declared [dataset] and [[transforms]] do not apply: the user's Dataset is the
        // pipeline, and a network is built for the items it declares.
        if s.dataset.storage.emulated() {
            refuse(
                KeyPath::keys(["dataset", "storage"]),
                "emulates the declared [dataset]'s storage, which your own Dataset \
                 ([pytorch] dataset) replaces: your Dataset reads as it reads"
                    .into(),
            );
        }
        if s.dataset.page_cache != PageCache::AsIs {
            refuse(
                KeyPath::keys(["dataset", "page_cache"]),
                "sets the page cache under the declared [dataset]'s files, which your own \
                 Dataset ([pytorch] dataset) replaces: its files are its own"
                    .into(),
            );
        }
        check_users_items(s, out);
        return;
    }
    if s.dataset.cache != CacheMode::None {
        refuse(
            KeyPath::keys(["dataset", "cache"]),
            "is loaderlab's own cache of an image folder; a torch DataLoader's ImageFolder reads \
             every file (cache = \"none\")"
                .into(),
        );
    }
    if !s.dataset.samples.is_empty() {
        refuse(
            KeyPath::keys(["dataset", "samples"]),
            "lists a folder dataset's samples for loaderlab's reader; the child's ImageFolder \
             walks dataset.root"
                .into(),
        );
    }
    if s.dataset.on_error == OnError::Skip {
        refuse(
            KeyPath::keys(["dataset", "on_error"]),
            "is loaderlab's own reader's: torchvision raises on an unreadable image (on_error = \
             \"fail\")"
                .into(),
        );
    }
    for (i, t) in s.transforms.iter().enumerate() {
        if !t.op().pytorch_twin() {
            refuse(
                KeyPath::keys(["transforms"]).index(i).key("op"),
                format!("{} has no torchvision twin in the child", t.op_name()),
            );
        }
    }
    if s.dataset.storage.emulated() && s.loader.read_ahead != 1 {
        refuse(
            KeyPath::keys(["loader", "read_ahead"]),
            "a torch DataLoader's worker reads one image at a time (read_ahead = 1)".into(),
        );
    }
}

/// A network on the user's own Dataset: `[pytorch] image_shape` and `classes` say what its
/// items are, and the network must take them; the stand-in needs neither.
fn check_users_items(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let p = &s.pytorch;
    let key = |name: &str| KeyPath::keys(["pytorch", name]);
    let Some(architecture) = s.model.architecture() else {
        return;
    };
    let shape_ok = matches!(p.image_shape.as_slice(), [c, h, w]
        if (1..=64).contains(c) && (1..=8192).contains(h) && (1..=8192).contains(w));
    if !shape_ok {
        out.push((
            key("image_shape"),
            format!(
                "a network on your own Dataset is built for its image tensors: expected \
                 [channels, height, width] (1–64 channels, 1–8192 pixels a side), found {:?}",
                p.image_shape
            ),
        ));
    }
    if !(2..=100_000).contains(&p.classes) {
        out.push((
            key("classes"),
            format!(
                "a network on your own Dataset is built for its labels (0 to classes − 1): \
                 expected 2 to 100000 classes, found {}",
                p.classes
            ),
        ));
    }
    if let Some(input) = p.items().filter(|_| shape_ok)
        && let Err(e) = net::check(&architecture, input)
    {
        out.push((
            KeyPath::keys(["model", e.key]),
            format!(
                "{} (the images' size set by pytorch.image_shape, your Dataset's)",
                e.message
            ),
        ));
    }
}

/// `file.py:function`: a Python file and a function name.
fn python_reference(value: &str) -> bool {
    value.rsplit_once(':').is_some_and(|(file, function)| {
        file.ends_with(".py")
            && !function.is_empty()
            && function.chars().all(|c| c.is_alphanumeric() || c == '_')
    })
}

#[cfg(test)]
mod tests;
