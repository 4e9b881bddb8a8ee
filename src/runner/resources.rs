//! What a timed window costs the machine: CPU time of the loader's workers and of the rest of
//! the process (the training thread, its compute pool, the stand-in's device thread), read
//! per thread from the kernel's scheduler statistics, and the peak resident memory inside the
//! window (the kernel's high-water mark, reset when the window opens).
//!
//! Linux only; elsewhere, or where /proc cannot be read, every figure is NaN.

use std::collections::HashMap;

/// The prefix of every loader worker thread's name (see `loader::pool`).
const WORKER_PREFIX: &str = "loader-worker";

/// CPU time per thread at one instant: tid → (is a loader worker, ns on a CPU).
#[derive(Default)]
struct Threads(HashMap<u32, (bool, u64)>);

impl Threads {
    fn read() -> Option<Threads> {
        let mut out = HashMap::new();
        for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
            let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            let dir = entry.path();
            // A thread that ended between the listing and the read is skipped.
            let (Ok(comm), Some(ns)) = (std::fs::read_to_string(dir.join("comm")), cpu_ns(&dir))
            else {
                continue;
            };
            out.insert(tid, (comm.trim_end().starts_with(WORKER_PREFIX), ns));
        }
        Some(Threads(out))
    }
}

/// A thread's time on a CPU, ns: `schedstat`'s first field, else `stat`'s utime + stime.
fn cpu_ns(task: &std::path::Path) -> Option<u64> {
    if let Ok(s) = std::fs::read_to_string(task.join("schedstat"))
        && let Some(ns) = s.split_whitespace().next().and_then(|v| v.parse().ok())
    {
        return Some(ns);
    }
    let stat = std::fs::read_to_string(task.join("stat")).ok()?;
    // Fields after the command name (which may hold spaces), from the state on.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000_000 / hz)
}

/// The window's resource figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Used {
    /// CPU time of the whole process, of the loader's workers, of everything else, s.
    pub process_cpu_s: f64,
    pub workers_cpu_s: f64,
    pub training_cpu_s: f64,
    /// Peak resident memory inside the window, MiB.
    pub peak_rss_mib: f64,
}

impl Used {
    pub const NONE: Used = Used {
        process_cpu_s: f64::NAN,
        workers_cpu_s: f64::NAN,
        training_cpu_s: f64::NAN,
        peak_rss_mib: f64::NAN,
    };
}

/// Started when a timed window opens.
pub struct Meter {
    threads: Option<Threads>,
    rss_reset: bool,
}

impl Meter {
    /// Read every thread's CPU time and reset the peak-memory mark.
    pub fn start() -> Meter {
        // "5" resets the process's peak RSS to its current RSS (Linux ≥ 4.0, own process).
        let rss_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        Meter {
            threads: Threads::read(),
            rss_reset,
        }
    }

    /// The figures since [`Meter::start`].
    pub fn stop(self) -> Used {
        let (Some(before), Some(after)) = (self.threads, Threads::read()) else {
            return Used::NONE;
        };
        let (mut workers, mut rest) = (0u64, 0u64);
        for (tid, (is_worker, ns)) in &after.0 {
            let spent = ns.saturating_sub(before.0.get(tid).map_or(0, |b| b.1));
            if *is_worker {
                workers += spent;
            } else {
                rest += spent;
            }
        }
        Used {
            process_cpu_s: (workers + rest) as f64 / 1e9,
            workers_cpu_s: workers as f64 / 1e9,
            training_cpu_s: rest as f64 / 1e9,
            peak_rss_mib: if self.rss_reset {
                peak_rss_mib().unwrap_or(f64::NAN)
            } else {
                f64::NAN
            },
        }
    }
}

/// `VmHWM` of /proc/self/status, MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_worker_thread_is_counted_as_a_worker() {
        let meter = Meter::start();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let spin = std::thread::Builder::new()
            .name(format!("{WORKER_PREFIX}-0"))
            .spawn(move || {
                // 150 ms of CPU time, then stay alive (idle) until the meter has read it, as
                // the runner's workers outlive its window.
                let end = cpu_of_this_thread() + 0.15;
                let mut x = 0u64;
                while cpu_of_this_thread() < end {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                let _ = wait.recv();
            })
            .unwrap();
        // Allocate and touch 64 MiB inside the window: the peak must see it.
        let mut big = vec![0u8; 64 << 20];
        for i in (0..big.len()).step_by(4096) {
            big[i] = 1;
        }
        std::hint::black_box(&big);
        std::thread::sleep(std::time::Duration::from_millis(50));
        while spin_cpu_below(0.15) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let used = meter.stop();
        done.send(()).unwrap();
        spin.join().unwrap();
        drop(big);
        if used.process_cpu_s.is_nan() {
            eprintln!("no /proc/self/task here: nothing to check");
            return;
        }
        assert!(
            (0.14..0.3).contains(&used.workers_cpu_s),
            "the worker spun 0.15 s: {used:?}"
        );
        assert!(used.peak_rss_mib >= 64.0, "{used:?}");
        assert!(
            (used.process_cpu_s - used.workers_cpu_s - used.training_cpu_s).abs() < 1e-9,
            "{used:?}"
        );
    }

    fn cpu_of_this_thread() -> f64 {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid, writable timespec for the call's duration.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
        t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
    }

    /// Whether the loader-worker thread has used less than `s` of CPU so far.
    fn spin_cpu_below(s: f64) -> bool {
        Threads::read().is_some_and(|t| {
            t.0.values()
                .filter(|(w, _)| *w)
                .map(|(_, ns)| *ns as f64 / 1e9)
                .sum::<f64>()
                < s
        })
    }
}
