//! Semantic checks on resolved settings: ranges and combinations that the types cannot express.
//! Each check returns the offending key path and a message; the loader ties it to its source.

use super::problem::KeyPath;
use super::schema::{
    ExperimentWide, ModelSection, OptimizerKind, OptimizerSection, PageCache, Settings,
    TransformSpec,
};
use crate::net::{self, ModelInput};
use crate::shape::ImageShape;
use crate::transforms::ops::{Reaching, chain_output, sets_size};

/// The shape of the dataset's images, known from the settings alone.
pub fn dataset_shape(s: &Settings) -> ImageShape {
    s.dataset.kind.spec().shape(&s.dataset)
}

/// Number of images the configured dataset holds (`u64::MAX`: known once opened).
pub fn dataset_len(s: &Settings) -> u64 {
    s.dataset.kind.spec().len(&s.dataset)
}

/// Every problem with one condition's settings.
pub fn check_settings(s: &Settings) -> Vec<(KeyPath, String)> {
    let mut out = Vec::new();
    check_dataset(s, &mut out);
    check_transforms(s, &mut out);
    check_model(s, &mut out);
    check_loader(s, &mut out);
    check_optimizer(s, &mut out);
    super::distributed::check(s, &mut out);
    super::engines::check(s, &mut out);
    out
}

/// Where the dataset's files are read from: emulated storage, read-ahead, the page cache.
fn check_storage(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    super::distributed::storage_ranges(
        &s.dataset.storage,
        &KeyPath::keys(["dataset", "storage"]),
        out,
    );
    let mut bad = |path: KeyPath, message: String| out.push((path, message));
    let key = |section: &str, name: &str| KeyPath::keys([section, name]);
    let st = &s.dataset.storage;
    let storing = s.dataset.kind.spec().storing(&s.dataset);
    if st.emulated() && !storing.encoded {
        bad(
            KeyPath::keys(["dataset", "storage"]),
            "emulated storage applies to images read one by one as encoded files: an image \
             folder, or synthetic images with encoding = \"jpeg\" or \"png\""
                .to_string(),
        );
    }
    if !(1..=256).contains(&s.loader.read_ahead) {
        bad(
            key("loader", "read_ahead"),
            format!(
                "expected 1 (one request at a time) to 256 requests in flight per worker, \
                 found {}",
                s.loader.read_ahead
            ),
        );
    }
    if s.loader.read_ahead != 1 && !st.emulated() {
        bad(
            key("loader", "read_ahead"),
            "applies to emulated storage's requests ([dataset.storage]): without it no image \
             waits for storage, so no request is read ahead"
                .to_string(),
        );
    }
    if s.dataset.page_cache != PageCache::AsIs && !storing.per_file {
        bad(
            key("dataset", "page_cache"),
            "\"warm\" and \"cold\" apply to an image folder read per sample (kind = \
             \"image_folder\", cache = \"none\"): every other dataset is held in memory once \
             opened, so no file is read during a timed window"
                .to_string(),
        );
    }
}

/// The dataset section.
fn check_dataset(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    check_storage(s, out);
    let mut bad = |path: KeyPath, message: String| out.push((path, message));
    let key = |section: &str, name: &str| KeyPath::keys([section, name]);
    s.dataset
        .kind
        .spec()
        .check(&s.dataset, &mut |name, message| {
            bad(key("dataset", name), message)
        });
    if !s.dataset.samples.is_empty() && s.dataset.kind != crate::data::DatasetKind::ImageFolder {
        bad(
            key("dataset", "samples"),
            "is read only by kind = \"image_folder\" (a folder dataset's samples list)".into(),
        );
    }
    let downloads = s.dataset.kind.spec().downloads();
    if downloads && s.dataset.download {
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
    let mut shape = dataset_shape(s);
    for (i, t) in s.transforms.iter().enumerate() {
        let at = KeyPath::keys(["transforms"]).index(i);
        if t.is_pixel_op() && tensor_at.is_some() {
            bad(
                at.key("op"),
                format!(
                    "{} works on 8-bit images and must come before to_tensor",
                    t.op_name()
                ),
            );
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
        let reaching = Reaching {
            shape,
            after_tensor: tensor_at.is_some(),
        };
        t.op()
            .check(reaching, &mut |key, message| bad(at.key(key), message));
        shape = t.op().output(shape);
    }
    if tensor_at.is_none() {
        bad(
            KeyPath::keys(["transforms"]),
            "the pipeline must end in a tensor: add { op = \"to_tensor\" }".into(),
        );
    }
    if shape.height == 0 || shape.width == 0 {
        let ops: Vec<&str> = s.transforms.iter().map(|t| t.op_name()).collect();
        bad(
            KeyPath::keys(["transforms"]),
            format!(
                "the images differ in size and no op makes them one size, so they cannot be \
                 batched: add random_resized_crop, center_crop, random_crop or resize with \
                 size = [height, width] (the chain is {})",
                ops.join(" → ")
            ),
        );
    }
}

/// The longest stand-in step accepted (10 minutes): past it a "step" is a typo.
pub const MAX_STAND_IN_MS: f64 = 600_000.0;

/// The stand-in's two sides: the device's `step_ms` and the host's `host_ms` (each ≥ 0, not
/// both 0, at most [`MAX_STAND_IN_MS`]) on `host_threads` cores (1 to this machine's).
fn check_stand_in(m: &ModelSection, out: &mut Vec<(KeyPath, String)>) {
    let ms_ok = |v: f64| v.is_finite() && (0.0..=MAX_STAND_IN_MS).contains(&v);
    if !ms_ok(m.step_ms) {
        out.push((
            KeyPath::keys(["model", "step_ms"]),
            format!(
                "model.step_ms must be 0 to {MAX_STAND_IN_MS} milliseconds (the stand-in step's \
                 device time; 0: no device, the step is all host; got {}; `loaderlab diagnose` \
                 measures it from a torch.profiler trace)",
                m.step_ms
            ),
        ));
    }
    if !ms_ok(m.host_ms) {
        out.push((
            KeyPath::keys(["model", "host_ms"]),
            format!(
                "model.host_ms must be 0 to {MAX_STAND_IN_MS} milliseconds (the host's own CPU \
                 time per step, spent on the training thread before the device's step; got {})",
                m.host_ms
            ),
        ));
    }
    if ms_ok(m.step_ms) && ms_ok(m.host_ms) && m.step_ms + m.host_ms <= 0.0 {
        out.push((
            KeyPath::keys(["model", "step_ms"]),
            "the stand-in step takes no time: set model.step_ms (the device's time per step), \
             model.host_ms (the host's), or both; `loaderlab diagnose` measures them from a \
             torch.profiler trace"
                .to_string(),
        ));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    if !(1..=cores).contains(&m.host_threads) {
        out.push((
            KeyPath::keys(["model", "host_threads"]),
            format!(
                "model.host_threads must be 1 to this machine's {cores} cores (the cores the \
                 host side holds while it spends host_ms, e.g. a CPU job's \
                 torch.get_num_threads()); got {}",
                m.host_threads
            ),
        ));
    }
}

/// The model takes what the transforms hand it; a key of another model kind is refused.
fn check_model(s: &Settings, out: &mut Vec<(KeyPath, String)>) {
    let m = &s.model;
    let kind = toml::Value::try_from(m.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    for key in m.foreign_keys() {
        let own = ModelSection::keys_of(m.kind);
        out.push((
            KeyPath::keys(["model", key]),
            format!(
                "model.{key} is not read by kind = \"{kind}\" (its keys: {})",
                own.join(", ")
            ),
        ));
    }
    if m.is_stand_in() {
        check_stand_in(m, out);
    }
    let Some(architecture) = m.architecture() else {
        return;
    };
    if s.users_dataset().is_some() {
        // The user's Dataset feeds the network: check_users_items checks its items.
        return;
    }
    let shape = chain_output(&s.transforms, dataset_shape(s));
    if shape.is_empty() {
        // An image folder without a fixed size: check_transforms says so.
        return;
    }
    // The class count does not change a shape's validity: any positive number will do.
    let input = ModelInput { shape, classes: 10 };
    if let Err(e) = net::check(&architecture, input) {
        // Name the key that set the image size too, when the size is what does not fit.
        let size_from = s
            .transforms
            .iter()
            .rposition(sets_size)
            .map(|i| format!("transforms[{i}].size"))
            .unwrap_or_else(|| "the dataset".to_string());
        out.push((
            KeyPath::keys(["model", e.key]),
            format!("model {kind}: {} (size set by {size_from})", e.message),
        ));
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
    if !(o.weight_decay >= 0.0 && o.weight_decay.is_finite()) {
        bad(
            key("optimizer", "weight_decay"),
            format!("expected a value ≥ 0, found {}", o.weight_decay),
        );
    }
    let d = OptimizerSection::default();
    let sgd = o.kind == OptimizerKind::Sgd;
    if sgd {
        for (name, changed) in [("betas", o.betas != d.betas), ("eps", o.eps != d.eps)] {
            if changed {
                bad(
                    key("optimizer", name),
                    "is read by adam and adamw only, not by kind = \"sgd\"".into(),
                );
            }
        }
        if !(0.0..1.0).contains(&o.momentum) {
            bad(
                key("optimizer", "momentum"),
                format!("expected a value in [0, 1), found {}", o.momentum),
            );
        }
        if o.nesterov && o.momentum == 0.0 {
            bad(
                key("optimizer", "nesterov"),
                "Nesterov momentum needs momentum > 0 (as PyTorch's SGD)".into(),
            );
        }
    } else {
        for (name, changed) in [
            ("momentum", o.momentum != d.momentum),
            ("nesterov", o.nesterov != d.nesterov),
        ] {
            if changed {
                bad(
                    key("optimizer", name),
                    "is read by sgd only (adam and adamw take betas and eps)".into(),
                );
            }
        }
    }
}

/// Checks on the settings that describe the whole experiment.
pub fn check_experiment_wide(
    s: &Settings,
    wide: &ExperimentWide,
    conditions: &[&str],
) -> Vec<(KeyPath, String)> {
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
    let p = &wide.protocol;
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
    if p.headroom && p.headroom_steps == 0 {
        out.push((
            KeyPath::keys(["protocol", "headroom_steps"]),
            "expected at least 1 step when headroom = true (or set headroom = false)".into(),
        ));
    }
    let r = &wide.report;
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
    if !(r.framework_step_ms.is_finite() && r.framework_step_ms >= 0.0) {
        out.push((
            KeyPath::keys(["report", "framework_step_ms"]),
            format!(
                "expected milliseconds, 0 (not known) or more, found {}",
                r.framework_step_ms
            ),
        ));
    }
    if !(0.0..0.5).contains(&r.min_effect) {
        out.push((
            KeyPath::keys(["report", "min_effect"]),
            format!(
                "expected a share of throughput from 0 to under 0.5 (0.02 = 2 %), found {}",
                r.min_effect
            ),
        ));
    }
    let (high, moderate) = (r.highly_input_bound, r.moderately_input_bound);
    if !(0.0..=1.0).contains(&high) {
        out.push((
            KeyPath::keys(["report", "highly_input_bound"]),
            format!("expected a share of step time from 0 to 1 (0.2 = 20 %), found {high}"),
        ));
    }
    if !(0.0..=1.0).contains(&moderate) || moderate > high {
        out.push((
            KeyPath::keys(["report", "moderately_input_bound"]),
            format!(
                "expected a share of step time from 0 to highly_input_bound ({high}), found \
                 {moderate}"
            ),
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
        assert!(check_experiment_wide(&s, &ExperimentWide::default(), &["default"]).is_empty());
    }

    #[test]
    fn advice_settings_are_checked() {
        let mut s = Settings::default();
        let mut w = ExperimentWide::default();
        w.report.highly_input_bound = 0.1;
        w.report.moderately_input_bound = 0.3;
        w.protocol.headroom_steps = 0;
        let wide: Vec<String> = check_experiment_wide(&s, &w, &["default"])
            .into_iter()
            .map(|(k, m)| format!("{k}: {m}"))
            .collect();
        assert_eq!(wide.len(), 2, "{wide:?}");
        assert!(wide[0].starts_with("protocol.headroom_steps: expected at least 1 step"));
        assert!(wide[1].starts_with(
            "report.moderately_input_bound: expected a share of step time from 0 to \
             highly_input_bound (0.1), found 0.3"
        ));
        s.transforms.insert(
            0,
            TransformSpec::CpuWork(crate::config::CpuWorkSpec { us: -5.0 }),
        );
        let keys: Vec<String> = check_settings(&s)
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(keys, ["transforms[0].us"]);
    }

    #[test]
    fn the_stand_ins_two_sides_are_checked_naming_the_key() {
        let stand_in = |step_ms: f64, host_ms: f64, host_threads: u64| {
            let mut s = Settings::default();
            s.model.kind = crate::config::ModelKind::StandIn;
            s.model.step_ms = step_ms;
            s.model.host_ms = host_ms;
            s.model.host_threads = host_threads;
            check_settings(&s)
                .into_iter()
                .map(|(k, m)| format!("{k}: {m}"))
                .collect::<Vec<String>>()
        };
        // Either side alone, or both, is a step; host threads up to the cores.
        assert!(stand_in(40.0, 0.0, 1).is_empty());
        assert!(stand_in(0.0, 12.0, 1).is_empty());
        assert!(stand_in(40.0, 12.0, 1).is_empty());
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        assert!(stand_in(0.0, 12.0, cores).is_empty());
        let none = stand_in(0.0, 0.0, 1);
        assert_eq!(none.len(), 1, "{none:?}");
        assert!(none[0].starts_with("model.step_ms: the stand-in step takes no time"));
        let bad = stand_in(-1.0, f64::NAN, 0);
        assert_eq!(bad.len(), 3, "{bad:?}");
        assert!(bad[0].starts_with("model.step_ms: model.step_ms must be 0 to"));
        assert!(bad[1].starts_with("model.host_ms: model.host_ms must be 0 to"));
        assert!(bad[2].starts_with("model.host_threads: model.host_threads must be 1 to"));
        let many = stand_in(0.0, 5.0, cores + 1);
        assert!(
            many.len() == 1 && many[0].contains(&format!("this machine's {cores} cores")),
            "{many:?}"
        );
        // A network's model does not read them.
        let mut s = Settings::default();
        s.model.host_ms = 3.0;
        let foreign: Vec<String> = check_settings(&s)
            .into_iter()
            .map(|(k, _)| k.to_string())
            .collect();
        assert_eq!(foreign, ["model.host_ms"]);
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
