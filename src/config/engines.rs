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
mod tests {
    use super::super::check_settings;
    use super::*;

    /// Every key of a condition's settings, walked from the defaults (`transforms` and
    /// `distributed.rank`, lists of tables, as one key each).
    fn keys() -> Vec<String> {
        fn walk(prefix: &str, v: &toml::Value, out: &mut Vec<String>) {
            match v {
                toml::Value::Table(t) if prefix != "transforms" => {
                    for (k, v) in t {
                        let path = if prefix.is_empty() {
                            k.clone()
                        } else {
                            format!("{prefix}.{k}")
                        };
                        walk(&path, v, out);
                    }
                }
                _ => out.push(prefix.to_string()),
            }
        }
        let mut out = Vec::new();
        walk(
            "",
            &toml::Value::try_from(Settings::default()).unwrap(),
            &mut out,
        );
        out.sort();
        out
    }

    /// What an engine does with a key set away from its default.
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Does {
        Uses,
        /// Refused, the message naming the engine.
        Refuses,
        /// Refused on both engines alike (the message names no engine).
        RefusedByBoth,
    }
    use Does::*;

    /// Every key: a planted value (TOML, with what it needs beside it) and what each engine
    /// does with it. A key added to the schema and missing here fails the test: each new
    /// setting is decided for both engines.
    const CASES: &[(&str, &str, Does, Does)] = &[
        ("experiment.name", "experiment.name = 'x'", Uses, Uses),
        (
            "experiment.description",
            "experiment.description = 'x'",
            Uses,
            Uses,
        ),
        ("experiment.seed", "experiment.seed = 7", Uses, Uses),
        ("experiment.output", "experiment.output = 'out'", Uses, Uses),
        ("dataset.kind", "dataset.kind = 'mnist'", Uses, Uses),
        (
            "dataset.mode",
            "dataset.kind = 'image_folder'\ndataset.mode = 'l'",
            Uses,
            Uses,
        ),
        (
            "dataset.cache",
            "dataset.kind = 'image_folder'\ndataset.cache = 'encoded'",
            Uses,
            Refuses,
        ),
        (
            "dataset.on_error",
            "dataset.kind = 'image_folder'\ndataset.on_error = 'skip'",
            Uses,
            Refuses,
        ),
        (
            "dataset.roi_decode",
            "dataset.roi_decode = false",
            Uses,
            Uses,
        ),
        (
            "dataset.page_cache",
            "dataset.kind = 'image_folder'\ndataset.page_cache = 'cold'",
            Uses,
            Uses,
        ),
        (
            "dataset.encoding",
            "dataset.kind = 'synthetic'\ndataset.encoding = 'png'",
            Uses,
            Uses,
        ),
        (
            "dataset.quality",
            "dataset.kind = 'synthetic'\ndataset.encoding = 'jpeg'\ndataset.quality = 90",
            Uses,
            Uses,
        ),
        ("dataset.root", "dataset.root = 'elsewhere'", Uses, Uses),
        ("dataset.split", "dataset.split = 'test'", Uses, Uses),
        ("dataset.download", "dataset.download = false", Uses, Uses),
        (
            "dataset.mirrors",
            "dataset.mirrors = ['http://127.0.0.1:1/']",
            Uses,
            Uses,
        ),
        (
            "dataset.synthetic_size",
            "dataset.kind = 'synthetic'\ndataset.synthetic_size = 512",
            Uses,
            Uses,
        ),
        (
            "dataset.synthetic_classes",
            "dataset.kind = 'synthetic'\ndataset.synthetic_classes = 4",
            Uses,
            Uses,
        ),
        (
            "dataset.size",
            "dataset.kind = 'synthetic'\ndataset.size = [32, 32]",
            Uses,
            Uses,
        ),
        (
            "dataset.channels",
            "dataset.kind = 'synthetic'\ndataset.channels = 3",
            Uses,
            Uses,
        ),
        (
            "dataset.samples",
            "dataset.kind = 'image_folder'\ndataset.root = 'images'\ndataset.samples = 'samples.json'",
            Uses,
            Refuses,
        ),
        (
            "dataset.shards",
            "dataset.kind = 'webdataset'\ndataset.shards = ['a-{0..1}.tar']",
            Uses,
            Uses,
        ),
        (
            "dataset.shuffle_buffer",
            "dataset.kind = 'webdataset'\ndataset.shards = ['a.tar']\ndataset.shuffle_buffer = 10",
            Uses,
            Uses,
        ),
        (
            "dataset.storage.latency_ms",
            "dataset.kind = 'image_folder'\ndataset.storage.latency_ms = 5",
            Uses,
            Uses,
        ),
        (
            "dataset.storage.bandwidth_mb_s",
            "dataset.kind = 'image_folder'\ndataset.storage.bandwidth_mb_s = 50",
            Uses,
            Uses,
        ),
        (
            "dataset.storage.max_in_flight",
            "dataset.kind = 'image_folder'\ndataset.storage.max_in_flight = 4",
            Uses,
            Uses,
        ),
        (
            "transforms",
            "transforms = [{ op = 'to_tensor' }]",
            Uses,
            Uses,
        ),
        ("loader.batch_size", "loader.batch_size = 64", Uses, Uses),
        ("loader.workers", "loader.workers = 2", Uses, Uses),
        (
            "loader.prefetch_factor",
            "loader.prefetch_factor = 4",
            Uses,
            Uses,
        ),
        ("loader.pin_memory", "loader.pin_memory = false", Uses, Uses),
        (
            "loader.persistent_workers",
            "loader.persistent_workers = false",
            Uses,
            Uses,
        ),
        ("loader.shuffle", "loader.shuffle = false", Uses, Uses),
        ("loader.drop_last", "loader.drop_last = false", Uses, Uses),
        (
            "loader.read_ahead",
            "loader.read_ahead = 4",
            RefusedByBoth,
            RefusedByBoth,
        ),
        ("loader.engine", "loader.engine = 'pytorch'", Uses, Uses),
        ("model.kind", "model.kind = 'mlp'", Uses, Uses),
        ("model.width", "model.width = 2", Uses, Uses),
        (
            "model.channels",
            "model.kind = 'cnn'\nmodel.channels = [16]",
            Uses,
            Uses,
        ),
        (
            "model.kernel",
            "model.kind = 'cnn'\nmodel.kernel = 5",
            Uses,
            Uses,
        ),
        (
            "model.hidden",
            "model.kind = 'mlp'\nmodel.hidden = [64]",
            Uses,
            Uses,
        ),
        (
            "model.depth",
            "model.kind = 'resnet'\nmodel.depth = 34",
            Uses,
            Uses,
        ),
        (
            "model.stem",
            "model.kind = 'resnet'\nmodel.stem = 'cifar'",
            Uses,
            Uses,
        ),
        (
            "model.step_ms",
            "model.kind = 'stand_in'\nmodel.step_ms = 5",
            Uses,
            Uses,
        ),
        (
            "model.host_ms",
            "model.kind = 'stand_in'\nmodel.host_ms = 5",
            Uses,
            Uses,
        ),
        (
            "model.host_threads",
            "model.kind = 'stand_in'\nmodel.step_ms = 5\nmodel.host_ms = 1\nmodel.host_threads = 1",
            Uses,
            Uses,
        ),
        ("optimizer.kind", "optimizer.kind = 'sgd'", Uses, Uses),
        ("optimizer.lr", "optimizer.lr = 0.01", Uses, Uses),
        (
            "optimizer.betas",
            "optimizer.betas = [0.8, 0.99]",
            Uses,
            Uses,
        ),
        ("optimizer.eps", "optimizer.eps = 1e-6", Uses, Uses),
        (
            "optimizer.weight_decay",
            "optimizer.weight_decay = 0.01",
            Uses,
            Uses,
        ),
        (
            "optimizer.momentum",
            "optimizer.kind = 'sgd'\noptimizer.momentum = 0.9",
            Uses,
            Uses,
        ),
        (
            "optimizer.nesterov",
            "optimizer.kind = 'sgd'\noptimizer.momentum = 0.9\noptimizer.nesterov = true",
            Uses,
            Uses,
        ),
        ("device.kind", "device.kind = 'cuda'", Uses, Refuses),
        ("device.ordinal", "device.ordinal = 1", Uses, Uses),
        (
            "device.threads",
            "model.kind = 'stand_in'\nmodel.step_ms = 5\ndevice.threads = 1",
            RefusedByBoth,
            RefusedByBoth,
        ),
        ("device.tf32", "device.tf32 = true", Uses, Uses),
        (
            "distributed.ranks",
            "model.kind = 'stand_in'\nmodel.step_ms = 5\ndistributed.ranks = 2",
            Uses,
            Uses,
        ),
        (
            "distributed.allreduce_ms",
            "model.kind = 'stand_in'\nmodel.step_ms = 5\ndistributed.ranks = 2\ndistributed.allreduce_ms = 1",
            Uses,
            Uses,
        ),
        (
            "distributed.rank",
            "model.kind = 'stand_in'\nmodel.step_ms = 5\ndistributed.ranks = 2\ndistributed.rank = [{ rank = 1, cpu_work_us = 10 }]",
            Uses,
            Refuses,
        ),
        (
            "pytorch.python",
            "pytorch.python = '/usr/bin/python3'",
            Uses,
            Uses,
        ),
        // The native engine's loader is in-process: a stalled read there is a hung thread of
        // loaderlab's own, which Ctrl-C stops; the limit is the child's.
        ("pytorch.stall_s", "pytorch.stall_s = 30", Uses, Uses),
        (
            "pytorch.dataset",
            "model.kind = 'stand_in'\nmodel.step_ms = 5\npytorch.dataset = 'my.py:make'",
            Refuses,
            Uses,
        ),
        (
            "pytorch.collate_fn",
            "pytorch.collate_fn = 'my.py:collate'",
            Refuses,
            Uses,
        ),
        (
            "pytorch.worker_init_fn",
            "pytorch.worker_init_fn = 'my.py:init'",
            Refuses,
            Uses,
        ),
        (
            "pytorch.image_shape",
            "model.kind = 'mlp'\npytorch.dataset = 'my.py:make'\npytorch.image_shape = [1, 28, 28]\npytorch.classes = 10",
            Refuses,
            Uses,
        ),
        (
            "pytorch.classes",
            "model.kind = 'mlp'\npytorch.dataset = 'my.py:make'\npytorch.image_shape = [1, 28, 28]\npytorch.classes = 10",
            Refuses,
            Uses,
        ),
    ];

    /// `planted` over the defaults, on `engine`.
    fn settings(planted: &str, engine: EngineKind) -> Settings {
        let mut v = toml::Value::try_from(Settings::default()).unwrap();
        let overlay: toml::Table = planted.parse().unwrap();
        fn merge(into: &mut toml::Value, from: &toml::Table) {
            for (k, v) in from {
                match (into.get_mut(k), v) {
                    (Some(dst @ toml::Value::Table(_)), toml::Value::Table(src)) => merge(dst, src),
                    _ => {
                        into.as_table_mut().unwrap().insert(k.clone(), v.clone());
                    }
                }
            }
        }
        merge(&mut v, &overlay);
        let mut s: Settings = v.try_into().unwrap();
        s.loader.engine = engine;
        s
    }

    /// Every key of the schema set away from its default, on each engine: used, or refused
    /// naming the key (and the engine, where only that one refuses it) — none silently
    /// ignored.
    #[test]
    fn every_key_is_used_or_refused_on_both_engines() {
        let listed: Vec<String> = {
            let mut v: Vec<String> = CASES.iter().map(|c| c.0.to_string()).collect();
            v.sort();
            v
        };
        assert_eq!(
            listed,
            keys(),
            "every key of the schema, decided for both engines"
        );
        for &(key, planted, native, pytorch) in CASES {
            for (engine, does, word) in [
                (EngineKind::Native, native, "native"),
                (EngineKind::Pytorch, pytorch, "pytorch"),
            ] {
                let s = settings(planted, engine);
                let problems = check_settings(&s);
                let about: Vec<&String> = problems
                    .iter()
                    .filter(|(k, _)| {
                        k.to_string() == key || k.to_string().starts_with(&format!("{key}["))
                    })
                    .map(|(_, m)| m)
                    .collect();
                match does {
                    Uses => assert!(
                        about.is_empty(),
                        "{key} on {word}: refused ({about:?}) where it is used; all: {problems:?}"
                    ),
                    Refuses => assert!(
                        about
                            .iter()
                            .any(|m| m.contains(&format!("loader.engine = \"{word}\""))),
                        "{key} on {word}: not refused naming the engine: {problems:?}"
                    ),
                    RefusedByBoth => assert!(
                        !about.is_empty(),
                        "{key} on {word}: not refused: {problems:?}"
                    ),
                }
            }
        }
    }
}
