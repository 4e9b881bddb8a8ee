//! Layered loading: built-in defaults < experiment file < `LOADERLAB_*` environment < `--set`,
//! merged with figment, then the matrix or the explicit conditions expanded into one resolved
//! [`Settings`] per condition.
//!
//! Invariant: nothing reaches the typed settings before the raw values have been checked
//! against the schema, and every problem is collected (never the first only) and tied to the
//! file line, environment variable or `--set` argument it came from.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use figment::Figment;
use figment::providers::Serialized;
use serde::Serialize;
use toml::Value;

use super::problem::{KeyPath, Location, Problem, Seg, did_you_mean, line_column};
use super::schema::{Settings, TransformSpec, choices, is_pair};
use super::validate::{check_experiment_wide, check_settings};

/// Prefix of the environment variables that override settings: `LOADERLAB_LOADER__WORKERS=4`.
pub const ENV_PREFIX: &str = "LOADERLAB_";

/// Sections whose settings may differ between the conditions of one experiment; the others
/// (experiment, protocol, report) describe the experiment as a whole.
const PER_CONDITION_SECTIONS: [&str; 6] = [
    "dataset",
    "transforms",
    "loader",
    "model",
    "optimizer",
    "device",
];

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
            .filter(|(k, _)| k.starts_with(ENV_PREFIX))
            .collect();
        env.sort();
        Overrides { set, env }
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

/// A validated experiment: the base settings and every condition's resolved settings.
#[derive(Debug, Clone, Serialize)]
pub struct Experiment {
    pub file: PathBuf,
    /// Settings before any condition's overrides.
    pub base: Settings,
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

/// Where the values of one layer came from, to turn a key path into a [`Location`].
#[derive(Debug, Clone)]
enum Source {
    File,
    Env(String),
    Set(String),
}

/// One overridden setting of one condition.
#[derive(Debug, Clone)]
struct Override {
    setting: KeyPath,
    value: Value,
    /// The path as the user wrote it, e.g. `matrix."loader.workers"[1]`.
    shown: KeyPath,
    source: Source,
}

/// A matrix axis: one setting and the values it takes.
#[derive(Debug, Clone)]
struct Axis {
    setting: KeyPath,
    values: Vec<Value>,
    shown: KeyPath,
    source: Source,
}

#[derive(Debug, Clone)]
struct ConditionSpec {
    name: String,
    overrides: Vec<Override>,
}

/// Everything needed to point at a problem.
struct Context<'a> {
    file: &'a Path,
    text: &'a str,
    doc: &'a toml_edit::ImDocument<String>,
    schema: Value,
    file_layer: toml::Table,
    env_layer: Vec<(KeyPath, String)>,
    set_layer: Vec<(KeyPath, String)>,
    problems: Vec<Problem>,
}

impl Context<'_> {
    fn locate(&self, source: &Source, shown: &KeyPath) -> Location {
        match source {
            Source::File => self.file_location(shown),
            Source::Env(var) => Location::Env { var: var.clone() },
            Source::Set(arg) => Location::Set { arg: arg.clone() },
        }
    }

    /// Line and column of the deepest part of `path` present in the file.
    fn file_location(&self, path: &KeyPath) -> Location {
        let mut item = self.doc.as_item();
        let mut span = None;
        for seg in &path.0 {
            let next = match seg {
                Seg::Key(k) => {
                    item.as_table_like()
                        .and_then(|t| t.get_key_value(k))
                        .map(|(key, child)| {
                            span = key.span().or_else(|| child.span()).or(span.clone());
                            child
                        })
                }
                Seg::Index(i) => item.get(*i).inspect(|child| {
                    span = child.span().or(span.clone());
                }),
            };
            match next {
                Some(child) => item = child,
                None => break,
            }
        }
        let (line, column) = span.map_or((1, 1), |s| line_column(self.text, s.start));
        Location::File {
            path: self.file.to_path_buf(),
            line,
            column,
        }
    }

    fn push(&mut self, location: Location, key: &KeyPath, message: impl Into<String>) {
        let problem = Problem {
            location,
            key: key.to_string(),
            message: message.into(),
        };
        if !self.problems.contains(&problem) {
            self.problems.push(problem);
        }
    }

    /// The layer that decided `setting` in the base settings, and how the user wrote it.
    fn origin(&self, setting: &KeyPath) -> Location {
        for (path, arg) in self.set_layer.iter().rev() {
            if setting.starts_with(path) {
                return Location::Set { arg: arg.clone() };
            }
        }
        for (path, var) in self.env_layer.iter().rev() {
            if setting.starts_with(path) {
                return Location::Env { var: var.clone() };
            }
        }
        if decides(&Value::Table(self.file_layer.clone()), &setting.0) {
            return self.file_location(setting);
        }
        Location::Default
    }
}

/// Whether `root` fixes the value at `path`: it holds the whole path, or a list or value that
/// replaces everything below it.
fn decides(root: &Value, path: &[Seg]) -> bool {
    let mut value = root;
    for (depth, seg) in path.iter().enumerate() {
        let next = match (seg, value) {
            (Seg::Key(k), Value::Table(t)) => t.get(k),
            (Seg::Index(i), Value::Array(a)) => a.get(*i),
            _ => None,
        };
        match next {
            Some(v) => value = v,
            None => return depth > 0 && !matches!(value, Value::Table(_)),
        }
    }
    true
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
    let doc = match toml_edit::ImDocument::parse(text.to_string()) {
        Ok(doc) => doc,
        Err(e) => {
            let (line, column) = line_column(text, e.span().map_or(0, |s| s.start));
            let message = e.message().trim().to_string();
            return Err(ConfigError::Invalid {
                problems: vec![Problem {
                    location: Location::File {
                        path: file.to_path_buf(),
                        line,
                        column,
                    },
                    key: String::new(),
                    message: format!("TOML syntax error: {message}"),
                }],
            });
        }
    };
    let mut table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Invalid {
        problems: vec![Problem {
            location: Location::File {
                path: file.to_path_buf(),
                line: 1,
                column: 1,
            },
            key: String::new(),
            message: format!("TOML syntax error: {}", e.message()),
        }],
    })?;
    let matrix = table.remove("matrix");
    let conditions = table.remove("conditions");

    let schema =
        Value::try_from(Settings::default()).expect("the default settings serialise to TOML");
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

    // The file's settings.
    let file_layer = cx.file_layer.clone();
    let schema_root = cx.schema.clone();
    check_value(
        &mut cx,
        &schema_root,
        &Value::Table(file_layer.clone()),
        &KeyPath::default(),
        &|p| p.clone(),
        &Source::File,
    );

    // The environment.
    let mut env_table = toml::Table::new();
    for (var, raw) in &overrides.env {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let setting = KeyPath::keys(rest.to_lowercase().split("__").map(str::to_string));
        let value = parse_value(raw);
        let source = Source::Env(var.clone());
        if check_override(&mut cx, &setting, &value, &source) {
            insert(&mut env_table, &setting, value);
            cx.env_layer.push((setting, var.clone()));
        }
    }

    // --set, which may also give or replace a matrix axis.
    let mut set_table = toml::Table::new();
    let mut set_axes: Vec<Axis> = Vec::new();
    for arg in &overrides.set {
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
            if let Some(axis) = check_axis(&mut cx, setting, value, shown, source) {
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
        if check_override(&mut cx, &setting, &value, &source) {
            insert(&mut set_table, &setting, value);
            cx.set_layer.push((setting, arg.clone()));
        }
    }

    // The conditions: a matrix (file axes, replaced or extended by --set axes) or a list.
    let mut axes = match &matrix {
        Some(m) => file_axes(&mut cx, m),
        None => Vec::new(),
    };
    for axis in set_axes {
        match axes.iter_mut().find(|a| a.setting == axis.setting) {
            Some(existing) => *existing = axis,
            None => axes.push(axis),
        }
    }
    let specs = match (&conditions, axes.is_empty()) {
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
        (Some(list), true) => listed_conditions(&mut cx, list),
        (None, false) => expand(&axes),
        (None, true) => vec![ConditionSpec {
            name: "default".into(),
            overrides: Vec::new(),
        }],
    };

    if !cx.problems.is_empty() {
        return Err(ConfigError::Invalid {
            problems: cx.problems,
        });
    }

    // Merge the layers. The raw checks above make extraction errors unexpected, but they are
    // still reported as problems rather than panics.
    let figment = Figment::new()
        .merge(Serialized::defaults(Settings::default()))
        .merge(Serialized::defaults(file_layer))
        .merge(Serialized::defaults(env_table))
        .merge(Serialized::defaults(set_table));
    let base: Settings = match figment.extract() {
        Ok(s) => s,
        Err(e) => {
            let path = KeyPath::keys(e.path.clone());
            let location = cx.origin(&path);
            cx.push(location, &path, e.kind.to_string());
            return Err(ConfigError::Invalid {
                problems: cx.problems,
            });
        }
    };

    let base_value = Value::try_from(&base).expect("settings serialise to TOML");
    let mut resolved = Vec::new();
    for spec in &specs {
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
    let names: Vec<&str> = resolved.iter().map(|c| c.name.as_str()).collect();
    for (path, message) in check_experiment_wide(&base, &names) {
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
        conditions: resolved,
    })
}

/// A value as TOML would read it after `key = `; a bare word is taken as a string, so
/// `--set device.kind=cpu` works without quotes.
fn parse_value(raw: &str) -> Value {
    match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| Value::String(raw.into())),
        Err(_) => Value::String(raw.to_string()),
    }
}

fn insert(table: &mut toml::Table, path: &KeyPath, value: Value) {
    let mut root = Value::Table(std::mem::take(table));
    set_path(&mut root, path, value);
    if let Value::Table(t) = root {
        *table = t;
    }
}

/// Set `path` (keys only) in `root`, creating tables on the way.
fn set_path(root: &mut Value, path: &KeyPath, value: Value) {
    let mut node = root;
    for (i, seg) in path.0.iter().enumerate() {
        let Seg::Key(k) = seg else { return };
        if !node.is_table() {
            *node = Value::Table(toml::Table::new());
        }
        let Value::Table(t) = node else { return };
        if i + 1 == path.0.len() {
            t.insert(k.clone(), value);
            return;
        }
        node = t
            .entry(k.clone())
            .or_insert_with(|| Value::Table(toml::Table::new()));
    }
}

/// The schema node for a setting path, or a problem naming the first unknown key.
fn schema_node(cx: &Context, setting: &KeyPath) -> Result<Value, (KeyPath, String)> {
    let mut node = &cx.schema;
    let mut walked = KeyPath::default();
    for seg in &setting.0 {
        let Seg::Key(k) = seg else {
            return Err((walked, "list indices cannot be overridden".into()));
        };
        walked = walked.key(k.clone());
        let Value::Table(t) = node else {
            return Err((
                walked,
                "names no setting: its parent is not a section".into(),
            ));
        };
        match t.get(k) {
            Some(child) => node = child,
            None => return Err((walked, unknown_key_message(k, t))),
        }
    }
    Ok(node.clone())
}

fn unknown_key_message(key: &str, known: &toml::Table) -> String {
    let list: Vec<&str> = known.keys().map(String::as_str).collect();
    let mut message = "unknown key".to_string();
    if let Some(s) = did_you_mean(key, list.iter().copied()) {
        message.push_str(&format!(" (did you mean `{s}`?)"));
    }
    message.push_str(&format!("; known keys here: {}", list.join(", ")));
    message
}

/// Check an environment or `--set` override; true when it is usable.
fn check_override(cx: &mut Context, setting: &KeyPath, value: &Value, source: &Source) -> bool {
    let before = cx.problems.len();
    match schema_node(cx, setting) {
        Ok(node) => check_value(cx, &node, value, setting, &|p| p.clone(), source),
        Err((shown, message)) => {
            let at = cx.locate(source, &shown);
            cx.push(at, setting, message);
        }
    }
    cx.problems.len() == before
}

/// Check one matrix axis: a known, per-condition setting and a non-empty list of valid values.
fn check_axis(
    cx: &mut Context,
    setting: KeyPath,
    value: Value,
    shown: KeyPath,
    source: Source,
) -> Option<Axis> {
    let node = match schema_node(cx, &setting) {
        Ok(node) => node,
        Err((_, message)) => {
            let at = cx.locate(&source, &shown);
            cx.push(
                at,
                &shown,
                format!("`{setting}` names no setting: {message}"),
            );
            return None;
        }
    };
    let section = setting.0.first().and_then(|s| match s {
        Seg::Key(k) => Some(k.as_str()),
        Seg::Index(_) => None,
    });
    if !section.is_some_and(|s| PER_CONDITION_SECTIONS.contains(&s)) {
        let at = cx.locate(&source, &shown);
        cx.push(
            at,
            &shown,
            format!(
                "`{setting}` describes the whole experiment and cannot vary between conditions; \
                 a matrix may vary settings of: {}",
                PER_CONDITION_SECTIONS.join(", ")
            ),
        );
        return None;
    }
    let Value::Array(values) = value else {
        let at = cx.locate(&source, &shown);
        cx.push(
            at,
            &shown,
            format!(
                "expected a list of values for `{setting}`, e.g. [0, 4]; found {}",
                describe(&value)
            ),
        );
        return None;
    };
    if values.is_empty() {
        let at = cx.locate(&source, &shown);
        cx.push(
            at,
            &shown,
            "empty list: a matrix axis needs at least one value",
        );
        return None;
    }
    let before = cx.problems.len();
    for (i, v) in values.iter().enumerate() {
        let element = shown.index(i);
        let base_len = setting.0.len();
        let map = |p: &KeyPath| {
            let mut out = element.clone();
            out.0.extend_from_slice(&p.0[base_len..]);
            out
        };
        check_value(cx, &node, v, &setting, &map, &source);
    }
    (cx.problems.len() == before).then_some(Axis {
        setting,
        values,
        shown,
        source,
    })
}

/// The axes of the file's `[matrix]`; quoted dotted keys and nested tables both work.
fn file_axes(cx: &mut Context, matrix: &Value) -> Vec<Axis> {
    let Value::Table(table) = matrix else {
        let at = cx.file_location(&KeyPath::keys(["matrix"]));
        cx.push(
            at,
            &KeyPath::keys(["matrix"]),
            "expected a table of dotted setting keys to lists, e.g. \"loader.workers\" = [0, 4]",
        );
        return Vec::new();
    };
    let mut flat = Vec::new();
    flatten(
        table,
        &KeyPath::keys(["matrix"]),
        &mut Vec::new(),
        &mut flat,
    );
    let mut axes = Vec::new();
    for (setting, shown, value) in flat {
        if let Some(axis) = check_axis(cx, setting, value, shown, Source::File) {
            axes.push(axis);
        }
    }
    axes
}

/// Flatten nested tables into (setting path, path as written, value).
fn flatten(
    table: &toml::Table,
    shown: &KeyPath,
    prefix: &mut Vec<String>,
    out: &mut Vec<(KeyPath, KeyPath, Value)>,
) {
    for (k, v) in table {
        let parts: Vec<String> = k.split('.').map(str::to_string).collect();
        let n = parts.len();
        prefix.extend(parts);
        match v {
            Value::Table(t) => flatten(t, &shown.key(k.clone()), prefix, out),
            _ => out.push((
                KeyPath::keys(prefix.clone()),
                shown.key(k.clone()),
                v.clone(),
            )),
        }
        prefix.truncate(prefix.len() - n);
    }
}

/// The cartesian product of the axes, the first axis varying slowest.
fn expand(axes: &[Axis]) -> Vec<ConditionSpec> {
    let mut last_keys: Vec<&str> = axes.iter().filter_map(|a| a.setting.last_key()).collect();
    last_keys.sort_unstable();
    let ambiguous = last_keys.windows(2).any(|w| w[0] == w[1]);
    let mut specs = vec![ConditionSpec {
        name: String::new(),
        overrides: Vec::new(),
    }];
    for axis in axes {
        let label_key = match axis.setting.last_key() {
            Some(k) if !ambiguous => k.to_string(),
            _ => axis.setting.to_string(),
        };
        let mut next = Vec::new();
        for spec in &specs {
            for (i, value) in axis.values.iter().enumerate() {
                let mut s = spec.clone();
                let part = format!("{label_key}={}", label_value(value, i));
                s.name = if s.name.is_empty() {
                    part
                } else {
                    format!("{},{part}", s.name)
                };
                s.overrides.push(Override {
                    setting: axis.setting.clone(),
                    value: value.clone(),
                    shown: axis.shown.index(i),
                    source: axis.source.clone(),
                });
                next.push(s);
            }
        }
        specs = next;
    }
    specs
}

fn label_value(value: &Value, index: usize) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Integer(_) | Value::Float(_) | Value::Boolean(_) => value.to_string(),
        Value::Array(a) if a.iter().all(|v| !v.is_table() && !v.is_array()) => {
            let parts: Vec<String> = a.iter().map(|v| label_value(v, 0)).collect();
            parts.join("-")
        }
        _ => format!("#{}", index + 1),
    }
}

/// The explicit `[[conditions]]`: a name plus setting overrides (dotted or nested keys).
fn listed_conditions(cx: &mut Context, list: &Value) -> Vec<ConditionSpec> {
    let here = KeyPath::keys(["conditions"]);
    let Value::Array(items) = list else {
        let at = cx.file_location(&here);
        cx.push(
            at,
            &here,
            "expected [[conditions]] tables, each with a name and setting overrides",
        );
        return Vec::new();
    };
    if items.is_empty() {
        let at = cx.file_location(&here);
        cx.push(at, &here, "empty list: give at least one condition");
    }
    let mut specs = Vec::new();
    let mut seen = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let at_item = here.index(i);
        let Value::Table(t) = item else {
            let at = cx.file_location(&at_item);
            cx.push(
                at,
                &at_item,
                "expected a table with a name and setting overrides",
            );
            continue;
        };
        let name = match t.get("name") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            Some(other) => {
                let p = at_item.key("name");
                let at = cx.file_location(&p);
                cx.push(
                    at,
                    &p,
                    format!("expected a non-empty string, found {}", describe(other)),
                );
                continue;
            }
            None => {
                let at = cx.file_location(&at_item);
                cx.push(at, &at_item, "missing `name`: every condition needs a name");
                continue;
            }
        };
        if !seen.insert(name.clone()) {
            let p = at_item.key("name");
            let at = cx.file_location(&p);
            cx.push(
                at,
                &p,
                format!("duplicate condition name {name:?}; names must be unique"),
            );
        }
        let mut rest = t.clone();
        rest.remove("name");
        let mut flat = Vec::new();
        flatten(&rest, &at_item, &mut Vec::new(), &mut flat);
        let mut overrides = Vec::new();
        for (setting, shown, value) in flat {
            let before = cx.problems.len();
            let per_condition = matches!(setting.0.first(),
                Some(Seg::Key(k)) if PER_CONDITION_SECTIONS.contains(&k.as_str()));
            match schema_node(cx, &setting) {
                Err((_, message)) => {
                    let at = cx.file_location(&shown);
                    cx.push(
                        at,
                        &shown,
                        format!("`{setting}` names no setting: {message}"),
                    );
                }
                Ok(_) if !per_condition => {
                    let at = cx.file_location(&shown);
                    cx.push(
                        at,
                        &shown,
                        format!(
                            "`{setting}` describes the whole experiment and cannot vary \
                             between conditions; conditions may set: {}",
                            PER_CONDITION_SECTIONS.join(", ")
                        ),
                    );
                }
                Ok(node) => {
                    let base_len = setting.0.len();
                    let map = |p: &KeyPath| {
                        let mut out = shown.clone();
                        out.0.extend_from_slice(&p.0[base_len..]);
                        out
                    };
                    check_value(cx, &node, &value, &setting, &map, &Source::File);
                }
            }
            if cx.problems.len() == before {
                overrides.push(Override {
                    setting,
                    value,
                    shown,
                    source: Source::File,
                });
            }
        }
        specs.push(ConditionSpec { name, overrides });
    }
    specs
}

/// How a found value reads in a message: its TOML text and, for non-strings, its type.
fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Integer(i) => format!("{i}"),
        Value::Float(f) => format!("{f}"),
        Value::Boolean(b) => format!("{b}"),
        Value::Datetime(d) => format!("the date {d}"),
        Value::Array(_) => format!("the list {value}"),
        Value::Table(_) => "a table".to_string(),
    }
}

/// Check `value` against the schema node for `setting`. `shown` maps a setting path to the
/// path as the user wrote it (for the message and the location).
fn check_value(
    cx: &mut Context,
    schema: &Value,
    value: &Value,
    setting: &KeyPath,
    shown: &dyn Fn(&KeyPath) -> KeyPath,
    source: &Source,
) {
    let fail = |cx: &mut Context, at: &KeyPath, expected: &str, found: &Value| {
        let key = shown(at);
        let location = cx.locate(source, &key);
        cx.push(
            location,
            &key,
            format!("expected {expected}, found {}", describe(found)),
        );
    };
    if setting.0 == [Seg::Key("transforms".into())] {
        check_transforms(cx, value, setting, shown, source);
        return;
    }
    match schema {
        Value::Table(st) => {
            let Value::Table(vt) = value else {
                fail(cx, setting, "a table", value);
                return;
            };
            for (k, v) in vt {
                let p = setting.key(k.clone());
                match st.get(k) {
                    Some(s) => check_value(cx, s, v, &p, shown, source),
                    None => {
                        let key = shown(&p);
                        let location = cx.locate(source, &key);
                        let message = unknown_key_message(k, st);
                        cx.push(location, &key, message);
                    }
                }
            }
        }
        Value::Integer(_) => {
            let limit = if setting.last_key() == Some("fill") {
                255
            } else {
                i64::MAX
            };
            match value {
                Value::Integer(i) if (0..=limit).contains(i) => {}
                _ if limit == 255 => fail(cx, setting, "an integer from 0 to 255", value),
                _ => fail(cx, setting, "an integer ≥ 0", value),
            }
        }
        Value::Float(_) => match value {
            Value::Integer(_) => {}
            Value::Float(f) if f.is_finite() => {}
            _ => fail(cx, setting, "a finite number", value),
        },
        Value::Boolean(_) => {
            if !value.is_bool() {
                fail(cx, setting, "true or false", value);
            }
        }
        Value::String(_) => match (value, choices(&setting.without_indices())) {
            (Value::String(s), Some(words)) if !words.contains(&s.as_str()) => {
                let list: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
                let mut expected = format!("one of {}", list.join(", "));
                if let Some(close) = did_you_mean(s, words.iter().copied()) {
                    expected = format!("{expected} (did you mean {close:?}?)");
                }
                fail(cx, setting, &expected, value);
            }
            (Value::String(_), _) => {}
            _ => match choices(&setting.without_indices()) {
                Some(words) => {
                    let list: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
                    fail(cx, setting, &format!("one of {}", list.join(", ")), value);
                }
                None => fail(cx, setting, "a string", value),
            },
        },
        Value::Array(sa) => {
            let Value::Array(va) = value else {
                let what = if setting.last_key().is_some_and(is_pair) {
                    "a pair [low, high] of numbers"
                } else {
                    "a list"
                };
                fail(cx, setting, what, value);
                return;
            };
            if setting.last_key().is_some_and(is_pair) && va.len() != 2 {
                fail(cx, setting, "a pair [low, high] of numbers", value);
                return;
            }
            if let Some(element) = sa.first() {
                for (i, v) in va.iter().enumerate() {
                    check_value(cx, element, v, &setting.index(i), shown, source);
                }
            }
        }
        Value::Datetime(_) => {}
    }
}

fn check_transforms(
    cx: &mut Context,
    value: &Value,
    setting: &KeyPath,
    shown: &dyn Fn(&KeyPath) -> KeyPath,
    source: &Source,
) {
    let ops: Vec<String> = TransformSpec::OPS
        .iter()
        .map(|o| format!("{o:?}"))
        .collect();
    let ops = ops.join(", ");
    let Value::Array(items) = value else {
        let key = shown(setting);
        let location = cx.locate(source, &key);
        cx.push(
            location,
            &key,
            format!(
                "expected a list of transforms ([[transforms]] tables with op = one of {ops}), \
                 found {}",
                describe(value)
            ),
        );
        return;
    };
    for (i, item) in items.iter().enumerate() {
        let at = setting.index(i);
        let Value::Table(t) = item else {
            let key = shown(&at);
            let location = cx.locate(source, &key);
            cx.push(
                location,
                &key,
                format!(
                    "expected a table with op = one of {ops}, found {}",
                    describe(item)
                ),
            );
            continue;
        };
        let op_path = at.key("op");
        let spec = match t.get("op") {
            Some(Value::String(op)) => match TransformSpec::with_defaults(op) {
                Some(spec) => spec,
                None => {
                    let key = shown(&op_path);
                    let location = cx.locate(source, &key);
                    let mut message = format!("unknown transform {op:?}; expected one of {ops}");
                    if let Some(close) = did_you_mean(op, TransformSpec::OPS) {
                        message.push_str(&format!(" (did you mean {close:?}?)"));
                    }
                    cx.push(location, &key, message);
                    continue;
                }
            },
            Some(other) => {
                let key = shown(&op_path);
                let location = cx.locate(source, &key);
                cx.push(
                    location,
                    &key,
                    format!("expected one of {ops}, found {}", describe(other)),
                );
                continue;
            }
            None => {
                let key = shown(&at);
                let location = cx.locate(source, &key);
                cx.push(
                    location,
                    &key,
                    format!("missing `op`: every transform names its op, one of {ops}"),
                );
                continue;
            }
        };
        let Ok(Value::Table(op_schema)) = Value::try_from(&spec) else {
            continue;
        };
        let mut params = t.clone();
        params.remove("op");
        let mut params_schema = op_schema.clone();
        params_schema.remove("op");
        if params_schema.is_empty() {
            for k in params.keys() {
                let key = shown(&at.key(k.clone()));
                let location = cx.locate(source, &key);
                cx.push(
                    location,
                    &key,
                    format!("unknown key: {} takes no parameters", spec.op_name()),
                );
            }
            continue;
        }
        check_value(
            cx,
            &Value::Table(params_schema),
            &Value::Table(params),
            &at,
            shown,
            source,
        );
    }
}
