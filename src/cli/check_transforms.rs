//! `check-transforms`: a condition's chain against torchvision's functional form of each op,
//! on images of its dataset. The check runs in Python, where torchvision is: the interpreter
//! the pytorch engine would run (`[pytorch] python`, else `LOADERLAB_PYTHON`, else `python3`)
//! runs `python -m loaderlab check-transforms`, which needs `pip install loaderlab` there.

use std::path::Path;
use std::process::Command;

use super::exit::Status;
use super::experiment::load;
use super::{Failure, Global};
use crate::config::Overrides;
use crate::runner::engine::child::interpreter;

pub(super) fn check_transforms(
    file: &Path,
    overrides: &Overrides,
    _g: &Global,
    n: usize,
    condition: Option<&str>,
) -> Result<(), Failure> {
    // The file and the condition are checked here first, so their problems read as every
    // command's do.
    let exp = load(file, overrides)?;
    let chosen = exp
        .condition(condition)
        .map_err(|e| Failure::Invalid(format!("--condition {e}")))?;
    if !overrides.set.is_empty() {
        return Err(Failure::Invalid(
            "check-transforms reads the file as it stands: put the --set in the file".into(),
        ));
    }
    let python = interpreter(&chosen.settings.pytorch);
    let import = Command::new(&python)
        .args(["-c", "import loaderlab.check, torchvision"])
        .output()
        .map_err(|e| {
            Failure::Failed(format!(
                "cannot start the Python interpreter {python:?}: {e}"
            ))
        })?;
    if !import.status.success() {
        return Err(Failure::Failed(format!(
            "check-transforms runs torchvision's side in Python, and {python} cannot import \
             loaderlab and torchvision ({}); pip install loaderlab torchvision there, or set \
             [pytorch] python (or LOADERLAB_PYTHON) to an interpreter that has them",
            String::from_utf8_lossy(&import.stderr)
                .lines()
                .last()
                .unwrap_or("no message")
        )));
    }
    let mut cmd = Command::new(&python);
    cmd.args(["-m", "loaderlab", "check-transforms"])
        .arg(file)
        .args(["-n", &n.to_string(), "--condition", &chosen.name]);
    let status = cmd
        .status()
        .map_err(|e| Failure::Failed(format!("cannot start {python}: {e}")))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(2) => Err(Failure::Reported(Status::Invalid)),
        _ => Err(Failure::Reported(Status::Failed)),
    }
}
