//! Time waiting for each batch, every timed step, per condition (log scale), with the median.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{
    DrawResult, Mark, TITLE, category_labels, color, legend, mesh, plain, with_legend_panel,
};
use crate::analysis::median;

/// Waits below this are drawn at it (a log axis has no zero).
const FLOOR_MS: f64 = 1e-3;

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE)?;
    let (plot, panel) = with_legend_panel(root);
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); d.conditions.len()];
    for (ci, _, rows) in &d.runs {
        per[*ci].extend(rows.iter().map(|r| r.batch_wait_ms.max(FLOOR_MS)));
    }
    let hi = per
        .iter()
        .flatten()
        .copied()
        .fold(FLOOR_MS * 10.0, f64::max)
        * 2.0;
    let n = d.conditions.len() as f64;
    let mut chart = ChartBuilder::on(&plot)
        .caption("Time waiting for each batch (all timed steps)", TITLE)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.6f64..(n - 0.4), (FLOOR_MS..hi).log_scale())?;
    mesh!(chart)
        .disable_x_mesh()
        .x_labels(d.conditions.len().max(1) * 2 + 1)
        .x_label_formatter(&category_labels(&d.conditions))
        .y_label_formatter(&plain)
        .x_desc("condition")
        .y_desc("batch_wait per step, ms (log scale)")
        .draw()?;
    for (i, values) in per.iter().enumerate() {
        let x = i as f64;
        chart.draw_series(values.iter().enumerate().map(|(j, v)| {
            // Spread the dots sideways by a deterministic jitter so they stay visible.
            let jitter = ((j as f64 * 0.618_034) % 1.0 - 0.5) * 0.5;
            Circle::new((x + jitter, *v), 2, color(i).mix(0.5).filled())
        }))?;
        let m = median(values);
        if m.is_finite() {
            chart.draw_series([PathElement::new(
                vec![(x - 0.35, m), (x + 0.35, m)],
                BLACK.stroke_width(3),
            )])?;
        }
    }
    let mut entries: Vec<(Mark, String)> = d
        .conditions
        .iter()
        .enumerate()
        .map(|(i, name)| {
            (
                Mark::Dot(color(i).to_rgba()),
                format!("{name} (one per step)"),
            )
        })
        .collect();
    entries.push((Mark::Line(BLACK.to_rgba()), "median".to_string()));
    legend(&panel, &entries)
}
