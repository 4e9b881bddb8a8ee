//! The raw checks: every value of every layer against the schema (the default settings as
//! TOML), before anything reaches the typed settings, so each problem names its key.

use toml::Value;

use super::choice::choices;
use super::locate::{Context, Source};
use super::problem::{KeyPath, Seg, did_you_mean};
use super::schema::{TransformSpec, is_pair};

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
/// A setting that is a count or a list of counts of one of `lengths`: every count ≥ 0.
fn counts_fit(value: &Value, lengths: &[usize]) -> bool {
    let fits = |v: &Value| matches!(v, Value::Integer(i) if *i >= 0);
    match value {
        Value::Array(items) => lengths.contains(&items.len()) && items.iter().all(fits),
        v => fits(v),
    }
}

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
    if let Some((lengths, expected)) = number_or_list(setting) {
        if !counts_fit(value, lengths) {
            fail(cx, setting, expected, value);
        }
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
        Value::String(_) => {
            if let Some(expected) = word_problem(setting, value) {
                fail(cx, setting, &expected, value);
            }
        }
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

/// Transform parameters written as one number or a list, as torchvision takes them: the list
/// lengths allowed and how the message words it.
fn number_or_list(setting: &KeyPath) -> Option<(&'static [usize], &'static str)> {
    if setting.0.first() != Some(&Seg::Key("transforms".into())) {
        return None;
    }
    match setting.last_key()? {
        "size" => Some((&[2], "a number of pixels or [height, width]")),
        "padding" => Some((
            &[0, 1, 2, 4],
            "a number of pixels, [left/right, top/bottom] or [left, top, right, bottom]",
        )),
        _ => None,
    }
}

/// What a string setting expects when `value` does not fit it (None: it fits): one of the
/// enum's words (with a "did you mean"), or any string.
fn word_problem(setting: &KeyPath, value: &Value) -> Option<String> {
    let words = choices(&setting.without_indices());
    let listed = |words: &[String]| {
        let list: Vec<String> = words.iter().map(|w| format!("{w:?}")).collect();
        format!("one of {}", list.join(", "))
    };
    match (value, words) {
        (Value::String(s), Some(words)) if !words.contains(s) => {
            let mut expected = listed(&words);
            if let Some(close) = did_you_mean(s, words.iter().map(String::as_str)) {
                expected = format!("{expected} (did you mean {close:?}?)");
            }
            Some(expected)
        }
        (Value::String(_), _) => None,
        (_, Some(words)) => Some(listed(&words)),
        (_, None) => Some("a string".into()),
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
        let Some(spec) = transform_spec(cx, t, &at, shown, source, &ops, &names) else {
            continue;
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

/// The op a transform table names, with its defaults; a problem (unknown, not a string,
/// missing) is reported and gives None.
fn transform_spec(
    cx: &mut Context,
    t: &toml::Table,
    at: &KeyPath,
    shown: &dyn Fn(&KeyPath) -> KeyPath,
    source: &Source,
    ops: &str,
    names: &[&str],
) -> Option<TransformSpec> {
    let op_path = at.key("op");
    match t.get("op") {
        Some(Value::String(op)) => match TransformSpec::with_defaults(op) {
            Some(spec) => Some(spec),
            None => {
                let key = shown(&op_path);
                let location = cx.locate(source, &key);
                let mut message = format!("unknown transform {op:?}; expected one of {ops}");
                if let Some(close) = did_you_mean(op, names.iter().copied()) {
                    message.push_str(&format!(" (did you mean {close:?}?)"));
                }
                cx.push(location, &key, message);
                None
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
            None
        }
        None => {
            let key = shown(at);
            let location = cx.locate(source, &key);
            cx.push(
                location,
                &key,
                format!("missing `op`: every transform names its op, one of {ops}"),
            );
            None
        }
    }
}

/// The message for a key the schema does not know here, with the nearest known key.
pub(super) fn unknown_key_message(key: &str, known: &toml::Table) -> String {
    let list: Vec<&str> = known.keys().map(String::as_str).collect();
    let mut message = "unknown key".to_string();
    if let Some(s) = did_you_mean(key, list.iter().copied()) {
        message.push_str(&format!(" (did you mean `{s}`?)"));
    }
    message.push_str(&format!("; known keys here: {}", list.join(", ")));
    message
}
