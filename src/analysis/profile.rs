//! The profiled runs' Chrome traces summarised: per track and span, count, total, mean and
//! share of the profiled window.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::AnalysisError;
use crate::loader::StageTotals;
use crate::results::Raw;
use crate::trace::{self, Span, read_trace};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SpanRow {
    /// "training thread" or "workers (summed)".
    pub track: String,
    pub span: String,
    pub count: usize,
    pub total_ms: f64,
    pub mean_ms: f64,
    /// Total over the profiled window (summed worker time can exceed 1).
    pub share: f64,
}

/// One stage of the loader's work, from the stage spans of a profiled run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StageCost {
    /// `read_decode`, an op name, `to_tensor_into_batch`, `fingerprint`, `queue_full`, or
    /// `other` (the rest of `build_batch`: the loop, labels, prefetch hints).
    pub stage: String,
    /// Times measured (a sample of images for per-image stages, every batch for the others).
    pub count: usize,
    /// Mean µs per image (per-batch stages divided by the batch size).
    pub us_per_image: f64,
    /// Share of the loader's time per batch (`build_batch` + `queue_full`).
    pub share: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProfileSummary {
    pub condition: String,
    pub file: String,
    pub bytes: u64,
    pub window_ms: f64,
    pub rows: Vec<SpanRow>,
    /// The loader's stages, in the order they run (from its stage clocks, not the spans: a
    /// span costs about as much as a stage).
    #[serde(default)]
    pub stages: Vec<StageCost>,
    /// One batch's whole build on one thread, ms, from the stage clocks (NaN without them).
    pub build_ms: f64,
    /// The build's wall time split by the kernel's scheduler statistics (absent where they
    /// could not be read, and in older folders).
    #[serde(default)]
    pub build_split: Option<BuildSplit>,
}

/// Shares of the build's wall time: on a CPU, runnable but waiting for one (other threads had
/// the cores), and off the CPU (asleep: storage, a disk read, a lock). They sum to 1.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct BuildSplit {
    pub on_cpu: f64,
    pub waiting_for_cpu: f64,
    pub off_cpu: f64,
}

impl BuildSplit {
    fn of(t: &StageTotals) -> Option<BuildSplit> {
        if t.split_batches == 0 || t.split_wall_ns == 0 {
            return None;
        }
        let wall = t.split_wall_ns as f64;
        let on_cpu = (t.split_cpu_ns as f64 / wall).min(1.0);
        let waiting_for_cpu = (t.split_runq_ns as f64 / wall).min(1.0 - on_cpu);
        Some(BuildSplit {
            on_cpu,
            waiting_for_cpu,
            off_cpu: 1.0 - on_cpu - waiting_for_cpu,
        })
    }
}

/// The loader's stages from its stage clocks: per-image stages in pipeline order, then the
/// fingerprint, the rest of the build (`other`) and the queue wait.
fn stage_costs(t: &StageTotals, batch_size: usize) -> Vec<StageCost> {
    if t.batches == 0 || batch_size == 0 {
        return Vec::new();
    }
    let per_batch_ms = |ns: u64| ns as f64 / t.batches as f64 / 1e6;
    let build_ms = per_batch_ms(t.build_ns);
    let queue_ms = per_batch_ms(t.queue_full_ns);
    let handoff_ms = if t.handoff_batches > 0 {
        t.handoff_ns as f64 / t.handoff_batches as f64 / 1e6
    } else {
        0.0
    };
    let loader_ms = build_ms + queue_ms + handoff_ms;
    if loader_ms <= 0.0 {
        return Vec::new();
    }
    let cost = |stage: &str, count: u64, batch_ms: f64| StageCost {
        stage: stage.to_string(),
        count: count as usize,
        us_per_image: batch_ms * 1e3 / batch_size as f64,
        share: batch_ms / loader_ms,
    };
    let mut inside: Vec<(&str, u64, f64, bool)> = Vec::new();
    for (i, name) in t.stages.iter().enumerate() {
        let (count, ns) = (t.count[i], t.ns[i]);
        if count == 0 {
            continue;
        }
        let per_batch = t.is_per_batch(i);
        let batch_ms = if per_batch {
            ns as f64 / count as f64 / 1e6
        } else {
            ns as f64 / count as f64 / 1e6 * batch_size as f64
        };
        inside.push((name, count, batch_ms, per_batch));
    }
    // The whole build is timed on every batch; the per-image stages on a sample of images,
    // scaled up. A preempted sampled image can carry that estimate past the whole: then the
    // per-image stages are scaled down to the room the build leaves them (a ratio estimate),
    // so no share exceeds what was measured.
    let sum = |per_batch: bool| -> f64 {
        inside
            .iter()
            .filter(|s| s.3 == per_batch)
            .map(|s| s.2)
            .sum()
    };
    // The wait for emulated storage, timed on every batch, is part of the build too.
    let storage_ms = if t.storage_batches > 0 {
        t.storage_ns as f64 / t.storage_batches as f64 / 1e6
    } else {
        0.0
    };
    let (sampled_ms, exact_ms) = (sum(false), sum(true) + storage_ms);
    let room = (build_ms - exact_ms).max(0.0);
    let fit = if sampled_ms > room && sampled_ms > 0.0 {
        room / sampled_ms
    } else {
        1.0
    };
    let mut stages = Vec::new();
    let mut inside_ms = storage_ms;
    if t.storage_batches > 0 {
        stages.push(cost(trace::STORAGE, t.storage_batches, storage_ms));
    }
    for (name, count, batch_ms, per_batch) in inside {
        let batch_ms = if per_batch { batch_ms } else { batch_ms * fit };
        inside_ms += batch_ms;
        stages.push(cost(name, count, batch_ms));
    }
    // What the clocks left unexplained, 0 where they account for the whole build (not a
    // rounding residue).
    let other = build_ms - inside_ms;
    let other = if other > build_ms * 1e-9 { other } else { 0.0 };
    stages.push(cost("other", t.batches, other));
    if t.queue_waits > 0 {
        stages.push(cost(trace::QUEUE_FULL, t.queue_waits, queue_ms));
    }
    if t.handoff_batches > 0 {
        stages.push(cost(HAND_OFF, t.handoff_batches, handoff_ms));
    }
    stages
}

/// The pytorch engine's stage from a worker's ready batch to the training loop holding it.
pub const HAND_OFF: &str = "hand_off";

/// Span statistics from each condition's Chrome trace.
pub(super) fn profile_summaries(raw: &Raw) -> Vec<ProfileSummary> {
    raw.meta
        .conditions
        .iter()
        .filter_map(|c| {
            // A watched job has stage clocks from its whole run and no trace.
            let watched = c.trace.is_none() && c.stages.is_some();
            let (file, bytes, window_ms, rows) = if watched {
                (String::new(), 0, f64::NAN, Vec::new())
            } else {
                let file = c.trace.clone()?;
                let path = raw.dir.join(&file);
                let bytes = std::fs::metadata(&path).ok()?.len();
                let (window_ms, rows) = summarise_trace(&path).ok()?;
                (file, bytes, window_ms, rows)
            };
            let batch_size = raw
                .plan
                .conditions
                .iter()
                .find(|p| p.name == c.name)
                .map_or(0, |p| p.config.loader.batch_size as usize);
            let totals = c.stages.as_ref();
            Some(ProfileSummary {
                condition: c.name.clone(),
                file,
                bytes,
                window_ms,
                stages: totals.map_or(Vec::new(), |t| stage_costs(t, batch_size)),
                build_ms: totals
                    .filter(|t| t.batches > 0)
                    .map_or(f64::NAN, |t| t.build_ns as f64 / t.batches as f64 / 1e6),
                build_split: totals.and_then(BuildSplit::of),
                rows,
            })
        })
        .collect()
}

fn summarise_trace(path: &Path) -> Result<(f64, Vec<SpanRow>), AnalysisError> {
    let (mut spans, names) = read_trace(path)?;
    spans.retain(|s| s.name != trace::GPU_CLOCK_ANCHOR);
    // A torch.profiler trace (the pytorch engine's): its own ProfilerStep and operator events
    // stay in the file for Perfetto; the summary keeps the step's spans and the batch build.
    if spans.iter().any(|s| s.name.starts_with("ProfilerStep#")) {
        spans.retain(|s| {
            trace::STEP_SPANS.contains(&s.name.as_str()) || s.name == trace::BUILD_BATCH
        });
    }
    // The training thread is the one with batch_wait spans; the GPU track is named.
    let main = spans
        .iter()
        .find(|s| s.name == trace::BATCH_WAIT)
        .map(|s| s.tid);
    let gpu = names
        .iter()
        .find(|(_, n)| trace::DEVICE_TRACKS.contains(&n.as_str()));
    let device_track = gpu.map_or(trace::GPU_TRACK, |(_, n)| n.as_str());
    let gpu = gpu.map(|(t, _)| *t);
    let track_of = |tid: u64| {
        if Some(tid) == main {
            0
        } else if Some(tid) == gpu {
            2
        } else {
            1
        }
    };
    let on_main: Vec<&Span> = spans.iter().filter(|s| Some(s.tid) == main).collect();
    let start = on_main
        .iter()
        .map(|s| s.start_us)
        .fold(f64::INFINITY, f64::min);
    let end = on_main
        .iter()
        .map(|s| s.end_us)
        .fold(f64::NEG_INFINITY, f64::max);
    let window_ms = if end > start {
        (end - start) / 1e3
    } else {
        0.0
    };
    let mut rows = Vec::new();
    for (t, track) in ["training thread", "workers (summed)", device_track]
        .into_iter()
        .enumerate()
    {
        let mut names: Vec<&str> = Vec::new();
        for s in spans.iter().filter(|s| track_of(s.tid) == t) {
            if !names.contains(&s.name.as_str()) {
                names.push(&s.name);
            }
        }
        for name in names {
            let durations: Vec<f64> = spans
                .iter()
                .filter(|s| track_of(s.tid) == t && s.name == name)
                .map(Span::duration_ms)
                .collect();
            let total: f64 = durations.iter().sum();
            rows.push(SpanRow {
                track: track.into(),
                span: name.into(),
                count: durations.len(),
                total_ms: total,
                mean_ms: total / durations.len() as f64,
                share: if window_ms > 0.0 {
                    total / window_ms
                } else {
                    0.0
                },
            });
        }
    }
    Ok((window_ms, rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_off_is_a_stage_of_the_loaders_time() {
        // 2 batches of 4 built in 4 ms each, handed off in 1 ms each.
        let t = StageTotals {
            stages: vec!["read_decode".into(), "collate".into()],
            count: vec![8, 2],
            ns: vec![4_000_000, 2_000_000],
            batches: 2,
            build_ns: 8_000_000,
            handoff_batches: 2,
            handoff_ns: 2_000_000,
            ..StageTotals::default()
        };
        let s = stage_costs(&t, 4);
        let hand_off = s.iter().find(|s| s.stage == HAND_OFF).unwrap();
        assert!((hand_off.share - 1.0 / 5.0).abs() < 1e-9, "{s:?}");
        assert!((hand_off.us_per_image - 250.0).abs() < 1e-9, "{s:?}");
        let total: f64 = s.iter().map(|s| s.share).sum();
        assert!((total - 1.0).abs() < 1e-9, "{s:?}");
    }

    fn totals(per_image_ns: [u64; 2], build_ns: u64) -> StageTotals {
        // 2 batches of 4 images; one image in 2 timed per stage (4 samples); the fingerprint
        // on both batches.
        StageTotals {
            stages: vec![
                "read_decode".into(),
                "cpu_work".into(),
                "fingerprint".into(),
            ],
            count: vec![4, 4, 2],
            ns: vec![per_image_ns[0], per_image_ns[1], 2_000_000],
            batches: 2,
            build_ns,
            queue_waits: 0,
            queue_full_ns: 0,
            sample_every: 2,
            storage_batches: 0,
            storage_ns: 0,
            ..StageTotals::default()
        }
    }

    #[test]
    fn the_build_splits_into_on_waiting_for_and_off_the_cpu() {
        let mut t = totals([1, 1], 1);
        assert_eq!(BuildSplit::of(&t), None, "no scheduler statistics");
        (
            t.split_batches,
            t.split_wall_ns,
            t.split_cpu_ns,
            t.split_runq_ns,
        ) = (2, 100, 30, 20);
        let b = BuildSplit::of(&t).unwrap();
        assert_eq!((b.on_cpu, b.waiting_for_cpu), (0.3, 0.2));
        assert!((b.off_cpu - 0.5).abs() < 1e-12);
        // Clock granularity can put CPU time past the wall time: capped, never negative.
        (t.split_cpu_ns, t.split_runq_ns) = (110, 5);
        let b = BuildSplit::of(&t).unwrap();
        assert_eq!((b.on_cpu, b.waiting_for_cpu, b.off_cpu), (1.0, 0.0, 0.0));
    }

    #[test]
    fn stages_and_the_rest_make_up_the_whole_build() {
        // Per batch: read 4 × 0.5 ms, work 4 × 2 ms, fingerprint 1 ms: 11 of a 12 ms build.
        let s = stage_costs(&totals([2_000_000, 8_000_000], 24_000_000), 4);
        let share = |n: &str| s.iter().find(|c| c.stage == n).unwrap().share;
        assert!((share("cpu_work") - 8.0 / 12.0).abs() < 1e-12);
        assert!((share("other") - 1.0 / 12.0).abs() < 1e-12);
        assert!((s.iter().map(|c| c.share).sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_sample_past_the_whole_build_is_fitted_to_it() {
        // The sampled images say 4 × 0.5 + 4 × 4 = 18 ms per batch of a 10 ms build, of which
        // the fingerprint (every batch) takes 1: the per-image stages share the other 9 in
        // their sampled proportions, nothing is left for `other`.
        let s = stage_costs(&totals([2_000_000, 16_000_000], 20_000_000), 4);
        let share = |n: &str| s.iter().find(|c| c.stage == n).unwrap().share;
        assert!((share("fingerprint") - 0.1).abs() < 1e-12);
        assert!((share("read_decode") - 0.9 * 2.0 / 18.0).abs() < 1e-12);
        assert!((share("cpu_work") - 0.9 * 16.0 / 18.0).abs() < 1e-12);
        assert_eq!(share("other"), 0.0);
        assert!((s.iter().map(|c| c.share).sum::<f64>() - 1.0).abs() < 1e-12);
    }
}
