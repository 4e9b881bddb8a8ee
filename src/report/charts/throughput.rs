//! Throughput per condition: bar = median of rounds, dots = runs, whisker = 95 % CI.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{
    DrawResult, Mark, TITLE, category_labels, color, legend, mesh, per_second, with_legend_panel,
};

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE)?;
    let (plot, panel) = with_legend_panel(root);
    let conds = &d.analysis.conditions;
    let top = conds
        .iter()
        .map(|c| c.img_per_s_max.max(c.img_per_s.high))
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.1;
    let n = conds.len() as f64;
    let mut chart = ChartBuilder::on(&plot)
        .caption("Throughput per condition (timed runs, no profiler)", TITLE)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(80)
        .build_cartesian_2d(-0.6f64..(n - 0.4), 0f64..top)?;
    mesh!(chart)
        .disable_x_mesh()
        .x_labels(conds.len().max(1) * 2 + 1)
        .x_label_formatter(&category_labels(&d.conditions))
        .y_label_formatter(&per_second)
        .x_desc("condition")
        .y_desc("images per second")
        .draw()?;
    for (i, c) in conds.iter().enumerate() {
        let x = i as f64;
        chart.draw_series([Rectangle::new(
            [(x - 0.3, 0.0), (x + 0.3, c.img_per_s.point)],
            color(i).mix(0.55).filled(),
        )])?;
        let dots: Vec<f64> = d
            .analysis
            .runs
            .iter()
            .filter(|r| r.condition == c.condition && !r.interrupted)
            .map(|r| r.img_per_s)
            .collect();
        let k = dots.len().max(1) as f64;
        chart.draw_series(dots.iter().enumerate().map(|(j, v)| {
            Circle::new(
                (x - 0.15 + 0.3 * (j as f64 + 0.5) / k, *v),
                4,
                BLACK.filled(),
            )
        }))?;
        let (lo, hi) = (c.img_per_s.low, c.img_per_s.high);
        if lo.is_finite() && hi.is_finite() {
            chart.draw_series([
                PathElement::new(vec![(x, lo), (x, hi)], BLACK.stroke_width(2)),
                PathElement::new(vec![(x - 0.08, lo), (x + 0.08, lo)], BLACK.stroke_width(2)),
                PathElement::new(vec![(x - 0.08, hi), (x + 0.08, hi)], BLACK.stroke_width(2)),
            ])?;
        }
    }
    let mut entries: Vec<(Mark, String)> = d
        .conditions
        .iter()
        .enumerate()
        .map(|(i, name)| (Mark::Bar(color(i).mix(0.55)), name.clone()))
        .collect();
    entries.extend([
        (Mark::Dot(BLACK.to_rgba()), "one timed run".to_string()),
        (Mark::Whisker, "95 % bootstrap CI of the median".to_string()),
    ]);
    legend(&panel, &entries)
}
