//! The transform chain and decoding per core, ours and Pillow's on the same bytes.

use std::sync::Arc;

use crate::data::Dataset;
use crate::transforms::{Input, Observe, Pipeline, Scratch, Target};

use super::step::python_result;
use super::timed_rate;

/// Per-core rates, img/s per repetition: the transform chain alone (images decoded
/// beforehand) and, for a dataset that decodes (image files, encoded synthetic), decoding
/// alone and the whole chain (read + decode + transforms), as one loader worker does it.
pub(super) struct ChainRates {
    pub(super) chain: Vec<f64>,
    pub(super) decode: Vec<f64>,
    pub(super) whole: Vec<f64>,
    /// Pillow's (and torchvision's, when installed) decode and whole chain on the same bytes,
    /// one repetition each between ours, and what ran.
    pub(super) theirs: Option<(Vec<f64>, Vec<f64>, String)>,
}

pub(super) fn chain_rates(
    dataset: &Arc<dyn Dataset>,
    pipeline: &Pipeline,
    repeats: usize,
) -> anyhow::Result<ChainRates> {
    let decodes = dataset.storage().decodes();
    // Images held decoded for the chain alone: up to 8,192 small ones, 64 large ones.
    let n = dataset.len().min(if decodes { 64 } else { 8192 });
    // One contiguous buffer, as a dataset in memory holds them (separate allocations scatter
    // the images over the heap and cost the chain a few percent in cache misses).
    let mut shapes = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(n + 1);
    let mut pixels = Vec::new();
    let mut one = Vec::new();
    for i in 0..n {
        shapes.push(dataset.read_image(i, &mut one)?);
        starts.push(pixels.len());
        pixels.extend_from_slice(&one);
    }
    starts.push(pixels.len());
    let mut scratch = Scratch::default();
    let mut out = vec![0f32; pipeline.output_shape().len()];
    let mut buf = Vec::new();
    let mut rates = ChainRates {
        chain: Vec::new(),
        decode: Vec::new(),
        whole: Vec::new(),
        theirs: None,
    };
    let python = if decodes {
        PythonChain::prepare(dataset, pipeline)
    } else {
        None
    };
    // Each repetition transforms 32,768 images or runs 0.5 s (≈ 0.1 s for the seed's chain),
    // so a scheduler hiccup on a shared machine moves one repetition by a few percent. The
    // first repetition warms caches and buffers and is not kept.
    for r in 0..repeats + 1 {
        let epoch = r as u64;
        let chain = timed_rate(16, 32_768, 0.5, |k| {
            let i = k % n;
            let image = &pixels[starts[i]..starts[i + 1]];
            pipeline.apply(
                Input::new(image, shapes[i], epoch, i as u64),
                &mut scratch,
                Target::Tensor(&mut out),
                Observe::default(),
            );
        });
        let (mut decode, mut whole) = (0.0, 0.0);
        if decodes {
            decode = timed_rate(16, 32_768, 0.5, |k| {
                let _ = dataset.read_image(k % dataset.len(), &mut buf);
            });
            // As the loader reads: only the region a leading RandomResizedCrop keeps.
            whole = timed_rate(16, 32_768, 0.5, |k| {
                let i = k % dataset.len();
                let crop = |shape| pipeline.leading_crop(shape, epoch, i as u64);
                if let Ok(read) = dataset.read_region(i, &mut buf, &crop) {
                    pipeline.apply(
                        Input::new(&buf, read.shape, epoch, i as u64).region(read.region),
                        &mut scratch,
                        Target::Tensor(&mut out),
                        Observe::default(),
                    );
                }
            });
        }
        let theirs = python.as_ref().and_then(PythonChain::run);
        if r > 0 {
            rates.chain.push(chain);
            if decodes {
                rates.decode.push(decode);
                rates.whole.push(whole);
            }
            if let Some((d, w, which)) = theirs {
                let entry = rates
                    .theirs
                    .get_or_insert_with(|| (Vec::new(), Vec::new(), which));
                entry.0.push(d);
                entry.1.push(w);
            }
        }
    }
    Ok(rates)
}

/// Pillow (+ torchvision when installed) on the same encoded images and the same chain, in a
/// `python3` started once per repetition. Only chains of ops the script knows are compared.
struct PythonChain {
    dir: tempfile::TempDir,
    spec: String,
}

impl PythonChain {
    fn prepare(dataset: &Arc<dyn Dataset>, pipeline: &Pipeline) -> Option<PythonChain> {
        if !pipeline.specs().iter().all(|t| t.op().in_pillow_chain()) {
            return None;
        }
        let probe = std::process::Command::new("python3")
            .args(["-c", "import PIL, numpy"])
            .output()
            .ok()?;
        if !probe.status.success() {
            return None;
        }
        let dir = tempfile::tempdir().ok()?;
        for i in 0..dataset.len().min(64) {
            std::fs::write(
                dir.path().join(format!("{i:03}")),
                dataset.storage().encoded(i)?,
            )
            .ok()?;
        }
        let spec = serde_json::to_string(pipeline.specs()).ok()?;
        Some(PythonChain { dir, spec })
    }

    /// One repetition: (decode img/s, whole chain img/s, what ran).
    fn run(&self) -> Option<(f64, f64, String)> {
        let output = std::process::Command::new("python3")
            .arg("-c")
            .arg(PILLOW_CHAIN)
            .arg(self.dir.path())
            .arg(&self.spec)
            .output()
            .ok()?;
        python_result(&output, "Pillow's chain")
    }
}

/// Decoding with Pillow (`Image.open(...).convert("RGB")`) and the chain with torchvision's
/// transforms when installed, else the same steps in Pillow + numpy (what torchvision calls):
/// each timed for 0.5 s after one warm-up pass over the images, all held in memory as bytes.
const PILLOW_CHAIN: &str = include_str!("pillow_chain.py");
