//! The first timed steps of each condition's first run, as stacked stage segments.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::style::{
    COMPUTE, DrawResult, H2D, Mark, TITLE, WAIT, category_labels, legend, mesh, plain,
    with_legend_panel,
};
use super::{ChartData, StepTimes};

/// Steps shown per condition.
pub const STEPS: usize = 5;

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE)?;
    let (plot, panel) = with_legend_panel(root);
    let firsts: Vec<Option<&Vec<StepTimes>>> = (0..d.conditions.len())
        .map(|ci| {
            d.runs
                .iter()
                .find(|(c, _, _)| *c == ci)
                .map(|(_, _, rows)| rows)
        })
        .collect();
    let total = firsts
        .iter()
        .flatten()
        .map(|rows| {
            rows.iter()
                .take(STEPS)
                .map(|r| r.segments().iter().sum::<f64>())
                .sum::<f64>()
        })
        .fold(1e-3, f64::max)
        * 1.05;
    let n = d.conditions.len() as f64;
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!("First {STEPS} timed steps of each condition's first run"),
            TITLE,
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(150)
        .build_cartesian_2d(0f64..total, -0.6f64..(n - 0.4))?;
    mesh!(chart)
        .disable_y_mesh()
        .y_labels(d.conditions.len().max(1) * 2 + 1)
        .y_label_formatter(&category_labels(&d.conditions))
        .x_label_formatter(&plain)
        .x_desc("time from the first timed batch request, ms")
        .draw()?;
    const STAGES: [(RGBColor, &str); 3] = [
        (WAIT, "batch_wait"),
        (H2D, "h2d"),
        (COMPUTE, "forward_backward_adam"),
    ];
    for (ci, rows) in firsts.iter().enumerate() {
        let Some(rows) = rows else { continue };
        let y = ci as f64;
        let mut t = 0.0;
        for r in rows.iter().take(STEPS) {
            for (len, (col, _)) in r.segments().into_iter().zip(STAGES) {
                chart.draw_series([Rectangle::new(
                    [(t, y - 0.3), (t + len, y + 0.3)],
                    col.filled(),
                )])?;
                t += len;
            }
            chart.draw_series([PathElement::new(
                vec![(t, y - 0.38), (t, y + 0.38)],
                BLACK.stroke_width(1),
            )])?;
        }
    }
    let mut entries: Vec<(Mark, String)> = STAGES
        .iter()
        .map(|(c, name)| (Mark::Bar(c.to_rgba()), name.to_string()))
        .collect();
    entries.push((Mark::Whisker, "end of a step".to_string()));
    legend(&panel, &entries)
}
