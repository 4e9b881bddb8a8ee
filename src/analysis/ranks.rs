//! A node's ranks (`[distributed] ranks > 1`): each rank's waiting and idle shares and class,
//! the time lost at the barrier, and the skew between the slowest rank's waits and the
//! others' — with a straggler named when its interval clears the threshold.
//!
//! Skew = the slowest rank's median `batch_wait` over the median of the other ranks' median
//! waits (floored at [`WAIT_FLOOR_MS`]: below it a wait is a hand-off, not a wait). "The other
//! ranks" rather than all of them, so that with two ranks the straggler is not half its own
//! yardstick. Its 95 % interval resamples each rank's steps. A straggler must also be the
//! slowest rank in every run (on a machine short of cores the slowest rank changes from run to
//! run: no rank is the straggler then) and input-bound on its own waiting share.

use serde::{Deserialize, Serialize};

use super::stats::{Estimate, bootstrap, median};
use super::{InputBound, Thresholds, idle_fraction};

/// A median wait under this (ms) counts as this in the skew's denominator.
pub const WAIT_FLOOR_MS: f64 = 0.01;

/// Mixed into the skew's bootstrap seed.
const SKEW_RESAMPLES_SEED: u64 = 0x5e_e0;

/// One rank's figures over a condition's timed runs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RankFigures {
    pub rank: i64,
    pub steps: usize,
    pub batch_wait_median_ms: f64,
    pub batch_wait_p95_ms: f64,
    /// Σ batch_wait / Σ step of its steps.
    pub wait_share: f64,
    /// The share of the timed windows its device was idle.
    pub device_idle: f64,
    /// Its median wait at the barrier, ms …
    pub sync_median_ms: f64,
    /// … and Σ sync / Σ step: the time it lost waiting for the other ranks.
    pub sync_share: f64,
    /// Judged on its own waiting share (the barrier keeps the ranks' devices in step, so
    /// they idle alike).
    pub input_bound: InputBound,
}

/// The node's figures for one condition.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Node {
    pub ranks: Vec<RankFigures>,
    /// The rank with the largest median wait.
    pub slowest: i64,
    /// Its median wait over the other ranks' median, with its 95 % interval.
    pub skew: Estimate,
    /// `[report] straggler_skew`.
    pub threshold: f64,
    /// The slowest rank, when the skew's interval lies above the threshold, it was the
    /// slowest in every run, and it is at least moderately input-bound.
    pub straggler: Option<i64>,
    /// The slowest rank was the slowest in every run.
    #[serde(default)]
    pub slowest_every_run: bool,
    /// Σ sync / Σ step over every rank: the node's rank-time lost at the barrier.
    pub barrier_share: f64,
}

/// One timed step of one rank, as the node analysis reads it.
#[derive(Debug, Clone, Copy)]
pub struct RankStep {
    pub run: i64,
    pub rank: i64,
    pub batch_wait_ms: f64,
    pub step_ms: f64,
    pub sync_ms: f64,
    pub device_ms: f64,
}

/// The node figures of a condition from its complete runs' steps and the sum of those runs'
/// windows (ms); None with one rank.
pub fn node(
    steps: &[RankStep],
    window_ms: f64,
    thresholds: &Thresholds,
    straggler_skew: f64,
    seed: u64,
) -> Option<Node> {
    let mut ids: Vec<i64> = steps.iter().map(|s| s.rank).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.len() < 2 {
        return None;
    }
    let of = |r: i64| steps.iter().filter(move |s| s.rank == r);
    let waits: Vec<Vec<f64>> = ids
        .iter()
        .map(|&r| of(r).map(|s| s.batch_wait_ms).collect())
        .collect();
    let ranks: Vec<RankFigures> = ids
        .iter()
        .zip(&waits)
        .map(|(&r, w)| {
            let sum = |f: fn(&RankStep) -> f64| of(r).map(f).sum::<f64>();
            let step = sum(|s| s.step_ms);
            let wait_share = sum(|s| s.batch_wait_ms) / step;
            let device_idle = idle_fraction(sum(|s| s.device_ms), window_ms);
            RankFigures {
                rank: r,
                steps: w.len(),
                batch_wait_median_ms: median(w),
                batch_wait_p95_ms: super::quantile(w, 0.95),
                wait_share,
                device_idle,
                sync_median_ms: median(&of(r).map(|s| s.sync_ms).collect::<Vec<_>>()),
                sync_share: sum(|s| s.sync_ms) / step,
                input_bound: thresholds.input_bound(wait_share),
            }
        })
        .collect();
    let slowest_at = (0..ranks.len())
        .max_by(|&a, &b| {
            ranks[a]
                .batch_wait_median_ms
                .total_cmp(&ranks[b].batch_wait_median_ms)
        })
        .unwrap_or(0);
    let groups: Vec<&[f64]> = waits.iter().map(Vec::as_slice).collect();
    let skew = bootstrap(&groups, seed ^ SKEW_RESAMPLES_SEED, |s| {
        skew_of(&s.iter().map(|w| median(w)).collect::<Vec<_>>())
    });
    let slowest = &ranks[slowest_at];
    let slowest_every_run = slowest_in_every_run(steps, slowest.rank);
    let straggler =
        (skew.low > straggler_skew && slowest_every_run && slowest.input_bound != InputBound::Not)
            .then_some(slowest.rank);
    let total = |f: fn(&RankStep) -> f64| steps.iter().map(f).sum::<f64>();
    Some(Node {
        slowest: slowest.rank,
        skew,
        threshold: straggler_skew,
        straggler,
        slowest_every_run,
        barrier_share: total(|s| s.sync_ms) / total(|s| s.step_ms),
        ranks,
    })
}

/// Whether `rank` has the largest median wait in every run.
fn slowest_in_every_run(steps: &[RankStep], rank: i64) -> bool {
    let mut runs: Vec<i64> = steps.iter().map(|s| s.run).collect();
    runs.sort_unstable();
    runs.dedup();
    runs.iter().all(|&run| {
        let median_of = |r: i64| {
            median(
                &steps
                    .iter()
                    .filter(|s| s.run == run && s.rank == r)
                    .map(|s| s.batch_wait_ms)
                    .collect::<Vec<_>>(),
            )
        };
        let mine = median_of(rank);
        steps
            .iter()
            .filter(|s| s.run == run && s.rank != rank)
            .all(|s| median_of(s.rank) <= mine)
    })
}

/// The largest of the ranks' median waits over the median of the others'.
pub fn skew_of(medians: &[f64]) -> f64 {
    let Some(top) = (0..medians.len()).max_by(|&a, &b| medians[a].total_cmp(&medians[b])) else {
        return f64::NAN;
    };
    let others: Vec<f64> = medians
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != top)
        .map(|(_, m)| *m)
        .collect();
    medians[top].max(WAIT_FLOOR_MS) / median(&others).max(WAIT_FLOOR_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(waits: &[(i64, f64, f64)]) -> Vec<RankStep> {
        waits
            .iter()
            .flat_map(|&(rank, wait, sync)| {
                (0..20).map(move |k| RankStep {
                    run: k % 2,
                    rank,
                    // A little spread, so the interval has width.
                    batch_wait_ms: wait * (1.0 + 0.01 * (k % 5) as f64),
                    step_ms: wait + sync + 10.0,
                    sync_ms: sync,
                    device_ms: 10.0,
                })
            })
            .collect()
    }

    #[test]
    fn a_slow_rank_is_named_and_the_others_lose_their_time_at_the_barrier() {
        let t = Thresholds::default();
        let planted = steps(&[(0, 30.0, 0.0), (1, 0.02, 30.0), (2, 0.03, 29.9)]);
        let n = node(&planted, 3000.0, &t, 2.0, 1).unwrap();
        assert_eq!(n.straggler, Some(0));
        assert!(n.skew.low > 100.0, "{:?}", n.skew);
        assert_eq!(n.ranks[0].input_bound, InputBound::Highly);
        assert_eq!(n.ranks[1].input_bound, InputBound::Not);
        assert!((n.ranks[1].sync_share - 30.0 / 40.02).abs() < 1e-9);
        // Balanced ranks: no straggler, skew near 1.
        let even = steps(&[(0, 5.0, 0.1), (1, 5.1, 0.1), (2, 4.9, 0.2)]);
        let n = node(&even, 3000.0, &t, 2.0, 1).unwrap();
        assert_eq!(n.straggler, None);
        assert!(n.skew.point < 1.1, "{:?}", n.skew);
        // One rank: no node figures.
        assert!(node(&steps(&[(0, 1.0, 0.0)]), 1.0, &t, 2.0, 1).is_none());
        // A rank slow in one run and another slow in the other: no straggler, however large
        // the pooled skew.
        let mut turns = steps(&[(0, 30.0, 0.0), (1, 0.02, 30.0)]);
        for s in turns.iter_mut().filter(|s| s.run == 1) {
            (s.batch_wait_ms, s.sync_ms) = if s.rank == 0 {
                (0.02, 30.0)
            } else {
                (30.0, 0.0)
            };
        }
        // Rank 0 a little slower in the other run too would make it the straggler; here the
        // ranks trade places.
        let n = node(&turns, 3000.0, &t, 2.0, 1).unwrap();
        assert!(!n.slowest_every_run);
        assert_eq!(n.straggler, None);
        // Two ranks: the straggler is measured against the other, not against its midpoint.
        assert!((skew_of(&[40.0, 1.0]) - 40.0).abs() < 1e-12);
        assert!((skew_of(&[0.0, 0.0]) - 1.0).abs() < 1e-12, "floored");
    }
}
