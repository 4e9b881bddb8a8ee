//! `loaderlab compare BEFORE AFTER`: two results folders (before and after a change) side by
//! side. Every condition both hold gets each figure's median before and after and the ratio
//! after / before with a 95 % bootstrap CI over both folders' runs; `--fail-if` gates turn a
//! regression beyond noise into a non-zero exit (criterion's baselines, for a CI job).
//!
//! Invariant: both folders are re-analysed from their raw rows (as `report` does), never read
//! from a summary that could be stale, and a gate fails only when the whole CI lies past its
//! threshold, so noise alone never fails a build.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::analysis::{self, Analysis, AnalysisError, Estimate, RunSummary, bootstrap, median};
use crate::format::{ms, pct, rate, ratio};
use crate::results::Raw;

/// A figure compare reports and gates can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// Images per second of each timed run.
    ImgPerS,
    /// Each run's median batch wait, ms.
    BatchWaitMs,
    /// Each run's device idle share.
    DeviceIdle,
    /// Each run's waiting share: its batch waits over its step time.
    WaitShare,
}

impl Figure {
    pub const ALL: [Figure; 4] = [
        Figure::ImgPerS,
        Figure::BatchWaitMs,
        Figure::DeviceIdle,
        Figure::WaitShare,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Figure::ImgPerS => "img_per_s",
            Figure::BatchWaitMs => "batch_wait_ms",
            Figure::DeviceIdle => "device_idle",
            Figure::WaitShare => "wait_share",
        }
    }

    fn of(self, r: &RunSummary) -> f64 {
        match self {
            Figure::ImgPerS => r.img_per_s,
            Figure::BatchWaitMs => r.batch_wait_median_ms,
            Figure::DeviceIdle => r.device_idle,
            Figure::WaitShare => r.wait_share,
        }
    }

    fn show(self, v: f64) -> String {
        match self {
            Figure::ImgPerS => rate(v),
            Figure::BatchWaitMs => ms(v),
            Figure::DeviceIdle | Figure::WaitShare => pct(v),
        }
    }
}

/// `FIGURE < -5%` or `FIGURE > +10%`: fail when the change after / before − 1 lies beyond the
/// percentage in that direction, with its whole 95 % CI.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gate {
    pub figure: Figure,
    /// True for `<` (a drop fails), false for `>` (a rise fails).
    pub below: bool,
    /// The change in percent, signed as written.
    pub percent: f64,
    pub text: String,
}

impl Gate {
    /// Parse `img_per_s < -5%`; the error says what is expected.
    pub fn parse(text: &str) -> Result<Gate, String> {
        let expected = || {
            format!(
                "--fail-if {text:?}: expected FIGURE < CHANGE% or FIGURE > CHANGE%, e.g. \
                 \"img_per_s < -5%\" or \"batch_wait_ms > +10%\"; figures: {}",
                Figure::ALL.map(Figure::name).join(", ")
            )
        };
        let (at, below) = match (text.find('<'), text.find('>')) {
            (Some(i), None) => (i, true),
            (None, Some(i)) => (i, false),
            _ => return Err(expected()),
        };
        let name = text[..at].trim();
        let figure = Figure::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(expected)?;
        let value = text[at + 1..].trim();
        let percent: f64 = value
            .strip_suffix('%')
            .and_then(|v| v.trim().parse().ok())
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(expected)?;
        Ok(Gate {
            figure,
            below,
            percent,
            text: text.trim().to_string(),
        })
    }

    /// Whether the ratio (after / before) fails this gate beyond noise.
    pub fn fails(&self, r: &Estimate) -> bool {
        let limit = 1.0 + self.percent / 100.0;
        if self.below {
            r.high < limit
        } else {
            r.low > limit
        }
    }
}

/// One figure of one condition, before and after.
#[derive(Debug, Clone, Serialize)]
pub struct FigureChange {
    pub figure: Figure,
    /// Median over the folder's completed runs.
    pub before: f64,
    pub after: f64,
    /// after / before with its 95 % bootstrap CI (resampling each folder's runs).
    pub ratio: Estimate,
    /// The CI excludes 1.
    pub beyond_noise: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConditionChange {
    pub condition: String,
    pub runs_before: usize,
    pub runs_after: usize,
    pub figures: Vec<FigureChange>,
}

/// A gate that failed, and where.
#[derive(Debug, Clone, Serialize)]
pub struct GateFailure {
    pub gate: String,
    pub condition: String,
    pub ratio: Estimate,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub before: PathBuf,
    pub after: PathBuf,
    pub conditions: Vec<ConditionChange>,
    pub only_before: Vec<String>,
    pub only_after: Vec<String>,
    pub gates: Vec<Gate>,
    pub failures: Vec<GateFailure>,
}

fn completed<'a>(a: &'a Analysis, condition: &str) -> Vec<&'a RunSummary> {
    a.runs
        .iter()
        .filter(|r| r.condition == condition && !r.interrupted)
        .collect()
}

/// Compare two results folders, condition by condition, and apply the gates.
pub fn compare(before: &Path, after: &Path, gates: &[Gate]) -> Result<Comparison, AnalysisError> {
    let a = analysis::analyse(&Raw::load(before)?)?;
    let b = analysis::analyse(&Raw::load(after)?)?;
    let names = |x: &Analysis| -> Vec<String> {
        x.conditions.iter().map(|c| c.condition.clone()).collect()
    };
    let (in_a, in_b) = (names(&a), names(&b));
    let mut conditions = Vec::new();
    let mut failures = Vec::new();
    for (ci, name) in in_a.iter().filter(|n| in_b.contains(n)).enumerate() {
        let (ra, rb) = (completed(&a, name), completed(&b, name));
        let figures: Vec<FigureChange> = Figure::ALL
            .iter()
            .enumerate()
            .map(|(fi, f)| {
                let va: Vec<f64> = ra.iter().map(|r| f.of(r)).collect();
                let vb: Vec<f64> = rb.iter().map(|r| f.of(r)).collect();
                let seed = 0x0c04_da2e ^ ((ci as u64) << 8) ^ fi as u64;
                let ratio = bootstrap(&[&vb, &va], seed, |s| median(&s[0]) / median(&s[1]));
                FigureChange {
                    figure: *f,
                    before: median(&va),
                    after: median(&vb),
                    beyond_noise: !ratio.contains(1.0),
                    ratio,
                }
            })
            .collect();
        for g in gates {
            if let Some(fc) = figures.iter().find(|fc| fc.figure == g.figure)
                && g.fails(&fc.ratio)
            {
                failures.push(GateFailure {
                    gate: g.text.clone(),
                    condition: name.clone(),
                    ratio: fc.ratio,
                });
            }
        }
        conditions.push(ConditionChange {
            condition: name.clone(),
            runs_before: ra.len(),
            runs_after: rb.len(),
            figures,
        });
    }
    Ok(Comparison {
        before: before.to_path_buf(),
        after: after.to_path_buf(),
        only_before: in_a.iter().filter(|n| !in_b.contains(n)).cloned().collect(),
        only_after: in_b.iter().filter(|n| !in_a.contains(n)).cloned().collect(),
        conditions,
        gates: gates.to_vec(),
        failures,
    })
}

/// `after / before` as a change: 0.93 → "-7.00 %".
fn change(r: f64) -> String {
    if !r.is_finite() {
        return "–".into();
    }
    let p = (r - 1.0) * 100.0;
    let sign = if p > 0.0 { "+" } else { "" };
    format!("{sign}{} %", crate::format::sig(p))
}

impl Comparison {
    /// The markdown report: a table per figure, then the gates.
    pub fn markdown(&self) -> String {
        let mut md = format!(
            "# Comparison\n\nBefore: `{}`  \nAfter: `{}`\n\nEach figure is the median over a \
             folder's completed timed runs; the ratio is after / before with a 95 % bootstrap \
             CI over both folders' runs. \"beyond noise\": the CI excludes 1.\n\n",
            self.before.display(),
            self.after.display()
        );
        for f in Figure::ALL {
            let _ = writeln!(
                md,
                "## {}\n\n| condition | runs before / after | before | after | after / before \
                 (95 % CI) | change | noise |\n|---|---:|---:|---:|---:|---:|---|",
                f.name()
            );
            for c in &self.conditions {
                let Some(x) = c.figures.iter().find(|x| x.figure == f) else {
                    continue;
                };
                let _ = writeln!(
                    md,
                    "| `{}` | {} / {} | {} | {} | {} ({}–{}) | {} | {} |",
                    c.condition,
                    c.runs_before,
                    c.runs_after,
                    f.show(x.before),
                    f.show(x.after),
                    ratio(x.ratio.point),
                    ratio(x.ratio.low),
                    ratio(x.ratio.high),
                    change(x.ratio.point),
                    if x.beyond_noise {
                        "beyond noise"
                    } else {
                        "within noise"
                    }
                );
            }
            md.push('\n');
        }
        for (what, list) in [
            ("Only before", &self.only_before),
            ("Only after", &self.only_after),
        ] {
            if !list.is_empty() {
                let _ = writeln!(md, "{what} (not compared): {}.\n", list.join(", "));
            }
        }
        if !self.gates.is_empty() {
            md.push_str("## Gates\n\n");
            for g in &self.gates {
                let failed: Vec<&GateFailure> =
                    self.failures.iter().filter(|x| x.gate == g.text).collect();
                if failed.is_empty() {
                    let _ = writeln!(md, "- `{}`: passed in every condition", g.text);
                } else {
                    for x in failed {
                        let _ = writeln!(
                            md,
                            "- `{}`: **failed** in `{}`: {} ({}–{}), the whole CI past the limit",
                            g.text,
                            x.condition,
                            change(x.ratio.point),
                            change(x.ratio.low),
                            change(x.ratio.high)
                        );
                    }
                }
            }
            md.push('\n');
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(point: f64, low: f64, high: f64) -> Estimate {
        Estimate { point, low, high }
    }

    #[test]
    fn gates_parse_and_fail_only_beyond_noise() {
        let g = Gate::parse("img_per_s < -5%").unwrap();
        assert_eq!(
            (g.figure, g.below, g.percent),
            (Figure::ImgPerS, true, -5.0)
        );
        assert!(g.fails(&est(0.8, 0.75, 0.85)));
        assert!(!g.fails(&est(0.9, 0.8, 0.97)), "the CI reaches past -5 %");
        let g = Gate::parse(" batch_wait_ms > +10 % ").unwrap();
        assert!(!g.below);
        assert!(g.fails(&est(1.5, 1.2, 1.8)));
        assert!(!g.fails(&est(1.5, 1.05, 1.8)));
        for bad in [
            "img_per_s -5%",
            "speed < -5%",
            "img_per_s < -5",
            "img_per_s < x%",
        ] {
            let e = Gate::parse(bad).unwrap_err();
            assert!(e.contains("expected FIGURE"), "{bad}: {e}");
        }
    }

    #[test]
    fn change_reads_as_percent() {
        // Three significant figures, as every figure of the reports.
        assert_eq!(change(0.93), "-7.00 %");
        assert_eq!(change(1.1), "+10.0 %");
    }
}
