//! The loader's work per stage: µs per image for each stage (read and decode, every op,
//! to_tensor into the batch, fingerprint, the rest of the build), one bar per profiled
//! condition, from the profiled runs' stage clocks.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{
    DrawResult, Mark, TITLE, category_labels, color, legend, mesh, plain, with_legend_panel,
};
use crate::spans::QUEUE_FULL;

/// The stage names in first-seen order over the profiled conditions, work only (the queue
/// wait is idle time; the table gives it).
pub fn stage_names(d: &ChartData) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in &d.analysis.profiles {
        for s in &p.stages {
            if s.stage != QUEUE_FULL && !names.contains(&s.stage) {
                names.push(s.stage.clone());
            }
        }
    }
    names
}

/// Horizontal bars, one row per stage (top down in pipeline order), one bar per condition.
pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE)?;
    let (plot, panel) = with_legend_panel(root);
    let names = stage_names(d);
    let profiled: Vec<(usize, &crate::analysis::ProfileSummary)> = d
        .analysis
        .profiles
        .iter()
        .filter(|p| !p.stages.is_empty())
        .filter_map(|p| Some((d.conditions.iter().position(|c| *c == p.condition)?, p)))
        .collect();
    let right = profiled
        .iter()
        .flat_map(|(_, p)| p.stages.iter().filter(|s| s.stage != QUEUE_FULL))
        .map(|s| s.us_per_image)
        .filter(|v| v.is_finite())
        .fold(1e-3, f64::max)
        * 1.15;
    let n = names.len();
    // Row r (from the top) sits at y = n - 1 - r.
    let row_of = |stage: &str| {
        names
            .iter()
            .position(|s| s == stage)
            .map(|r| (n - 1 - r) as f64)
    };
    let labels: Vec<String> = names.iter().rev().cloned().collect();
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            if d.job.is_empty() {
                "Loader work per image, by stage (profiled runs)"
            } else {
                "Loader work per image, by stage (the whole watched run)"
            },
            TITLE,
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(190)
        .build_cartesian_2d(0f64..right, -0.6f64..(n as f64 - 0.4))?;
    mesh!(chart)
        .disable_y_mesh()
        .y_labels(n.max(1) * 2 + 1)
        .y_label_formatter(&category_labels(&labels))
        .x_label_formatter(&plain)
        .x_desc("µs per image")
        .y_desc("stage")
        .draw()?;
    let k = profiled.len().max(1) as f64;
    let height = 0.8 / k;
    for (j, (ci, p)) in profiled.iter().enumerate() {
        let bars = p.stages.iter().filter_map(|s| {
            let y = row_of(&s.stage)? + 0.4 - height * (j as f64 + 1.0);
            Some(Rectangle::new(
                [(0.0, y + height * 0.1), (s.us_per_image, y + height * 0.9)],
                color(*ci).mix(0.75).filled(),
            ))
        });
        chart.draw_series(bars)?;
    }
    let entries: Vec<(Mark, String)> = profiled
        .iter()
        .map(|(ci, p)| (Mark::Bar(color(*ci).mix(0.75)), p.condition.clone()))
        .collect();
    legend(&panel, &entries)
}
