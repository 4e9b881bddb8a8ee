//! The loader's cost per stage: µs per image for each stage (read and decode, every op,
//! to_tensor into the batch, fingerprint, the rest of build_batch, queue wait), one bar per
//! profiled condition, from the profiled runs' stage spans.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::with_legend_panel;
use super::style::{DrawResult, Mark, TITLE, category_labels, color, e, legend, mesh, plain};

/// The stage names in first-seen order over the profiled conditions.
pub fn stage_names(d: &ChartData) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for p in &d.analysis.profiles {
        for s in &p.stages {
            if !names.contains(&s.stage) {
                names.push(s.stage.clone());
            }
        }
    }
    names
}

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE).map_err(e)?;
    let (plot, panel) = with_legend_panel(root);
    let names = stage_names(d);
    let profiled: Vec<(usize, &crate::analysis::ProfileSummary)> = d
        .analysis
        .profiles
        .iter()
        .filter(|p| !p.stages.is_empty())
        .filter_map(|p| Some((d.conditions.iter().position(|c| *c == p.condition)?, p)))
        .collect();
    let top = profiled
        .iter()
        .flat_map(|(_, p)| p.stages.iter().map(|s| s.us_per_image))
        .filter(|v| v.is_finite())
        .fold(1e-3, f64::max)
        * 1.15;
    let n = names.len() as f64;
    let mut chart = ChartBuilder::on(&plot)
        .caption("Loader time per image, by stage (profiled runs)", TITLE)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.6f64..(n - 0.4), 0f64..top)
        .map_err(e)?;
    mesh!(chart)
        .disable_x_mesh()
        .x_labels(names.len().max(1) * 2 + 1)
        .x_label_formatter(&category_labels(&names))
        .y_label_formatter(&plain)
        .x_desc("stage")
        .y_desc("µs per image")
        .draw()
        .map_err(e)?;
    let k = profiled.len().max(1) as f64;
    let width = 0.8 / k;
    for (j, (ci, p)) in profiled.iter().enumerate() {
        let bars = p.stages.iter().filter_map(|s| {
            let x = names.iter().position(|n| *n == s.stage)? as f64 - 0.4 + width * j as f64;
            Some(Rectangle::new(
                [(x, 0.0), (x + width * 0.9, s.us_per_image)],
                color(*ci).mix(0.75).filled(),
            ))
        });
        chart.draw_series(bars).map_err(e)?;
    }
    let entries: Vec<(Mark, String)> = profiled
        .iter()
        .map(|(ci, p)| (Mark::Bar(color(*ci).mix(0.75)), p.condition.clone()))
        .collect();
    legend(&panel, &entries)
}
