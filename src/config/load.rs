//! Layered loading: built-in defaults < experiment file < `LOADERLAB_*` environment < `--set`,
//! merged with figment, then the matrix or the explicit conditions expanded into one resolved
//! [`Settings`] per condition. The jobs live beside it: [`super::locate`] (where a value came
//! from), [`super::layers`] (the override layers), [`super::raw`] (schema checks),
//! [`super::matrix`] (conditions) and [`super::validate`] (ranges and cross-checks).
//!
//! Invariant: nothing reaches the typed settings before the raw values have been checked
//! against the schema; values that fail those checks are left out so that the range checks
//! still run on the rest, and every problem of every kind is reported at once, each tied to
//! the file line, environment variable or `--set` argument it came from.

use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::Serialized;
use serde::Serialize;
use toml::Value;

use super::layers::{check_override, insert, parse_value, set_path};
use super::locate::{Context, Source};
use super::matrix::{Axis, ConditionSpec, check_axis, expand, file_axes, listed_conditions};
use super::problem::{KeyPath, Location, Problem, Seg, line_column};
use super::raw::check_value;
use super::schema::{ExperimentWide, ProtocolSection, ReportSection, Settings};
use super::validate::{check_experiment_wide, check_settings};

/// Prefix of the environment variables that override settings: `LOADERLAB_LOADER__WORKERS=4`.
pub const ENV_PREFIX: &str = "LOADERLAB_";

/// `LOADERLAB_*` variables that are not settings: `LOADERLAB_PYTHON` names the pytorch
/// engine's interpreter when `[pytorch] python` is empty.
pub const NOT_SETTINGS: [&str; 1] = ["LOADERLAB_PYTHON"];

/// Overrides from outside the file.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `key.path=value` arguments, in the order given.
    pub set: Vec<String>,
    /// `(variable, value)` pairs whose variable starts with [`ENV_PREFIX`].
    pub env: Vec<(String, String)>,
}

impl Overrides {
    /// `--set` arguments plus the `LOADERLAB_*` variables of this process.
    pub fn from_process(set: Vec<String>) -> Self {
        let mut env: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with(ENV_PREFIX) && !NOT_SETTINGS.contains(&k.as_str()))
            .collect();
        env.sort();
        Overrides { set, env }
    }

    /// Every override as (dotted key, value, how it was given), lowest layer first: the
    /// `LOADERLAB_*` variables, then `--set` in order. A `--set matrix.KEY=…` axis keeps its
    /// `matrix.` prefix. Entries that are not `key=value` are left out (loading refuses them).
    pub fn layers(&self) -> Vec<(String, Value, String)> {
        let env = self.env.iter().filter_map(|(var, raw)| {
            let key = var
                .strip_prefix(ENV_PREFIX)?
                .to_lowercase()
                .replace("__", ".");
            Some((key, parse_value(raw), format!("{var}={raw}")))
        });
        let set = self.set.iter().filter_map(|arg| {
            let (key, raw) = arg.split_once('=')?;
            Some((
                key.trim().to_string(),
                parse_value(raw.trim()),
                format!("--set {arg}"),
            ))
        });
        env.chain(set).collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read experiment file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}", render(problems))]
    Invalid { problems: Vec<Problem> },
}

fn render(problems: &[Problem]) -> String {
    let lines: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
    lines.join("\n")
}

/// A validated experiment: the base settings, every condition's resolved settings, and the
/// experiment-wide sections once.
#[derive(Debug, Clone, Serialize)]
pub struct Experiment {
    pub file: PathBuf,
    /// Settings before any condition's overrides.
    pub base: Settings,
    /// How every condition is measured.
    pub protocol: ProtocolSection,
    /// How the results are reported.
    pub report: ReportSection,
    pub conditions: Vec<Condition>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Condition {
    pub name: String,
    /// Dotted setting path → value, as written in the matrix or the condition.
    pub overrides: toml::Table,
    pub settings: Settings,
}

impl Experiment {
    /// The condition named `name`, else (None) the first: the one `preview`, `tune` and the
    /// Python module's `Loader` take. The error names the conditions there are.
    pub fn condition(&self, name: Option<&str>) -> Result<&Condition, String> {
        match name {
            Some(name) => self
                .conditions
                .iter()
                .find(|c| c.name == name)
                .ok_or_else(|| {
                    let names: Vec<&str> =
                        self.conditions.iter().map(|c| c.name.as_str()).collect();
                    format!(
                        "{name:?} names no condition; the conditions are {}",
                        names.join(", ")
                    )
                }),
            None => {
                (self.conditions.first()).ok_or_else(|| "the experiment has no condition".into())
            }
        }
    }

    /// The results folder: `--out`, else `experiment.output`, else `reports/<name>`.
    pub fn output_dir(&self, out: Option<&Path>) -> PathBuf {
        if let Some(out) = out {
            return out.to_path_buf();
        }
        if !self.base.experiment.output.is_empty() {
            return PathBuf::from(&self.base.experiment.output);
        }
        Path::new("reports").join(&self.base.experiment.name)
    }
}

/// Load, check and resolve an experiment file.
pub fn load(file: &Path, overrides: &Overrides) -> Result<Experiment, ConfigError> {
    let text = std::fs::read_to_string(file).map_err(|source| ConfigError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    load_str(file, &text, overrides)
}

/// As [`load`], with the file's text already read (`file` names it in messages).
pub fn load_str(file: &Path, text: &str, overrides: &Overrides) -> Result<Experiment, ConfigError> {
    let (doc, mut table) = parse(file, text)?;
    let matrix = table.remove("matrix");
    let conditions = table.remove("conditions");
    let schema = schema();
    let mut cx = Context {
        file,
        text,
        doc: &doc,
        schema,
        file_layer: table,
        env_layer: Vec::new(),
        set_layer: Vec::new(),
        problems: Vec::new(),
    };
    let rejected = check_file_layer(&mut cx);
    let env_table = env_layer(&mut cx, &overrides.env);
    let (set_table, set_axes) = set_layer(&mut cx, &overrides.set);
    let specs = condition_specs(&mut cx, matrix.as_ref(), conditions.as_ref(), set_axes);

    // Every problem at once: the range checks run on the settings whose raw values passed
    // (a rejected value falls back to its default here, and is reported already).
    let mut file_layer = cx.file_layer.clone();
    for path in &rejected {
        remove_path(&mut file_layer, path);
    }
    // The experiment-wide sections apart from a condition's.
    let mut layers = [file_layer, env_table, set_table];
    let wide_layers = layers.each_mut().map(|t| {
        toml::Table::from_iter(
            ExperimentWide::SECTIONS
                .iter()
                .filter_map(|k| t.remove(*k).map(|v| (k.to_string(), v))),
        )
    });
    let [file_layer, env_table, set_table] = layers;
    let figment = Figment::new()
        .merge(Serialized::defaults(Settings::default()))
        .merge(Serialized::defaults(file_layer))
        .merge(Serialized::defaults(env_table))
        .merge(Serialized::defaults(set_table));
    let [file_wide, env_wide, set_wide] = wide_layers;
    let wide_figment = Figment::new()
        .merge(Serialized::defaults(ExperimentWide::default()))
        .merge(Serialized::defaults(file_wide))
        .merge(Serialized::defaults(env_wide))
        .merge(Serialized::defaults(set_wide));
    let extracted = match figment.extract::<Settings>() {
        Ok(base) => wide_figment
            .extract::<ExperimentWide>()
            .map(|wide| (base, wide)),
        Err(e) => Err(e),
    };
    let (base, wide) = match extracted {
        Ok(s) => s,
        Err(e) => {
            // The raw checks make this unexpected; it is still a problem, never a panic.
            let path = KeyPath::keys(e.path.clone());
            let location = cx.origin(&path);
            cx.push(location, &path, e.kind.to_string());
            return Err(ConfigError::Invalid {
                problems: cx.problems,
            });
        }
    };
    let resolved = resolve(&mut cx, &base, &specs);
    check_python_files(&mut cx, &resolved);
    let names: Vec<&str> = resolved.iter().map(|c| c.name.as_str()).collect();
    for (path, message) in check_experiment_wide(&base, &wide, &names) {
        let location = cx.origin(&path);
        cx.push(location, &path, message);
    }
    if !cx.problems.is_empty() {
        return Err(ConfigError::Invalid {
            problems: cx.problems,
        });
    }
    Ok(Experiment {
        file: file.to_path_buf(),
        base,
        protocol: wide.protocol,
        report: wide.report,
        conditions: resolved,
    })
}

/// Each `[pytorch]` reference names a file that exists (relative to the experiment file), once
/// per reference however many conditions share it.
fn check_python_files(cx: &mut Context, conditions: &[Condition]) {
    let mut seen = Vec::new();
    for c in conditions {
        for (key, reference) in c.settings.pytorch.references() {
            let path = KeyPath::keys(["pytorch", key]);
            let file = super::pytorch::reference_file(reference, cx.file);
            if seen.contains(&(key, reference)) || file.is_file() || !reference.contains(".py:") {
                continue;
            }
            seen.push((key, reference));
            let location = cx.origin(&path);
            cx.push(
                location,
                &path,
                format!(
                    "{reference:?}: no such file {} (the file is relative to the experiment file)",
                    file.display()
                ),
            );
        }
    }
}

/// The schema the raw checks walk: the default settings as TOML, with a sample element in
/// each list of tables that defaults to empty.
fn schema() -> Value {
    let mut schema =
        Value::try_from(Settings::default()).expect("the default settings serialise to TOML");
    if let (Value::Table(t), Value::Table(wide)) = (
        &mut schema,
        Value::try_from(ExperimentWide::default()).expect("the sections serialise to TOML"),
    ) {
        t.extend(wide);
    }
    if let Some(Value::Array(ranks)) = schema
        .get_mut("distributed")
        .and_then(|d| d.get_mut("rank"))
    {
        ranks.push(super::distributed::schema_element());
    }
    schema
}

/// The file as a span-keeping document (for locations) and as a table; a syntax error is one
/// problem at its line and column, naming the key when the value is a number too large.
fn parse(
    file: &Path,
    text: &str,
) -> Result<(toml_edit::ImDocument<String>, toml::Table), ConfigError> {
    let at = |line, column, key: String, message: String| ConfigError::Invalid {
        problems: vec![Problem {
            location: Location::File {
                path: file.to_path_buf(),
                line,
                column,
            },
            key,
            message,
        }],
    };
    let doc = toml_edit::ImDocument::parse(text.to_string()).map_err(|e| {
        let (line, column) = line_column(text, e.span().map_or(0, |s| s.start));
        let message = e.message().trim().to_string();
        if message.contains("too large") {
            let key = key_on_line(text, line).unwrap_or_default();
            at(
                line,
                column,
                key,
                format!(
                    "the number is too large: TOML integers go up to {} (and this setting \
                     allows far less)",
                    i64::MAX
                ),
            )
        } else {
            at(
                line,
                column,
                String::new(),
                format!("TOML syntax error: {message}"),
            )
        }
    })?;
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        at(
            1,
            1,
            String::new(),
            format!("TOML syntax error: {}", e.message()),
        )
    })?;
    Ok((doc, table))
}

/// The dotted key a `key = value` line sets, with the `[section]` above it: what a syntax
/// error in the value belongs to.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let here = lines.get(line.checked_sub(1)?)?;
    let key = here.split_once('=')?.0.trim().trim_matches('"');
    let section = lines[..line - 1]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    Some(match section {
        Some(s) if !s.is_empty() => format!("{s}.{key}"),
        _ => key.to_string(),
    })
}

/// Check the file's settings one by one; returns the settings (section.key, or a top-level
/// list such as `transforms`) whose values were rejected.
fn check_file_layer(cx: &mut Context) -> Vec<KeyPath> {
    let layer = cx.file_layer.clone();
    let schema = cx.schema.clone();
    let mut rejected = Vec::new();
    for (section, value) in &layer {
        let settings: Vec<(KeyPath, Value)> = match value {
            Value::Table(t) if schema.get(section).is_some_and(Value::is_table) => t
                .iter()
                .map(|(k, v)| {
                    let one = toml::Table::from_iter([(k.clone(), v.clone())]);
                    (
                        KeyPath::keys([section.clone(), k.clone()]),
                        Value::Table(toml::Table::from_iter([(
                            section.clone(),
                            Value::Table(one),
                        )])),
                    )
                })
                .collect(),
            _ => vec![(
                KeyPath::keys([section.clone()]),
                Value::Table(toml::Table::from_iter([(section.clone(), value.clone())])),
            )],
        };
        for (path, one) in settings {
            let before = cx.problems.len();
            check_value(
                cx,
                &schema,
                &one,
                &KeyPath::default(),
                &|p| p.clone(),
                &Source::File,
            );
            if cx.problems.len() > before {
                rejected.push(path);
            }
        }
    }
    rejected
}

/// Remove `path` (keys only) from `table`.
fn remove_path(table: &mut toml::Table, path: &KeyPath) {
    let keys: Vec<&str> = path
        .0
        .iter()
        .filter_map(|s| match s {
            Seg::Key(k) => Some(k.as_str()),
            Seg::Index(_) => None,
        })
        .collect();
    match keys.as_slice() {
        [key] => {
            table.remove(*key);
        }
        [section, key, ..] => {
            if let Some(Value::Table(t)) = table.get_mut(*section) {
                t.remove(*key);
            }
        }
        [] => {}
    }
}

/// The `LOADERLAB_*` layer: each variable checked, the usable ones as a table.
fn env_layer(cx: &mut Context, env: &[(String, String)]) -> toml::Table {
    let mut env_table = toml::Table::new();
    for (var, raw) in env {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let setting = KeyPath::keys(rest.to_lowercase().split("__").map(str::to_string));
        let value = parse_value(raw);
        let source = Source::Env(var.clone());
        if check_override(cx, &setting, &value, &source) {
            insert(&mut env_table, &setting, value);
            cx.env_layer.push((setting, var.clone()));
        }
    }
    env_table
}

/// The `--set` layer, which may also give or replace a matrix axis.
fn set_layer(cx: &mut Context, set: &[String]) -> (toml::Table, Vec<Axis>) {
    let mut set_table = toml::Table::new();
    let mut set_axes: Vec<Axis> = Vec::new();
    for arg in set {
        let source = Source::Set(arg.clone());
        let Some((key, raw)) = arg.split_once('=') else {
            cx.push(
                Location::Set { arg: arg.clone() },
                &KeyPath::default(),
                "expected key.path=value, e.g. --set loader.workers=4",
            );
            continue;
        };
        let key = key.trim();
        let value = parse_value(raw.trim());
        if key.contains('[') {
            cx.push(
                Location::Set { arg: arg.clone() },
                &KeyPath::keys([key]),
                "indices are not supported in --set keys; set the whole list, e.g. \
                 --set 'transforms=[{op=\"to_tensor\"}]'",
            );
            continue;
        }
        if let Some(axis_key) = key.strip_prefix("matrix.") {
            let setting = KeyPath::keys(axis_key.split('.').map(str::to_string));
            let shown = KeyPath::keys(["matrix", axis_key]);
            if let Some(axis) = check_axis(cx, setting, value, shown, source) {
                set_axes.retain(|a| a.setting != axis.setting);
                set_axes.push(axis);
            }
            continue;
        }
        let setting = KeyPath::keys(key.split('.').map(str::to_string));
        if matches!(setting.0.first(), Some(Seg::Key(k)) if k == "conditions") {
            cx.push(
                Location::Set { arg: arg.clone() },
                &setting,
                "conditions can only be listed in the experiment file",
            );
            continue;
        }
        if check_override(cx, &setting, &value, &source) {
            insert(&mut set_table, &setting, value);
            cx.set_layer.push((setting, arg.clone()));
        }
    }
    (set_table, set_axes)
}

/// The conditions: a matrix (file axes, replaced or extended by `--set` axes) or a list.
fn condition_specs(
    cx: &mut Context,
    matrix: Option<&Value>,
    conditions: Option<&Value>,
    set_axes: Vec<Axis>,
) -> Vec<ConditionSpec> {
    let mut axes = match matrix {
        Some(m) => file_axes(cx, m),
        None => Vec::new(),
    };
    for axis in set_axes {
        match axes.iter_mut().find(|a| a.setting == axis.setting) {
            Some(existing) => *existing = axis,
            None => axes.push(axis),
        }
    }
    match (conditions, axes.is_empty()) {
        (Some(_), false) => {
            let at = if matrix.is_some() {
                cx.file_location(&KeyPath::keys(["matrix"]))
            } else {
                cx.file_location(&KeyPath::keys(["conditions"]))
            };
            cx.push(
                at,
                &KeyPath::keys(["matrix"]),
                "an experiment has either [matrix] or [[conditions]], not both; \
                 move the grid into explicit conditions or drop the list",
            );
            Vec::new()
        }
        (Some(list), true) => listed_conditions(cx, list),
        (None, false) => expand(&axes),
        (None, true) => vec![ConditionSpec {
            name: "default".into(),
            overrides: Vec::new(),
        }],
    }
}

/// Each condition's settings: the base with its overrides, range-checked; a problem points at
/// the override that set the value, else at the layer that did.
fn resolve(cx: &mut Context, base: &Settings, specs: &[ConditionSpec]) -> Vec<Condition> {
    let base_value = Value::try_from(base).expect("settings serialise to TOML");
    let mut resolved = Vec::new();
    for spec in specs {
        let mut value = base_value.clone();
        let mut shown = toml::Table::new();
        for ov in &spec.overrides {
            set_path(&mut value, &ov.setting, ov.value.clone());
            shown.insert(ov.setting.to_string(), ov.value.clone());
        }
        let settings: Settings = match value.try_into() {
            Ok(s) => s,
            Err(e) => {
                let at = spec
                    .overrides
                    .first()
                    .map(|o| cx.locate(&o.source, &o.shown))
                    .unwrap_or(Location::Default);
                cx.push(
                    at,
                    &KeyPath::keys(["conditions"]),
                    format!("condition {:?}: {}", spec.name, e.message()),
                );
                continue;
            }
        };
        for (path, message) in check_settings(&settings) {
            let (location, key) = match spec
                .overrides
                .iter()
                .rev()
                .find(|o| path.starts_with(&o.setting))
            {
                Some(o) => {
                    let mut shown = o.shown.clone();
                    shown.0.extend_from_slice(&path.0[o.setting.0.len()..]);
                    (cx.locate(&o.source, &shown), shown)
                }
                None => (cx.origin(&path), path.clone()),
            };
            cx.push(location, &key, message);
        }
        resolved.push(Condition {
            name: spec.name.clone(),
            overrides: shown,
            settings,
        });
    }
    resolved
}
