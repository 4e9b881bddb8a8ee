//! The tables analysis writes next to the raw files: `summary.csv` and `steps.parquet`.

use polars::prelude::*;

use super::{Analysis, AnalysisError, ConditionSummary, file_err};
use crate::results::{Raw, STEPS_PARQUET, SUMMARY_CSV, write_atomic};

type Figure = fn(&ConditionSummary) -> f64;

/// The numeric columns of `summary.csv`, in order.
const FIGURES: [(&str, Figure); 20] = [
    ("img_per_s_median", |s| s.img_per_s.point),
    ("img_per_s_min", |s| s.img_per_s_min),
    ("img_per_s_max", |s| s.img_per_s_max),
    ("img_per_s_ci_low", |s| s.img_per_s.low),
    ("img_per_s_ci_high", |s| s.img_per_s.high),
    ("speedup", |s| {
        s.speedup.as_ref().map_or(1.0, |x| x.ratio.point)
    }),
    ("speedup_ci_low", |s| {
        s.speedup.as_ref().map_or(f64::NAN, |x| x.ratio.low)
    }),
    ("speedup_ci_high", |s| {
        s.speedup.as_ref().map_or(f64::NAN, |x| x.ratio.high)
    }),
    ("batch_wait_p50_ms", |s| s.batch_wait_p50_ms),
    ("batch_wait_p95_ms", |s| s.batch_wait_p95_ms),
    ("batch_wait_max_ms", |s| s.batch_wait_max_ms),
    ("h2d_median_ms", |s| s.h2d_median_ms),
    ("compute_median_ms", |s| s.compute_median_ms),
    ("step_median_ms", |s| s.step_median_ms),
    ("wait_share", |s| s.wait_share),
    ("device_idle", |s| s.device_idle_median),
    ("startup_ms_median", |s| s.startup_ms_median),
    ("speedup_bound", |s| s.speedup_bound),
    ("headroom_img_per_s", |s| {
        s.headroom.as_ref().map_or(f64::NAN, |h| h.img_per_s)
    }),
    ("share_of_ceiling", |s| {
        s.headroom.as_ref().map_or(f64::NAN, |h| h.share_of_ceiling)
    }),
];

/// `summary.csv`: one row per condition.
pub fn summary_frame(a: &Analysis) -> Result<DataFrame, AnalysisError> {
    let c = &a.conditions;
    let mut columns = vec![
        Column::new(
            "condition".into(),
            c.iter().map(|s| s.condition.clone()).collect::<Vec<_>>(),
        ),
        Column::new(
            "runs".into(),
            c.iter().map(|s| s.runs as i64).collect::<Vec<_>>(),
        ),
        Column::new(
            "workers".into(),
            c.iter().map(|s| s.workers).collect::<Vec<_>>(),
        ),
    ];
    columns.extend(
        FIGURES
            .iter()
            .map(|(name, f)| Column::new((*name).into(), c.iter().map(f).collect::<Vec<f64>>())),
    );
    columns.push(Column::new(
        "loader_verdict".into(),
        c.iter()
            .map(|s| verdict_word(s).to_string())
            .collect::<Vec<_>>(),
    ));
    columns.push(Column::new(
        "input_bound".into(),
        c.iter()
            .map(|s| s.judgement.input_bound.word().to_string())
            .collect::<Vec<_>>(),
    ));
    let groups = a.comparison_groups();
    let strings = |f: &dyn Fn(&ConditionSummary) -> String| c.iter().map(f).collect::<Vec<_>>();
    columns.push(Column::new(
        "group".into(),
        strings(&|s| {
            super::group_of(&groups, &s.condition).map_or(String::new(), |g| g.label.clone())
        }),
    ));
    columns.push(Column::new(
        "speedup_against".into(),
        strings(&|s| {
            s.speedup
                .as_ref()
                .map_or(String::new(), |x| x.against.clone())
        }),
    ));
    columns.push(Column::new(
        "effect".into(),
        strings(&|s| {
            s.speedup
                .as_ref()
                .map_or(String::new(), |x| x.effect.words().replace(' ', "_"))
        }),
    ));
    Ok(DataFrame::new_infer_height(columns)?)
}

fn verdict_word(s: &ConditionSummary) -> &'static str {
    use super::LoaderVerdict::*;
    match s.judgement.loader {
        Bottleneck => "bottleneck",
        PartialBottleneck => "partial_bottleneck",
        KeptUp => "kept_up",
    }
}

/// Write `summary.csv` and `steps.parquet` (atomically) next to the raw files.
pub fn write_tables(raw: &Raw, a: &Analysis) -> Result<(), AnalysisError> {
    let mut summary = summary_frame(a)?;
    let mut buf = Vec::new();
    CsvWriter::new(&mut buf).finish(&mut summary)?;
    let path = raw.dir.join(SUMMARY_CSV);
    write_atomic(&path, &buf).map_err(|e| file_err(&path, e))?;
    let mut steps = raw.steps.clone();
    let mut pq = Vec::new();
    ParquetWriter::new(&mut pq).finish(&mut steps)?;
    let path = raw.dir.join(STEPS_PARQUET);
    write_atomic(&path, &pq).map_err(|e| file_err(&path, e))?;
    Ok(())
}
