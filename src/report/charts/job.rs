//! A watched job, every step over the whole run: the step time and its wait for a batch, with
//! the epochs' boundaries.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{DrawResult, Mark, color, legend, step_chart};

/// The most points a line holds: a longer job is drawn as the means of consecutive steps.
const POINTS: usize = 2000;

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    let per = d.job.len().div_ceil(POINTS).max(1);
    // (epoch of the bucket's first step, mean step ms, mean wait ms) per bucket of `per` steps.
    let steps: Vec<(i64, f64, f64)> = d
        .job
        .chunks(per)
        .map(|c| {
            let n = c.len() as f64;
            (
                c[0].0,
                c.iter().map(|s| s.1).sum::<f64>() / n,
                c.iter().map(|s| s.2).sum::<f64>() / n,
            )
        })
        .collect();
    let caption = if per > 1 {
        format!("Every step of the watched job (means of {per} steps)")
    } else {
        "Every step of the watched job".to_string()
    };
    let x_desc = if per > 1 {
        format!("step ÷ {per}")
    } else {
        "step".to_string()
    };
    let (mut chart, panel) = step_chart(
        root,
        &caption,
        &x_desc,
        "ms",
        std::iter::once(steps.len()),
        steps.iter().map(|s| s.1),
    )?;
    let top = steps
        .iter()
        .map(|s| s.1)
        .filter(|v| v.is_finite())
        .fold(1e-3, f64::max)
        * 1.1;
    let boundary = RGBColor(150, 150, 150).mix(0.7);
    for i in 1..steps.len() {
        if steps[i].0 != steps[i - 1].0 {
            let x = i as f64 - 0.5;
            chart.draw_series(LineSeries::new(
                [(x, 0.0), (x, top)],
                boundary.stroke_width(1),
            ))?;
        }
    }
    let (step, wait) = (color(0).mix(0.8), color(1).mix(0.9));
    chart.draw_series(LineSeries::new(
        steps.iter().enumerate().map(|(i, s)| (i as f64, s.1)),
        step.stroke_width(1),
    ))?;
    chart.draw_series(LineSeries::new(
        steps.iter().enumerate().map(|(i, s)| (i as f64, s.2)),
        wait.stroke_width(1),
    ))?;
    legend(
        &panel,
        &[
            (Mark::Line(step), "step".into()),
            (Mark::Line(wait), "wait for a batch".into()),
            (Mark::Line(boundary), "epoch boundary".into()),
        ],
    )
}
