//! A step as the device saw it: when it reached the step's copy, its compute, and its end.

/// One step on the device clock, in ms after the window's anchor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepMarks {
    pub copy_start_ms: f64,
    pub compute_start_ms: f64,
    pub end_ms: f64,
}

impl StepMarks {
    /// From the device reaching the step's copy to it finishing the step's last kernel.
    /// Gaps inside a step (kernel launch latency) count as busy, so this is an upper bound of
    /// busy time and the idle fraction derived from it a lower bound.
    pub fn busy_ms(&self) -> f64 {
        (self.end_ms - self.copy_start_ms).max(0.0)
    }
}
