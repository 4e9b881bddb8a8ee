//! The raw checks: every value of every layer against the schema (the default settings as
//! TOML), before anything reaches the typed settings, so each problem names its key.

use toml::Value;

use super::layers::unknown_key_message;
use super::locate::{Context, Source};
use super::problem::{KeyPath, Seg, did_you_mean};
use super::schema::{TransformSpec, choices, is_pair};

/// How a found value reads in a message: its TOML text and, for non-strings, its type.
pub(super) fn describe(value: &Value) -> String {
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
pub(super) fn check_value(
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
            (Value::String(s), Some(words)) if !words.contains(s) => {
                let list: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
                let mut expected = format!("one of {}", list.join(", "));
                if let Some(close) = did_you_mean(s, words.iter().map(String::as_str)) {
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

pub(super) fn check_transforms(
    cx: &mut Context,
    value: &Value,
    setting: &KeyPath,
    shown: &dyn Fn(&KeyPath) -> KeyPath,
    source: &Source,
) {
    let names = TransformSpec::ops();
    let ops: Vec<String> = names.iter().map(|o| format!("{o:?}")).collect();
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
                    if let Some(close) = did_you_mean(op, names.iter().copied()) {
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
