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
    /// What was set on the device's memory pool (CUDA only).
    pub memory_pool: Option<String>,
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
        memory_pool: None,
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(_ordinal: usize) -> Result<Chosen, DeviceError> {
    Err(DeviceError::NotBuilt)
}

#[cfg(feature = "cuda")]
fn cuda(ordinal: usize) -> Result<Chosen, DeviceError> {
    use candle_core::cuda::cudarc;
    const NO_DRIVER: &str =
        "no CUDA driver library (libcuda.so.1) found; is an NVIDIA driver installed?";
    let unavailable = |reason: String| DeviceError::Unavailable { ordinal, reason };
    // With cudarc's dynamic loading a missing library or symbol panics instead of erring, and
    // `cuda_if_available` errs instead of falling back. So every call that may load a library
    // (the presence probes too: loading runs cudarc's symbol resolution, which panics on a
    // missing symbol) runs inside catch_unwind, with the default hook silenced meanwhile.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let created = std::panic::catch_unwind(|| {
        // SAFETY: is_culib_present only tries to dlopen the library by name (running its
        // initialisers, which ask nothing of the caller) and closes it again; no other thread
        // of ours touches CUDA while a device is being chosen.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(NO_DRIVER.to_string());
        }
        // One line: candle appends a backtrace when RUST_BACKTRACE is set. The error is
        // formatted in here too: formatting asks the driver library for its text.
        let device = super::cuda::new_device(ordinal)
            .map_err(|e| e.to_string().lines().next().unwrap_or_default().to_string())?;
        let pool = super::cuda::keep_pool_memory(&device)
            .unwrap_or_else(|e| Some(format!("default memory pool left as it was: {e}")));
        // Naming the device calls the driver too (a symbol it lacks would panic): in here.
        let name = super::cuda::describe(&device).unwrap_or_default();
        Ok((device, pool, name))
    });
    let missing = created.is_err().then(|| {
        std::panic::catch_unwind(|| {
            let mut missing = Vec::new();
            // SAFETY: as for the driver above: a trial dlopen by name, nothing else.
            if !unsafe { cudarc::cublas::sys::is_culib_present() } {
                missing.push("libcublas.so.13 (+ libcublasLt.so.13)");
            }
            // SAFETY: as for the driver above: a trial dlopen by name, nothing else.
            if !unsafe { cudarc::curand::sys::is_culib_present() } {
                missing.push("libcurand.so.10");
            }
            missing
        })
        .unwrap_or_default()
    });
    std::panic::set_hook(hook);
    match created {
        Ok(Ok((device, memory_pool, name))) => Ok(Chosen {
            device,
            name: format!("cuda:{ordinal} {name}").trim_end().to_string(),
            notice: None,
            memory_pool,
        }),
        Ok(Err(e)) => Err(unavailable(e)),
        Err(panic) => {
            // The panic names what failed (e.g. a symbol the driver library lacks); libraries
            // that are absent altogether are named too, with where to find them.
            let missing = missing.unwrap_or_default();
            let what = crate::loader::panic_message(&panic);
            Err(unavailable(if missing.is_empty() {
                what
            } else {
                format!(
                    "{what}; also, {} not found: put the folder that holds the CUDA 13 \
                     libraries on LD_LIBRARY_PATH (e.g. Python's site-packages/nvidia/cu13/lib)",
                    missing.join(" and ")
                )
            }))
        }
    }
}

/// How many CUDA devices the driver reports; None without a CUDA build, a driver or an answer.
pub fn cuda_devices() -> Option<usize> {
    #[cfg(feature = "cuda")]
    {
        use candle_core::cuda::cudarc::driver::{CudaContext, sys};
        // As in `cuda`: a missing library or symbol panics under dynamic loading.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let n = std::panic::catch_unwind(|| {
            // SAFETY: a trial dlopen by name, as in `cuda`.
            if !unsafe { sys::is_culib_present() } {
                return None;
            }
            CudaContext::device_count().ok()
        });
        std::panic::set_hook(hook);
        n.ok().flatten().and_then(|n| usize::try_from(n).ok())
    }
    #[cfg(not(feature = "cuda"))]
    None
}

/// Wait for all queued device work (a no-op on the CPU).
pub fn synchronize(device: &Device) -> candle_core::Result<()> {
    device.synchronize()
}

/// Cores of this machine.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A machine's cores, shared by the training step's compute threads and the loader's workers:
/// the one place where `device.threads = 0` becomes a number and where the cores left to one
/// side beside the other are derived (the set-up, the advice and `tune` ask it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoreBudget {
    pub cores: usize,
}

impl CoreBudget {
    /// This machine's.
    pub fn here() -> CoreBudget {
        CoreBudget { cores: cores() }
    }

    /// The compute threads `device.threads` asks for: 0 means one per core.
    pub fn compute_threads(self, setting: u64) -> usize {
        match setting {
            0 => self.cores.max(1),
            n => n as usize,
        }
    }

    /// The cores left beside `busy` threads (at least 1): on the CPU, the workers that fit
    /// beside the compute threads, or the compute threads that fit beside the workers.
    pub fn left_beside(self, busy: u64) -> u64 {
        (self.cores as u64).saturating_sub(busy).max(1)
    }
}
