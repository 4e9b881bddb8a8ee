//! What every chart shares: the embedded font, one colour per condition (the same in every
//! chart), the stage colours, a light grid, axis label formats and a legend drawn beside the
//! plot (never over the data).

use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::format::{sig, thousands};

static FONT: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

pub fn register_font() {
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
pub const WAIT: RGBColor = RGBColor(230, 85, 13);
pub const H2D: RGBColor = RGBColor(49, 163, 84);
pub const COMPUTE: RGBColor = RGBColor(49, 130, 189);
pub const GRID_LIGHT: RGBColor = RGBColor(238, 238, 238);
pub const GRID_BOLD: RGBColor = RGBColor(215, 215, 215);

pub const TITLE: (&str, u32) = ("sans-serif", 22);
pub const LABEL: (&str, u32) = ("sans-serif", 15);
/// Width of the legend panel at the right of every chart.
pub const LEGEND_WIDTH: u32 = 270;

/// The colour of condition `i` (its index in the plan), in every chart.
pub fn color(i: usize) -> RGBColor {
    COLORS[i % COLORS.len()]
}

/// A chart that could not be drawn or written, with the reason (the drawing back end's, or
/// the missing column's).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ChartError(pub String);

impl<E: std::error::Error + Send + Sync> From<DrawingAreaErrorKind<E>> for ChartError {
    fn from(err: DrawingAreaErrorKind<E>) -> Self {
        ChartError(err.to_string())
    }
}

pub type DrawResult = Result<(), ChartError>;

/// The mesh of every chart: a light grid (faint minor lines, slightly darker major ones) and
/// the shared label fonts. A macro because plotters' mesh type carries the axis types.
macro_rules! mesh {
    ($chart:expr) => {
        $chart
            .configure_mesh()
            .light_line_style(crate::report::charts::style::GRID_LIGHT)
            // One minor line between major ones (plotters draws up to ten by default: a line
            // every 0.01 on a 0–1 axis).
            .max_light_lines(1)
            .bold_line_style(crate::report::charts::style::GRID_BOLD)
            .label_style(crate::report::charts::style::LABEL)
            .axis_desc_style(crate::report::charts::style::LABEL)
    };
}
pub(crate) use mesh;

/// Axis labels: a count or step as an integer (no "5.0"), skipping non-integer ticks.
pub fn integer(v: &f64) -> String {
    let r = v.round();
    if (v - r).abs() < 1e-9 {
        format!("{r:.0}")
    } else {
        String::new()
    }
}

/// Axis labels: img/s with thousands separators.
pub fn per_second(v: &f64) -> String {
    thousands(*v)
}

/// Axis labels: a measured quantity (ms) with no float noise or padding: "0.3", "50", not
/// "0.30000000000000004" or "50.0".
pub fn plain(v: &f64) -> String {
    let s = sig(*v);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Axis labels: a category (condition) name at each integer position.
pub fn category_labels(names: &[String]) -> impl Fn(&f64) -> String + '_ {
    move |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            names.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    }
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
pub enum Mark {
    Bar(RGBAColor),
    Dot(RGBAColor),
    Line(RGBAColor),
    Whisker,
}

/// Split a chart's area into the plot (left) and the legend panel (right).
pub fn with_legend_panel<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
) -> (DrawingArea<DB, Shift>, DrawingArea<DB, Shift>) {
    let (w, _) = root.dim_in_pixel();
    root.split_horizontally(w.saturating_sub(LEGEND_WIDTH))
}

/// The legend entries, top-down in the panel beside the plot.
pub fn legend<DB: DrawingBackend>(
    panel: &DrawingArea<DB, Shift>,
    entries: &[(Mark, String)],
) -> DrawResult {
    let font = ("sans-serif", 14).into_font().color(&BLACK);
    for (k, (mark, text)) in entries.iter().enumerate() {
        let y = 60 + 24 * k as i32;
        let x = 12;
        match *mark {
            Mark::Bar(c) => {
                panel.draw(&Rectangle::new([(x, y - 6), (x + 14, y + 6)], c.filled()))?
            }
            Mark::Dot(c) => panel.draw(&Circle::new((x + 7, y), 4, c.filled()))?,
            Mark::Line(c) => panel.draw(&PathElement::new(
                vec![(x, y), (x + 16, y)],
                c.stroke_width(3),
            ))?,
            Mark::Whisker => panel.draw(&PathElement::new(
                vec![(x + 7, y - 7), (x + 7, y + 7)],
                BLACK.stroke_width(2),
            ))?,
        }
        panel.draw(&Text::new(text.clone(), (x + 24, y - 8), font.clone()))?;
    }
    Ok(())
}
/// The set-up every step-time chart shares (the runs' step times, a profiled trace's steps): a
/// white ground, the legend panel, x the step index over the longest series, y from 0 to a
/// tenth above the largest finite value, the caption, the grid and integer step labels.
/// Returns the chart and the legend panel.
pub fn step_chart<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    lengths: impl Iterator<Item = usize>,
    values: impl Iterator<Item = f64>,
) -> Result<(StepChart<'a, DB>, DrawingArea<DB, Shift>), ChartError> {
    root.fill(&WHITE)?;
    let (plot, panel) = with_legend_panel(root);
    let steps = lengths.max().unwrap_or(1).max(2);
    let top = values.filter(|v| v.is_finite()).fold(1e-3, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&plot)
        .caption(caption, TITLE)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..(steps - 1) as f64, 0f64..top)?;
    mesh!(chart)
        // At most one label per step: integer ticks only.
        .x_labels(steps.min(11))
        .x_label_formatter(&integer)
        .y_label_formatter(&plain)
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()?;
    Ok((chart, panel))
}

/// A chart over step indices and milliseconds.
pub type StepChart<'a, DB> = ChartContext<
    'a,
    DB,
    plotters::coord::cartesian::Cartesian2d<
        plotters::coord::types::RangedCoordf64,
        plotters::coord::types::RangedCoordf64,
    >,
>;
