//! What `[model]` describes: the keys each kind reads, the network it builds, whether the
//! step is the stand-in.

use super::schema::{ModelKind, ModelSection};
use crate::net::Architecture;

impl ModelSection {
    /// The keys `kind` reads.
    pub fn keys_of(kind: ModelKind) -> &'static [&'static str] {
        match kind {
            ModelKind::SmallCnn => &["width"],
            ModelKind::Cnn => &["channels", "kernel", "hidden"],
            ModelKind::Resnet => &["depth", "width", "stem"],
            ModelKind::Mlp => &["hidden"],
            ModelKind::StandIn => &["step_ms", "host_ms", "host_threads"],
        }
    }

    /// Keys set away from their defaults that `kind` does not read.
    pub fn foreign_keys(&self) -> Vec<&'static str> {
        let d = ModelSection::default();
        let set = [
            ("width", self.width != d.width),
            ("channels", self.channels != d.channels),
            ("kernel", self.kernel != d.kernel),
            ("hidden", self.hidden != d.hidden),
            ("depth", self.depth != d.depth),
            ("stem", self.stem != d.stem),
            ("step_ms", self.step_ms != d.step_ms),
            ("host_ms", self.host_ms != d.host_ms),
            ("host_threads", self.host_threads != d.host_threads),
        ];
        let own = Self::keys_of(self.kind);
        set.iter()
            .filter(|(k, changed)| *changed && !own.contains(k))
            .map(|(k, _)| *k)
            .collect()
    }

    /// The step is the stand-in of declared device time, not a network.
    pub fn is_stand_in(&self) -> bool {
        self.kind == ModelKind::StandIn
    }

    /// The stand-in step's device time, when this is one.
    pub fn stand_in_ms(&self) -> Option<f64> {
        self.is_stand_in().then_some(self.step_ms)
    }

    /// The stand-in's host side (`host_ms` on `host_threads` cores), when this is a stand-in
    /// with one.
    pub fn host_side(&self) -> Option<(f64, u64)> {
        (self.is_stand_in() && self.host_ms > 0.0).then_some((self.host_ms, self.host_threads))
    }

    /// The network these settings describe (none for the stand-in step).
    pub fn architecture(&self) -> Option<Architecture> {
        let list = |v: &[u64]| v.iter().map(|&c| c as usize).collect::<Vec<_>>();
        let or = |v: u64, default: usize| if v == 0 { default } else { v as usize };
        Some(match self.kind {
            ModelKind::SmallCnn => Architecture::SmallCnn {
                width: or(self.width, 1),
            },
            ModelKind::Cnn => Architecture::Cnn {
                channels: list(&self.channels),
                kernel: self.kernel as usize,
                hidden: list(&self.hidden),
            },
            ModelKind::Resnet => Architecture::Resnet {
                depth: self.depth as usize,
                width: or(self.width, 64),
                stem: self.stem,
            },
            ModelKind::Mlp => Architecture::Mlp {
                hidden: list(&self.hidden),
            },
            ModelKind::StandIn => return None,
        })
    }
}
