//! Step statistics with polars: per run, or pooled per condition.

use std::collections::BTreeMap;

use polars::prelude::*;

use super::AnalysisError;
use crate::results::column;
use crate::results::f64s;

/// The step statistics computed per run and per condition, by column name.
pub(super) const STAT_COLUMNS: [&str; 9] = [
    "batch_wait_median_ms",
    "batch_wait_p95_ms",
    "batch_wait_max_ms",
    "h2d_median_ms",
    "compute_median_ms",
    "step_median_ms",
    "wait_share",
    "device_ms_sum",
    "device_median_ms",
];

/// Step statistics grouped by `key` (`run`, or `condition` for pooled figures), with polars.
pub(super) fn step_stats(steps: DataFrame, key: &str) -> Result<DataFrame, AnalysisError> {
    Ok(steps
        .lazy()
        .group_by([col(key)])
        .agg([
            col(column::STEP).count().alias("steps"),
            col(column::BATCH_WAIT_MS).median().alias(STAT_COLUMNS[0]),
            col(column::BATCH_WAIT_MS)
                .quantile(lit(0.95), QuantileMethod::Linear)
                .alias(STAT_COLUMNS[1]),
            col(column::BATCH_WAIT_MS).max().alias(STAT_COLUMNS[2]),
            col(column::H2D_MS).median().alias(STAT_COLUMNS[3]),
            col(column::COMPUTE_MS).median().alias(STAT_COLUMNS[4]),
            col(column::STEP_MS).median().alias(STAT_COLUMNS[5]),
            (col(column::BATCH_WAIT_MS).sum() / col(column::STEP_MS).sum()).alias(STAT_COLUMNS[6]),
            col(column::DEVICE_MS).sum().alias(STAT_COLUMNS[7]),
            col(column::DEVICE_MS).median().alias(STAT_COLUMNS[8]),
        ])
        .sort([key], Default::default())
        .collect()?)
}

pub(super) fn stat_columns(
    df: &DataFrame,
) -> Result<BTreeMap<&'static str, Vec<f64>>, AnalysisError> {
    STAT_COLUMNS
        .into_iter()
        .map(|c| Ok((c, f64s(df, c)?)))
        .collect()
}
