//! The pytorch engine's child, as files and an interpreter: the embedded driver and networks
//! (written once per process where Python can run them), the interpreter a condition names, the
//! probe that checks it imports torch and torchvision, and the line protocol both sides speak
//! ([`protocol`]). A leaf: the engine (which starts the child), the set-up (which records its
//! versions) and `cli` (which checks the interpreter before any run) ask it; it asks none of them.

pub mod protocol;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::config::{EngineKind, PytorchSection, Settings};
use crate::results::EngineRecord;
use protocol::{PROTOCOL, Reply};

/// The child, a Python package (standard library + torch/torchvision), file by file; run as
/// `python <dir>/loaderlab_child/__main__.py`.
pub const PACKAGE: &[(&str, &str)] = &[
    ("__init__.py", include_str!("loaderlab_child/__init__.py")),
    ("__main__.py", include_str!("loaderlab_child/__main__.py")),
    ("clocks.py", include_str!("loaderlab_child/clocks.py")),
    ("condition.py", include_str!("loaderlab_child/condition.py")),
    ("datasets.py", include_str!("loaderlab_child/datasets.py")),
    ("device.py", include_str!("loaderlab_child/device.py")),
    ("headroom.py", include_str!("loaderlab_child/headroom.py")),
    ("main.py", include_str!("loaderlab_child/main.py")),
    ("metering.py", include_str!("loaderlab_child/metering.py")),
    ("profiled.py", include_str!("loaderlab_child/profiled.py")),
    ("protocol.py", include_str!("loaderlab_child/protocol.py")),
    ("ranks.py", include_str!("loaderlab_child/ranks.py")),
    ("shards.py", include_str!("loaderlab_child/shards.py")),
    ("storage.py", include_str!("loaderlab_child/storage.py")),
    ("timed.py", include_str!("loaderlab_child/timed.py")),
    ("twins.py", include_str!("loaderlab_child/twins.py")),
    ("watchdog.py", include_str!("loaderlab_child/watchdog.py")),
];

/// loaderlab's networks in PyTorch (shared with `bench step`), written beside the package.
const MODEL: &str = include_str!("../../../net/pytorch_model.py");

/// The environment variable that names the interpreter when `[pytorch] python` is empty (not a
/// setting: the `LOADERLAB_*` layer leaves it out).
pub const PYTHON_VAR: &str = "LOADERLAB_PYTHON";

/// What the results record of the engine `s` names: the native engine, or the pytorch
/// engine's interpreter and the versions it imports (probed; the error names the interpreter
/// and the way out).
pub fn record(s: &Settings) -> Result<EngineRecord, String> {
    match s.loader.engine {
        EngineKind::Native => Ok(EngineRecord::Native),
        EngineKind::Pytorch => probe(&interpreter(&s.pytorch)),
    }
}

/// The interpreter a condition's child runs under: `[pytorch] python`, else `LOADERLAB_PYTHON`,
/// else `python3` on PATH.
pub fn interpreter(s: &PytorchSection) -> String {
    if !s.python.is_empty() {
        return s.python.clone();
    }
    std::env::var(PYTHON_VAR)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// Check that `python` runs and imports torch and torchvision (once per interpreter and
/// process: the import takes seconds); the error says which interpreter was tried, what it
/// lacked and how to point to another.
pub fn probe(python: &str) -> Result<EngineRecord, String> {
    static SEEN: Mutex<Vec<(String, Result<EngineRecord, String>)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, answer)) = seen.iter().find(|(p, _)| p == python) {
        return answer.clone();
    }
    let answer = ask(python);
    seen.push((python.to_string(), answer.clone()));
    answer
}

fn ask(python: &str) -> Result<EngineRecord, String> {
    let how = format!(
        "set [pytorch] python = \"/path/to/python\" (or {PYTHON_VAR}) to an interpreter with torch \
         and torchvision (pip install torch torchvision)"
    );
    let script = driver_file().map_err(|e| format!("cannot write the pytorch driver: {e}"))?;
    let out = Command::new(python)
        .arg(&script)
        .arg("--versions")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot start the Python interpreter {python:?}: {e}; {how}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let reply = text
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<Reply>(l).ok());
    match reply {
        Some(Reply::Ready {
            protocol,
            torch,
            torchvision,
            python: version,
        }) if protocol == PROTOCOL => Ok(EngineRecord::Pytorch {
            interpreter: python.to_string(),
            python: version,
            torch,
            torchvision,
        }),
        Some(Reply::Error { message, .. }) => Err(format!(
            "the Python interpreter {python:?} cannot import torch and torchvision ({message}); \
             {how}"
        )),
        _ => Err(format!(
            "the Python interpreter {python:?} did not answer as the pytorch driver should \
             (exit {}, stderr: {}); {how}",
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 400)
        )),
    }
}

/// The child's package, written once per process where Python can run it (tracebacks then
/// name its files): the path of its `__main__.py`.
pub fn driver_file() -> std::io::Result<PathBuf> {
    static FILE: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut file = FILE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = file.as_ref().filter(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let dir = std::env::temp_dir().join(format!("loaderlab-{}", std::process::id()));
    let package = dir.join("loaderlab_child");
    std::fs::create_dir_all(&package)?;
    for (name, text) in PACKAGE.iter().filter(|(_, text)| !text.is_empty()) {
        std::fs::write(package.join(name), text)?;
    }
    std::fs::write(dir.join("pytorch_model.py"), MODEL)?;
    let main = package.join("__main__.py");
    *file = Some(main.clone());
    Ok(main)
}

/// The end of `text`, at most `n` bytes (on a character boundary).
pub fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].trim()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of the package is embedded, and no module is over 400 lines.
    #[test]
    fn the_package_is_embedded_whole_in_modules_of_one_concern() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/runner/engine/child/loaderlab_child");
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".py"))
            .collect();
        files.sort();
        let embedded: Vec<String> = PACKAGE.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(files, embedded);
        for (name, text) in PACKAGE {
            let lines = text.lines().count();
            assert!(lines <= 400, "{name}: {lines} lines");
        }
    }
}
