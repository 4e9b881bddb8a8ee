//! Reading a results folder: the raw files as the runner (or merge) wrote them, and the
//! column helpers every reader uses.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use polars::prelude::*;
use serde::Deserialize;

use super::records::column;
use super::{
    PLAN_JSON, RUN_COLUMNS, RUN_JSON, RUN_RESOURCE_COLUMNS, RUNS_CSV, ResultsError, RunMeta,
    SEARCH_JSON, STEP_COLUMNS, STEP_RANK_COLUMNS, STEPS_CSV, SearchRecord,
};
use crate::plan::Plan;

/// The raw contents of a results folder.
pub struct Raw {
    pub dir: PathBuf,
    pub plan: Plan,
    pub meta: RunMeta,
    pub steps: DataFrame,
    pub runs: DataFrame,
    /// The search of a `tune` folder (absent elsewhere).
    pub search: Option<SearchRecord>,
}

fn read_err(path: &Path, message: impl ToString) -> ResultsError {
    ResultsError::Read {
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// A JSON file of the folder, decoded; the error names the file.
pub fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, ResultsError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| read_err(path, format!("cannot read: {e}")))?;
    serde_json::from_str(&text).map_err(|e| read_err(path, format!("not valid: {e}")))
}

/// A CSV file of the folder with the named columns read as strings; the error names the file.
pub fn read_csv(path: &Path, strings: &[&str]) -> Result<DataFrame, ResultsError> {
    if !path.is_file() {
        return Err(read_err(path, "missing"));
    }
    let overwrite = Schema::from_iter(
        strings
            .iter()
            .map(|name| Field::new((*name).into(), DataType::String)),
    );
    CsvReadOptions::default()
        .with_has_header(true)
        .with_schema_overwrite(Some(Arc::new(overwrite)))
        .try_into_reader_with_file_path(Some(path.to_path_buf()))
        .and_then(|r| r.finish())
        .map_err(|e| read_err(path, format!("cannot parse as CSV: {e}")))
}

impl Raw {
    pub fn load(dir: &Path) -> Result<Raw, ResultsError> {
        let plan: Plan = read_json(&dir.join(PLAN_JSON))?;
        let meta: RunMeta = read_json(&dir.join(RUN_JSON))?;
        let steps_path = dir.join(STEPS_CSV);
        let mut steps = read_csv(&steps_path, &[column::CONDITION, column::FINGERPRINT])?;
        if steps.column(column::DEVICE_MS).is_err() {
            // Folders from before device timing: no device figures, everything else stands.
            let nan = vec![f64::NAN; steps.height()];
            steps
                .with_column(Column::new(column::DEVICE_MS.into(), nan))
                .map_err(|e| read_err(&steps_path, e))?;
        }
        for name in STEP_RANK_COLUMNS {
            if steps.column(name).is_err() {
                // Folders from before ranks: one rank, no barrier.
                let zero = vec![0i64; steps.height()];
                steps
                    .with_column(Column::new(name.into(), zero))
                    .map_err(|e| read_err(&steps_path, e))?;
            }
        }
        let mut runs = read_csv(&dir.join(RUNS_CSV), &[column::CONDITION, column::DEVICE])?;
        for name in RUN_RESOURCE_COLUMNS {
            if runs.column(name).is_err() {
                // Folders from before resource figures: NaN, everything else stands.
                let nan = vec![f64::NAN; runs.height()];
                runs.with_column(Column::new(name.into(), nan))
                    .map_err(|e| read_err(&dir.join(RUNS_CSV), e))?;
            }
        }
        for (df, name, needed) in [
            (&steps, STEPS_CSV, &STEP_COLUMNS[..]),
            (&runs, RUNS_CSV, &RUN_COLUMNS[..]),
        ] {
            if let Some(column) = needed.iter().find(|c| df.column(c).is_err()) {
                return Err(read_err(
                    &dir.join(name),
                    format!("column {column} is missing"),
                ));
            }
        }
        let search_path = dir.join(SEARCH_JSON);
        let search = if search_path.is_file() {
            Some(read_json(&search_path)?)
        } else {
            None
        };
        Ok(Raw {
            dir: dir.to_path_buf(),
            plan,
            meta,
            steps,
            runs,
            search,
        })
    }
}

/// A column as f64 (missing values as NaN).
pub fn f64s(df: &DataFrame, name: &str) -> PolarsResult<Vec<f64>> {
    let c = df.column(name)?.cast(&DataType::Float64)?;
    Ok(c.f64()?.iter().map(|v| v.unwrap_or(f64::NAN)).collect())
}

/// A column as i64 (missing values as 0).
pub fn i64s(df: &DataFrame, name: &str) -> PolarsResult<Vec<i64>> {
    let c = df.column(name)?.cast(&DataType::Int64)?;
    Ok(c.i64()?.iter().map(|v| v.unwrap_or(0)).collect())
}

/// A column as strings (missing values as "").
pub fn strs(df: &DataFrame, name: &str) -> PolarsResult<Vec<String>> {
    let c = df.column(name)?.cast(&DataType::String)?;
    Ok(c.str()?
        .iter()
        .map(|v| v.unwrap_or("").to_string())
        .collect())
}

/// A column of `true` / `false` words.
pub fn bools(df: &DataFrame, name: &str) -> PolarsResult<Vec<bool>> {
    Ok(strs(df, name)?.iter().map(|s| s == "true").collect())
}
