//! The report's charts, drawn with plotters to SVG and PNG with an embedded font (no system
//! fonts are assumed), one file per chart over a shared [`style`]: throughput per condition,
//! the batch-wait distribution, the first timed steps as a timeline, and step time over each
//! run, and, for a model-scale matrix, compute against workers. [`CHARTS`] lists every chart's name (= file name) and caption once.

mod batch_wait;
mod job;
mod model_scale;
mod ranks;
mod resources;
mod stages;
mod step_time;
pub(crate) mod style;
mod throughput;
mod timeline;

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::analysis::Analysis;
use crate::config::ImageFormat;
use crate::results::column;
use crate::results::{Raw, f64s};
use style::{ChartError, register_font};

/// A chart of the report: its name (the file is `charts/<name>.svg|png`) and its caption.
pub struct ChartSpec {
    pub name: &'static str,
    pub caption: &'static str,
}

/// Every chart, in report order.
pub const CHARTS: [ChartSpec; 9] = [
    ChartSpec {
        name: "throughput",
        caption: "Throughput per condition: bar = median of rounds, dots = runs, whisker = 95 % bootstrap CI of the median.",
    },
    ChartSpec {
        name: "batch_wait",
        caption: "Time spent waiting for each batch, every timed step (log scale); the bar marks the median.",
    },
    ChartSpec {
        name: "timeline",
        caption: "The first five timed steps of each condition's first run: batch_wait, h2d and compute segments.",
    },
    ChartSpec {
        name: "job",
        caption: "A watched job: every step's time and its wait for a batch over the whole run, epochs marked.",
    },
    ChartSpec {
        name: "step_time",
        caption: "Step time over each timed run.",
    },
    ChartSpec {
        name: "stages",
        caption: "The loader's work per image by stage, from each profiled run's stage clocks (per-image stages timed on one image in 8; per-batch stages divided by the batch size). The time workers sat idle with a full queue is in the table above, not here.",
    },
    ChartSpec {
        name: "resources",
        caption: "What each condition cost the machine: peak resident memory inside the timed window (top) and cores busy, the process's CPU time over the window's wall time (bottom); medians over its timed runs.",
    },
    ChartSpec {
        name: "ranks",
        caption: "Several ranks per node: each rank's median wait for a batch, and stacked on it its median wait at the barrier after the step; the straggler, when one is named, is outlined.",
    },
    ChartSpec {
        name: "model_scale",
        caption: "Model compute against workers (only when the matrix varies a model setting and the worker count): waiting share (top) and speed-up over the fewest workers with its 95 % CI (bottom) against each model setting's compute per step.",
    },
];

/// One timed step's times, ms (steps.csv's columns of the same names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTimes {
    pub batch_wait_ms: f64,
    pub h2d_ms: f64,
    pub compute_ms: f64,
    pub step_ms: f64,
}

impl StepTimes {
    /// The step's segments in order: batch_wait, h2d, compute.
    pub fn segments(&self) -> [f64; 3] {
        [self.batch_wait_ms, self.h2d_ms, self.compute_ms]
    }
}

/// Data the charts need, taken once from the raw steps.
pub struct ChartData<'a> {
    pub analysis: &'a Analysis,
    pub conditions: Vec<String>,
    /// (condition index, run, its timed steps in order).
    pub runs: Vec<(usize, i64, Vec<StepTimes>)>,
    /// A watched job's every step in order: (epoch, step ms, wait ms); empty elsewhere.
    pub job: Vec<(i64, f64, f64)>,
}

impl<'a> ChartData<'a> {
    pub fn new(raw: &Raw, analysis: &'a Analysis) -> Result<Self, ChartError> {
        let conditions: Vec<String> = analysis
            .conditions
            .iter()
            .map(|c| c.condition.clone())
            .collect();
        let col = |n: &str| f64s(&raw.steps, n).map_err(|m| ChartError(m.to_string()));
        let run_col = col(column::RUN)?;
        let step_col = col(column::STEP)?;
        let (w, h, c, s) = (
            col(column::BATCH_WAIT_MS)?,
            col(column::H2D_MS)?,
            col(column::COMPUTE_MS)?,
            col(column::STEP_MS)?,
        );
        let mut runs = Vec::new();
        for r in &analysis.runs {
            let Some(ci) = conditions.iter().position(|n| *n == r.condition) else {
                continue;
            };
            let mut rows: Vec<(f64, StepTimes)> = (0..run_col.len())
                .filter(|&i| run_col[i] as i64 == r.run)
                .map(|i| {
                    let times = StepTimes {
                        batch_wait_ms: w[i],
                        h2d_ms: h[i],
                        compute_ms: c[i],
                        step_ms: s[i],
                    };
                    (step_col[i], times)
                })
                .collect();
            rows.sort_by(|a, b| a.0.total_cmp(&b.0));
            runs.push((ci, r.run, rows.into_iter().map(|(_, v)| v).collect()));
        }
        let watched = raw
            .meta
            .conditions
            .iter()
            .any(|c| matches!(c.engine, crate::results::EngineRecord::Watched { .. }));
        let job = if watched {
            let epoch = col(column::EPOCH)?;
            (0..s.len())
                .map(|i| (epoch[i] as i64, s[i], w[i]))
                .collect()
        } else {
            Vec::new()
        };
        Ok(ChartData {
            analysis,
            conditions,
            runs,
            job,
        })
    }
}

macro_rules! render {
    ($dir:expr, $name:expr, $formats:expr, $size:expr, $draw:path, $data:expr) => {{
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
                    root.present()?;
                }
                ImageFormat::Png => {
                    let root = BitMapBackend::new(&path, $size).into_drawing_area();
                    $draw(&root, $data)?;
                    root.present()?;
                }
            }
            written.push(path);
        }
        written
    }};
}

/// Draw every chart of [`CHARTS`] into `dir`; returns each chart's name and files.
pub fn draw_all(
    dir: &Path,
    formats: &[ImageFormat],
    data: &ChartData,
) -> Result<Vec<(String, Vec<PathBuf>)>, ChartError> {
    register_font();
    std::fs::create_dir_all(dir)
        .map_err(|err| ChartError(format!("cannot create {}: {err}", dir.display())))?;
    let n = data.conditions.len().max(1) as u32;
    let legend = style::LEGEND_WIDTH;
    let wide = (900u32.max(160 * n + 200) + legend, 520u32);
    let mut out = Vec::new();
    for spec in &CHARTS {
        let absent = match spec.name {
            "model_scale" => data.analysis.model_scale.is_none(),
            "job" => data.job.is_empty(),
            // A watched job: its every-step chart stands for these.
            "timeline" | "step_time" | "throughput" | "batch_wait" => !data.job.is_empty(),
            "stages" => stages::stage_names(data).is_empty(),
            "resources" => !resources::drawn(data),
            "ranks" => !ranks::drawn(data),
            _ => false,
        };
        if absent {
            continue;
        }
        let files = match spec.name {
            "throughput" => render!(dir, spec.name, formats, wide, throughput::draw, data),
            "batch_wait" => render!(dir, spec.name, formats, wide, batch_wait::draw, data),
            "job" => render!(
                dir,
                spec.name,
                formats,
                (1000 + legend, 520),
                job::draw,
                data
            ),
            "timeline" => render!(
                dir,
                spec.name,
                formats,
                (1000 + legend, 160 + 70 * n),
                timeline::draw,
                data
            ),
            "stages" => render!(
                dir,
                spec.name,
                formats,
                (
                    1000 + legend,
                    140 + 44 * stages::stage_names(data).len() as u32
                ),
                stages::draw,
                data
            ),
            "resources" => render!(
                dir,
                spec.name,
                formats,
                (wide.0, 640),
                resources::draw,
                data
            ),
            "ranks" => render!(
                dir,
                spec.name,
                formats,
                (ranks::width(data) + legend, 520),
                ranks::draw,
                data
            ),
            "model_scale" => render!(
                dir,
                spec.name,
                formats,
                (1000 + legend, 720),
                model_scale::draw,
                data
            ),
            _ => render!(
                dir,
                spec.name,
                formats,
                (1000 + legend, 520),
                step_time::draw,
                data
            ),
        };
        out.push((spec.name.to_string(), files));
    }
    Ok(out)
}
