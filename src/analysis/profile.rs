//! The profiled runs' Chrome traces summarised: per track and span, count, total, mean and
//! share of the profiled window.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::AnalysisError;
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
    /// Spans measured (a sample of images for per-image stages, every batch for the others).
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
    /// The loader's stages, in the order they run.
    #[serde(default)]
    pub stages: Vec<StageCost>,
}

/// Per-image stages first (in pipeline order), then the per-batch ones.
fn stage_costs(rows: &[SpanRow], batch_size: usize) -> Vec<StageCost> {
    let loader_rows: Vec<&SpanRow> = rows
        .iter()
        .filter(|r| r.track != trace::GPU_TRACK)
        .collect();
    let mean_of = |name: &str| {
        loader_rows
            .iter()
            .find(|r| r.span == name)
            .map_or(0.0, |r| r.mean_ms)
    };
    let build_ms = mean_of(trace::BUILD_BATCH);
    let loader_ms = build_ms + mean_of(trace::QUEUE_FULL);
    if batch_size == 0 || loader_ms <= 0.0 {
        return Vec::new();
    }
    let per_batch = |name: &str| matches!(name, trace::FINGERPRINT | trace::QUEUE_FULL);
    let mut stages: Vec<StageCost> = Vec::new();
    let mut inside_build_ms = 0.0;
    for r in loader_rows.iter().filter(|r| trace::is_stage(&r.span)) {
        let batch_ms = if per_batch(&r.span) {
            r.mean_ms
        } else {
            r.mean_ms * batch_size as f64
        };
        if r.span != trace::QUEUE_FULL {
            inside_build_ms += batch_ms;
        }
        stages.push(StageCost {
            stage: r.span.clone(),
            count: r.count,
            us_per_image: batch_ms * 1e3 / batch_size as f64,
            share: batch_ms / loader_ms,
        });
    }
    if stages.is_empty() {
        return stages;
    }
    // The per-batch fingerprint, then the queue wait, after the per-image stages.
    stages.sort_by_key(|s| (per_batch(&s.stage), s.stage == trace::QUEUE_FULL));
    let other_ms = (build_ms - inside_build_ms).max(0.0);
    let at = stages
        .iter()
        .position(|s| s.stage == trace::QUEUE_FULL)
        .unwrap_or(stages.len());
    stages.insert(
        at,
        StageCost {
            stage: "other".into(),
            count: 0,
            us_per_image: other_ms * 1e3 / batch_size as f64,
            share: other_ms / loader_ms,
        },
    );
    stages
}

/// Span statistics from each condition's Chrome trace.
pub(super) fn profile_summaries(raw: &Raw) -> Vec<ProfileSummary> {
    raw.meta
        .conditions
        .iter()
        .filter_map(|c| {
            let file = c.trace.clone()?;
            let path = raw.dir.join(&file);
            let bytes = std::fs::metadata(&path).ok()?.len();
            let (window_ms, rows) = summarise_trace(&path).ok()?;
            let batch_size = raw
                .plan
                .conditions
                .iter()
                .find(|p| p.name == c.name)
                .map_or(0, |p| p.config.loader.batch_size as usize);
            Some(ProfileSummary {
                condition: c.name.clone(),
                file,
                bytes,
                window_ms,
                stages: stage_costs(&rows, batch_size),
                rows,
            })
        })
        .collect()
}

fn summarise_trace(path: &Path) -> Result<(f64, Vec<SpanRow>), AnalysisError> {
    let (mut spans, names) = read_trace(path)?;
    spans.retain(|s| s.1 != trace::GPU_CLOCK_ANCHOR);
    // The training thread is the one with batch_wait spans; the GPU track is named.
    let main = spans.iter().find(|s| s.1 == trace::BATCH_WAIT).map(|s| s.0);
    let gpu = names
        .iter()
        .find(|(_, n)| n.as_str() == trace::GPU_TRACK)
        .map(|(t, _)| *t);
    let track_of = |tid: u64| {
        if Some(tid) == main {
            0
        } else if Some(tid) == gpu {
            2
        } else {
            1
        }
    };
    let on_main: Vec<&Span> = spans.iter().filter(|s| Some(s.0) == main).collect();
    let start = on_main.iter().map(|s| s.2).fold(f64::INFINITY, f64::min);
    let end = on_main
        .iter()
        .map(|s| s.3)
        .fold(f64::NEG_INFINITY, f64::max);
    let window_ms = if end > start {
        (end - start) / 1e3
    } else {
        0.0
    };
    let mut rows = Vec::new();
    for (t, track) in ["training thread", "workers (summed)", trace::GPU_TRACK]
        .into_iter()
        .enumerate()
    {
        let mut names: Vec<&str> = Vec::new();
        for s in spans.iter().filter(|s| track_of(s.0) == t) {
            if !names.contains(&s.1.as_str()) {
                names.push(&s.1);
            }
        }
        for name in names {
            let durations: Vec<f64> = spans
                .iter()
                .filter(|s| track_of(s.0) == t && s.1 == name)
                .map(|s| (s.3 - s.2) / 1e3)
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
