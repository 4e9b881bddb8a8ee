//! The machine a run happened on, captured at run time (a report may be rebuilt elsewhere), and
//! the build that ran, stamped at build time.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Environment {
    pub cpu_model: String,
    pub cores: usize,
    pub memory_gib: f64,
    pub os: String,
    pub hostname: String,
    pub loaderlab_version: String,
    pub rustc: String,
    /// The commit this binary was built from (stamped at build time, not read where it runs).
    pub git_commit: Option<String>,
    /// The build's working tree had changes against that commit (None: not built from git).
    #[serde(default)]
    pub git_dirty: Option<bool>,
    /// Devices used, e.g. ["cpu"] or ["cuda:0"].
    pub devices: Vec<String>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn field<'a>(text: &'a str, key: &str, sep: char) -> Option<&'a str> {
    text.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_once(sep))
        .map(|(_, v)| v.trim().trim_matches('"'))
}

impl Environment {
    pub fn capture(devices: Vec<String>) -> Self {
        let cpuinfo = read("/proc/cpuinfo");
        let meminfo = read("/proc/meminfo");
        let os_release = read("/etc/os-release");
        let mem_kib: f64 = field(&meminfo, "MemTotal", ':')
            .and_then(|v| v.trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        Environment {
            cpu_model: field(&cpuinfo, "model name", ':')
                .unwrap_or(std::env::consts::ARCH)
                .to_string(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
            os: field(&os_release, "PRETTY_NAME", '=')
                .map(str::to_string)
                .unwrap_or_else(|| std::env::consts::OS.to_string()),
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            loaderlab_version: env!("CARGO_PKG_VERSION").to_string(),
            rustc: env!("LLBUILD_RUSTC").to_string(),
            git_commit: build_commit().map(str::to_string),
            git_dirty: build_commit().map(|_| env!("LLBUILD_GIT_DIRTY") == "true"),
            devices,
        }
    }
}

/// The commit the binary was built from, as `build.rs` found it (None outside a git checkout).
pub fn build_commit() -> Option<&'static str> {
    Some(env!("LLBUILD_GIT_COMMIT")).filter(|c| !c.is_empty())
}
