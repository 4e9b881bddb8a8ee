//! Pointing at a problem: where each layer's values came from (file line and column,
//! environment variable, `--set` argument), and the collected problems themselves.

use std::path::Path;

use toml::Value;

use super::problem::{KeyPath, Location, Problem, Seg, line_column};

/// Where the values of one layer came from, to turn a key path into a [`Location`].
#[derive(Debug, Clone)]
pub(super) enum Source {
    File,
    Env(String),
    Set(String),
}

/// Everything needed to point at a problem.
pub(super) struct Context<'a> {
    pub(super) file: &'a Path,
    pub(super) text: &'a str,
    pub(super) doc: &'a toml_edit::ImDocument<String>,
    pub(super) schema: Value,
    pub(super) file_layer: toml::Table,
    pub(super) env_layer: Vec<(KeyPath, String)>,
    pub(super) set_layer: Vec<(KeyPath, String)>,
    pub(super) problems: Vec<Problem>,
}

impl Context<'_> {
    pub(super) fn locate(&self, source: &Source, shown: &KeyPath) -> Location {
        match source {
            Source::File => self.file_location(shown),
            Source::Env(var) => Location::Env { var: var.clone() },
            Source::Set(arg) => Location::Set { arg: arg.clone() },
        }
    }

    /// Line and column of the deepest part of `path` present in the file.
    pub(super) fn file_location(&self, path: &KeyPath) -> Location {
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

    pub(super) fn push(&mut self, location: Location, key: &KeyPath, message: impl Into<String>) {
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
    pub(super) fn origin(&self, setting: &KeyPath) -> Location {
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
/// replaces everything below it. A key missing inside a list's item (a transform op's unset
/// key) is decided by the list too: the item's defaults come with the item the file wrote.
pub(super) fn decides(root: &Value, path: &[Seg]) -> bool {
    let mut value = root;
    let mut in_list = false;
    for (depth, seg) in path.iter().enumerate() {
        let next = match (seg, value) {
            (Seg::Key(k), Value::Table(t)) => t.get(k),
            (Seg::Index(i), Value::Array(a)) => a.get(*i),
            _ => None,
        };
        match next {
            Some(v) => {
                in_list |= matches!(seg, Seg::Index(_));
                value = v;
            }
            None => return in_list || (depth > 0 && !matches!(value, Value::Table(_))),
        }
    }
    true
}
