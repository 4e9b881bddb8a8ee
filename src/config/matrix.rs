//! The conditions: `[matrix]` axes expanded into their cartesian product, or the explicit
//! `[[conditions]]` list, each checked against the schema and the per-condition sections.

use std::collections::HashSet;

use toml::Value;

use super::layers::schema_node;
use super::locate::{Context, Source};
use super::problem::{KeyPath, Seg};
use super::raw::{check_value, describe};

/// Sections whose settings may differ between the conditions of one experiment; the others
/// (experiment, protocol, report) describe the experiment as a whole.
pub(super) const PER_CONDITION_SECTIONS: [&str; 8] = [
    "dataset",
    "transforms",
    "loader",
    "model",
    "optimizer",
    "device",
    "distributed",
    "pytorch",
];

/// One overridden setting of one condition.
#[derive(Debug, Clone)]
pub(super) struct Override {
    pub(super) setting: KeyPath,
    pub(super) value: Value,
    /// The path as the user wrote it, e.g. `matrix."loader.workers"[1]`.
    pub(super) shown: KeyPath,
    pub(super) source: Source,
}

/// A matrix axis: one setting and the values it takes.
#[derive(Debug, Clone)]
pub(super) struct Axis {
    pub(super) setting: KeyPath,
    pub(super) values: Vec<Value>,
    pub(super) shown: KeyPath,
    pub(super) source: Source,
}

#[derive(Debug, Clone)]
pub(super) struct ConditionSpec {
    pub(super) name: String,
    pub(super) overrides: Vec<Override>,
}

/// Check one matrix axis: a known, per-condition setting and a non-empty list of valid values.
pub(super) fn check_axis(
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
pub(super) fn file_axes(cx: &mut Context, matrix: &Value) -> Vec<Axis> {
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
pub(super) fn flatten(
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
pub(super) fn expand(axes: &[Axis]) -> Vec<ConditionSpec> {
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

pub(super) fn label_value(value: &Value, index: usize) -> String {
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
pub(super) fn listed_conditions(cx: &mut Context, list: &Value) -> Vec<ConditionSpec> {
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
        let overrides = condition_overrides(cx, &rest, &at_item);
        specs.push(ConditionSpec { name, overrides });
    }
    specs
}

/// One listed condition's settings, each checked: a known setting of a per-condition section
/// with a valid value. Only the valid ones become overrides (the others are reported).
fn condition_overrides(cx: &mut Context, rest: &toml::Table, at_item: &KeyPath) -> Vec<Override> {
    let mut flat = Vec::new();
    flatten(rest, at_item, &mut Vec::new(), &mut flat);
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
    overrides
}
