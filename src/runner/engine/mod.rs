//! Engines: whose loader feeds the step. The seam is one trait, [`Engine`]: it owns a
//! condition's timed runs, headroom runs and profiled run, and the runner opens the engine a
//! condition names ([`open`]) and calls it without asking which one it holds. What differs
//! between the engines is a method of the engine or a field of what it returns.
//!
//! - [`native`]: loaderlab's own (the loader, transforms and datasets of this crate, in-process
//!   worker threads), over one device step per rank.
//! - [`pytorch`]: a real `torch.utils.data.DataLoader` in a Python child ([`child`]: its files,
//!   interpreter and line protocol), speaking the same results contract: its rows go through
//!   the same writers, so analysis, report, verify, compare and tune stay engine-blind but for
//!   the record ([`crate::results::EngineRecord`]).
//!
//! A third engine (a thread-worker DataLoader, a free-threaded interpreter) is its file here,
//! its word in `config::EngineKind` (the `loader.engine` setting) and its line in [`engines!`];
//! `validate` refuses for it whatever it cannot honour.

pub mod child;
mod handover;
mod native;
mod pytorch;

use std::path::Path;

use super::outcome::{Profiled, Timed};
use super::setup::Setup;
use super::{Outputs, RunError};
use crate::config::{EngineKind, ProtocolSection};
use crate::plan::PlannedRun;
use crate::results::HeadroomRecord;

/// What opens an engine for a condition.
pub(crate) struct Opening<'a> {
    pub setup: &'a Setup,
    pub condition: &'a str,
    /// The experiment file (the `[pytorch]` references are relative to it).
    pub experiment: &'a Path,
    /// The experiment's seed (the initial weights).
    pub seed: u64,
}

/// One condition's engine: it runs every run of the condition, in the plan's order.
pub(crate) trait Engine {
    /// One timed run: a new loader, the warm-up, every timed step written to `steps.csv` as it
    /// is measured, and the run's row of runs.csv.
    fn timed(
        &mut self,
        planned: &PlannedRun,
        total_runs: usize,
        p: &ProtocolSection,
        out: &mut Outputs,
    ) -> Result<Timed, RunError>;

    /// A headroom run of `steps` steps (the step on batches built once, no loader running);
    /// None when interrupted.
    fn headroom(&mut self, steps: u64) -> Result<Option<HeadroomRecord>, RunError>;

    /// The profiled run: its own loader and warm-up, then `p.profile_steps` steps recorded as a
    /// Chrome trace in the results folder.
    fn profiled(&mut self, p: &ProtocolSection, out: &Outputs) -> Result<Profiled, RunError>;
}

/// Registers each engine with the `loader.engine` word that selects it: [`open`] dispatches on
/// it, and [`ENGINES`] lists them.
macro_rules! engines {
    ($($kind:ident => $t:ty),+ $(,)?) => {
        /// Every engine, by the word that selects it.
        pub const ENGINES: &[EngineKind] = &[$(EngineKind::$kind),+];

        /// Open the engine a condition names.
        pub(crate) fn open<'a>(o: Opening<'a>) -> Result<Box<dyn Engine + 'a>, RunError> {
            Ok(match o.setup.settings().loader.engine {
                $(EngineKind::$kind => Box::new(<$t>::open(o)?),)+
            })
        }
    };
}

engines! {
    Native => native::Native<'a>,
    Pytorch => pytorch::Pytorch<'a>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Choice;

    /// Every word `loader.engine` accepts opens an engine, and the README's code layout names
    /// each one's file.
    #[test]
    fn the_engines_are_native_and_pytorch() {
        let words: Vec<String> = ENGINES
            .iter()
            .map(|e| {
                toml::Value::try_from(e)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(words, ["native", "pytorch"]);
        assert_eq!(words, EngineKind::words());
    }
}
