//! `check-transforms`: a condition's chain against torchvision's functional form of each op,
//! on images of its dataset. The check runs in Python, where torchvision is: the interpreter
//! the pytorch engine would run (`[pytorch] python`, else `LOADERLAB_PYTHON`, else `python3`)
//! runs `python -m loaderlab check-transforms`, which needs `pip install loaderlab` there.

use std::path::Path;

use super::experiment::load;
use super::{Failure, Global, python};
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
    python::requiring(
        &python,
        "loaderlab.check, torchvision",
        "loaderlab and torchvision",
        "check-transforms runs torchvision's side in Python",
    )?;
    let n = n.to_string();
    let args = [
        "check-transforms".as_ref(),
        file.as_os_str(),
        "-n".as_ref(),
        n.as_ref(),
        "--condition".as_ref(),
        chosen.name.as_ref(),
    ];
    python::loaderlab(&python, args)
}
