//! The statistics every figure uses: linear-interpolation quantiles (numpy's and pandas'
//! default, so anyone can recompute them), the percentile bootstrap, and [`Estimate`], the one
//! type for a figure with its confidence interval (criterion's `Estimate`).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::hash::splitmix;

/// Bootstrap resamples for confidence intervals.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// The confidence level of every interval.
pub const CONFIDENCE: f64 = 0.95;

/// A figure and its 95 % percentile-bootstrap confidence interval.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Estimate {
    pub point: f64,
    pub low: f64,
    pub high: f64,
}

impl Estimate {
    /// The interval includes `value` (a ratio's interval including 1 means "no difference
    /// beyond noise").
    pub fn contains(&self, value: f64) -> bool {
        self.low <= value && value <= self.high
    }
}

/// What a ratio's interval says, against the smallest difference that matters
/// (`[report] min_effect`): an effect is told from one that is merely measurable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Above 1 beyond noise, and not all of the interval within `min_effect` of 1.
    Faster,
    /// Below 1 beyond noise, and not all of the interval within `min_effect` of 1.
    Slower,
    /// The whole interval within ±`min_effect` of 1, whether or not it excludes 1.
    NoPracticalDifference,
    /// The interval includes 1 and reaches past ±`min_effect`: these runs cannot tell (or
    /// there is no interval).
    #[default]
    WithinNoise,
}

impl Effect {
    /// The effect of a ratio `r` (this over that) against `min_effect` (0.02 = 2 %).
    pub fn of(r: &Estimate, min_effect: f64) -> Effect {
        if !(r.low.is_finite() && r.high.is_finite()) {
            Effect::WithinNoise
        } else if 1.0 - min_effect <= r.low && r.high <= 1.0 + min_effect {
            Effect::NoPracticalDifference
        } else if r.low > 1.0 {
            Effect::Faster
        } else if r.high < 1.0 {
            Effect::Slower
        } else {
            Effect::WithinNoise
        }
    }

    /// Faster or slower by a difference that matters.
    pub fn matters(self) -> bool {
        matches!(self, Effect::Faster | Effect::Slower)
    }

    /// As a table cell or a clause reads it.
    pub fn words(self) -> &'static str {
        match self {
            Effect::Faster => "faster",
            Effect::Slower => "slower",
            Effect::NoPracticalDifference => "no practical difference",
            Effect::WithinNoise => "no difference beyond noise",
        }
    }
}

/// Linear-interpolation quantile of unsorted data (numpy/pandas default).
pub fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let pos = q * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

pub fn median(values: &[f64]) -> f64 {
    quantile(values, 0.5)
}

pub fn min(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::INFINITY, f64::min)
}

pub fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// `stat` of the groups with its 95 % percentile-bootstrap interval over resamples of each
/// group (seeded, so a rebuilt report gives the same interval).
pub fn bootstrap<F: Fn(&[Vec<f64>]) -> f64>(groups: &[&[f64]], seed: u64, stat: F) -> Estimate {
    let point = stat(&groups.iter().map(|g| g.to_vec()).collect::<Vec<_>>());
    if groups.iter().any(|g| g.is_empty()) {
        return Estimate {
            point,
            low: f64::NAN,
            high: f64::NAN,
        };
    }
    let mut rng = ChaCha8Rng::seed_from_u64(splitmix(seed ^ 0x626f_6f74));
    let mut samples: Vec<Vec<f64>> = groups.iter().map(|g| vec![0.0; g.len()]).collect();
    let mut stats = Vec::with_capacity(BOOTSTRAP_RESAMPLES);
    for _ in 0..BOOTSTRAP_RESAMPLES {
        for (g, s) in groups.iter().zip(samples.iter_mut()) {
            for slot in s.iter_mut() {
                *slot = g[rng.random_range(0..g.len())];
            }
        }
        stats.push(stat(&samples));
    }
    let tail = (1.0 - CONFIDENCE) / 2.0;
    Estimate {
        point,
        low: quantile(&stats, tail),
        high: quantile(&stats, 1.0 - tail),
    }
}

/// `mine / other` paired by round (rounds present in both; interleaved rounds share the
/// machine's drift, which pairing removes): the median ratio with its bootstrap CI over rounds.
pub fn paired_ratio(mine: &[(i64, f64)], other: &[(i64, f64)], seed: u64) -> Estimate {
    let ratios: Vec<f64> = mine
        .iter()
        .filter_map(|(round, v)| {
            let (_, o) = other.iter().find(|(r, _)| r == round)?;
            Some(v / o)
        })
        .collect();
    bootstrap(&[&ratios], seed, |s| median(&s[0]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_linearly() {
        let v = [4.0, 1.0, 3.0, 2.0];
        assert_eq!(median(&v), 2.5);
        assert!((quantile(&v, 0.95) - 3.85).abs() < 1e-12);
        assert_eq!(quantile(&[7.0], 0.95), 7.0);
    }

    #[test]
    fn an_effect_matters_only_beyond_min_effect() {
        let e = |low, high| {
            Effect::of(
                &Estimate {
                    point: (low + high) / 2.0,
                    low,
                    high,
                },
                0.02,
            )
        };
        // 0.05 % faster, and the interval excludes 1: measurable, not practical.
        assert_eq!(e(1.0003, 1.0007), Effect::NoPracticalDifference);
        assert_eq!(e(0.99, 1.01), Effect::NoPracticalDifference);
        assert_eq!(e(0.97, 1.05), Effect::WithinNoise);
        assert_eq!(e(1.01, 1.05), Effect::Faster);
        assert_eq!(e(0.5, 0.97), Effect::Slower);
        assert_eq!(e(f64::NAN, f64::NAN), Effect::WithinNoise);
        assert!(Effect::Faster.matters() && !Effect::NoPracticalDifference.matters());
    }

    #[test]
    fn bootstrap_interval_brackets_the_ratio() {
        let a = [100.0, 110.0, 105.0];
        let b = [50.0, 52.0, 49.0];
        let e = bootstrap(&[&a, &b], 1, |s| median(&s[0]) / median(&s[1]));
        assert_eq!(e.point, 105.0 / 50.0);
        assert!(e.low > 1.8 && e.high < 2.3 && e.contains(e.point), "{e:?}");
    }
}
