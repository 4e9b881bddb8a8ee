//! Semantic checks on resolved settings: ranges and combinations that the types cannot express.
//! Each check returns the offending key path and a message; the loader ties it to its source.

use super::problem::KeyPath;
use super::schema::{DatasetKind, ModelKind, Settings, Split, TransformSpec};

/// Input side the model expects (SmallCNN's Linear(1568) needs 28×28 after two poolings).
pub const MODEL_INPUT_SIDE: u64 = 28;

/// FashionMNIST's split sizes.
pub fn fashion_mnist_len(split: Split) -> u64 {
    match split {
        Split::Train => 60_000,
        Split::Test => 10_000,
    }
}

/// Number of images the configured dataset holds.
pub fn dataset_len(s: &Settings) -> u64 {
    match s.dataset.kind {
        DatasetKind::FashionMnist => fashion_mnist_len(s.dataset.split),
        DatasetKind::Synthetic => s.dataset.synthetic_size,
    }
}

/// Every problem with one condition's settings.
pub fn check_settings(s: &Settings) -> Vec<(KeyPath, String)> {
    let mut out = Vec::new();
    check_dataset(s, &mut out);
    check_transforms(s, &mut out);
    check_loader(s, &mut out);
    check_optimizer(s, &mut out);
    out
}

/// The dataset section.
fn check_dataset(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let mut bad = |path: KeyPath, message: String| out.push((path, message));
    let key = |section: &str, name: &str| KeyPath::keys([section, name]);
    if s.dataset.kind == DatasetKind::Synthetic {
        if s.dataset.synthetic_size == 0 {
            bad(
                key("dataset", "synthetic_size"),
                "expected at least 1 image, found 0".into(),
            );
        }
        if !(2..=256).contains(&s.dataset.synthetic_classes) {
            bad(
                key("dataset", "synthetic_classes"),
                format!(
                    "expected 2 to 256 classes, found {}",
                    s.dataset.synthetic_classes
                ),
            );
        }
    }
    if s.dataset.kind == DatasetKind::FashionMnist && s.dataset.download {
        if s.dataset.mirrors.is_empty() {
            bad(
                key("dataset", "mirrors"),
                "expected at least one mirror URL when download = true".into(),
            );
        }
        for (i, m) in s.dataset.mirrors.iter().enumerate() {
            if !(m.starts_with("http://") || m.starts_with("https://")) {
                bad(
                    key("dataset", "mirrors").index(i),
                    format!("expected an http:// or https:// URL, found {m:?}"),
                );
            }
        }
    }
    if s.dataset.root.trim().is_empty() {
        bad(
            key("dataset", "root"),
            "expected a folder, found an empty string".into(),
        );
    }
}

/// The transform chain: pixel ops before to_tensor, exactly one to_tensor, the output size
/// the model takes, and each op's parameters.
fn check_transforms(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let mut bad = |path: KeyPath, message: String| out.push((path, message));
    let mut tensor_at = None;
    let mut side = MODEL_INPUT_SIDE;
    let mut side_from = None;
    for (i, t) in s.transforms.iter().enumerate() {
        let at = KeyPath::keys(["transforms"]).index(i);
        let is_pixel_op = matches!(
            t,
            TransformSpec::RandomResizedCrop(_)
                | TransformSpec::RandomRotation(_)
                | TransformSpec::RandomHorizontalFlip(_)
        );
        if is_pixel_op && tensor_at.is_some() {
            bad(
                at.key("op"),
                format!(
                    "{} works on 8-bit images and must come before to_tensor",
                    t.op_name()
                ),
            );
        }
        if let TransformSpec::RandomResizedCrop(c) = t
            && c.size > 0
        {
            side = c.size;
            side_from = Some(at.key("size"));
        }
        if matches!(t, TransformSpec::ToTensor(_)) {
            if tensor_at.is_some() {
                bad(
                    at.key("op"),
                    "to_tensor appears twice; keep one".to_string(),
                );
            }
            tensor_at = Some(i);
        }
        check_op(t, &at, tensor_at.is_some(), &mut bad);
    }
    if tensor_at.is_none() {
        bad(
            KeyPath::keys(["transforms"]),
            "the pipeline must end in a tensor: add { op = \"to_tensor\" }".into(),
        );
    }
    if let Some(path) =
        side_from.filter(|_| s.model.kind == ModelKind::SmallCnn && side != MODEL_INPUT_SIDE)
    {
        bad(
            path,
            format!(
                "model small_cnn takes {MODEL_INPUT_SIDE}×{MODEL_INPUT_SIDE} images, found size {side}"
            ),
        );
    }
}

/// One transform's own parameters; `after_tensor`: a `to_tensor` came before it (or is it).
fn check_op(
    t: &TransformSpec,
    at: &KeyPath,
    after_tensor: bool,
    bad: &mut dyn FnMut(KeyPath, String),
) {
    match t {
        TransformSpec::RandomResizedCrop(c) => {
            if c.size == 0 {
                bad(at.key("size"), "expected at least 1 pixel, found 0".into());
            }
            let [lo, hi] = c.scale;
            if !(lo > 0.0 && hi <= 1.0 && lo <= hi) {
                bad(
                    at.key("scale"),
                    format!(
                        "expected 0 < low ≤ high ≤ 1 (fractions of the image area), found [{lo}, {hi}]"
                    ),
                );
            }
            let [lo, hi] = c.ratio;
            if !(lo > 0.0 && lo <= hi) {
                bad(
                    at.key("ratio"),
                    format!("expected 0 < low ≤ high (aspect ratios), found [{lo}, {hi}]"),
                );
            }
        }
        TransformSpec::RandomRotation(r) => {
            if r.degrees < 0.0 || r.degrees > 180.0 {
                bad(
                    at.key("degrees"),
                    format!(
                        "expected 0 to 180 (the angle is drawn from [-degrees, degrees]), found {}",
                        r.degrees
                    ),
                );
            }
        }
        TransformSpec::RandomHorizontalFlip(f) => {
            if !(0.0..=1.0).contains(&f.p) {
                bad(
                    at.key("p"),
                    format!("expected a probability from 0 to 1, found {}", f.p),
                );
            }
        }
        TransformSpec::ToTensor(_) => {}
        TransformSpec::Normalize(n) => {
            if !after_tensor {
                bad(
                    at.key("op"),
                    "normalize works on tensors and must come after to_tensor".into(),
                );
            }
            if n.mean.len() != 1 {
                bad(
                    at.key("mean"),
                    format!(
                        "expected one value per channel (1 channel), found {}",
                        n.mean.len()
                    ),
                );
            }
            if n.std.len() != 1 {
                bad(
                    at.key("std"),
                    format!(
                        "expected one value per channel (1 channel), found {}",
                        n.std.len()
                    ),
                );
            }
            if n.std.iter().any(|v| *v <= 0.0) {
                bad(at.key("std"), "expected values > 0".into());
            }
        }
    }
}

/// The loader section.
fn check_loader(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let mut bad = |path: KeyPath, message: String| out.push((path, message));
    let key = |section: &str, name: &str| KeyPath::keys([section, name]);
    let l = &s.loader;
    if l.batch_size == 0 {
        bad(
            key("loader", "batch_size"),
            "expected at least 1, found 0".into(),
        );
    }
    if l.workers > 0 && l.prefetch_factor == 0 {
        bad(
            key("loader", "prefetch_factor"),
            format!(
                "expected at least 1 when workers > 0 (workers = {}), found 0",
                l.workers
            ),
        );
    }
    if l.workers > 1024 {
        bad(
            key("loader", "workers"),
            format!("expected at most 1024 worker threads, found {}", l.workers),
        );
    }
    let len = dataset_len(s);
    if l.batch_size > 0 && l.drop_last && l.batch_size > len {
        bad(
            key("loader", "batch_size"),
            format!(
                "batch of {} is larger than the dataset ({len} images) with drop_last = true: \
                 there would be no batch",
                l.batch_size
            ),
        );
    }
}

/// The optimizer section.
fn check_optimizer(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let mut bad = |path: KeyPath, message: String| out.push((path, message));
    let key = |section: &str, name: &str| KeyPath::keys([section, name]);
    let o = &s.optimizer;
    if o.lr <= 0.0 {
        bad(
            key("optimizer", "lr"),
            format!("expected a learning rate > 0, found {}", o.lr),
        );
    }
    if o.betas.iter().any(|b| !(0.0..1.0).contains(b)) {
        bad(
            key("optimizer", "betas"),
            format!(
                "expected two values in [0, 1), found [{}, {}]",
                o.betas[0], o.betas[1]
            ),
        );
    }
    if o.eps <= 0.0 {
        bad(
            key("optimizer", "eps"),
            format!("expected a value > 0, found {}", o.eps),
        );
    }
}

/// Checks on the settings that describe the whole experiment.
pub fn check_experiment_wide(s: &Settings, conditions: &[&str]) -> Vec<(KeyPath, String)> {
    let mut out = Vec::new();
    let name = &s.experiment.name;
    let safe = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if !safe {
        out.push((
            KeyPath::keys(["experiment", "name"]),
            format!("expected a folder name of letters, digits, '-', '_' or '.', found {name:?}"),
        ));
    }
    let p = &s.protocol;
    if p.timed_steps == 0 {
        out.push((
            KeyPath::keys(["protocol", "timed_steps"]),
            "expected at least 1 timed step, found 0".into(),
        ));
    }
    if p.rounds == 0 {
        out.push((
            KeyPath::keys(["protocol", "rounds"]),
            "expected at least 1 round, found 0".into(),
        ));
    }
    if p.profile && p.profile_steps == 0 {
        out.push((
            KeyPath::keys(["protocol", "profile_steps"]),
            "expected at least 1 profiled step when profile = true (or set profile = false)".into(),
        ));
    }
    let r = &s.report;
    if !r.baseline.is_empty() && !conditions.contains(&r.baseline.as_str()) {
        let list: Vec<String> = conditions.iter().map(|c| format!("{c:?}")).collect();
        out.push((
            KeyPath::keys(["report", "baseline"]),
            format!("names no condition; the conditions are {}", list.join(", ")),
        ));
    }
    if r.charts && r.formats.is_empty() {
        out.push((
            KeyPath::keys(["report", "formats"]),
            "expected at least one image format (\"svg\", \"png\") when charts = true".into(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let s = Settings::default();
        assert!(check_settings(&s).is_empty());
        assert!(check_experiment_wide(&s, &["default"]).is_empty());
    }

    #[test]
    fn ranges_are_enforced() {
        let mut s = Settings::default();
        s.loader.batch_size = 0;
        s.loader.workers = 2;
        s.loader.prefetch_factor = 0;
        if let TransformSpec::RandomResizedCrop(c) = &mut s.transforms[0] {
            c.scale = [0.9, 0.5];
            c.ratio = [2.0, 1.0];
        }
        let keys: Vec<String> = check_settings(&s)
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(
            keys,
            [
                "transforms[0].scale",
                "transforms[0].ratio",
                "loader.batch_size",
                "loader.prefetch_factor"
            ]
        );
    }
}
