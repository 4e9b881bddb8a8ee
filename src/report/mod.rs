//! The human-readable answer: `report.md` with a verdict computed from the numbers, tables,
//! charts and the profile summary, plus `result.json` for machines. Works from a results folder
//! alone (see [`crate::analysis`]), so `loaderlab report <dir>` and the end of a run share it.

pub mod charts;
mod headline;
mod html;
mod markdown;
mod node;
mod resources;
mod sections;
mod table;
mod verdict;
mod watched;

pub use headline::headline;
pub use verdict::verdict;

use std::path::Path;

use serde::Serialize;

use crate::analysis::{self, Analysis, AnalysisError};
use crate::results::{
    CHARTS_DIR, CONFIG_TOML, Environment, REPORT_HTML, REPORT_MD, RESULT_JSON, Raw, RunMeta,
    write_atomic,
};

/// Everything `result.json` holds.
#[derive(Serialize)]
struct ResultFile<'a> {
    loaderlab_version: &'static str,
    environment: &'a Environment,
    config: serde_json::Value,
    plan: &'a crate::plan::Plan,
    run: &'a RunMeta,
    analysis: &'a Analysis,
}

/// Rebuild analysis tables, charts, `result.json` and `report.md` in `dir`.
pub fn build(dir: &Path) -> Result<Analysis, AnalysisError> {
    let raw = Raw::load(dir)?;
    let analysis = analysis::analyse(&raw)?;
    analysis::write_tables(&raw, &analysis)?;
    let formats = raw.plan.report();
    let charts = if formats.charts && !analysis.conditions.is_empty() {
        let data = charts::ChartData::new(&raw, &analysis)
            .map_err(|m| AnalysisError::Data(m.to_string()))?;
        charts::draw_all(&dir.join(CHARTS_DIR), &formats.formats, &data)
            .map_err(|m| AnalysisError::Data(format!("drawing charts: {m}")))?
    } else {
        Vec::new()
    };
    let config_text = std::fs::read_to_string(dir.join(CONFIG_TOML)).unwrap_or_default();
    let config: serde_json::Value = toml::from_str::<toml::Value>(&config_text)
        .ok()
        .and_then(|v| serde_json::to_value(v).ok())
        .unwrap_or(serde_json::Value::Null);
    let result = ResultFile {
        loaderlab_version: env!("CARGO_PKG_VERSION"),
        environment: &raw.meta.environment,
        config,
        plan: &raw.plan,
        run: &raw.meta,
        analysis: &analysis,
    };
    let json =
        serde_json::to_vec_pretty(&result).map_err(|e| AnalysisError::Data(e.to_string()))?;
    let path = dir.join(RESULT_JSON);
    write_atomic(&path, &json).map_err(|e| AnalysisError::File {
        path: path.clone(),
        message: e.to_string(),
    })?;
    let md = markdown::markdown(&raw, &analysis, &charts);
    let path = dir.join(REPORT_MD);
    write_atomic(&path, md.as_bytes()).map_err(|e| AnalysisError::File {
        path,
        message: e.to_string(),
    })?;
    let path = dir.join(REPORT_HTML);
    if formats.html {
        let title = format!(
            "{}: is the training step waiting for data?",
            raw.plan.experiment.name
        );
        write_atomic(&path, html::page(&md, dir, &title).as_bytes()).map_err(|e| {
            AnalysisError::File {
                path,
                message: e.to_string(),
            }
        })?;
    } else if path.exists() {
        // A page left from an earlier build would contradict the rebuilt report.
        let _ = std::fs::remove_file(&path);
    }
    Ok(analysis)
}
