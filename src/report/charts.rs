//! The report's charts, drawn with plotters to SVG and PNG with an embedded font (no system
//! fonts are assumed): throughput per condition, batch-wait distribution, the first timed steps
//! as a timeline, and step time over each run.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;

use crate::analysis::{Analysis, median};
use crate::config::ImageFormat;
use crate::results::Raw;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

fn register_font() {
    REGISTER.call_once(|| {
        // The font is compiled in; a failure here would be a corrupt build.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];
const WAIT: RGBColor = RGBColor(230, 85, 13);
const H2D: RGBColor = RGBColor(49, 163, 84);
const COMPUTE: RGBColor = RGBColor(49, 130, 189);

fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

type DrawResult = Result<(), String>;

fn e<E: std::fmt::Display>(err: E) -> String {
    err.to_string()
}

/// One step's (batch_wait, h2d, compute, step) in ms.
pub type StepTimes = [f64; 4];

/// Data the charts need, taken once from the raw steps.
pub struct ChartData<'a> {
    pub analysis: &'a Analysis,
    pub conditions: Vec<String>,
    /// (condition index, run, steps' (batch_wait, h2d, compute, step) ms).
    pub runs: Vec<(usize, i64, Vec<StepTimes>)>,
}

impl<'a> ChartData<'a> {
    pub fn new(raw: &Raw, analysis: &'a Analysis) -> Result<Self, String> {
        let conditions: Vec<String> = analysis
            .conditions
            .iter()
            .map(|c| c.condition.clone())
            .collect();
        let df = &raw.steps;
        let col = |n: &str| -> Result<Vec<f64>, String> {
            let c = df
                .column(n)
                .map_err(e)?
                .cast(&polars::prelude::DataType::Float64)
                .map_err(e)?;
            Ok(c.f64()
                .map_err(e)?
                .iter()
                .map(|v| v.unwrap_or(f64::NAN))
                .collect())
        };
        let run_col = col("run")?;
        let step_col = col("step")?;
        let (w, h, c, s) = (
            col("batch_wait_ms")?,
            col("h2d_ms")?,
            col("compute_ms")?,
            col("step_ms")?,
        );
        let mut runs = Vec::new();
        for r in &analysis.runs {
            let Some(ci) = conditions.iter().position(|n| *n == r.condition) else {
                continue;
            };
            let mut rows: Vec<(f64, StepTimes)> = (0..run_col.len())
                .filter(|&i| run_col[i] as i64 == r.run)
                .map(|i| (step_col[i], [w[i], h[i], c[i], s[i]]))
                .collect();
            rows.sort_by(|a, b| a.0.total_cmp(&b.0));
            runs.push((ci, r.run, rows.into_iter().map(|(_, v)| v).collect()));
        }
        Ok(ChartData {
            analysis,
            conditions,
            runs,
        })
    }
}

macro_rules! render {
    ($dir:expr, $name:expr, $formats:expr, $size:expr, $draw:ident, $data:expr) => {{
        let mut written = Vec::new();
        for format in $formats {
            let path = $dir.join(format!(
                "{}.{}",
                $name,
                match format {
                    ImageFormat::Svg => "svg",
                    ImageFormat::Png => "png",
                }
            ));
            match format {
                ImageFormat::Svg => {
                    let root = SVGBackend::new(&path, $size).into_drawing_area();
                    $draw(&root, $data)?;
                    root.present().map_err(e)?;
                }
                ImageFormat::Png => {
                    let root = BitMapBackend::new(&path, $size).into_drawing_area();
                    $draw(&root, $data)?;
                    root.present().map_err(e)?;
                }
            }
            written.push(path);
        }
        written
    }};
}

/// Draw every chart into `dir`; returns the chart names written (without extension).
pub fn draw_all(
    dir: &Path,
    formats: &[ImageFormat],
    data: &ChartData,
) -> Result<Vec<(String, Vec<PathBuf>)>, String> {
    register_font();
    std::fs::create_dir_all(dir)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    let n = data.conditions.len().max(1) as u32;
    let wide = (900u32.max(160 * n + 200), 520u32);
    Ok(vec![
        (
            "throughput".into(),
            render!(dir, "throughput", formats, wide, throughput, data),
        ),
        (
            "batch_wait".into(),
            render!(dir, "batch_wait", formats, wide, batch_wait, data),
        ),
        (
            "timeline".into(),
            render!(
                dir,
                "timeline",
                formats,
                (1000, 160 + 70 * n),
                timeline,
                data
            ),
        ),
        (
            "step_time".into(),
            render!(dir, "step_time", formats, (1000, 520), step_time, data),
        ),
    ])
}

/// The legend box, alike on every chart.
fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    position: SeriesLabelPosition,
) -> DrawResult {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(e)
}

fn category_labels(names: &[String]) -> impl Fn(&f64) -> String + '_ {
    move |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            names.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    }
}

fn throughput<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE).map_err(e)?;
    let conds = &d.analysis.conditions;
    let top = conds
        .iter()
        .map(|c| c.img_per_s_max.max(c.img_per_s_ci.1))
        .filter(|v| v.is_finite())
        .fold(1.0f64, f64::max)
        * 1.15;
    let n = conds.len() as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Throughput per condition (timed runs, no profiler)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.6f64..(n - 0.4), 0f64..top)
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(conds.len().max(1) * 2 + 1)
        .x_label_formatter(&category_labels(&d.conditions))
        .x_desc("condition")
        .y_desc("images per second")
        .draw()
        .map_err(e)?;
    for (i, c) in conds.iter().enumerate() {
        let x = i as f64;
        let bar = chart
            .draw_series([Rectangle::new(
                [(x - 0.3, 0.0), (x + 0.3, c.img_per_s_median)],
                color(i).mix(0.55).filled(),
            )])
            .map_err(e)?;
        if i == 0 {
            bar.label("median of rounds (bar)").legend(|(x, y)| {
                Rectangle::new([(x, y - 5), (x + 12, y + 5)], color(0).mix(0.55).filled())
            });
        }
        let dots: Vec<f64> = d
            .analysis
            .runs
            .iter()
            .filter(|r| r.condition == c.condition && !r.interrupted)
            .map(|r| r.img_per_s)
            .collect();
        let k = dots.len().max(1) as f64;
        let series = chart
            .draw_series(dots.iter().enumerate().map(|(j, v)| {
                Circle::new(
                    (x - 0.15 + 0.3 * (j as f64 + 0.5) / k, *v),
                    4,
                    BLACK.filled(),
                )
            }))
            .map_err(e)?;
        if i == 0 {
            series
                .label("one timed run (dot)")
                .legend(|(x, y)| Circle::new((x + 6, y), 4, BLACK.filled()));
        }
        let (lo, hi) = c.img_per_s_ci;
        if lo.is_finite() && hi.is_finite() {
            let whisker = chart
                .draw_series([
                    PathElement::new(vec![(x, lo), (x, hi)], BLACK.stroke_width(2)),
                    PathElement::new(vec![(x - 0.08, lo), (x + 0.08, lo)], BLACK.stroke_width(2)),
                    PathElement::new(vec![(x - 0.08, hi), (x + 0.08, hi)], BLACK.stroke_width(2)),
                ])
                .map_err(e)?;
            if i == 0 {
                whisker
                    .label("95 % bootstrap CI of the median (whisker)")
                    .legend(|(x, y)| {
                        PathElement::new(
                            vec![(x + 6, y - 6), (x + 6, y + 6)],
                            BLACK.stroke_width(2),
                        )
                    });
            }
        }
    }
    legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

fn batch_wait<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE).map_err(e)?;
    const FLOOR_MS: f64 = 1e-3;
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); d.conditions.len()];
    for (ci, _, rows) in &d.runs {
        per[*ci].extend(rows.iter().map(|r| r[0].max(FLOOR_MS)));
    }
    let hi = per
        .iter()
        .flatten()
        .copied()
        .fold(FLOOR_MS * 10.0, f64::max)
        * 2.0;
    let n = d.conditions.len() as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Time waiting for each batch (all timed steps)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.6f64..(n - 0.4), (FLOOR_MS..hi).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(d.conditions.len().max(1) * 2 + 1)
        .x_label_formatter(&category_labels(&d.conditions))
        .y_label_formatter(&|v| format!("{v}"))
        .x_desc("condition")
        .y_desc("batch_wait per step, ms (log scale)")
        .draw()
        .map_err(e)?;
    for (i, values) in per.iter().enumerate() {
        let x = i as f64;
        let dots = chart
            .draw_series(values.iter().enumerate().map(|(j, v)| {
                // Spread the dots sideways by a deterministic jitter so they stay visible.
                let jitter = ((j as f64 * 0.618_034) % 1.0 - 0.5) * 0.5;
                Circle::new((x + jitter, *v), 2, color(i).mix(0.5).filled())
            }))
            .map_err(e)?;
        dots.label(format!("{} (one dot per step)", d.conditions[i]))
            .legend(move |(x, y)| Circle::new((x + 6, y), 4, color(i).filled()));
        let m = median(values);
        if m.is_finite() {
            chart
                .draw_series([PathElement::new(
                    vec![(x - 0.35, m), (x + 0.35, m)],
                    BLACK.stroke_width(3),
                )])
                .map_err(e)?;
        }
    }
    chart
        .draw_series([PathElement::new(
            vec![(-0.6, FLOOR_MS), (-0.6, FLOOR_MS)],
            BLACK.stroke_width(3),
        )])
        .map_err(e)?
        .label("median")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], BLACK.stroke_width(3)));
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// The first five timed steps of each condition's first run, as stacked segments.
fn timeline<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE).map_err(e)?;
    const STEPS: usize = 5;
    let firsts: Vec<Option<&Vec<[f64; 4]>>> = (0..d.conditions.len())
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
                .map(|r| r[0] + r[1] + r[2])
                .sum::<f64>()
        })
        .fold(1e-3, f64::max)
        * 1.05;
    let n = d.conditions.len() as f64;
    let labels = d.conditions.clone();
    let mut chart = ChartBuilder::on(root)
        .caption(
            format!("First {STEPS} timed steps of each condition's first run"),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(150)
        .build_cartesian_2d(0f64..total, -0.6f64..(n - 0.4))
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(d.conditions.len().max(1) * 2 + 1)
        .y_label_formatter(&category_labels(&labels))
        .x_desc("time from the first timed batch request, ms")
        .draw()
        .map_err(e)?;
    let mut legend_done = false;
    for (ci, rows) in firsts.iter().enumerate() {
        let Some(rows) = rows else { continue };
        let y = ci as f64;
        let mut t = 0.0;
        for r in rows.iter().take(STEPS) {
            for (k, (len, col, name)) in [
                (r[0], WAIT, "batch_wait"),
                (r[1], H2D, "h2d"),
                (r[2], COMPUTE, "forward_backward_adam"),
            ]
            .into_iter()
            .enumerate()
            {
                let seg = chart
                    .draw_series([Rectangle::new(
                        [(t, y - 0.3), (t + len, y + 0.3)],
                        col.filled(),
                    )])
                    .map_err(e)?;
                if !legend_done {
                    seg.label(name).legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], col.filled())
                    });
                    if k == 2 {
                        legend_done = true;
                    }
                }
                t += len;
            }
            chart
                .draw_series([PathElement::new(
                    vec![(t, y - 0.38), (t, y + 0.38)],
                    BLACK.stroke_width(1),
                )])
                .map_err(e)?;
        }
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    Ok(())
}

fn step_time<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, d: &ChartData) -> DrawResult {
    root.fill(&WHITE).map_err(e)?;
    let steps = d
        .runs
        .iter()
        .map(|(_, _, r)| r.len())
        .max()
        .unwrap_or(1)
        .max(2) as f64;
    let top = d
        .runs
        .iter()
        .flat_map(|(_, _, r)| r.iter().map(|v| v[3]))
        .filter(|v| v.is_finite())
        .fold(1e-3, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(root)
        .caption("Step time over each timed run", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..(steps - 1.0), 0f64..top)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("timed step")
        .y_desc("step time, ms")
        .draw()
        .map_err(e)?;
    let mut labelled = vec![false; d.conditions.len()];
    for (ci, _, rows) in &d.runs {
        let series = chart
            .draw_series(LineSeries::new(
                rows.iter().enumerate().map(|(i, r)| (i as f64, r[3])),
                color(*ci).mix(0.8).stroke_width(2),
            ))
            .map_err(e)?;
        if !labelled[*ci] {
            let c = color(*ci);
            series
                .label(d.conditions[*ci].clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 14, y)], c.stroke_width(2))
                });
            labelled[*ci] = true;
        }
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}
