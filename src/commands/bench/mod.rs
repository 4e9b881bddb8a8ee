//! `loaderlab bench`: the speed claims, measured. `bench FILE` times the transform chain on one
//! thread and the loader (no training) at 0, 1 and 2 workers, beside two ceilings for the
//! loader's speed-up (the same batches with no hand-off, and arithmetic alone); `bench step`
//! times the training step at 1 and 2 threads, and PyTorch's step in the same run when a Python
//! with torch exists. Every figure is a median over repetitions with its min–max.
//!
//! `chain` times the transform chain and decoding (and Pillow's, in `pillow_chain.py`),
//! `loader` the loader and its ceilings, `step` the training step (and PyTorch's, in
//! `pytorch_step.py`); this file holds the measurement type, the timing loop and `bench FILE`.

mod chain;
mod loader;
mod step;

pub use loader::independent_rate;
pub use step::{StepCase, step, step_on_gpu};

use std::time::Instant;

use serde::Serialize;

use crate::analysis::median;
use crate::config::Settings;
use crate::runner::DataSetup;

use chain::{ChainRates, chain_rates};
use loader::{LoaderRates, loader_rates};

#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub name: String,
    pub unit: String,
    pub values: Vec<f64>,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Measurement {
    fn new(name: impl Into<String>, unit: &str, values: Vec<f64>) -> Self {
        Measurement {
            name: name.into(),
            unit: unit.into(),
            median: median(&values),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            values,
        }
    }

    pub fn line(&self) -> String {
        // Ratios (small numbers) get two decimals, rates and times one.
        let p = if self.median.abs() < 100.0 { 2 } else { 1 };
        format!(
            "{:<52} {:>12.p$} {}  (min {:.p$}, max {:.p$}, n = {})",
            self.name,
            self.median,
            self.unit,
            self.min,
            self.max,
            self.values.len()
        )
    }
}

/// Run `one(k)` for k = 0, 1, 2, … until `max_images` images or `max_s` seconds, whichever
/// comes first (at least `min_images`); returns images per second.
pub(super) fn timed_rate(
    min_images: usize,
    max_images: usize,
    max_s: f64,
    mut one: impl FnMut(usize),
) -> f64 {
    let t = Instant::now();
    let mut k = 0;
    // The clock is read every 16 images, not every image (a read costs ≈ 1 % of a 28×28 image).
    while k < min_images || (k < max_images && t.elapsed().as_secs_f64() < max_s) {
        for _ in 0..16 {
            one(k);
            k += 1;
        }
    }
    k as f64 / t.elapsed().as_secs_f64()
}

/// Transform chain on one thread, and the loader without training at 0, 1 and 2 workers.
/// Each repetition's `a / b`.
fn ratio(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(a, b)| a / b).collect()
}

pub fn data(settings: &Settings, repeats: usize, quiet: bool) -> anyhow::Result<Vec<Measurement>> {
    let DataSetup {
        dataset, pipeline, ..
    } = DataSetup::open(settings, quiet)?;
    let ChainRates {
        chain,
        decode,
        whole,
        theirs,
    } = chain_rates(&dataset, &pipeline, repeats)?;
    let mut results = vec![Measurement::new(
        "transform chain, 1 thread",
        "img/s",
        chain,
    )];
    if !decode.is_empty() {
        let against = theirs.map(|(d, w, which)| {
            [
                Measurement::new(
                    format!("decoding alone, {which}, 1 thread"),
                    "img/s",
                    d.clone(),
                ),
                Measurement::new(
                    format!("decode + transform chain, {which}, 1 thread"),
                    "img/s",
                    w.clone(),
                ),
                Measurement::new(
                    "decoding, loaderlab / Pillow (per repetition)",
                    "×",
                    ratio(&decode, &d),
                ),
                Measurement::new(
                    "whole chain, loaderlab / Python (per repetition)",
                    "×",
                    ratio(&whole, &w),
                ),
            ]
        });
        results.extend([
            Measurement::new("decoding alone, 1 thread", "img/s", decode),
            Measurement::new("read + decode + transform chain, 1 thread", "img/s", whole),
        ]);
        results.extend(against.into_iter().flatten());
    }
    let LoaderRates {
        rates,
        alone,
        woken,
        arithmetic,
    } = loader_rates(&dataset, &pipeline, settings, repeats)?;
    let speedup = ratio(&rates[2], &rates[0]);
    let ceiling = ratio(&alone[1], &alone[0]);
    let share = ratio(&speedup, &ceiling);
    let handed = ratio(&woken, &alone[0]);
    let handed_share = ratio(&speedup, &handed);
    let cores = ratio(&arithmetic[1], &arithmetic[0]);
    for (workers, r) in rates.into_iter().enumerate() {
        results.push(Measurement::new(
            format!("loader, workers = {workers} (no training)"),
            "img/s",
            r,
        ));
    }
    for (r, threads) in alone.iter().zip(["1 thread", "2 threads"]) {
        results.push(Measurement::new(
            format!("same batches, {threads}, no hand-off"),
            "img/s",
            r.clone(),
        ));
    }
    let ratios = [
        ("loader speed-up, workers = 2 / workers = 0", "×", speedup),
        (
            "same batches, 2 threads / 1, no hand-off (ceiling)",
            "×",
            ceiling,
        ),
        ("loader speed-up / that ceiling", "", share),
        (
            "same, waking a consumer each batch (least hand-off)",
            "×",
            handed,
        ),
        ("loader speed-up / that", "", handed_share),
        ("arithmetic only, 2 threads / 1 (the cores)", "×", cores),
    ];
    results.extend(
        ratios
            .into_iter()
            .map(|(name, unit, values)| Measurement::new(name, unit, values)),
    );
    Ok(results)
}
