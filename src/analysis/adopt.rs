//! The change as code: where the baseline is the user's DataLoader (the pytorch engine) and
//! loaderlab's loader is faster beyond noise, the baseline's `DataLoader(...)` line and its
//! `loaderlab.Loader(...)` replacement with the same data and loader settings — at the fewest
//! native workers that keep up with the DataLoader's best — plus the one-line form that reads
//! the experiment file.
//!
//! Invariant: the replacement's keywords are the experiment file's tables and keys (the
//! Python package validates them with the same code), so it builds the batches of the native
//! condition it names, fingerprint for fingerprint.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::stats::Estimate;
use crate::config::{DatasetKind, DatasetSection, EngineKind, LoaderSection, Settings};
use crate::plan::PlanCondition;

/// The user's loader and its replacement, as Python.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Adopt {
    /// The baseline (a pytorch condition) and its DataLoader.
    pub yours: String,
    pub dataloader: String,
    /// The native condition whose settings the replacement takes, and the replacement.
    pub native: String,
    pub loader: String,
    /// The same, read from the experiment file.
    pub from_experiment: String,
}

/// The code, when the baseline runs the pytorch engine on a declared dataset and a native
/// condition of its group is faster than the DataLoader's best beyond noise (its ratio's 95 %
/// CI above 1). `candidates` are native conditions with their ratio to the DataLoader's best,
/// by preference: the fewest workers that keep up, then the same workers.
pub fn adopt(
    plan: &[PlanCondition],
    file: &str,
    baseline: &str,
    candidates: &[(Option<String>, Option<Estimate>)],
) -> Option<Adopt> {
    let base = plan.iter().find(|c| c.name == baseline)?;
    if base.config.loader.engine != EngineKind::Pytorch || base.config.users_dataset().is_some() {
        return None;
    }
    let native = candidates
        .iter()
        .find_map(|(name, r)| name.clone().filter(|_| r.is_some_and(|r| r.low > 1.0)))?;
    let native = plan.iter().find(|c| c.name == native)?;
    Some(Adopt {
        yours: base.name.clone(),
        dataloader: dataloader(&base.config),
        native: native.name.clone(),
        loader: loader(&native.config),
        from_experiment: format!(
            "loader = loaderlab.Loader.from_experiment({}, {})",
            quoted(file),
            quoted(&native.name)
        ),
    })
}

/// The baseline's DataLoader call, as the pytorch engine makes it.
fn dataloader(s: &Settings) -> String {
    let mut args = vec!["dataset".to_string()];
    args.extend(dataloader_args(&s.loader));
    format!("loader = torch.utils.data.DataLoader({})", args.join(", "))
}

/// The loader settings as DataLoader's keyword arguments, which both lines share.
fn dataloader_args(l: &LoaderSection) -> Vec<String> {
    let mut args = vec![
        format!("batch_size={}", l.batch_size),
        format!("shuffle={}", py_bool(l.shuffle)),
        format!("num_workers={}", l.workers),
    ];
    // torch refuses both without workers (and so does loaderlab.Loader).
    if l.workers > 0 {
        args.push(format!("prefetch_factor={}", l.prefetch_factor));
        args.push(format!(
            "persistent_workers={}",
            py_bool(l.persistent_workers)
        ));
    }
    args.push(format!("pin_memory={}", py_bool(l.pin_memory)));
    args.push(format!("drop_last={}", py_bool(l.drop_last)));
    args
}

/// `loaderlab.Loader(...)` with DataLoader's names: over the same `dataset` object as the
/// DataLoader line where the dataset is a torchvision one the pytorch engine builds from the
/// file's keys alone (the one-line change), else over the dict form of `[dataset]` (the keys
/// that differ from the defaults, and always its kind and root) with the transforms. The seed
/// makes the batches the native condition's.
fn loader(s: &Settings) -> String {
    let l = &s.loader;
    let mut args = dataloader_args(l);
    if l.read_ahead != LoaderSection::default().read_ahead {
        args.push(format!("read_ahead={}", l.read_ahead));
    }
    args.push(format!("seed={}", s.experiment.seed));
    if torchvisions(&s.dataset) {
        return format!("loader = loaderlab.Loader(dataset, {})", args.join(", "));
    }
    let (ours, defaults) = (json(&s.dataset), json(&DatasetSection::default()));
    let dataset = match (&ours, &defaults) {
        // The kind and root first, as a file writes them.
        (Value::Object(ours), Value::Object(defaults)) => dict(
            ["kind", "root"]
                .into_iter()
                .filter_map(|k| ours.get_key_value(k))
                .chain(ours.iter().filter(|(k, v)| {
                    !matches!(k.as_str(), "kind" | "root") && defaults.get(*k) != Some(v)
                })),
        ),
        _ => "{}".into(),
    };
    let transforms: Vec<String> = s
        .transforms
        .iter()
        .map(|t| format!("        {},", python(&json(t))))
        .collect();
    format!(
        "loader = loaderlab.Loader(\n    dataset={},\n    transforms=[\n{}\n    ],\n    {},\n)",
        dataset,
        transforms.join("\n"),
        args.join(", "),
    )
}

/// Whether the pytorch engine's dataset for `d` is a torchvision dataset object that
/// `loaderlab.Loader` reads as it stands: MNIST, FashionMNIST, CIFAR10 or an RGB ImageFolder,
/// with no key of loaderlab's own (storage, cache, a samples list, …) set.
fn torchvisions(d: &DatasetSection) -> bool {
    let kinds = [
        DatasetKind::FashionMnist,
        DatasetKind::Mnist,
        DatasetKind::Cifar10,
        DatasetKind::ImageFolder,
    ];
    // The keys the object carries, set to the defaults: the rest must be the defaults too.
    let bare = DatasetSection {
        kind: d.kind,
        root: d.root.clone(),
        split: d.split,
        download: d.download,
        mirrors: d.mirrors.clone(),
        page_cache: d.page_cache,
        ..DatasetSection::default()
    };
    kinds.contains(&d.kind) && json(d) == json(&bare)
}

fn json(v: &impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// A string as a Python literal (JSON's escapes are Python's).
fn quoted(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// A JSON value as a Python literal.
fn python(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => py_bool(*b).into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => quoted(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(python).collect();
            format!("[{}]", items.join(", "))
        }
        // A transform's `op` first, as a file writes it.
        Value::Object(map) => dict(
            (map.get_key_value("op").into_iter()).chain(map.iter().filter(|(k, _)| *k != "op")),
        ),
    }
}

/// Key-value pairs as a dict literal, in the order given.
fn dict<'a>(items: impl IntoIterator<Item = (&'a String, &'a Value)>) -> String {
    let items: Vec<String> = items
        .into_iter()
        .map(|(k, v)| format!("{}: {}", quoted(k), python(v)))
        .collect();
    format!("{{{}}}", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CacheMode;

    #[test]
    fn the_dataloader_and_its_replacement_carry_the_same_settings() {
        let mut s = Settings::default();
        s.loader.workers = 2;
        s.loader.batch_size = 128;
        s.experiment.seed = 9;
        s.dataset.root = "my \"data\"".into();
        let d = dataloader(&s);
        assert_eq!(
            d,
            "loader = torch.utils.data.DataLoader(dataset, batch_size=128, shuffle=True, \
             num_workers=2, prefetch_factor=2, persistent_workers=True, pin_memory=True, \
             drop_last=True)"
        );
        s.loader.workers = 0;
        assert!(!dataloader(&s).contains("prefetch_factor"));
        // FashionMNIST from its root: the same object, one line changed.
        assert_eq!(
            loader(&s),
            "loader = loaderlab.Loader(dataset, batch_size=128, shuffle=True, num_workers=0, \
             pin_memory=True, drop_last=True, seed=9)"
        );
        s.loader.workers = 3;
        s.loader.read_ahead = 4;
        assert!(
            loader(&s).contains("num_workers=3, prefetch_factor=2, persistent_workers=True,"),
            "{}",
            loader(&s)
        );
        assert!(loader(&s).contains("read_ahead=4, seed=9)"));
        // Synthetic images, or a key of loaderlab's own: the dict form, DataLoader's names.
        s.loader.workers = 0;
        s.dataset.cache = CacheMode::Decoded;
        let l = loader(&s);
        assert!(
            l.contains(
                r#"dataset={"kind": "fashion_mnist", "root": "my \"data\"", "cache": "decoded"}"#
            ),
            "{l}"
        );
        assert!(l.contains(r#"{"op": "to_tensor"}"#), "{l}");
        assert!(
            l.contains(r#"{"op": "random_rotation", "degrees": 15.0"#),
            "{l}"
        );
        assert!(
            l.contains("batch_size=128, shuffle=True, num_workers=0,"),
            "{l}"
        );
        assert!(l.contains("seed=9,\n)"), "{l}");
        // Only the keys that differ from the defaults, besides the kind and root.
        s.dataset.kind = DatasetKind::Synthetic;
        s.dataset.cache = DatasetSection::default().cache;
        s.dataset.synthetic_size = 600;
        assert!(loader(&s).contains(r#""synthetic_size": 600"#));
        assert!(!loader(&s).contains("synthetic_classes"));
    }
}
