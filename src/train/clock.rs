//! Device time per step: how long the device was busy with each step's work.
//!
//! On CUDA the host only queues work, so host timings say when work was *submitted*; CUDA
//! events on the device's stream say when the device *ran* it. On the CPU the step is
//! synchronous and the host timings are the device's own (`device_ms = h2d_ms + compute_ms`).
//! The stand-in's emulated device keeps its own schedule, like a GPU's.
//! Either way the run's device idle fraction is `1 − Σ device_ms / window` — the direct answer
//! to "is the device waiting for data?".

use candle_core::{Device, Result};

use super::marks::StepMarks;

/// Records per-step device marks where the device has its own clock (CUDA, the emulated
/// stand-in device), nothing on the CPU.
pub enum DeviceClock {
    Host,
    /// The stand-in device marks each step itself; [`DeviceClock::mark`] adds nothing.
    Emulated(super::stand_in::Clock),
    #[cfg(feature = "cuda")]
    Cuda(super::cuda::EventClock),
}

impl DeviceClock {
    pub fn for_device(device: &Device) -> DeviceClock {
        #[cfg(feature = "cuda")]
        if let Some(c) = super::cuda::EventClock::for_device(device) {
            return DeviceClock::Cuda(c);
        }
        let _ = device;
        DeviceClock::Host
    }

    /// Whether [`DeviceClock::read`] returns device marks.
    pub fn on_device(&self) -> bool {
        !matches!(self, DeviceClock::Host)
    }

    /// The window starts; the device must be idle (synchronised).
    pub fn anchor(&mut self) -> Result<()> {
        match self {
            DeviceClock::Host => Ok(()),
            DeviceClock::Emulated(c) => {
                c.anchor();
                Ok(())
            }
            #[cfg(feature = "cuda")]
            DeviceClock::Cuda(c) => c.anchor(),
        }
    }

    /// Call before the copy, before the step's compute, and after it: three marks per step.
    pub fn mark(&mut self) -> Result<()> {
        match self {
            DeviceClock::Host | DeviceClock::Emulated(_) => Ok(()),
            #[cfg(feature = "cuda")]
            DeviceClock::Cuda(c) => c.mark(),
        }
    }

    /// The marks of every step since the anchor (empty on the host); call after synchronising.
    pub fn read(&mut self) -> Result<Vec<StepMarks>> {
        match self {
            DeviceClock::Host => Ok(Vec::new()),
            DeviceClock::Emulated(c) => Ok(c.read()),
            #[cfg(feature = "cuda")]
            DeviceClock::Cuda(c) => c.read(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_has_no_device_clock() {
        let mut c = DeviceClock::for_device(&Device::Cpu);
        assert!(!c.on_device());
        c.anchor().unwrap();
        c.mark().unwrap();
        assert!(c.read().unwrap().is_empty());
    }
}
