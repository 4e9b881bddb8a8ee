//! The CPU transform pipeline: 8-bit pixel ops (crop-resize, rotation, flip) followed by
//! `to_tensor` and `normalize`, with torchvision's semantics, on planar images of any size and
//! 1 or 3 channels (each op works plane by plane, as Pillow works band by band).
//!
//! Invariant: every random parameter of sample `i` in epoch `e` comes from one RNG seeded by
//! (experiment seed, e, i), drawn in op order, so the output never depends on which thread or
//! loader condition produced it. Buffers live in a [`Scratch`] reused from sample to sample.

mod colour;
mod geometry;
mod resize;
mod rotate;

use rand::seq::SliceRandom;
use serde::{Deserialize, Serialize};

pub use colour::{brightness, contrast, grey_plane, hue, luma, saturation};
pub use geometry::{PadMode, center_crop_geometry, crop, flip_horizontal, flip_vertical, pad};
pub use resize::{CropBox, ResizeScratch, crop_resize, sample_crop, uniform};
pub use rotate::rotate_nearest;

use crate::config::{PaddingMode, Size, TransformSpec, chain_output, resize_output};
use crate::hash::{SplitMix64, splitmix as mix};
use std::time::Instant;

use crate::shape::{ImageShape, Padding};
use crate::spans;

/// The RNG for one sample: a function of (seed, epoch, index) only.
pub fn sample_rng(seed: u64, epoch: u64, index: u64) -> SplitMix64 {
    let key =
        mix(mix(seed ^ 0x7472_616e_7366_6f72) ^ epoch.wrapping_mul(0x9e37_79b9_7f4a_7c15)) ^ index;
    SplitMix64::new(mix(key))
}

/// `p / 255` for every byte, as torchvision's ToTensor computes it (a division, not a
/// multiplication by 1/255, which differs in the last bit for some values).
static TO_TENSOR: std::sync::LazyLock<[f32; 256]> =
    std::sync::LazyLock::new(|| std::array::from_fn(|p| p as f32 / 255.0));

/// The random parameters one op drew for one sample, named by the op (samples.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OpParams {
    RandomResizedCrop {
        top: usize,
        left: usize,
        height: usize,
        width: usize,
    },
    RandomRotation {
        angle: f64,
    },
    RandomHorizontalFlip {
        flipped: bool,
    },
    RandomVerticalFlip {
        flipped: bool,
    },
    /// The crop's corner in the padded image.
    RandomCrop {
        top: usize,
        left: usize,
    },
    /// The factors drawn (absent: that adjustment is off) and the order they were applied in.
    ColorJitter {
        order: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        brightness: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        contrast: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        saturation: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        hue: Option<f64>,
    },
    RandomGrayscale {
        applied: bool,
    },
}

/// Every random parameter one sample received, op by op in chain order, for previews and
/// fidelity checks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleParams {
    pub ops: Vec<OpParams>,
}

impl SampleParams {
    /// The crop box of the first random_resized_crop, if any.
    pub fn crop(&self) -> Option<CropBox> {
        self.ops.iter().find_map(|p| match *p {
            OpParams::RandomResizedCrop {
                top,
                left,
                height,
                width,
            } => Some(CropBox {
                top,
                left,
                height,
                width,
            }),
            _ => None,
        })
    }
}

/// ColorJitter's four adjustments, in torchvision's numbering (its `fn_idx`).
const JITTER_NAMES: [&str; 4] = ["brightness", "contrast", "saturation", "hue"];

#[derive(Debug, Clone)]
enum PixelOp {
    RandomResizedCrop {
        size: (usize, usize),
        scale: [f64; 2],
        ratio: [f64; 2],
    },
    Rotate {
        degrees: f64,
        fill: u8,
    },
    Flip {
        p: f64,
        vertical: bool,
    },
    Resize {
        size: Size,
        max_size: u64,
    },
    CenterCrop {
        size: (usize, usize),
    },
    RandomCrop {
        size: (usize, usize),
        padding: Padding,
        pad_if_needed: bool,
        fill: u8,
        mode: PadMode,
    },
    /// Factor ranges per adjustment (None: off), in [`JITTER_NAMES`] order.
    ColorJitter {
        ranges: [Option<[f64; 2]>; 4],
    },
    Grayscale {
        channels: usize,
    },
    RandomGrayscale {
        p: f64,
    },
    /// Burn this many ns of the thread's CPU time; the image is untouched.
    CpuWork {
        ns: u64,
    },
}

impl PixelOp {
    fn compile(spec: &TransformSpec) -> Option<PixelOp> {
        Some(match spec {
            TransformSpec::RandomResizedCrop(c) => PixelOp::RandomResizedCrop {
                size: c.size.fixed(),
                scale: c.scale,
                ratio: c.ratio,
            },
            TransformSpec::RandomRotation(r) => PixelOp::Rotate {
                degrees: r.degrees,
                fill: r.fill,
            },
            TransformSpec::RandomHorizontalFlip(f) => PixelOp::Flip {
                p: f.p,
                vertical: false,
            },
            TransformSpec::RandomVerticalFlip(f) => PixelOp::Flip {
                p: f.p,
                vertical: true,
            },
            TransformSpec::Resize(r) => PixelOp::Resize {
                size: r.size,
                max_size: r.max_size,
            },
            TransformSpec::CenterCrop(c) => PixelOp::CenterCrop {
                size: c.size.fixed(),
            },
            TransformSpec::RandomCrop(c) => PixelOp::RandomCrop {
                size: c.size.fixed(),
                padding: Padding::from_values(&c.padding),
                pad_if_needed: c.pad_if_needed,
                fill: c.fill,
                mode: match c.padding_mode {
                    PaddingMode::Constant => PadMode::Constant,
                    PaddingMode::Edge => PadMode::Edge,
                    PaddingMode::Reflect => PadMode::Reflect,
                    PaddingMode::Symmetric => PadMode::Symmetric,
                },
            },
            TransformSpec::ColorJitter(j) => {
                // torchvision's _check_input: a factor v gives [max(0, 1 - v), 1 + v], hue h
                // gives [-h, h]; a range that is only its centre turns the adjustment off.
                let around_one = |v: f64| (v > 0.0).then(|| [(1.0 - v).max(0.0), 1.0 + v]);
                PixelOp::ColorJitter {
                    ranges: [
                        around_one(j.brightness),
                        around_one(j.contrast),
                        around_one(j.saturation),
                        (j.hue > 0.0).then_some([-j.hue, j.hue]),
                    ],
                }
            }
            TransformSpec::Grayscale(g) => PixelOp::Grayscale {
                channels: g.num_output_channels as usize,
            },
            TransformSpec::RandomGrayscale(g) => PixelOp::RandomGrayscale { p: g.p },
            TransformSpec::CpuWork(w) => PixelOp::CpuWork {
                ns: (w.us * 1e3).round() as u64,
            },
            TransformSpec::ToTensor(_) | TransformSpec::Normalize(_) => return None,
        })
    }
}

/// A compiled pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    specs: Vec<TransformSpec>,
    ops: Vec<PixelOp>,
    /// Each of `ops`' op names (its stage span in a profiled run).
    op_names: Vec<&'static str>,
    /// Per-channel (mean, std) applied after to_tensor, if any.
    normalize: Option<Vec<(f32, f32)>>,
    seed: u64,
    input: ImageShape,
    output: ImageShape,
}

/// Per-thread buffers, and the parameters the last sample drew (kept here so that recording
/// them allocates nothing per sample).
#[derive(Debug, Default)]
pub struct Scratch {
    a: Vec<u8>,
    b: Vec<u8>,
    grey: Vec<u8>,
    resize: ResizeScratch,
    params: SampleParams,
}

/// `torch.rand(1) < p`.
fn coin(rng: &mut SplitMix64, p: f64) -> bool {
    rand::Rng::random::<f64>(rng) < p
}

impl Pipeline {
    /// Compile validated specs for inputs of `input`'s shape.
    pub fn new(specs: &[TransformSpec], seed: u64, input: ImageShape) -> Self {
        let output = chain_output(specs, input);
        let normalize = specs.iter().find_map(|spec| match spec {
            // One pair per channel (checked at validate time); a single pair applies to every
            // channel, as a one-element torch tensor broadcasts.
            TransformSpec::Normalize(n) => Some(
                (0..output.channels)
                    .map(|c| {
                        let at = |v: &[f64], d: f64| v.get(c).or(v.first()).copied().unwrap_or(d);
                        (at(&n.mean, 0.0) as f32, at(&n.std, 1.0) as f32)
                    })
                    .collect(),
            ),
            _ => None,
        });
        Pipeline {
            specs: specs.to_vec(),
            ops: specs.iter().filter_map(PixelOp::compile).collect(),
            op_names: specs
                .iter()
                .filter(|s| PixelOp::compile(s).is_some())
                .map(TransformSpec::op_name)
                .collect(),
            normalize,
            seed,
            input,
            output,
        }
    }

    /// The specs it was compiled from.
    pub fn specs(&self) -> &[TransformSpec] {
        &self.specs
    }

    /// Shape of the images the pipeline takes.
    pub fn input_shape(&self) -> ImageShape {
        self.input
    }

    /// Shape of the tensors it produces (C×H×W floats per sample).
    pub fn output_shape(&self) -> ImageShape {
        self.output
    }

    /// Apply the pixel ops to `src` (planar, [`Pipeline::input_shape`]); returns the 8-bit
    /// result (a view into `scratch`, planar, [`Pipeline::output_shape`]) and the parameters
    /// drawn.
    pub fn augment<'s>(
        &self,
        src: &[u8],
        epoch: u64,
        index: u64,
        scratch: &'s mut Scratch,
    ) -> (&'s [u8], SampleParams) {
        self.augment_shaped(src, self.input, epoch, index, scratch)
    }

    /// [`Pipeline::augment`] for an input of its own shape (images of a folder differ).
    pub fn augment_shaped<'s>(
        &self,
        src: &[u8],
        input: ImageShape,
        epoch: u64,
        index: u64,
        scratch: &'s mut Scratch,
    ) -> (&'s [u8], SampleParams) {
        let shape = self.run_ops(
            src,
            input,
            None,
            epoch,
            index,
            scratch,
            &mut Observe::default(),
        );
        (&scratch.a[..shape.len()], scratch.params.clone())
    }

    /// The crop a sample's first op keeps of an image of `input`'s shape, when the first op is
    /// a RandomResizedCrop: its parameters depend only on the image's size and the sample's
    /// random stream, so a reader can decode just that region
    /// ([`crate::data::Dataset::read_region`]) and [`Pipeline::apply_staged`] draws the same
    /// box from it.
    pub fn leading_crop(&self, input: ImageShape, epoch: u64, index: u64) -> Option<CropBox> {
        match self.ops.first()? {
            PixelOp::RandomResizedCrop { scale, ratio, .. } => {
                let mut rng = sample_rng(self.seed, epoch, index);
                Some(sample_crop(
                    &mut rng,
                    input.width,
                    input.height,
                    *scale,
                    *ratio,
                ))
            }
            _ => None,
        }
    }

    /// The pixel ops on `src`, leaving the result in `scratch.a` and the parameters drawn in
    /// `scratch.params`; returns the result's shape. Each op is timed and drawn as `observe`
    /// asks. With `region`, `src` holds only that crop of an `input`-shaped image: the one
    /// the first op, a RandomResizedCrop, draws ([`Pipeline::leading_crop`]).
    #[allow(clippy::too_many_arguments)]
    fn run_ops(
        &self,
        src: &[u8],
        input: ImageShape,
        region: Option<CropBox>,
        epoch: u64,
        index: u64,
        scratch: &mut Scratch,
        observe: &mut Observe,
    ) -> ImageShape {
        let mut rng = sample_rng(self.seed, epoch, index);
        scratch.params.ops.clear();
        let mut shape = input;
        if region.is_none() {
            scratch.a.clear();
            scratch.a.extend_from_slice(&src[..shape.len()]);
        }
        for (i, (op, name)) in self.ops.iter().zip(&self.op_names).enumerate() {
            // The span opens before the clock starts and closes after it stops.
            let _span = observe.traced.then(|| spans::stage_span(name).entered());
            let start = observe.ns.is_some().then(Instant::now);
            shape = match (i, region) {
                (0, Some(region)) => resize_region(op, src, input, region, &mut rng, scratch),
                _ => apply_op(op, shape, &mut rng, scratch),
            };
            observe.add(i, start);
        }
        shape
    }

    /// The pixel ops' names, in order (the stages after reading).
    pub fn op_names(&self) -> &[&'static str] {
        &self.op_names
    }

    /// The full pipeline for one sample: pixel ops, then to_tensor (CHW float32 / 255) and
    /// normalize, written into `out` ([`Pipeline::output_shape`]`.len()` floats).
    pub fn apply<'s>(
        &self,
        src: &[u8],
        epoch: u64,
        index: u64,
        scratch: &'s mut Scratch,
        out: &mut [f32],
    ) -> &'s SampleParams {
        self.apply_shaped(src, self.input, epoch, index, scratch, out)
    }

    /// [`Pipeline::apply`] for an input of its own shape. The chain's output shape is fixed
    /// (checked at validate time), so every sample fills `out` exactly.
    pub fn apply_shaped<'s>(
        &self,
        src: &[u8],
        input: ImageShape,
        epoch: u64,
        index: u64,
        scratch: &'s mut Scratch,
        out: &mut [f32],
    ) -> &'s SampleParams {
        self.apply_staged(
            src,
            input,
            None,
            epoch,
            index,
            scratch,
            out,
            Observe::default(),
        )
    }

    /// [`Pipeline::apply_shaped`], with its stages (every op, then to_tensor into `out`) timed
    /// and drawn as `observe` asks (a profiled run's sampled images). With `region`, `src` is
    /// only that crop of the image, as [`crate::data::Dataset::read_region`] read it for
    /// [`Pipeline::leading_crop`].
    #[allow(clippy::too_many_arguments)]
    pub fn apply_staged<'s>(
        &self,
        src: &[u8],
        input: ImageShape,
        region: Option<CropBox>,
        epoch: u64,
        index: u64,
        scratch: &'s mut Scratch,
        out: &mut [f32],
        mut observe: Observe,
    ) -> &'s SampleParams {
        let plane = self.output.plane();
        let shape = self.run_ops(src, input, region, epoch, index, scratch, &mut observe);
        let _span = observe
            .traced
            .then(|| spans::stage_span(spans::TO_TENSOR_INTO_BATCH).entered());
        let to_tensor_start = observe.ns.is_some().then(Instant::now);
        let pixels = &scratch.a[..shape.len()];
        assert_eq!(
            pixels.len(),
            self.output.len(),
            "the transforms gave {} pixels for an output of {}",
            pixels.len(),
            self.output
        );
        let table = &*TO_TENSOR;
        match &self.normalize {
            None => {
                for (o, &p) in out.iter_mut().zip(pixels) {
                    *o = table[p as usize];
                }
            }
            Some(per_channel) => {
                let planes = out.chunks_exact_mut(plane).zip(pixels.chunks_exact(plane));
                for ((out, pixels), &(mean, std)) in planes.zip(per_channel) {
                    for (o, &p) in out.iter_mut().zip(pixels) {
                        *o = (table[p as usize] - mean) / std;
                    }
                }
            }
        }
        observe.add(self.ops.len(), to_tensor_start);
        &scratch.params
    }
}

/// How a sample's stages are observed in a profiled run: timed into `ns` (one slot per pixel
/// op in order, then one for to_tensor into the batch) and/or drawn as trace spans.
#[derive(Default)]
pub struct Observe<'a> {
    pub ns: Option<&'a mut [u64]>,
    pub traced: bool,
}

impl Observe<'_> {
    fn add(&mut self, slot: usize, start: Option<Instant>) {
        if let (Some(ns), Some(start)) = (self.ns.as_deref_mut(), start) {
            ns[slot] += start.elapsed().as_nanos() as u64;
        }
    }
}

/// Apply one op to `scratch.a` (of `shape`), leaving the result in `scratch.a`; returns the new
/// shape. Ops that write a new image write into `scratch.b` and swap.
fn apply_op(
    op: &PixelOp,
    shape: ImageShape,
    rng: &mut SplitMix64,
    scratch: &mut Scratch,
) -> ImageShape {
    let Scratch {
        a,
        b,
        grey,
        resize,
        params,
    } = scratch;
    let (w, h, plane) = (shape.width, shape.height, shape.plane());
    let out = match op {
        PixelOp::RandomResizedCrop { size, scale, ratio } => {
            let cb = draw_crop(rng, shape, *scale, *ratio, params);
            resize_planes(a, shape, cb, *size, b, resize)
        }
        PixelOp::Resize { size, max_size } => {
            let to = resize_output(h, w, *size, *max_size);
            resize_planes(a, shape, CropBox::whole(shape), to, b, resize)
        }
        PixelOp::Rotate { degrees, fill } => {
            let angle = uniform(rng, -degrees, *degrees);
            b.resize(shape.len(), 0);
            // Slack after the image lets the rotation gather 4 bytes at a time.
            a.resize(shape.len() + 3, 0);
            for c in 0..shape.channels {
                let dst = &mut b[c * plane..][..plane];
                rotate_nearest(&a[c * plane..], w, h, angle, *fill, dst);
            }
            params.ops.push(OpParams::RandomRotation { angle });
            shape
        }
        PixelOp::Flip { p, vertical } => {
            let flipped = coin(rng, *p);
            params.ops.push(if *vertical {
                OpParams::RandomVerticalFlip { flipped }
            } else {
                OpParams::RandomHorizontalFlip { flipped }
            });
            if !flipped {
                return shape;
            }
            b.resize(shape.len(), 0);
            if *vertical {
                flip_vertical(a, shape, b);
            } else {
                flip_horizontal(a, shape, b);
            }
            shape
        }
        PixelOp::CenterCrop { size } => {
            let (padding, top, left) = center_crop_geometry(shape, size.0, size.1);
            let padded = pad_into(a, b, shape, padding, PadMode::Constant, 0);
            crop_into(a, b, padded, top, left, *size)
        }
        PixelOp::RandomCrop {
            size,
            padding,
            pad_if_needed,
            fill,
            mode,
        } => {
            let mut padded = pad_into(a, b, shape, *padding, *mode, *fill);
            if *pad_if_needed {
                // torchvision pads both sides by the whole shortfall.
                let grow_w = size.1.saturating_sub(padded.width);
                let grow_h = size.0.saturating_sub(padded.height);
                let more = Padding {
                    left: grow_w,
                    right: grow_w,
                    top: grow_h,
                    bottom: grow_h,
                };
                padded = pad_into(a, b, padded, more, *mode, *fill);
            }
            let (th, tw) = *size;
            let (top, left) = if padded.height == th && padded.width == tw {
                (0, 0)
            } else {
                let top = rand::Rng::random_range(rng, 0..=padded.height - th);
                let left = rand::Rng::random_range(rng, 0..=padded.width - tw);
                (top, left)
            };
            params.ops.push(OpParams::RandomCrop { top, left });
            crop_into(a, b, padded, top, left, *size)
        }
        PixelOp::ColorJitter { ranges } => {
            jitter(a, shape, ranges, rng, grey, params);
            return shape;
        }
        PixelOp::Grayscale { channels } => to_grey(a, b, grey, shape, *channels),
        PixelOp::RandomGrayscale { p } => {
            let applied = coin(rng, *p);
            params.ops.push(OpParams::RandomGrayscale { applied });
            if !applied {
                return shape;
            }
            to_grey(a, b, grey, shape, shape.channels)
        }
        PixelOp::CpuWork { ns } => {
            burn_cpu(*ns);
            return shape;
        }
    };
    std::mem::swap(a, b);
    out
}

/// This thread's CPU time in ns (not wall time: a preempted worker does not count as working).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec, and both clocks exist on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        // Never seen on Linux; the monotonic clock still ends the spin.
        // SAFETY: as above.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Spin until this thread has used `ns` more ns of CPU time.
fn burn_cpu(ns: u64) {
    if ns == 0 {
        return;
    }
    let start = thread_cpu_ns();
    let mut x = 0u64;
    while thread_cpu_ns().saturating_sub(start) < ns {
        // Some register work between clock reads; black_box keeps it from being removed.
        for _ in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

/// RandomResizedCrop's box for an image of `shape`, recorded in `params`.
fn draw_crop(
    rng: &mut SplitMix64,
    shape: ImageShape,
    scale: [f64; 2],
    ratio: [f64; 2],
    params: &mut SampleParams,
) -> CropBox {
    let cb = sample_crop(rng, shape.width, shape.height, scale, ratio);
    params.ops.push(OpParams::RandomResizedCrop {
        top: cb.top,
        left: cb.left,
        height: cb.height,
        width: cb.width,
    });
    cb
}

/// The first op, a RandomResizedCrop, on `src`: only the crop `region` of an `input`-shaped
/// image. It draws its box as on the whole image (the same random numbers; the box is
/// `region`, see [`Pipeline::leading_crop`]) and resizes `src` whole into `scratch.a`.
fn resize_region(
    op: &PixelOp,
    src: &[u8],
    input: ImageShape,
    region: CropBox,
    rng: &mut SplitMix64,
    scratch: &mut Scratch,
) -> ImageShape {
    let PixelOp::RandomResizedCrop { size, scale, ratio } = op else {
        unreachable!("a region is read only for a leading RandomResizedCrop")
    };
    let cb = draw_crop(rng, input, *scale, *ratio, &mut scratch.params);
    assert_eq!(
        cb, region,
        "the region read is not the crop this sample draws"
    );
    let cropped = input.with_size(cb.height, cb.width);
    resize_planes(
        src,
        cropped,
        CropBox::whole(cropped),
        *size,
        &mut scratch.a,
        &mut scratch.resize,
    )
}

/// Crop `cb` of every plane of `src` and resize it to `size` (height, width) into `dst`.
fn resize_planes(
    src: &[u8],
    shape: ImageShape,
    cb: CropBox,
    (oh, ow): (usize, usize),
    dst: &mut Vec<u8>,
    resize: &mut ResizeScratch,
) -> ImageShape {
    let out = shape.with_size(oh, ow);
    dst.resize(out.len(), 0);
    for c in 0..shape.channels {
        let plane = &mut dst[c * out.plane()..][..out.plane()];
        crop_resize(
            &src[c * shape.plane()..],
            shape.width,
            cb,
            ow,
            oh,
            plane,
            resize,
        );
    }
    out
}

/// Pad `a` in place (through `b`); returns the padded shape. No padding: no copy.
fn pad_into(
    a: &mut Vec<u8>,
    b: &mut Vec<u8>,
    shape: ImageShape,
    padding: Padding,
    mode: PadMode,
    fill: u8,
) -> ImageShape {
    if padding.is_zero() {
        return shape;
    }
    let out = padding.apply_to(shape);
    b.resize(out.len(), 0);
    pad(a, shape, padding, mode, fill, b);
    std::mem::swap(a, b);
    out
}

/// The `size` window at (top, left) of `a` into `b`.
fn crop_into(
    a: &[u8],
    b: &mut Vec<u8>,
    shape: ImageShape,
    top: usize,
    left: usize,
    (height, width): (usize, usize),
) -> ImageShape {
    let out = shape.with_size(height, width);
    b.resize(out.len(), 0);
    crop(a, shape, top, left, height, width, b);
    out
}

/// `convert("L")` into `b`, repeated to `channels` planes.
fn to_grey(
    a: &[u8],
    b: &mut Vec<u8>,
    grey: &mut Vec<u8>,
    shape: ImageShape,
    channels: usize,
) -> ImageShape {
    let out = shape.with_channels(channels);
    grey.resize(shape.plane(), 0);
    grey_plane(a, shape, grey);
    b.clear();
    for _ in 0..channels {
        b.extend_from_slice(grey);
    }
    out
}

/// torchvision's ColorJitter: `fn_idx = randperm(4)`, then each enabled factor drawn in the
/// order brightness, contrast, saturation, hue, then the adjustments applied in `fn_idx` order.
fn jitter(
    image: &mut [u8],
    shape: ImageShape,
    ranges: &[Option<[f64; 2]>; 4],
    rng: &mut SplitMix64,
    grey: &mut Vec<u8>,
    params: &mut SampleParams,
) {
    let mut order = [0usize, 1, 2, 3];
    order.shuffle(rng);
    let factors: Vec<Option<f64>> = ranges
        .iter()
        .map(|r| r.map(|[lo, hi]| uniform(rng, lo, hi)))
        .collect();
    for &k in &order {
        let Some(f) = factors[k] else { continue };
        match k {
            0 => brightness(&mut image[..shape.len()], f),
            1 => contrast(image, shape, f, grey),
            2 => saturation(image, shape, f, grey),
            _ => hue(image, shape, f),
        }
    }
    params.ops.push(OpParams::ColorJitter {
        order: order
            .iter()
            .filter(|&&k| factors[k].is_some())
            .map(|&k| JITTER_NAMES[k].to_string())
            .collect(),
        brightness: factors[0],
        contrast: factors[1],
        saturation: factors[2],
        hue: factors[3],
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CpuWorkSpec, seed_transforms};

    #[test]
    fn cpu_work_burns_its_cpu_time_and_changes_no_pixel() {
        let mut specs = seed_transforms();
        let plain = Pipeline::new(&specs, 42, ImageShape::GREY_28);
        specs.insert(1, TransformSpec::CpuWork(CpuWorkSpec { us: 3000.0 }));
        let busy = Pipeline::new(&specs, 42, ImageShape::GREY_28);
        let src: Vec<u8> = (0..784).map(|i| (i * 7 % 256) as u8).collect();
        let (mut a, mut b) = (vec![0f32; 784], vec![0f32; 784]);
        plain.apply(&src, 0, 5, &mut Scratch::default(), &mut a);
        let before = thread_cpu_ns();
        busy.apply(&src, 0, 5, &mut Scratch::default(), &mut b);
        let used_us = (thread_cpu_ns() - before) as f64 / 1e3;
        assert_eq!(a, b, "cpu_work touched the pixels");
        assert!(
            (3000.0..30_000.0).contains(&used_us),
            "cpu_work of 3000 µs used {used_us} µs of CPU"
        );
    }

    #[test]
    fn same_sample_same_output_whatever_the_order() {
        let p = Pipeline::new(&seed_transforms(), 42, ImageShape::GREY_28);
        let src: Vec<u8> = (0..784).map(|i| (i * 7 % 256) as u8).collect();
        let mut s1 = Scratch::default();
        let mut s2 = Scratch::default();
        let mut a = vec![0f32; 784];
        let mut b = vec![0f32; 784];
        let pa = p.apply(&src, 0, 5, &mut s1, &mut a).clone();
        let _ = p.apply(&src, 0, 6, &mut s2, &mut b);
        let pb = p.apply(&src, 0, 5, &mut s2, &mut b).clone();
        assert_eq!(pa, pb);
        assert_eq!(a, b);
        let pc = p.apply(&src, 1, 5, &mut s2, &mut b).clone();
        assert_ne!(pa, pc, "another epoch draws other parameters");
        assert!(a.iter().all(|v| (0.0..=1.0).contains(v)));
    }
}
