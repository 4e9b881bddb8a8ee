//! Per-rank waits of every node condition: for each rank its median wait for a batch and,
//! stacked on it, its median wait at the barrier — a straggler shows as one tall wait bar
//! beside tall barrier bars.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{
    DrawResult, Mark, TITLE, WAIT, category_labels, legend, mesh, plain, with_legend_panel,
};

/// The barrier's colour: the waiting colour's neighbour, lighter.
const SYNC: RGBColor = RGBColor(158, 154, 200);

/// (rank label, batch_wait p50, barrier wait p50, is the straggler) per rank of every node.
fn bars(d: &ChartData) -> Vec<(String, f64, f64, bool)> {
    d.analysis
        .conditions
        .iter()
        .filter_map(|c| c.node.as_ref())
        .flat_map(|n| {
            n.ranks.iter().map(move |r| {
                (
                    format!("r{}", r.rank),
                    r.batch_wait_median_ms,
                    r.sync_median_ms,
                    n.straggler == Some(r.rank),
                )
            })
        })
        .collect()
}

/// Each node condition's name and its first and last bar.
fn groups(d: &ChartData) -> Vec<(String, usize, usize)> {
    let mut at = 0;
    d.analysis
        .conditions
        .iter()
        .filter_map(|c| c.node.as_ref().map(|n| (c, n.ranks.len())))
        .map(|(c, n)| {
            at += n;
            (c.condition.clone(), at - n, at - 1)
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
    root.fill(&WHITE)?;
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
        .build_cartesian_2d(-0.6f64..(n - 0.4), 0f64..top)?;
    mesh!(chart)
        .disable_x_mesh()
        .x_labels(bars.len().max(1) * 2 + 1)
        .x_label_formatter(&category_labels(&labels))
        .y_label_formatter(&plain)
        .x_desc("rank (each condition's ranks under its name)")
        .y_desc("ms per step (median over its steps)")
        .draw()?;
    for (i, (_, wait, sync, straggler)) in bars.iter().enumerate() {
        let x = i as f64;
        let (wait, sync) = (wait.max(0.0), sync.max(0.0));
        chart.draw_series([
            Rectangle::new([(x - 0.3, 0.0), (x + 0.3, wait)], WAIT.mix(0.8).filled()),
            Rectangle::new([(x - 0.3, wait), (x + 0.3, wait + sync)], SYNC.filled()),
        ])?;
        if *straggler {
            chart.draw_series([Rectangle::new(
                [(x - 0.34, 0.0), (x + 0.34, wait + sync)],
                BLACK.stroke_width(2),
            )])?;
        }
    }
    // Each condition's name over its ranks, a line between conditions.
    let font = ("sans-serif", 14).into_font().color(&BLACK);
    for (k, (name, first, last)) in groups(d).iter().enumerate() {
        let centre = (*first + *last) as f64 / 2.0;
        chart.draw_series([Text::new(
            name.clone(),
            (centre - 0.3, top / 1.15 * 1.1),
            font.clone(),
        )])?;
        if k > 0 {
            let x = *first as f64 - 0.5;
            chart.draw_series([PathElement::new(
                vec![(x, 0.0), (x, top)],
                BLACK.mix(0.4).stroke_width(1),
            )])?;
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
