//! Which setting `tune` searches, and how it reads and writes it in a condition's settings.

use crate::config::Settings;

/// The settings `tune` can search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    Workers,
    PrefetchFactor,
    Threads,
}

impl Knob {
    pub const ALL: [Knob; 3] = [Knob::Workers, Knob::PrefetchFactor, Knob::Threads];

    pub fn key(self) -> &'static str {
        match self {
            Knob::Workers => "loader.workers",
            Knob::PrefetchFactor => "loader.prefetch_factor",
            Knob::Threads => "device.threads",
        }
    }

    pub fn parse(text: &str) -> Result<Knob, String> {
        Knob::ALL
            .into_iter()
            .find(|k| k.key() == text)
            .ok_or_else(|| {
                format!(
                    "--knob {text:?}: expected one of {}",
                    Knob::ALL.map(Knob::key).join(", ")
                )
            })
    }

    pub fn get(self, s: &Settings) -> u64 {
        match self {
            Knob::Workers => s.loader.workers,
            Knob::PrefetchFactor => s.loader.prefetch_factor,
            Knob::Threads => s.device.threads,
        }
    }

    pub fn set(self, s: &mut Settings, v: u64) {
        match self {
            Knob::Workers => s.loader.workers = v,
            Knob::PrefetchFactor => s.loader.prefetch_factor = v,
            Knob::Threads => s.device.threads = v,
        }
    }
}
