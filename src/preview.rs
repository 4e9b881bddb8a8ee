//! `loaderlab preview`: what the transforms do to the first samples the loader would serve.
//!
//! Writes a PNG grid (originals above, augmented below), `samples.json` with each sample's
//! index, label and exact transform parameters, and `originals.npy` / `augmented.npy`
//! (uint8 N×H×W for grey images, N×H×W×3 for colour, as `numpy.asarray(pil_image)` has them;
//! the augmented image before `to_tensor`) so anyone can recompute the augmentation with
//! Pillow from the parameters and compare pixels.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use plotters::prelude::*;
use serde::Serialize;

use crate::config::Settings;
use crate::loader::epoch_order;
use crate::runner::DataSetup;
use crate::shape::ImageShape;
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

/// Pixels per image pixel in the grid: small images are magnified.
fn scale_for(shape: ImageShape) -> u32 {
    (112 / shape.height.max(shape.width).max(1)).clamp(1, 4) as u32
}

/// Planar (CHW) images as numpy's layout for pictures: N×H×W for grey, N×H×W×C otherwise.
fn to_npy(data: &[u8], n: usize, shape: ImageShape, path: &Path) -> anyhow::Result<()> {
    let ImageShape {
        channels: c,
        height: h,
        width: w,
    } = shape;
    if c == 1 {
        Tensor::from_vec(data.to_vec(), (n, h, w), &Device::Cpu)?.write_npy(path)?;
    } else {
        let mut hwc = vec![0u8; data.len()];
        for (image, out) in data
            .chunks_exact(shape.len())
            .zip(hwc.chunks_exact_mut(shape.len()))
        {
            for (i, px) in out.chunks_exact_mut(c).enumerate() {
                for (ch, v) in px.iter_mut().enumerate() {
                    *v = image[ch * h * w + i];
                }
            }
        }
        Tensor::from_vec(hwc, (n, h, w, c), &Device::Cpu)?.write_npy(path)?;
    }
    Ok(())
}

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
    let (in_shape, out_shape) = (pipeline.input_shape(), pipeline.output_shape());
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
    let mut originals = Vec::with_capacity(n * in_shape.len());
    let mut augmented = Vec::with_capacity(n * out_shape.len());
    let mut samples = Vec::new();
    let mut scratch = Scratch::default();
    let mut pixels = vec![0u8; in_shape.len()];
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
    for (name, data, shape) in [
        ("originals.npy", &originals, in_shape),
        ("augmented.npy", &augmented, out_shape),
    ] {
        let path = out.join(name);
        to_npy(data, n, shape, &path)?;
        written.push(path);
    }
    let png = out.join("preview.png");
    draw_grid(&png, n, [(&originals, in_shape), (&augmented, out_shape)])?;
    written.push(png);
    Ok(written)
}

/// The PNG: one column per sample, one row per stage (original, augmented).
fn draw_grid(png: &Path, n: usize, rows: [(&[u8], ImageShape); 2]) -> anyhow::Result<()> {
    let scale = scale_for(rows[0].1).min(scale_for(rows[1].1));
    let side = |s: ImageShape| s.height.max(s.width) as u32 * scale;
    let cell = side(rows[0].1).max(side(rows[1].1)) + 4;
    let width = (cell * n.max(1) as u32).max(cell);
    let root = BitMapBackend::new(png, (width, 2 * cell)).into_drawing_area();
    root.fill(&RGBColor(40, 40, 40))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for k in 0..n {
        for (row, (data, shape)) in rows.iter().enumerate() {
            let img = &data[k * shape.len()..(k + 1) * shape.len()];
            let (x0, y0) = (k as u32 * cell + 2, row as u32 * cell + 2);
            let plane = shape.plane();
            for y in 0..shape.height {
                for x in 0..shape.width {
                    let at =
                        |c: usize| img[c.min(shape.channels - 1) * plane + y * shape.width + x];
                    let (x, y) = (x as u32, y as u32);
                    let rect = Rectangle::new(
                        [
                            ((x0 + x * scale) as i32, (y0 + y * scale) as i32),
                            ((x0 + (x + 1) * scale) as i32, (y0 + (y + 1) * scale) as i32),
                        ],
                        RGBColor(at(0), at(1), at(2)).filled(),
                    );
                    root.draw(&rect).map_err(|e| anyhow::anyhow!("{e}"))?;
                }
            }
        }
    }
    root.present()
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", png.display()))?;
    Ok(())
}
