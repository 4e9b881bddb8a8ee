//! Model compute against workers: for each worker count, the waiting share (top) and the
//! speed-up over the fewest workers (bottom, with its 95 % CI) against the compute time per
//! step of each model setting (log scale). Drawn only when analysis found a model-scale
//! matrix.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::ChartData;
use super::style::{DrawResult, LABEL, Mark, TITLE, color, legend, mesh, plain, with_legend_panel};
use crate::analysis::{ModelScale, ScalePoint};

/// Every worker count of the groups, ascending.
fn worker_counts(m: &ModelScale) -> Vec<u64> {
    let mut w: Vec<u64> = m
        .groups
        .iter()
        .flat_map(|g| g.points.iter().map(|p| p.workers))
        .collect();
    w.sort_unstable();
    w.dedup();
    w
}

pub fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE)?;
    let Some(m) = &d.analysis.model_scale else {
        return Ok(());
    };
    let (plot, panel) = with_legend_panel(root);
    let (top_area, bottom_area) = plot.split_vertically(plot.dim_in_pixel().1 / 2);
    let xs: Vec<f64> = m
        .groups
        .iter()
        .map(|g| g.compute_ms)
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min).min(1e6) / 1.5;
    let hi = xs.iter().copied().fold(0.0, f64::max).max(lo * 2.0) * 1.5;
    let counts = worker_counts(m);
    draw_waits(&top_area, m, (lo, hi), &counts)?;
    draw_speedups(&bottom_area, m, (lo, hi), &counts)?;
    let mut entries: Vec<(Mark, String)> = counts
        .iter()
        .enumerate()
        .map(|(k, w)| (Mark::Line(color(k).mix(1.0)), format!("workers={w}")))
        .collect();
    entries.push((Mark::Whisker, "95 % CI of the speed-up".into()));
    for g in &m.groups {
        entries.push((
            Mark::Dot(BLACK.mix(0.0)),
            format!("{}: {} ms", g.label, plain(&g.compute_ms)),
        ));
    }
    legend(&panel, &entries)
}

/// The points of the `w`-workers line: (compute ms, point) of every group that measured it.
fn series(m: &ModelScale, w: u64) -> Vec<(f64, &ScalePoint)> {
    m.groups
        .iter()
        .filter_map(|g| {
            let p = g.points.iter().find(|p| p.workers == w)?;
            (g.compute_ms > 0.0).then_some((g.compute_ms, p))
        })
        .collect()
}

/// Top: the waiting share per worker count, each model setting named at its point.
fn draw_waits<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    m: &ModelScale,
    (lo, hi): (f64, f64),
    counts: &[u64],
) -> DrawResult {
    let wait_top = m
        .groups
        .iter()
        .flat_map(|g| g.points.iter().map(|p| p.wait_share * 100.0))
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max)
        * 1.1;
    let mut top = ChartBuilder::on(area)
        .caption("Model compute against workers", TITLE)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..wait_top)?;
    mesh!(top)
        .x_label_formatter(&plain)
        .y_label_formatter(&plain)
        .x_desc("compute per step, ms (log scale)")
        .y_desc("waiting share, %")
        .draw()?;
    for (k, w) in counts.iter().enumerate() {
        let pts: Vec<(f64, f64)> = series(m, *w)
            .iter()
            .map(|(x, p)| (*x, p.wait_share * 100.0))
            .collect();
        let c = color(k);
        top.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?;
        top.draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))?;
    }

    // Each model setting named at its point of the fewest-workers line.
    let label_font = LABEL.into_font().color(&BLACK.mix(0.8));
    let last = m.groups.len().saturating_sub(1);
    let labels = m
        .groups
        .iter()
        .enumerate()
        .filter(|(_, g)| g.compute_ms > 0.0)
        .map(|(k, g)| {
            let y = g.points.first().map_or(0.0, |p| p.wait_share * 100.0);
            // The rightmost label starts left of its point, inside the plot.
            let x = if k == last && k > 0 {
                g.compute_ms / 3.0
            } else {
                g.compute_ms
            };
            Text::new(
                g.label.clone(),
                (x, y + wait_top * 0.06),
                label_font.clone(),
            )
        });
    top.draw_series(labels)?;
    Ok(())
}

/// Bottom: the speed-up over the fewest workers per worker count, with its 95 % CI.
fn draw_speedups<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    m: &ModelScale,
    (lo, hi): (f64, f64),
    counts: &[u64],
) -> DrawResult {
    let ratios: Vec<f64> = m
        .groups
        .iter()
        .flat_map(|g| g.points.iter().filter_map(|p| p.speedup.as_ref()))
        .flat_map(|r| [r.low, r.high, r.point])
        .filter(|v| v.is_finite())
        .collect();
    let r_lo = ratios.iter().copied().fold(1.0, f64::min) * 0.9;
    let r_hi = ratios.iter().copied().fold(1.0, f64::max) * 1.1;
    let mut bottom = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((lo..hi).log_scale(), r_lo..r_hi)?;
    mesh!(bottom)
        .x_label_formatter(&plain)
        .y_label_formatter(&plain)
        .x_desc("compute per step, ms (log scale)")
        .y_desc("speed-up over fewest workers, ×")
        .draw()?;
    bottom.draw_series([PathElement::new(
        vec![(lo, 1.0), (hi, 1.0)],
        BLACK.mix(0.6).stroke_width(1),
    )])?;
    bottom.draw_series([Text::new(
        "1× = no gain".to_string(),
        (lo * 1.05, 1.0),
        LABEL.into_font().color(&BLACK.mix(0.7)),
    )])?;
    for (k, w) in counts.iter().enumerate() {
        let pts: Vec<(f64, &crate::analysis::Estimate)> = series(m, *w)
            .into_iter()
            .filter_map(|(x, p)| Some((x, p.speedup.as_ref()?)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let c = color(k);
        bottom.draw_series(LineSeries::new(
            pts.iter().map(|(x, r)| (*x, r.point)),
            c.stroke_width(2),
        ))?;
        bottom.draw_series(
            pts.iter()
                .map(|(x, r)| Circle::new((*x, r.point), 4, c.filled())),
        )?;
        bottom.draw_series(
            pts.iter()
                .filter(|(_, r)| r.low.is_finite() && r.high.is_finite())
                .map(|(x, r)| PathElement::new(vec![(*x, r.low), (*x, r.high)], c.stroke_width(2))),
        )?;
    }
    Ok(())
}
