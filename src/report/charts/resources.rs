//! What each condition cost the machine: peak resident memory (top) and cores busy (bottom),
//! medians over its timed runs, one bar per condition.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{
    DrawResult, Mark, TITLE, category_labels, color, legend, mesh, plain, with_legend_panel,
};

/// Whether any condition has resource figures to draw.
pub fn drawn(d: &ChartData) -> bool {
    d.analysis
        .conditions
        .iter()
        .filter_map(|c| c.resources.as_ref())
        .any(|r| r.peak_rss_mib.is_finite() || r.cores_busy.is_finite())
}

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE)?;
    let (plot, panel) = with_legend_panel(root);
    let (top, bottom) = plot.split_vertically(plot.dim_in_pixel().1 / 2);
    let conds = &d.analysis.conditions;
    let value = |i: usize, memory: bool| {
        conds[i].resources.as_ref().map_or(f64::NAN, |r| {
            if memory { r.peak_rss_mib } else { r.cores_busy }
        })
    };
    for (area, memory) in [(&top, true), (&bottom, false)] {
        let highest = (0..conds.len())
            .map(|i| value(i, memory))
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max);
        let ceiling = highest.max(1.0) * 1.15;
        let n = conds.len() as f64;
        let (caption, desc) = if memory {
            (
                "Peak resident memory inside the timed window",
                "MiB (median of runs)",
            )
        } else {
            (
                "Cores busy: process CPU time / wall time",
                "cores (median of runs)",
            )
        };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, TITLE)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(80)
            .build_cartesian_2d(-0.6f64..(n - 0.4), 0f64..ceiling)?;
        mesh!(chart)
            .disable_x_mesh()
            .x_labels(conds.len().max(1) * 2 + 1)
            .x_label_formatter(&category_labels(&d.conditions))
            .y_label_formatter(&plain)
            .y_desc(desc)
            .draw()?;
        for i in 0..conds.len() {
            let v = value(i, memory);
            if !v.is_finite() {
                continue;
            }
            let x = i as f64;
            chart.draw_series([Rectangle::new(
                [(x - 0.3, 0.0), (x + 0.3, v)],
                color(i).mix(0.6).filled(),
            )])?;
        }
    }
    let entries: Vec<(Mark, String)> = d
        .conditions
        .iter()
        .enumerate()
        .map(|(i, name)| (Mark::Bar(color(i).mix(0.6)), name.clone()))
        .collect();
    legend(&panel, &entries)
}
