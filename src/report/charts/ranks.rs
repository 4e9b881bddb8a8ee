//! Per-rank waits of every node condition: for each rank its median wait for a batch and,
//! stacked on it, its median wait at the barrier — a straggler shows as one tall wait bar
//! beside tall barrier bars.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{
    DrawResult, Mark, TITLE, WAIT, category_labels, e, legend, mesh, plain, with_legend_panel,
};

/// The barrier's colour: the waiting colour's neighbour, lighter.
const SYNC: RGBColor = RGBColor(158, 154, 200);

/// (label, batch_wait p50, barrier wait p50, is the straggler) per rank of every node.
fn bars(d: &ChartData) -> Vec<(String, f64, f64, bool)> {
    d.analysis
        .conditions
        .iter()
        .filter_map(|c| c.node.as_ref().map(|n| (c, n)))
        .flat_map(|(c, n)| {
            n.ranks.iter().map(move |r| {
                (
                    format!("{} r{}", c.condition, r.rank),
                    r.batch_wait_median_ms,
                    r.sync_median_ms,
                    n.straggler == Some(r.rank),
                )
            })
        })
        .collect()
}

/// Whether any condition ran several ranks.
pub fn drawn(d: &ChartData) -> bool {
    d.analysis.conditions.iter().any(|c| c.node.is_some())
}

/// The chart's width for its bars.
pub fn width(d: &ChartData) -> u32 {
    900u32.max(70 * bars(d).len() as u32 + 200)
}

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE).map_err(e)?;
    let (plot, panel) = with_legend_panel(root);
    let bars = bars(d);
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let top = bars
        .iter()
        .map(|b| b.1.max(0.0) + b.2.max(0.0))
        .fold(0.0f64, f64::max)
        .max(0.01)
        * 1.15;
    let n = bars.len() as f64;
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            "Each rank's median wait: for a batch, then at the barrier",
            TITLE,
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.6f64..(n - 0.4), 0f64..top)
        .map_err(e)?;
    mesh!(chart)
        .disable_x_mesh()
        .x_labels(bars.len().max(1) * 2 + 1)
        .x_label_formatter(&category_labels(&labels))
        .y_label_formatter(&plain)
        .x_desc("condition and rank")
        .y_desc("ms per step (median over its steps)")
        .draw()
        .map_err(e)?;
    for (i, (_, wait, sync, straggler)) in bars.iter().enumerate() {
        let x = i as f64;
        let (wait, sync) = (wait.max(0.0), sync.max(0.0));
        chart
            .draw_series([
                Rectangle::new([(x - 0.3, 0.0), (x + 0.3, wait)], WAIT.mix(0.8).filled()),
                Rectangle::new([(x - 0.3, wait), (x + 0.3, wait + sync)], SYNC.filled()),
            ])
            .map_err(e)?;
        if *straggler {
            chart
                .draw_series([Rectangle::new(
                    [(x - 0.34, 0.0), (x + 0.34, wait + sync)],
                    BLACK.stroke_width(2),
                )])
                .map_err(e)?;
        }
    }
    legend(
        &panel,
        &[
            (Mark::Bar(WAIT.mix(0.8)), "waiting for a batch".into()),
            (Mark::Bar(SYNC.to_rgba()), "waiting at the barrier".into()),
            (Mark::Line(BLACK.to_rgba()), "outline: the straggler".into()),
        ],
    )
}
