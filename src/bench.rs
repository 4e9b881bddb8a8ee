//! `loaderlab bench`: the speed claims, measured. `bench FILE` times the transform chain on one
//! thread and the loader (no training) at 0, 1 and 2 workers, beside two ceilings for the
//! loader's speed-up (the same batches with no hand-off, and arithmetic alone); `bench step`
//! times the training step at 1 and 2 threads, and PyTorch's step in the same run when a Python
//! with torch exists. Every figure is a median over repetitions with its min–max.

use std::sync::Arc;
use std::time::Instant;

use candle_core::{Device, Tensor};
use serde::Serialize;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::analysis::median;
use crate::config::{OptimizerSection, Settings};
use crate::data::Dataset;
use crate::loader::{Batch, BatchBuilder, Loader, LoaderConfig, LoaderError};
use crate::net::{Layer, Network};
use crate::runner::DataSetup;
use crate::train::{ComputePool, InitialWeights, Layers, Trainer};
use crate::transforms::{Observe, Pipeline, Scratch};

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
fn timed_rate(min_images: usize, max_images: usize, max_s: f64, mut one: impl FnMut(usize)) -> f64 {
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

/// Per-core rates, img/s per repetition: the transform chain alone (images decoded
/// beforehand) and, for a dataset that decodes (image files, encoded synthetic), decoding
/// alone and the whole chain (read + decode + transforms), as one loader worker does it.
struct ChainRates {
    chain: Vec<f64>,
    decode: Vec<f64>,
    whole: Vec<f64>,
    /// Pillow's (and torchvision's, when installed) decode and whole chain on the same bytes,
    /// one repetition each between ours, and what ran.
    theirs: Option<(Vec<f64>, Vec<f64>, String)>,
}

fn chain_rates(
    dataset: &Arc<dyn Dataset>,
    pipeline: &Pipeline,
    repeats: usize,
) -> anyhow::Result<ChainRates> {
    let decodes = dataset.decodes();
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
            pipeline.apply_shaped(image, shapes[i], epoch, i as u64, &mut scratch, &mut out);
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
                    pipeline.apply_staged(
                        &buf,
                        read.shape,
                        read.region,
                        epoch,
                        i as u64,
                        &mut scratch,
                        &mut out,
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
        let known = [
            "random_resized_crop",
            "random_horizontal_flip",
            "to_tensor",
            "normalize",
        ];
        if !pipeline
            .specs()
            .iter()
            .all(|t| known.contains(&t.op_name()))
        {
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
            std::fs::write(dir.path().join(format!("{i:03}")), dataset.encoded(i)?).ok()?;
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
const PILLOW_CHAIN: &str = r#"
import io, json, os, random, sys, time
import numpy as np
import PIL
from PIL import Image
folder, spec = sys.argv[1], json.loads(sys.argv[2])
blobs = [open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))]
def decode(b):
    return Image.open(io.BytesIO(b)).convert("RGB")
try:
    import torch, torchvision
    import torchvision.transforms as T
    ops = []
    for t in spec:
        op = t["op"]
        if op == "random_resized_crop":
            s = t["size"]
            ops.append(T.RandomResizedCrop(s if isinstance(s, int) else tuple(s), scale=tuple(t["scale"]), ratio=tuple(t["ratio"])))
        elif op == "random_horizontal_flip": ops.append(T.RandomHorizontalFlip(t["p"]))
        elif op == "to_tensor": ops.append(T.ToTensor())
        elif op == "normalize": ops.append(T.Normalize(t["mean"], t["std"]))
    chain = T.Compose(ops)
    torch.set_num_threads(1)
    which = f"torchvision {torchvision.__version__} + Pillow {PIL.__version__}"
except ImportError:
    def chain(img):
        x = img
        for t in spec:
            op = t["op"]
            if op == "random_resized_crop":
                s = t["size"]; (oh, ow) = (s, s) if isinstance(s, int) else s
                w, h = x.size; area = w * h
                for _ in range(10):
                    ta = area * random.uniform(*t["scale"])
                    ar = np.exp(random.uniform(np.log(t["ratio"][0]), np.log(t["ratio"][1])))
                    cw, ch = int(round(np.sqrt(ta * ar))), int(round(np.sqrt(ta / ar)))
                    if 0 < cw <= w and 0 < ch <= h:
                        i, j = random.randint(0, h - ch), random.randint(0, w - cw); break
                else:
                    cw, ch, i, j = w, h, 0, 0
                x = x.crop((j, i, j + cw, i + ch)).resize((ow, oh), Image.BILINEAR)
            elif op == "random_horizontal_flip":
                if random.random() < t["p"]: x = x.transpose(Image.FLIP_LEFT_RIGHT)
            elif op == "to_tensor":
                x = np.asarray(x, dtype=np.uint8).transpose(2, 0, 1).astype(np.float32) / 255.0
            elif op == "normalize":
                x = (x - np.array(t["mean"], np.float32)[:, None, None]) / np.array(t["std"], np.float32)[:, None, None]
        return x
    which = f"Pillow {PIL.__version__} + numpy {np.__version__} (torchvision not installed)"
def rate(f):
    for b in blobs: f(b)
    t0, k = time.perf_counter(), 0
    while time.perf_counter() - t0 < 0.5:
        f(blobs[k % len(blobs)]); k += 1
    return k / (time.perf_counter() - t0)
d = rate(decode)
w = rate(lambda b: chain(decode(b)))
print(json.dumps([d, w, which]))
"#;

/// Rates per repetition, each list indexed by worker or thread count.
struct LoaderRates {
    /// The loader at 0, 1, 2 workers, img/s.
    rates: [Vec<f64>; 3],
    /// The independent builders on 1, 2 threads (the no-hand-off ceiling), img/s.
    alone: [Vec<f64>; 2],
    /// The independent builders on 2 threads waking a consumer per batch, img/s.
    woken: Vec<f64>,
    /// Register-only arithmetic on 1, 2 threads, rounds/s.
    arithmetic: [Vec<f64>; 2],
}

/// The loader's rates at 0, 1 and 2 workers and the two ceilings beside them, interleaved
/// within each repetition.
fn loader_rates(
    dataset: &Arc<dyn Dataset>,
    pipeline: &Arc<Pipeline>,
    settings: &Settings,
    repeats: usize,
) -> anyhow::Result<LoaderRates> {
    let batch = settings.loader.batch_size as usize;
    // ≈ 65,536 images per repetition (0.1–0.3 s), for the same reason. Each repetition also
    // builds the same batches on one and on two threads that hand nothing over
    // (`independent_rate`): the machine's own ceiling for the speed-up. Within a repetition the
    // figures of each ratio are measured close together, in an order drawn per repetition
    // (below), because this machine's speed drifts by tens of percent within a minute; each
    // speed-up is the median of per-repetition ratios.
    // A costly pipeline (decoding large images) gets fewer: about 2 s of building per timing.
    let mut probe = BatchBuilder::new(
        Arc::clone(dataset),
        Arc::clone(pipeline),
        LoaderConfig::from_settings(settings),
    );
    let mut b = Batch::default();
    probe.build(0, 0, &mut b)?;
    let t = Instant::now();
    probe.build(0, 1, &mut b)?;
    let per_batch = t.elapsed().as_secs_f64().max(1e-6);
    let by_time = (2.0 / per_batch) as usize;
    let batches = (65_536 / batch).min(by_time).clamp(8, 1024) as u64;
    // What one timing in a repetition measures: the loader, or the independent builders.
    #[derive(Clone, Copy)]
    enum Case {
        Workers {
            workers: usize,
        },
        Alone {
            threads: usize,
        },
        /// Two builders and a consumer they wake per batch.
        Woken,
        Arithmetic {
            threads: usize,
        },
    }
    use Case::{Alone, Arithmetic, Woken, Workers};
    let mut rates = [Vec::new(), Vec::new(), Vec::new()]; // the loader at 0, 1, 2 workers
    let mut alone = [Vec::new(), Vec::new()]; // independent builders on 1, 2 threads
    let mut woken = Vec::new(); // on 2 threads, waking a consumer
    let mut arithmetic = [Vec::new(), Vec::new()]; // the cores alone, on 1, 2 threads
    for r in 0..repeats {
        // The four timings of the loader's share of its ceiling (workers 0 and 2, 1 and 2
        // threads without hand-off) back to back, so the least drift falls between them; their
        // order, and whether they come before or after the other four, drawn afresh each
        // repetition (seeded), so no figure always follows the same one: with a fixed order
        // (each repetition reversing the last) the share moved by about 3 % with the order.
        let mut rng = ChaCha8Rng::seed_from_u64(r as u64);
        let mut share = [
            Workers { workers: 0 },
            Workers { workers: 2 },
            Alone { threads: 1 },
            Alone { threads: 2 },
        ];
        let mut others = [
            Workers { workers: 1 },
            Woken,
            Arithmetic { threads: 1 },
            Arithmetic { threads: 2 },
        ];
        share.shuffle(&mut rng);
        others.shuffle(&mut rng);
        let mut order: Vec<Case> = [share, others].concat();
        if rng.random_bool(0.5) {
            order.rotate_left(4);
        }
        for case in order {
            let mut cfg = LoaderConfig::from_settings(settings);
            match case {
                Arithmetic { threads } => arithmetic[threads - 1].push(arithmetic_rate(threads)),
                Alone { threads } => {
                    // As workers = 0 (one thread, one buffer) and as workers = 2 (two
                    // threads, prefetch_factor buffers each).
                    let buffers = if threads == 1 { 1 } else { cfg.prefetch_factor };
                    alone[threads - 1].push(independent_rate(
                        Arc::clone(dataset),
                        Arc::clone(pipeline),
                        cfg,
                        threads,
                        buffers,
                        batches,
                        false,
                    )?);
                }
                Woken => woken.push(independent_rate(
                    Arc::clone(dataset),
                    Arc::clone(pipeline),
                    cfg.clone(),
                    2,
                    cfg.prefetch_factor,
                    batches,
                    true,
                )?),
                Workers { workers } => {
                    cfg.workers = workers;
                    // Warm-up touches every buffer the loader will cycle through (prefetch ×
                    // workers, or the one serial buffer): no first-touch page faults are timed.
                    let warm_up = (cfg.prefetch_factor * workers).max(1) + 1;
                    let mut loader = Loader::new(Arc::clone(dataset), Arc::clone(pipeline), cfg)?;
                    for _ in 0..warm_up {
                        loader.next_batch()?;
                    }
                    let t = Instant::now();
                    let mut images = 0;
                    for _ in 0..batches {
                        images += loader.next_batch()?.len;
                    }
                    rates[workers].push(images as f64 / t.elapsed().as_secs_f64());
                }
            }
        }
    }
    Ok(LoaderRates {
        rates,
        alone,
        woken,
        arithmetic,
    })
}

/// Transform chain on one thread, and the loader without training at 0, 1 and 2 workers.
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
        let ratio =
            |a: &[f64], b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(a, b)| a / b).collect() };
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
        results.push(Measurement::new(
            "decoding alone, 1 thread",
            "img/s",
            decode,
        ));
        results.push(Measurement::new(
            "read + decode + transform chain, 1 thread",
            "img/s",
            whole,
        ));
        results.extend(against.into_iter().flatten());
    }
    let LoaderRates {
        rates,
        alone,
        woken,
        arithmetic,
    } = loader_rates(&dataset, &pipeline, settings, repeats)?;
    let ratio =
        |a: &[f64], b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(a, b)| a / b).collect() };
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

/// The loader's batch work with the hand-off taken away: `threads` threads each build every
/// `threads`-th of `batches` batches into a private ring of `buffers` batch buffers, with no
/// channels, no ordering and no consumer; timed until the last thread is done. Returns images
/// per second, or the first builder's failure (a panic names thread and batch, as a worker's).
///
/// With one buffer on one thread this is the serial loader's work (workers = 0); with
/// `prefetch_factor` buffers on N threads, N workers' work. The ratio of the two is the ceiling
/// of the loader's speed-up on this machine: equal fixed shares, so a slower core holds the
/// total back (the loader's workers share out batches as they free up and can beat it), but
/// nothing ever waits for anything else. `bench` sets the loader's speed-up beside it, so a
/// loader shortfall can be told apart from a machine that does not scale (shared caches and
/// memory, cores of unequal speed on a busy host).
///
/// With `consumer`, the calling thread stands in for a training thread that does nothing but
/// take batches: each builder wakes it once per batch it finishes (one byte through a pipe, as
/// the loader wakes its training thread) and it sleeps until then. That is the least any
/// loader with a separate training thread pays per batch: on 2 cores the third thread takes
/// its turns on the builders' cores.
pub fn independent_rate(
    dataset: Arc<dyn Dataset>,
    pipeline: Arc<Pipeline>,
    cfg: LoaderConfig,
    threads: usize,
    buffers: usize,
    batches: u64,
    consumer: bool,
) -> Result<f64, LoaderError> {
    use std::io::{Read, Write};
    let (threads, buffers) = (threads.max(1), buffers.max(1));
    let wait_error = |e: std::io::Error| LoaderError::Wait {
        message: e.to_string(),
    };
    let (mut woken, wake) = match consumer {
        true => std::io::pipe()
            .map(|(r, w)| (Some(r), Some(w)))
            .map_err(wait_error)?,
        false => (None, None),
    };
    // One write end per builder and none kept here: when every builder has returned (done or
    // failed), the consumer reads the end of the pipe instead of waiting for ever.
    let mut wakes = (0..threads)
        .map(|_| wake.as_ref().map(|w| w.try_clone()).transpose())
        .collect::<Result<Vec<_>, _>>()
        .map_err(wait_error)?;
    drop(wake);
    let start = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .zip(wakes.drain(..))
            .map(|(t, wake)| {
                let start = &start;
                let mut builder =
                    BatchBuilder::new(Arc::clone(&dataset), Arc::clone(&pipeline), cfg.clone());
                scope.spawn(move || {
                    let mut ring: Vec<Batch> = (0..buffers).map(|_| Batch::default()).collect();
                    // Every buffer of the ring is built into once before the clock starts, as
                    // the loader's warm-up does; a failure still reaches the barrier (no hang).
                    let warm = ring.iter_mut().enumerate().try_for_each(|(i, batch)| {
                        builder.build(t, (t + i * threads) as u64, batch)
                    });
                    start.wait();
                    warm?;
                    let mut images = 0;
                    for (i, k) in (t as u64..batches).step_by(threads).enumerate() {
                        let batch = &mut ring[i % buffers];
                        builder.build(t, k, batch)?;
                        images += batch.len;
                        if let Some(wake) = &wake {
                            let _ = (&*wake).write(&[1]);
                        }
                    }
                    Ok::<usize, LoaderError>(images)
                })
            })
            .collect();
        start.wait();
        let started = Instant::now();
        if let Some(woken) = &mut woken {
            // One batch at a time: a batch already built is taken without sleeping.
            let mut byte = [0];
            let mut taken = 0;
            while taken < batches {
                match woken.read(&mut byte) {
                    Ok(0) => break,
                    Ok(_) => taken += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(wait_error(e)),
                }
            }
        }
        let mut images = 0;
        for h in handles {
            // Builders catch their own panics; anything else is a bug, passed on as a panic.
            images += h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        }
        Ok(images as f64 / started.elapsed().as_secs_f64())
    })
}

/// Rounds of register-only integer arithmetic per second on `threads` threads, each doing
/// the same fixed share (≈ 0.1 s on a 2020s core), timed until the last is done: no memory,
/// no data, nothing shared. Two threads over one is what this machine's cores give to perfectly
/// parallel work, so a speed-up below 2 that this ratio shares is the machine's, not the
/// loader's (a virtual machine's cores can run at different, drifting speeds).
fn arithmetic_rate(threads: usize) -> f64 {
    const ROUNDS: u64 = 1 << 17;
    const PER_ROUND: u64 = 1024;
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                // Four independent chains keep several ALUs busy without touching memory.
                let (mut a, mut b, mut c, mut d) = (1u64, 2u64, 3u64, 4u64);
                for _ in 0..ROUNDS {
                    for _ in 0..PER_ROUND {
                        a = a.wrapping_mul(3).wrapping_add(1);
                        b = b.wrapping_mul(5).wrapping_add(7);
                        c ^= c << 1;
                        d = d.wrapping_add(d >> 3);
                    }
                    (a, b, c, d) = std::hint::black_box((a, b, c, d));
                }
            });
        }
    });
    (threads as u64 * ROUNDS) as f64 / started.elapsed().as_secs_f64()
}

/// What `bench step` times: a network, its optimizer and the batch.
pub struct StepCase {
    pub net: Network,
    pub optimizer: OptimizerSection,
    pub batch: usize,
    pub steps: usize,
    pub layers: Layers,
}

impl StepCase {
    /// The formula batch of the fixtures: pixels 0.5 + 0.5·sin(0.13·i + 1), labels n mod classes.
    fn batch(&self) -> candle_core::Result<(Tensor, Tensor)> {
        let (input, batch) = (self.net.input, self.batch);
        let shape = input.shape;
        let pixels: Vec<f32> = (0..batch * shape.len())
            .map(|i| (0.5 + 0.5 * (0.13 * i as f64 + 1.0).sin()) as f32)
            .collect();
        let labels: Vec<u32> = (0..batch as u32)
            .map(|n| n % input.classes as u32)
            .collect();
        let dims = (batch, shape.channels, shape.height, shape.width);
        Ok((
            Tensor::from_vec(pixels, dims, &Device::Cpu)?,
            Tensor::from_vec(labels, batch, &Device::Cpu)?,
        ))
    }

    /// "SmallCNN + adam, batch 256".
    pub fn describe(&self) -> String {
        let kind = toml::Value::try_from(self.optimizer.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        format!("{} + {kind}, batch {}", self.net.describe(), self.batch)
    }
}

/// Our step and PyTorch's (when `python3` has torch) at each thread count, repetitions
/// interleaved (ours, then PyTorch's, then ours …) so drift hits both alike; the ratio is taken
/// per repetition pair and reported as its median with min–max.
pub fn step(
    case: &StepCase,
    threads: &[usize],
    repeats: usize,
) -> anyhow::Result<Vec<Measurement>> {
    let (x, y) = case.batch()?;
    let mut trainer = Trainer::with_layers(
        InitialWeights::pytorch_default(42, case.net.clone()),
        &case.optimizer,
        Device::Cpu,
        case.layers,
    )?;
    let which = match trainer.model().layers() {
        Layers::FastCpu => "loaderlab step",
        Layers::Candle => "loaderlab step (candle layers)",
    };
    let batch = case.batch;
    let mut results = Vec::new();
    for &t in threads {
        let pool = ComputePool::new(t)?;
        let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        let mut version = None;
        for _ in 0..repeats {
            trainer.reset()?;
            // The whole repetition runs on the pool: its threads are the step's threads.
            let times = pool.install(|| -> candle_core::Result<Vec<f64>> {
                for _ in 0..3 {
                    trainer.step(&x, &y)?;
                }
                let mut times = Vec::with_capacity(case.steps);
                for _ in 0..case.steps {
                    let t0 = Instant::now();
                    trainer.step(&x, &y)?.to_scalar::<f32>()?;
                    times.push(t0.elapsed().as_secs_f64() * 1e3);
                }
                Ok(times)
            })?;
            let m = median(&times);
            ours.push(m);
            if let Some((p, v)) = pytorch_step(case, t) {
                ratios.push(m / p);
                theirs.push(p);
                version = Some(v);
            }
        }
        results.push(Measurement::new(
            format!("{which}, batch {batch}, {t} thread(s)"),
            "ms",
            ours,
        ));
        if let Some(v) = version {
            results.push(Measurement::new(
                format!("PyTorch {v} step, batch {batch}, {t} thread(s)"),
                "ms",
                theirs,
            ));
            results.push(Measurement::new(
                format!("ratio loaderlab / PyTorch, {t} thread(s), per interleaved pair"),
                "×",
                ratios,
            ));
        }
    }
    Ok(results)
}

/// The network as the layer list [`PYTORCH_STEP`] builds a torch module from.
fn layers_json(net: &Network) -> serde_json::Value {
    use serde_json::json;
    fn walk(layers: &[Layer], net: &Network) -> Vec<serde_json::Value> {
        layers
            .iter()
            .map(|l| match l {
                Layer::Conv {
                    weight,
                    bias,
                    kernel,
                    stride,
                    padding,
                } => {
                    let s = &net.params[*weight].shape;
                    json!(["conv", s[1], s[0], kernel, stride, padding, bias.is_some()])
                }
                Layer::BatchNorm { weight, .. } => json!(["bn", net.params[*weight].shape[0]]),
                Layer::Relu => json!(["relu"]),
                Layer::MaxPool2 => json!(["pool2"]),
                Layer::MaxPool3 => json!(["pool3"]),
                Layer::Residual { body, shortcut } => {
                    json!(["res", walk(body, net), walk(shortcut, net)])
                }
                Layer::GlobalAvgPool => json!(["gap"]),
                Layer::Flatten => json!(["flatten"]),
                Layer::Linear { weight, .. } => {
                    let s = &net.params[*weight].shape;
                    json!(["linear", s[1], s[0]])
                }
            })
            .collect()
    }
    serde_json::Value::Array(walk(&net.layers, net))
}

/// One repetition of PyTorch's step for `case` on `threads` threads: (median ms, torch version),
/// or None when no `python3` with torch runs it.
fn pytorch_step(case: &StepCase, threads: usize) -> Option<(f64, String)> {
    let o = &case.optimizer;
    let spec = serde_json::json!({
        "layers": layers_json(&case.net),
        "input": [case.net.input.shape.channels, case.net.input.shape.height, case.net.input.shape.width],
        "classes": case.net.input.classes,
        "batch": case.batch,
        "steps": case.steps,
        "threads": threads,
        "optimizer": o,
    });
    let output = std::process::Command::new("python3")
        .arg("-c")
        .arg(PYTORCH_STEP)
        .arg(spec.to_string())
        .output()
        .ok()?;
    python_result(&output, "PyTorch's step")
}

/// A comparison script's printed JSON; None, with the reason on stderr when it is more than
/// a missing module (a script that breaks on a machine with torch must not pass silently).
fn python_result<T: serde::de::DeserializeOwned>(
    output: &std::process::Output,
    what: &str,
) -> Option<T> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if !stderr.contains("ModuleNotFoundError") {
            let last = stderr.lines().last().unwrap_or("(nothing on stderr)");
            eprintln!("warning: {what} in python3 failed: {last}");
        }
        return None;
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| eprintln!("warning: {what} in python3 printed no result ({e})"))
        .ok()
}

/// The same network and optimizer in PyTorch, timed like ours: 3 warm-up steps, then the median
/// of `steps` steps (loss read each step). Prints [median_ms, torch_version].
const PYTORCH_STEP: &str = r#"
import json, sys, time, math
import torch, torch.nn as nn, torch.nn.functional as F
spec = json.loads(sys.argv[1])
class Res(nn.Module):
    def __init__(self, body, shortcut):
        super().__init__(); self.body = body; self.shortcut = shortcut
    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))
def build(layers):
    mods = []
    for l in layers:
        k = l[0]
        if k == "conv": mods.append(nn.Conv2d(l[1], l[2], l[3], stride=l[4], padding=l[5], bias=l[6]))
        elif k == "bn": mods.append(nn.BatchNorm2d(l[1]))
        elif k == "relu": mods.append(nn.ReLU())
        elif k == "pool2": mods.append(nn.MaxPool2d(2))
        elif k == "pool3": mods.append(nn.MaxPool2d(3, 2, 1))
        elif k == "res": mods.append(Res(build(l[1]), build(l[2])))
        elif k == "gap": mods.append(nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten()))
        elif k == "flatten": mods.append(nn.Flatten())
        elif k == "linear": mods.append(nn.Linear(l[1], l[2]))
    return nn.Sequential(*mods)
torch.set_num_threads(spec["threads"])
c, h, w = spec["input"]; batch = spec["batch"]
x = torch.tensor([0.5 + 0.5 * math.sin(0.13 * i + 1.0) for i in range(batch * c * h * w)], dtype=torch.float32).reshape(batch, c, h, w)
y = torch.tensor([n % spec["classes"] for n in range(batch)])
torch.manual_seed(42); model = build(spec["layers"]).train()
o = spec["optimizer"]
if o["kind"] == "adam": opt = torch.optim.Adam(model.parameters(), lr=o["lr"], betas=o["betas"], eps=o["eps"], weight_decay=o["weight_decay"])
elif o["kind"] == "adamw": opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=o["betas"], eps=o["eps"], weight_decay=o["weight_decay"])
else: opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"], nesterov=o["nesterov"], weight_decay=o["weight_decay"])
def step():
    opt.zero_grad(set_to_none=True); loss = F.cross_entropy(model(x), y); loss.backward(); opt.step(); return loss.item()
for _ in range(3): step()
times = []
for _ in range(spec["steps"]):
    t0 = time.perf_counter(); step(); times.append((time.perf_counter() - t0) * 1e3)
times.sort(); n = len(times)
print(json.dumps([(times[(n - 1) // 2] + times[n // 2]) / 2, torch.__version__]))
"#;
