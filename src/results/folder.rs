//! The results folder's lifecycle: a partial folder, atomic writes, promotion.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{ResultsError, TRACES_DIR};

/// `<out>.partial`, where a run or merge builds its results.
pub fn partial_dir(out: &Path) -> PathBuf {
    sibling(out, ".partial")
}

fn sibling(out: &Path, suffix: &str) -> PathBuf {
    let mut name = out
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(suffix);
    out.with_file_name(name)
}

/// Write `contents` to `path` atomically: a temporary file in the same folder, then rename.
pub fn write_atomic(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!(
        "{}.tmp",
        path.extension().and_then(|e| e.to_str()).unwrap_or("")
    ));
    {
        let mut f = File::create(&tmp)?;
        f.write_all(contents)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// Serialise `value` as pretty JSON into `path`, atomically. A value that cannot be encoded is
/// an error, never an empty file that a later reader would take for defaults.
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<(), ResultsError> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| ResultsError::Encode {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    write_atomic(path, &bytes).map_err(|source| ResultsError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Move `partial` into place as `out`, replacing earlier results only now.
pub fn promote(partial: &Path, out: &Path) -> std::io::Result<()> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    if out.exists() {
        let old = sibling(out, ".old");
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        std::fs::rename(out, &old)?;
        std::fs::rename(partial, out)?;
        std::fs::remove_dir_all(&old)?;
    } else {
        std::fs::rename(partial, out)?;
    }
    Ok(())
}

/// A results folder under construction: `<out>.partial/` with its `traces/` folder. Earlier
/// results in `<out>/` stay untouched until [`Partial::promote`].
#[derive(Debug, Clone)]
pub struct Partial {
    dir: PathBuf,
    out: PathBuf,
}

impl Partial {
    /// Start a fresh partial folder for `out` (a stale one from an earlier attempt is removed).
    /// Fails before any work on an unwritable location.
    pub fn create(out: &Path) -> Result<Partial, ResultsError> {
        let dir = partial_dir(out);
        let werr = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ResultsError::Folder { path, source }
        };
        if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(werr(parent))?;
        }
        // Promoting replaces `out` whole: never a file, or a folder of something else (a
        // dataset given as --out by mistake).
        let foreign = out.is_file()
            || (out.is_dir()
                && !out.join(super::RUN_JSON).is_file()
                && std::fs::read_dir(out).map_or(true, |mut d| d.next().is_some()));
        if foreign {
            return Err(werr(out)(std::io::Error::other(
                "it exists and is not a loaderlab results folder (no run.json): a run replaces \
                 its output folder whole, so it refuses this one; choose another --out",
            )));
        }
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(werr(&dir))?;
        }
        std::fs::create_dir_all(dir.join(TRACES_DIR)).map_err(werr(&dir))?;
        Ok(Partial {
            dir,
            out: out.to_path_buf(),
        })
    }

    /// The partial folder itself.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A file inside the partial folder.
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Write `contents` as `name`, atomically.
    pub fn write(&self, name: &str, contents: &[u8]) -> Result<(), ResultsError> {
        let path = self.join(name);
        write_atomic(&path, contents).map_err(|source| ResultsError::Write { path, source })
    }

    /// Write `value` as `name` in pretty JSON, atomically.
    pub fn write_json<T: Serialize + ?Sized>(
        &self,
        name: &str,
        value: &T,
    ) -> Result<(), ResultsError> {
        write_json(&self.join(name), value)
    }

    /// Replace `<out>/` with the finished partial folder.
    pub fn promote(&self) -> Result<(), ResultsError> {
        promote(&self.dir, &self.out).map_err(|source| ResultsError::Write {
            path: self.out.clone(),
            source,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partial_folder_replaces_earlier_results_only_when_promoted() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("res");
        std::fs::create_dir_all(&out).unwrap();
        std::fs::write(out.join("old.txt"), "earlier").unwrap();
        // Not a results folder: refused, untouched.
        let e = Partial::create(&out).unwrap_err().to_string();
        assert!(e.contains("not a loaderlab results folder"), "{e}");
        assert!(out.join("old.txt").is_file());
        std::fs::write(out.join(crate::results::RUN_JSON), "{}").unwrap();
        let p = Partial::create(&out).unwrap();
        p.write("new.txt", b"now").unwrap();
        assert!(out.join("old.txt").is_file(), "earlier results untouched");
        p.promote().unwrap();
        assert!(out.join("new.txt").is_file() && !out.join("old.txt").exists());
        assert!(!partial_dir(&out).exists());
    }

    #[test]
    fn a_value_that_cannot_be_encoded_is_an_error_not_an_empty_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("x.json");
        // JSON objects need string keys: a map keyed by tuples cannot be encoded.
        let bad: std::collections::BTreeMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let e = write_json(&path, &bad).unwrap_err();
        assert!(matches!(e, ResultsError::Encode { .. }), "{e}");
        assert!(!path.exists());
    }
}
