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
use crate::transforms::{Input, Observe, SampleParams, Scratch, Target};

#[derive(Serialize)]
pub struct Sample {
    pub position: usize,
    pub index: usize,
    pub label: u8,
    pub epoch: u64,
    #[serde(flatten)]
    pub params: SampleParams,
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
    let out_shape = pipeline.output_shape();
    // The loader's epoch-0 order.
    let mut order = Vec::new();
    let (shuffle, seed) = (settings.loader.shuffle, settings.experiment.seed);
    if !dataset.storage().epoch_order(shuffle, seed, 0, &mut order) {
        epoch_order(dataset.len(), shuffle, seed, 0, &mut order);
    }
    let n = n.min(order.len());
    let mut originals: Vec<(ImageShape, Vec<u8>)> = Vec::with_capacity(n);
    let mut augmented = Vec::with_capacity(n * out_shape.len());
    let mut samples = Vec::new();
    let mut scratch = Scratch::default();
    for (position, &i) in order.iter().take(n).enumerate() {
        let i = i as usize;
        let mut pixels = Vec::new();
        let shape = dataset.read_image(i, &mut pixels)?;
        let params = pipeline
            .apply(
                Input::new(&pixels, shape, 0, i as u64),
                &mut scratch,
                Target::Pixels,
                Observe::default(),
            )
            .clone();
        augmented.extend_from_slice(scratch.pixels());
        originals.push((shape, pixels));
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
    // One array of the originals when they share a shape (every dataset but an image folder
    // of mixed sizes); else one array per sample, original_<position>.npy.
    let same = originals.windows(2).all(|w| w[0].0 == w[1].0);
    if let (true, Some((shape, _))) = (same, originals.first()) {
        let all: Vec<u8> = originals
            .iter()
            .flat_map(|(_, p)| p.iter().copied())
            .collect();
        let path = out.join("originals.npy");
        to_npy(&all, n, *shape, &path)?;
        written.push(path);
    } else {
        for (position, (shape, pixels)) in originals.iter().enumerate() {
            let path = out.join(format!("original_{position}.npy"));
            to_npy(pixels, 1, *shape, &path)?;
            written.push(path);
        }
    }
    let path = out.join("augmented.npy");
    to_npy(&augmented, n, out_shape, &path)?;
    written.push(path);
    let png = out.join("preview.png");
    let augmented: Vec<(ImageShape, &[u8])> = augmented
        .chunks_exact(out_shape.len().max(1))
        .map(|p| (out_shape, p))
        .collect();
    let originals: Vec<(ImageShape, &[u8])> =
        originals.iter().map(|(s, p)| (*s, p.as_slice())).collect();
    let columns: Vec<String> = samples
        .iter()
        .map(|s| format!("#{} · label {}", s.index, s.label))
        .collect();
    draw_grid(&png, &columns, [&originals, &augmented])?;
    written.push(png);
    Ok(written)
}

/// Images are drawn at most this many pixels wide or high (larger ones are sampled).
const CELL_MAX: usize = 128;

/// Space for the row labels (left) and the column captions (top).
const ROW_LABEL: u32 = 96;
const CAPTION: u32 = 22;

/// The PNG: one column per sample (captioned with its dataset index and label), one row per
/// stage (labelled original and augmented). Small images are magnified, large ones sampled down
/// to fit a cell.
fn draw_grid(
    png: &Path,
    columns: &[String],
    rows: [&[(ImageShape, &[u8])]; 2],
) -> anyhow::Result<()> {
    crate::report::charts::style::register_font();
    let n = columns.len();
    let longest = rows
        .iter()
        .flat_map(|r| r.iter().map(|(s, _)| s.height.max(s.width)))
        .max()
        .unwrap_or(1)
        .max(1);
    let step = longest.div_ceil(CELL_MAX);
    let scale = if step > 1 {
        1
    } else {
        (112 / longest).clamp(1, 4) as u32
    };
    // Wide enough for its caption too.
    let cell = ((longest.div_ceil(step)) as u32 * scale + 4).max(110);
    let width = ROW_LABEL + (cell * n.max(1) as u32).max(cell);
    let height = CAPTION + 2 * cell;
    let root = BitMapBackend::new(png, (width, height)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow::anyhow!("{e}");
    root.fill(&RGBColor(40, 40, 40)).map_err(|e| err(&e))?;
    let font = ("sans-serif", 13)
        .into_font()
        .color(&RGBColor(235, 235, 235));
    for (k, caption) in columns.iter().enumerate() {
        let x = (ROW_LABEL + k as u32 * cell + 4) as i32;
        root.draw(&Text::new(caption.as_str(), (x, 4), font.clone()))
            .map_err(|e| err(&e))?;
    }
    for (row, name) in ["original", "augmented"].iter().enumerate() {
        let y = (CAPTION + row as u32 * cell + cell / 2 - 7) as i32;
        root.draw(&Text::new(*name, (8, y), font.clone()))
            .map_err(|e| err(&e))?;
    }
    for (row, images) in rows.iter().enumerate() {
        for (k, (shape, img)) in images.iter().enumerate() {
            let (x0, y0) = (
                ROW_LABEL + k as u32 * cell + 2,
                CAPTION + row as u32 * cell + 2,
            );
            let plane = shape.plane();
            for (dy, y) in (0..shape.height).step_by(step).enumerate() {
                for (dx, x) in (0..shape.width).step_by(step).enumerate() {
                    let at =
                        |c: usize| img[c.min(shape.channels - 1) * plane + y * shape.width + x];
                    let (x, y) = (dx as u32, dy as u32);
                    let rect = Rectangle::new(
                        [
                            ((x0 + x * scale) as i32, (y0 + y * scale) as i32),
                            ((x0 + (x + 1) * scale) as i32, (y0 + (y + 1) * scale) as i32),
                        ],
                        RGBColor(at(0), at(1), at(2)).filled(),
                    );
                    root.draw(&rect).map_err(|e| err(&e))?;
                }
            }
        }
    }
    root.present()
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", png.display()))?;
    Ok(())
}
