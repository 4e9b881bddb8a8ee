//! `[pytorch]`: how the pytorch engine (`loader.engine = "pytorch"`) finds Python and, when the
//! user brings one, their own Dataset, collate_fn and worker_init_fn.

use serde::{Deserialize, Serialize};

/// `[pytorch]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PytorchSection {
    /// The interpreter that runs the DataLoader; empty: `LOADERLAB_PYTHON`, else `python3` on
    /// PATH.
    pub python: String,
    /// `"file.py:function"` (the file relative to the experiment file): a function returning the
    /// user's own torch `Dataset`, whose items are (image tensor, label). Empty: the declared
    /// `[dataset]` and `[[transforms]]`, through torchvision's twins.
    pub dataset: String,
    /// `"file.py:function"`: the DataLoader's `collate_fn` (empty: PyTorch's default).
    pub collate_fn: String,
    /// `"file.py:function"`: the DataLoader's `worker_init_fn` (empty: none).
    pub worker_init_fn: String,
}

impl PytorchSection {
    /// The user's own Dataset replaces the declared pipeline.
    pub fn users_dataset(&self) -> bool {
        !self.dataset.is_empty()
    }
}
