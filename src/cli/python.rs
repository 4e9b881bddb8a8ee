//! The subcommands whose work runs in Python (`check-transforms`, `watch`): the interpreter
//! checked for what it must import, then `python -m loaderlab …` run there, its exit status
//! passed on.

use std::ffi::OsStr;
use std::process::Command;

use super::Failure;
use super::exit::Status;

/// `python` can import `modules` (e.g. "loaderlab.check, torchvision"); else a failure naming
/// the interpreter, what `what` needs it for, the packages (`packages`, e.g. "loaderlab and
/// torchvision") and their `pip install`.
pub(super) fn requiring(
    python: &str,
    modules: &str,
    packages: &str,
    what: &str,
) -> Result<(), Failure> {
    let import = Command::new(python)
        .args(["-c", &format!("import {modules}")])
        .output()
        .map_err(|e| {
            Failure::Failed(format!(
                "cannot start the Python interpreter {python:?}: {e}"
            ))
        })?;
    if import.status.success() {
        return Ok(());
    }
    let (pip, them) = match packages.contains(" and ") {
        true => (packages.replace(" and ", " "), "them"),
        false => (packages.to_string(), "it"),
    };
    Err(Failure::Failed(format!(
        "{what}, and {python} cannot import {packages} ({}); pip install {pip} there, or set \
         [pytorch] python (or LOADERLAB_PYTHON) to an interpreter that has {them}",
        String::from_utf8_lossy(&import.stderr)
            .lines()
            .last()
            .unwrap_or("no message"),
    )))
}

/// `python -m loaderlab ARGS`, its exit status passed on: 0 success, 2 an invalid input, else
/// a failure.
pub(super) fn loaderlab<I, S>(python: &str, args: I) -> Result<(), Failure>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let status = Command::new(python)
        .args(["-m", "loaderlab"])
        .args(args)
        .status()
        .map_err(|e| Failure::Failed(format!("cannot start {python}: {e}")))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(2) => Err(Failure::Reported(Status::Invalid)),
        _ => Err(Failure::Reported(Status::Failed)),
    }
}
