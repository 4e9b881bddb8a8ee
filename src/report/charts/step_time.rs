//! Step time over each timed run, one line per run in its condition's colour.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{
    DrawResult, Mark, TITLE, color, e, integer, legend, mesh, plain, with_legend_panel,
};

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE).map_err(e)?;
    let (plot, panel) = with_legend_panel(root);
    let steps = d
        .runs
        .iter()
        .map(|(_, _, r)| r.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let top = d
        .runs
        .iter()
        .flat_map(|(_, _, r)| r.iter().map(|v| v[3]))
        .filter(|v| v.is_finite())
        .fold(1e-3, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(&plot)
        .caption("Step time over each timed run", TITLE)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..(steps - 1) as f64, 0f64..top)
        .map_err(e)?;
    mesh!(chart)
        // At most one label per step: integer ticks only.
        .x_labels(steps.min(11))
        .x_label_formatter(&integer)
        .y_label_formatter(&plain)
        .x_desc("timed step")
        .y_desc("step time, ms")
        .draw()
        .map_err(e)?;
    for (ci, _, rows) in &d.runs {
        chart
            .draw_series(LineSeries::new(
                rows.iter().enumerate().map(|(i, r)| (i as f64, r[3])),
                color(*ci).mix(0.8).stroke_width(2),
            ))
            .map_err(e)?;
    }
    let entries: Vec<(Mark, String)> = d
        .conditions
        .iter()
        .enumerate()
        .map(|(i, name)| (Mark::Line(color(i).mix(0.8)), name.clone()))
        .collect();
    legend(&panel, &entries)
}
