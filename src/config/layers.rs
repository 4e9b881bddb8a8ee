//! The layers above the defaults: values parsed as TOML, inserted by dotted path, and checked
//! against the schema (an unknown key names the keys known there).

use toml::Value;

use super::locate::{Context, Source};
use super::problem::{KeyPath, Seg};
use super::raw::{check_value, unknown_key_message};

/// A value as TOML would read it after `key = `; a bare word is taken as a string, so
/// `--set device.kind=cpu` works without quotes.
pub(super) fn parse_value(raw: &str) -> Value {
    match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").unwrap_or_else(|| Value::String(raw.into())),
        Err(_) => Value::String(raw.to_string()),
    }
}

pub(super) fn insert(table: &mut toml::Table, path: &KeyPath, value: Value) {
    let mut root = Value::Table(std::mem::take(table));
    set_path(&mut root, path, value);
    if let Value::Table(t) = root {
        *table = t;
    }
}

/// Set `path` (keys only) in `root`, creating tables on the way.
pub(super) fn set_path(root: &mut Value, path: &KeyPath, value: Value) {
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
pub(super) fn schema_node(cx: &Context, setting: &KeyPath) -> Result<Value, (KeyPath, String)> {
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

/// Check an environment or `--set` override; true when it is usable.
pub(super) fn check_override(
    cx: &mut Context,
    setting: &KeyPath,
    value: &Value,
    source: &Source,
) -> bool {
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
