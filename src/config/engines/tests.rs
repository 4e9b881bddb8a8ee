//! Every key of the schema, set away from its default, on each engine: used, or refused naming
//! the key (and the engine, where only that one refuses it).

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
