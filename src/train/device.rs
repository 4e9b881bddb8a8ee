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

/// The most loader workers worth running for one rank: the one rule that the prediction,
/// `tune`'s bounds and the verdict share. The workers may use the cores the step leaves them
/// (beside a CPU step's compute threads; all of them when the step runs on a device and holds
/// none), split over the ranks (each rank has its own workers), stretched by the share of their
/// time the workers sleep (waiting for storage, off the CPU): a sleeping worker holds no core.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct WorkerCap {
    /// The node's cores.
    pub cores: usize,
    /// Ranks on the node, each with its own workers (at least 1).
    pub ranks: u64,
    /// Threads the step keeps busy on those cores: a CPU step's compute threads, a stand-in's
    /// host side's (`model.host_threads`); 0 when it runs on a device (CUDA or the stand-in's
    /// emulated device) and the host only enqueues.
    pub step_threads: u64,
    /// The share of the loader's time it sleeps (see [`asleep_share`]).
    pub asleep_share: f64,
}

impl WorkerCap {
    /// Above this share asleep the stretch stops (20 workers per core): a worker that seems to
    /// compute nothing still has a decode to do.
    pub const MAX_ASLEEP: f64 = 0.95;

    /// Cores the workers of one rank may use (at least 1).
    pub fn cores_per_rank(self) -> u64 {
        let free = CoreBudget { cores: self.cores }.left_beside(self.step_threads);
        (free / self.ranks.max(1)).max(1)
    }

    /// Workers per core: 1 / (1 − the share asleep).
    pub fn per_core(self) -> f64 {
        1.0 / (1.0 - self.asleep_share.clamp(0.0, Self::MAX_ASLEEP))
    }

    /// The most workers worth running for one rank.
    pub fn workers(self) -> u64 {
        // The small epsilon keeps 2 / (1 - 0.5) from flooring to 3.999….
        ((self.cores_per_rank() as f64) * self.per_core() + 1e-9).floor() as u64
    }

    /// What the cores are, as the report says it.
    pub fn describe(self) -> String {
        if self.ranks > 1 {
            format!(
                "the node's {} cores shared by its {} ranks, per rank",
                self.cores, self.ranks
            )
        } else if self.step_threads >= self.cores as u64 {
            format!(
                "no core left beside the training step's {} threads on the machine's {} cores \
                 (each worker competes with the step; counted as one core)",
                self.step_threads, self.cores
            )
        } else if self.step_threads > 0 {
            format!(
                "the {} cores left beside the training step's {} threads",
                self.cores_per_rank(),
                self.step_threads
            )
        } else {
            format!(
                "the machine's {} cores (the step runs on a device and holds none)",
                self.cores
            )
        }
    }
}

/// The share of the loader's time it sleeps, which stretches the cores: its wait for emulated
/// storage, or the build's time off the CPU where that is larger and beyond noise (5 %).
pub fn asleep_share(storage_share: f64, off_cpu_share: f64) -> f64 {
    storage_share.max(if off_cpu_share > 0.05 {
        off_cpu_share
    } else {
        0.0
    })
}
