//! Step time over each timed run, one line per run in its condition's colour.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{DrawResult, Mark, color, legend, step_chart};

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    let (mut chart, panel) = step_chart(
        root,
        "Step time over each timed run",
        "timed step",
        "step time, ms",
        d.runs.iter().map(|(_, _, r)| r.len()),
        d.runs
            .iter()
            .flat_map(|(_, _, r)| r.iter().map(|v| v.step_ms)),
    )?;
    for (ci, _, rows) in &d.runs {
        chart.draw_series(LineSeries::new(
            rows.iter().enumerate().map(|(i, r)| (i as f64, r.step_ms)),
            color(*ci).mix(0.8).stroke_width(2),
        ))?;
    }
    let entries: Vec<(Mark, String)> = d
        .conditions
        .iter()
        .enumerate()
        .map(|(i, name)| (Mark::Line(color(i).mix(0.8)), name.clone()))
        .collect();
    legend(&panel, &entries)
}
