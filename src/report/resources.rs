//! The report's resources section: what each condition cost the machine, and whether the
//! loader's load slowed the step itself.

use super::table::{Align, Table};
use crate::analysis::Analysis;
use crate::format::{ratio, sig};

use Align::{Left, Right};

pub(super) fn section(a: &Analysis, cores: usize) -> String {
    let rows: Vec<_> = a
        .conditions
        .iter()
        .filter_map(|c| c.resources.as_ref().map(|r| (c, r)))
        .filter(|(_, r)| r.process_cpu_s.is_finite() || r.compute_inflation.is_some())
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut t = Table::new([
        ("condition", Left),
        ("peak memory, MiB", Right),
        ("CPU: process, s", Right),
        ("workers, s", Right),
        ("training, s", Right),
        ("cores busy", Right),
        ("page cache at start", Right),
        ("compute inflation (95 % CI)", Right),
    ]);
    for (c, r) in rows {
        t.row([
            format!("`{}`", c.condition),
            sig(r.peak_rss_mib),
            sig(r.process_cpu_s),
            sig(r.workers_cpu_s),
            sig(r.training_cpu_s),
            sig(r.cores_busy),
            if r.page_cache_resident.is_finite() {
                crate::format::pct(r.page_cache_resident)
            } else {
                "– (in memory)".into()
            },
            r.compute_inflation.as_ref().map_or("–".into(), |e| {
                format!("{} ({}–{})", ratio(e.point), ratio(e.low), ratio(e.high))
            }),
        ]);
    }
    format!(
        "## Resources\n\nWhat each condition cost the machine over its timed windows (medians over \
         its runs): the peak resident memory inside the window, the CPU time of the process, of \
         the loader's workers and of the rest (the training thread, its compute pool, the \
         stand-in's device thread), from each thread's scheduler clock, and cores busy = process \
         CPU time / the window's wall time (this machine has {cores}), and the share of the \
         dataset's file pages the page cache held as the windows opened (`dataset.page_cache`: \
         \"cold\" drops them first; a dataset held in memory reads no file). **Compute inflation** is \
         the median compute time of the timed steps over that of the headroom steps, the same \
         step with no loader running (95 % bootstrap CI over both sets of steps): above 1, the \
         loader's load slows the step itself — a cost the waiting share does not show. It is not \
         given for the stand-in step, whose time is declared.\n\n{}\n",
        t.render()
    )
}
