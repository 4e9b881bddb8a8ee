//! `watch --out DIR -- COMMAND`: run a script that cannot be edited with every torch
//! DataLoader it iterates watched (`loaderlab.watch`). The hook runs in Python: the interpreter
//! `LOADERLAB_PYTHON` names (else `python3`) runs `python -m loaderlab watch`, which needs
//! `pip install loaderlab` there, and starts COMMAND with the hook first on its PYTHONPATH.

use std::ffi::OsStr;

use super::{Failure, Global, python};
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
    python::requiring(
        &python,
        "loaderlab.watch",
        "loaderlab",
        "watch hooks the script's DataLoader in Python",
    )?;
    let every = every.to_string();
    let head = [
        "watch".as_ref(),
        "--out".as_ref(),
        out.as_os_str(),
        "--every".as_ref(),
        every.as_ref(),
        "--".as_ref(),
    ];
    python::loaderlab(
        &python,
        head.into_iter().chain(command.iter().map(OsStr::new)),
    )
}
