//! `loaderlab preview`: what the transforms do to the first samples the loader would serve.
//!
//! Writes a PNG grid (originals above, augmented below), `samples.json` with each sample's
//! index, label and exact transform parameters, and `originals.npy` / `augmented.npy`
//! (uint8 N×28×28, the augmented image before `to_tensor`) so anyone can recompute the
//! augmentation with Pillow from the parameters and compare pixels.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use plotters::prelude::*;
use serde::Serialize;

use crate::config::Settings;
use crate::data::{IMAGE_PIXELS, IMAGE_SIDE};
use crate::loader::epoch_order;
use crate::runner::DataSetup;
use crate::transforms::{SampleParams, Scratch};

#[derive(Serialize)]
pub struct Sample {
    pub position: usize,
    pub index: usize,
    pub label: u8,
    pub epoch: u64,
    #[serde(flatten)]
    pub params: SampleParams,
}

const SCALE: u32 = 4;

/// Write the preview of the first `n` samples of epoch 0 into `out`; returns the files written.
pub fn preview(
    settings: &Settings,
    n: usize,
    out: &Path,
    quiet: bool,
) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", out.display()))?;
    let DataSetup {
        dataset, pipeline, ..
    } = DataSetup::open(settings, quiet)?;
    let side = pipeline.out_side();
    // The loader's epoch-0 order.
    let mut order = Vec::new();
    epoch_order(
        dataset.len(),
        settings.loader.shuffle,
        settings.experiment.seed,
        0,
        &mut order,
    );
    let n = n.min(order.len());
    let mut originals = Vec::with_capacity(n * IMAGE_PIXELS);
    let mut augmented = Vec::with_capacity(n * side * side);
    let mut samples = Vec::new();
    let mut scratch = Scratch::default();
    let mut pixels = vec![0u8; IMAGE_PIXELS];
    for (position, &i) in order.iter().take(n).enumerate() {
        let i = i as usize;
        dataset.image_into(i, &mut pixels);
        originals.extend_from_slice(&pixels);
        let (aug, params) = pipeline.augment(&pixels, 0, i as u64, &mut scratch);
        augmented.extend_from_slice(aug);
        samples.push(Sample {
            position,
            index: i,
            label: dataset.label(i),
            epoch: 0,
            params,
        });
    }
    let mut written = Vec::new();
    let json = out.join("samples.json");
    std::fs::write(&json, serde_json::to_vec_pretty(&samples)?)?;
    written.push(json);
    for (name, data, s) in [
        ("originals.npy", &originals, IMAGE_SIDE),
        ("augmented.npy", &augmented, side),
    ] {
        let path = out.join(name);
        Tensor::from_vec(data.clone(), (n, s, s), &Device::Cpu)?.write_npy(&path)?;
        written.push(path);
    }
    let png = out.join("preview.png");
    let cell = IMAGE_SIDE.max(side) as u32 * SCALE + 4;
    let width = (cell * n.max(1) as u32).max(cell);
    {
        let root = BitMapBackend::new(&png, (width, 2 * cell)).into_drawing_area();
        root.fill(&RGBColor(40, 40, 40))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        for k in 0..n {
            for (row, img, s) in [
                (
                    0u32,
                    &originals[k * IMAGE_PIXELS..(k + 1) * IMAGE_PIXELS],
                    IMAGE_SIDE,
                ),
                (1, &augmented[k * side * side..(k + 1) * side * side], side),
            ] {
                let (x0, y0) = (k as u32 * cell + 2, row * cell + 2);
                for y in 0..s as u32 {
                    for x in 0..s as u32 {
                        let v = img[(y as usize) * s + x as usize];
                        let rect = Rectangle::new(
                            [
                                ((x0 + x * SCALE) as i32, (y0 + y * SCALE) as i32),
                                ((x0 + (x + 1) * SCALE) as i32, (y0 + (y + 1) * SCALE) as i32),
                            ],
                            RGBColor(v, v, v).filled(),
                        );
                        root.draw(&rect).map_err(|e| anyhow::anyhow!("{e}"))?;
                    }
                }
            }
        }
        root.present()
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", png.display()))?;
    }
    written.push(png);
    Ok(written)
}
