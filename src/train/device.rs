//! Choosing the compute device: the CPU always works; CUDA only in a `cuda` build with a
//! driver and a GPU present. `auto` falls back to the CPU with a notice, `cuda` fails clearly.

use candle_core::Device;

use crate::config::DeviceKind;

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error(
        "device.kind = \"cuda\" but this loaderlab was built without CUDA support; rebuild with \
         `cargo build --release --features cuda` (see README) or set device.kind = \"auto\""
    )]
    NotBuilt,
    #[error("device.kind = \"cuda\" but CUDA device {ordinal} is not usable: {reason}")]
    Unavailable { ordinal: usize, reason: String },
}

/// The chosen device and a line for the terminal and the results.
pub struct Chosen {
    pub device: Device,
    /// e.g. "cpu (2 threads)" or "cuda:0".
    pub name: String,
    /// Why `auto` did not pick CUDA, when it did not.
    pub notice: Option<String>,
}

pub fn select(kind: DeviceKind, ordinal: usize) -> Result<Chosen, DeviceError> {
    match kind {
        DeviceKind::Cpu => Ok(cpu(None)),
        DeviceKind::Cuda => cuda(ordinal),
        DeviceKind::Auto => match cuda(ordinal) {
            Ok(c) => Ok(c),
            Err(DeviceError::NotBuilt) => Ok(cpu(None)),
            Err(DeviceError::Unavailable { reason, .. }) => Ok(cpu(Some(format!(
                "CUDA not usable ({reason}); training on the CPU"
            )))),
        },
    }
}

fn cpu(notice: Option<String>) -> Chosen {
    Chosen {
        device: Device::Cpu,
        name: "cpu".into(),
        notice,
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(_ordinal: usize) -> Result<Chosen, DeviceError> {
    Err(DeviceError::NotBuilt)
}

#[cfg(feature = "cuda")]
fn cuda(ordinal: usize) -> Result<Chosen, DeviceError> {
    // With cudarc's dynamic loading a missing driver library panics instead of erring, and
    // `cuda_if_available` errs instead of falling back: check first, then catch.
    let present = unsafe { candle_core::cuda::cudarc::driver::sys::is_culib_present() };
    if !present {
        return Err(DeviceError::Unavailable {
            ordinal,
            reason: "no CUDA driver library (libcuda.so) found".into(),
        });
    }
    match std::panic::catch_unwind(|| Device::new_cuda(ordinal)) {
        Ok(Ok(device)) => Ok(Chosen {
            device,
            name: format!("cuda:{ordinal}"),
            notice: None,
        }),
        Ok(Err(e)) => Err(DeviceError::Unavailable {
            ordinal,
            reason: e.to_string(),
        }),
        Err(_) => Err(DeviceError::Unavailable {
            ordinal,
            reason: "the CUDA libraries could not be loaded".into(),
        }),
    }
}

/// Wait for all queued device work (a no-op on the CPU).
pub fn synchronize(device: &Device) -> candle_core::Result<()> {
    device.synchronize()
}

/// Cores of this machine.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
