//! The report's node section (`[distributed] ranks > 1`): per rank its waits, idle share,
//! barrier wait and class; the node's throughput, the skew, the straggler verdict and the time
//! lost at the barrier; and the workers per rank the stage costs call for.

use super::table::{Align, Table};
use crate::analysis::{Analysis, ConditionSummary, Node, WAIT_FLOOR_MS};
use crate::format::{ms, pct, rate, ratio};

use Align::{Left, Right};

/// The straggler sentence of a condition, also one of the findings at the top.
pub fn straggler(c: &ConditionSummary, n: &Node) -> String {
    let skew = format!(
        "{} (95 % CI {}–{})",
        ratio(n.skew.point),
        ratio(n.skew.low),
        ratio(n.skew.high)
    );
    let others_sync = n
        .ranks
        .iter()
        .filter(|r| r.rank != n.slowest)
        .map(|r| r.sync_share)
        .fold(0.0, f64::max);
    match n.straggler {
        Some(r) => format!(
            "Straggler: rank {r} of {} — its median wait for a batch is {skew} the other ranks', \
             beyond the {} threshold; the others lost up to {} of their step time waiting for it \
             at the barrier.",
            c.condition,
            ratio(n.threshold),
            pct(others_sync)
        ),
        None => format!(
            "No straggler in {}: the slowest rank ({}) waits {skew} as long as the others{} \
             (a straggler's skew must clear {}, in every run, and it must itself be \
             input-bound); {} of the ranks' step time went to the barrier.",
            c.condition,
            n.slowest,
            if n.slowest_every_run {
                ""
            } else {
                ", but another rank was the slowest in some runs"
            },
            ratio(n.threshold),
            pct(n.barrier_share)
        ),
    }
}

pub(super) fn section(a: &Analysis, cores: usize) -> String {
    let nodes: Vec<(&ConditionSummary, &Node)> = a
        .conditions
        .iter()
        .filter_map(|c| c.node.as_ref().map(|n| (c, n)))
        .collect();
    if nodes.is_empty() {
        return String::new();
    }
    let mut md = format!(
        "## Ranks\n\nEach rank ran its own loader over its own share of every epoch (positions \
         rank, rank + R, … of the shared shuffle, as PyTorch's `DistributedSampler` deals them) \
         and its own device (an emulated one on the CPU, its own GPU on CUDA), and waited at a \
         barrier after every step for the others — \
         the stand-in for the gradient all-reduce. A rank's lost time shows as its wait for a \
         batch when its own loader is behind, and as its wait at the barrier when another \
         rank's is. Throughput is the node's: every rank's images over the window. **Skew** is \
         the slowest rank's median wait over the median of the other ranks' (waits under \
         {WAIT_FLOOR_MS} ms count as {WAIT_FLOOR_MS} ms: a hand-off, not a wait), with its 95 % \
         bootstrap CI over each rank's steps; the node's {cores} cores serve every rank's \
         workers.\n\n"
    );
    for (c, n) in nodes {
        let mut t = Table::new([
            ("rank", Right),
            ("batch_wait p50", Right),
            ("p95", Right),
            ("waiting share", Right),
            ("device idle", Right),
            ("barrier wait p50", Right),
            ("time at barrier", Right),
            ("input-bound", Left),
        ]);
        for r in &n.ranks {
            let mark = if Some(r.rank) == n.straggler {
                " ← straggler"
            } else {
                ""
            };
            t.row([
                r.rank.to_string(),
                ms(r.batch_wait_median_ms),
                ms(r.batch_wait_p95_ms),
                pct(r.wait_share),
                pct(r.device_idle),
                ms(r.sync_median_ms),
                pct(r.sync_share),
                format!("{}{mark}", r.input_bound.word()),
            ]);
        }
        md.push_str(&format!(
            "### `{}`: {} ranks, {} img/s for the node\n\n{}\nEach rank is classed by its own \
             waiting share: the barrier keeps the ranks' devices in step, so they idle alike. \
             {}\n\n",
            c.condition,
            n.ranks.len(),
            rate(c.img_per_s.point),
            t.render(),
            straggler(c, n)
        ));
    }
    if let Some(p) = &a.prediction
        && a.conditions
            .iter()
            .any(|c| c.condition == p.from && c.node.is_some())
    {
        md.push_str(&format!(
            "**Workers per rank**: {} ({} of loader work per batch on one thread over a {} \
             step per rank{}), with the node's {cores} cores shared by the ranks, at most {} \
             per rank. See the prediction above for the measured worker counts.\n\n",
            p.workers,
            ms(p.loader_ms_per_batch),
            ms(p.step_ms),
            if p.capped {
                format!("; {} wanted, cut to the cores", p.workers_exact.ceil())
            } else {
                String::new()
            },
            p.cap
        ));
    }
    md
}
