//! What a condition costs the machine, from runs.csv's resource columns (medians over its
//! timed runs): peak resident memory inside the timed window, CPU time of the process, of the
//! loader's workers and of the rest (the training thread and its compute pool), cores busy
//! (process CPU time over the window's wall time), and the **compute inflation**: the median
//! compute time of its timed steps over that of its headroom steps (the same step with no
//! loader running), with a bootstrap CI over both sets of steps — the slowdown of the step
//! that the loader's load causes, which the waiting share alone hides.

use serde::{Deserialize, Serialize};

use super::RunSummary;
use super::stats::{Estimate, bootstrap, median};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Resources {
    pub peak_rss_mib: f64,
    pub process_cpu_s: f64,
    pub workers_cpu_s: f64,
    pub training_cpu_s: f64,
    pub cores_busy: f64,
    /// The share of the dataset's file pages in the page cache as the windows opened (NaN
    /// for a dataset held in memory).
    #[serde(default)]
    pub page_cache_resident: f64,
    /// None where there is no headroom run, or the step is the stand-in's (its compute is
    /// declared, not measured).
    pub compute_inflation: Option<Estimate>,
}

/// The figures of one condition's complete runs; `compute_ms` its timed steps' compute
/// times, `headroom_ms` its headroom steps' (when inflation applies).
pub(super) fn of(
    runs: &[&RunSummary],
    compute_ms: &[f64],
    headroom_ms: Option<&[f64]>,
    seed: u64,
) -> Resources {
    let m = |f: fn(&RunSummary) -> f64| median(&runs.iter().map(|r| f(r)).collect::<Vec<_>>());
    Resources {
        peak_rss_mib: m(|r| r.peak_rss_mib),
        process_cpu_s: m(|r| r.process_cpu_s),
        workers_cpu_s: m(|r| r.workers_cpu_s),
        training_cpu_s: m(|r| r.training_cpu_s),
        cores_busy: m(|r| r.process_cpu_s / r.elapsed_s),
        page_cache_resident: m(|r| r.page_cache_resident),
        compute_inflation: headroom_ms
            .filter(|h| !h.is_empty() && !compute_ms.is_empty())
            .map(|h| bootstrap(&[compute_ms, h], seed, |s| median(&s[0]) / median(&s[1]))),
    }
}

/// The warning for a step slowed beyond noise by the loader's load.
pub(super) fn inflation_warning(condition: &str, r: &Resources) -> Option<String> {
    let e = r.compute_inflation.as_ref()?;
    (e.low > 1.0).then(|| {
        format!(
            "{condition}: the training step's compute took {}× its time with no loader running \
             (95 % CI {}–{}): the loader's load slows the step itself, which the waiting share \
             does not show",
            crate::format::ratio(e.point).trim_end_matches('×'),
            crate::format::ratio(e.low),
            crate::format::ratio(e.high)
        )
    })
}
