//! `[pytorch]`: how the pytorch engine (`loader.engine = "pytorch"`) finds Python and, when the
//! user brings one, their own Dataset, collate_fn and worker_init_fn.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `[pytorch]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// With a network on the user's own Dataset: the shape `[channels, height, width]` of its
    /// image tensors, which the network is built for (the child checks item 0 against it).
    pub image_shape: Vec<u64>,
    /// With a network on the user's own Dataset: the number of classes its labels count
    /// (0 to classes − 1).
    pub classes: u64,
    /// A wait for one batch longer than this many seconds ends the run, naming the condition,
    /// the worker count and the batch (a Dataset whose `__getitem__` never returns).
    pub stall_s: f64,
}

impl Default for PytorchSection {
    fn default() -> Self {
        PytorchSection {
            python: String::new(),
            dataset: String::new(),
            collate_fn: String::new(),
            worker_init_fn: String::new(),
            image_shape: Vec::new(),
            classes: 0,
            stall_s: 300.0,
        }
    }
}

impl PytorchSection {
    /// `dataset` is set (whichever engine the condition names: [`super::Settings::users_dataset`]
    /// says whether the user's own Dataset replaces the declared pipeline).
    pub fn names_a_dataset(&self) -> bool {
        !self.dataset.is_empty()
    }

    /// What the network trains on where the user's own Dataset feeds it: `image_shape` and
    /// `classes`, when both are set.
    pub fn items(&self) -> Option<crate::net::ModelInput> {
        let &[c, h, w] = self.image_shape.as_slice() else {
            return None;
        };
        (self.classes > 0).then(|| crate::net::ModelInput {
            shape: crate::shape::ImageShape::new(c as usize, h as usize, w as usize),
            classes: self.classes as usize,
        })
    }

    /// The `file.py:function` references that are set, by key.
    pub fn references(&self) -> Vec<(&'static str, &str)> {
        [
            ("dataset", self.dataset.as_str()),
            ("collate_fn", self.collate_fn.as_str()),
            ("worker_init_fn", self.worker_init_fn.as_str()),
        ]
        .into_iter()
        .filter(|(_, r)| !r.is_empty())
        .collect()
    }
}

impl super::Settings {
    /// The user's own Dataset (`[pytorch] dataset`, `file.py:function`), where the pytorch
    /// engine runs it in place of the declared `[dataset]` and `[[transforms]]` — the one
    /// answer to "is this the user's own Dataset?".
    pub fn users_dataset(&self) -> Option<&str> {
        (self.loader.engine == super::EngineKind::Pytorch && self.pytorch.names_a_dataset())
            .then_some(self.pytorch.dataset.as_str())
    }
}

/// The file of a `file.py:function` reference: relative to the experiment file's folder
/// (`experiment`), unless absolute.
pub fn reference_file(reference: &str, experiment: &Path) -> PathBuf {
    let file = reference.rsplit_once(':').map_or(reference, |(f, _)| f);
    experiment.parent().unwrap_or(Path::new("")).join(file)
}
