//! Problems found in an experiment, each tied to where the offending value came from: a file
//! line and column, an environment variable, a `--set` argument or the built-in default.

use std::fmt;
use std::path::PathBuf;

/// One step of a key path: a table key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A dotted key such as `loader.workers` or `transforms[1].degrees`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct KeyPath(pub Vec<Seg>);

impl KeyPath {
    pub fn keys<I: IntoIterator<Item = S>, S: Into<String>>(keys: I) -> Self {
        KeyPath(keys.into_iter().map(|k| Seg::Key(k.into())).collect())
    }

    pub fn key(&self, k: impl Into<String>) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(k.into()));
        p
    }

    pub fn index(&self, i: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }

    /// The path without array indices, e.g. `report.formats` for `report.formats[2]`.
    pub fn without_indices(&self) -> String {
        let keys: Vec<&str> = self
            .0
            .iter()
            .filter_map(|s| match s {
                Seg::Key(k) => Some(k.as_str()),
                Seg::Index(_) => None,
            })
            .collect();
        keys.join(".")
    }

    pub fn last_key(&self) -> Option<&str> {
        self.0.iter().rev().find_map(|s| match s {
            Seg::Key(k) => Some(k.as_str()),
            Seg::Index(_) => None,
        })
    }

    pub fn starts_with(&self, prefix: &KeyPath) -> bool {
        self.0.len() >= prefix.0.len() && self.0[..prefix.0.len()] == prefix.0[..]
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for seg in &self.0 {
            match seg {
                Seg::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    let bare = !k.is_empty()
                        && k.chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if bare {
                        f.write_str(k)?;
                    } else {
                        write!(f, "{k:?}")?;
                    }
                }
                Seg::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        Ok(())
    }
}

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Location {
    File {
        path: PathBuf,
        line: usize,
        column: usize,
    },
    Env {
        var: String,
    },
    Set {
        arg: String,
    },
    Default,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File { path, line, column } => {
                write!(f, "{}:{line}:{column}", path.display())
            }
            Location::Env { var } => write!(f, "environment variable {var}"),
            Location::Set { arg } => write!(f, "--set {arg}"),
            Location::Default => f.write_str("built-in default"),
        }
    }
}

/// One thing wrong with an experiment, phrased so the user can fix it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Problem {
    pub location: Location,
    /// Empty for problems that belong to no key (TOML syntax).
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.location, self.message)
        } else {
            write!(f, "{}: {}: {}", self.location, self.key, self.message)
        }
    }
}

/// Line and column (both from 1, column in characters) of a byte offset.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// The known word closest to `word`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known
        .into_iter()
        .map(|k| (strsim::jaro_winkler(word, k), k))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_display_like_toml() {
        let p = KeyPath::keys(["transforms"]).index(1).key("degrees");
        assert_eq!(p.to_string(), "transforms[1].degrees");
        assert_eq!(
            KeyPath::keys(["matrix", "loader.workers"]).to_string(),
            "matrix.\"loader.workers\""
        );
        assert_eq!(p.without_indices(), "transforms.degrees");
    }

    #[test]
    fn line_and_column_count_from_one() {
        let text = "a = 1\nbé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, text.find('=').unwrap()), (1, 3));
        assert_eq!(line_column(text, text.rfind('=').unwrap()), (2, 4));
    }

    #[test]
    fn suggestions_only_for_near_misses() {
        let known = ["workers", "batch_size", "prefetch_factor"];
        assert_eq!(did_you_mean("worker", known), Some("workers"));
        assert_eq!(did_you_mean("batchsize", known), Some("batch_size"));
        assert_eq!(did_you_mean("zzz", known), None);
    }
}
