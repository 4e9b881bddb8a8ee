//! `selftest`: every model kind and optimizer on a device against a reference, one line each.

use super::{Failure, Status, exit::failed};
use crate::commands::selftest::{self, TOLERANCE};
use crate::config::DeviceKind;

pub(super) fn selftest(kind: DeviceKind) -> Result<(), Failure> {
    let (device, reference) = match kind {
        DeviceKind::Cpu => ("cpu (hand-written layers)", "candle's layers on the CPU"),
        _ => ("cuda:0", "the CPU's implementation"),
    };
    println!(
        "selftest: every model kind and optimizer, 3 steps on {device} against {reference}; \
         losses, parameters and running statistics within {TOLERANCE:e} of each tensor's \
         largest value"
    );
    let outcomes = selftest::run(kind, |o| {
        println!(
            "{:<7} {:<56} worst {:.1e} ({}; weights updated by {})",
            if o.passed() { "ok" } else { "FAILED" },
            o.case,
            o.worst,
            o.at,
            o.optimizer_path
        )
    })
    .map_err(failed)?;
    let bad = outcomes.iter().filter(|o| !o.passed()).count();
    if bad == 0 {
        println!("selftest passed: {} cases", outcomes.len());
        Ok(())
    } else {
        eprintln!("selftest failed: {bad} of {} cases", outcomes.len());
        Err(Failure::Reported(Status::Failed))
    }
}
