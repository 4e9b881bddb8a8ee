//! `watch --out DIR -- COMMAND`: run a script that cannot be edited with every torch
//! DataLoader it iterates watched (`loaderlab.watch`). The hook runs in Python: the interpreter
//! `LOADERLAB_PYTHON` names (else `python3`) runs `python -m loaderlab watch`, which needs
//! `pip install loaderlab` there, and starts COMMAND with the hook first on its PYTHONPATH.

use std::process::Command;

use super::exit::Status;
use super::{Failure, Global};
use crate::config::PytorchSection;
use crate::runner::engine::child::interpreter;

pub(super) fn watch(g: &Global, every: u64, command: &[String]) -> Result<(), Failure> {
    let Some(out) = &g.out else {
        return Err(Failure::Invalid(
            "watch needs --out DIR, the results folder of the watched job".into(),
        ));
    };
    if command.is_empty() {
        return Err(Failure::Invalid(
            "watch needs the command after --, e.g. loaderlab watch --out runs/job -- python \
             train.py"
                .into(),
        ));
    }
    let python = interpreter(&PytorchSection::default());
    let import = Command::new(&python)
        .args(["-c", "import loaderlab.watch"])
        .output()
        .map_err(|e| {
            Failure::Failed(format!(
                "cannot start the Python interpreter {python:?}: {e}"
            ))
        })?;
    if !import.status.success() {
        return Err(Failure::Failed(format!(
            "watch hooks the script's DataLoader in Python, and {python} cannot import loaderlab \
             ({}); pip install loaderlab there, or set LOADERLAB_PYTHON to an interpreter that \
             has it",
            String::from_utf8_lossy(&import.stderr)
                .lines()
                .last()
                .unwrap_or("no message")
        )));
    }
    let status = Command::new(&python)
        .args(["-m", "loaderlab", "watch", "--out"])
        .arg(out)
        .args(["--every", &every.to_string(), "--"])
        .args(command)
        .status()
        .map_err(|e| Failure::Failed(format!("cannot start {python}: {e}")))?;
    match status.code() {
        Some(0) => Ok(()),
        Some(2) => Err(Failure::Reported(Status::Invalid)),
        _ => Err(Failure::Reported(Status::Failed)),
    }
}
