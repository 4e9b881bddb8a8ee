//! The CPU transform pipeline: 8-bit pixel ops (crop-resize, rotation, flip) followed by
//! `to_tensor` and `normalize`, with torchvision's semantics, on planar images of any size and
//! 1 or 3 channels (each op works plane by plane, as Pillow works band by band).
//!
//! Each op lives in [`ops`] (spec, checks, output shape, compiled form); the pixel kernels they
//! call are the family files beside it; this file is the [`Pipeline`] that runs them.
//!
//! Invariant: every random parameter of sample `i` in epoch `e` comes from one RNG seeded by
//! (experiment seed, e, i), drawn in op order, so the output never depends on which thread or
//! loader condition produced it. Buffers live in a [`Scratch`] reused from sample to sample.

mod colour;
mod geometry;
pub mod ops;
mod resize;
mod rotate;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use colour::{brightness, contrast, grey_plane, hue, luma, saturation};
pub use geometry::{PadMode, center_crop_geometry, crop, flip_horizontal, flip_vertical, pad};
pub use resize::{CropBox, ResizeScratch, crop_resize, sample_crop, uniform};
pub use rotate::rotate_nearest;

pub use ops::{Op, OpParams, PixelOp, TransformSpec, chain_output};

use crate::hash::{SplitMix64, splitmix as mix};
use std::time::Instant;

use crate::shape::ImageShape;
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
            OpParams::RandomResizedCrop(crop) => Some(crop),
            _ => None,
        })
    }
}

/// A compiled pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    specs: Vec<TransformSpec>,
    ops: Vec<Arc<dyn PixelOp>>,
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
    /// The shape of the last sample's pixels in `a`.
    shape: ImageShape,
}

impl Scratch {
    /// The shape of the last sample's pixels after the pixel ops.
    pub fn shape(&self) -> ImageShape {
        self.shape
    }

    /// The last sample's 8-bit pixels after the pixel ops (planar).
    pub fn pixels(&self) -> &[u8] {
        &self.a[..self.shape.len()]
    }
}

/// One sample as the chain takes it: its 8-bit pixels (planar) of `shape` — or, with `region`,
/// only that crop of a `shape`-sized image, as [`crate::data::Dataset::read_region`] read it
/// for [`Pipeline::leading_crop`] — and the (epoch, index) that seed its random stream.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub pixels: &'a [u8],
    pub shape: ImageShape,
    pub region: Option<CropBox>,
    pub epoch: u64,
    pub index: u64,
}

impl<'a> Input<'a> {
    /// The whole image `pixels` of `shape`, as sample `index` of `epoch`.
    pub fn new(pixels: &'a [u8], shape: ImageShape, epoch: u64, index: u64) -> Self {
        Input {
            pixels,
            shape,
            region: None,
            epoch,
            index,
        }
    }

    /// Only `region` of the image was read (None: all of it).
    pub fn region(self, region: Option<CropBox>) -> Self {
        Input { region, ..self }
    }
}

/// Where [`Pipeline::apply`] leaves its result.
pub enum Target<'o> {
    /// The 8-bit pixels after the pixel ops, in the scratch ([`Scratch::pixels`]).
    Pixels,
    /// Then to_tensor and normalize, into these floats.
    Tensor(&'o mut [f32]),
}

impl Pipeline {
    /// Compile validated specs for inputs of `input`'s shape.
    pub fn new(specs: &[TransformSpec], seed: u64, input: ImageShape) -> Self {
        let output = chain_output(specs, input);
        let normalize = specs.iter().find_map(|spec| match spec {
            TransformSpec::Normalize(n) => Some(n.per_channel(output.channels)),
            _ => None,
        });
        let (op_names, ops) = specs
            .iter()
            .filter_map(|s| Some((s.op_name(), Arc::from(s.op().compile()?))))
            .unzip();
        Pipeline {
            specs: specs.to_vec(),
            ops,
            op_names,
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

    /// The crop a sample's first op keeps of an image of `input`'s shape, when the first op is
    /// a RandomResizedCrop: its parameters depend only on the image's size and the sample's
    /// random stream, so a reader can decode just that region
    /// ([`crate::data::Dataset::read_region`]) and [`Pipeline::apply`] draws the same
    /// box from it.
    pub fn leading_crop(&self, input: ImageShape, epoch: u64, index: u64) -> Option<CropBox> {
        let crop = self.ops.first()?.as_resized_crop()?;
        Some(crop.draw_box(&mut sample_rng(self.seed, epoch, index), input))
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
        for (i, op) in self.ops.iter().enumerate() {
            // The span opens before the clock starts and closes after it stops.
            let _span = observe.traced.then(|| op.span().entered());
            let start = observe.ns.is_some().then(Instant::now);
            shape = match (i, region) {
                (0, Some(region)) => op
                    .as_resized_crop()
                    .expect("a region is read only for a leading RandomResizedCrop")
                    .apply_region(src, input, region, &mut rng, scratch),
                _ => op.apply(shape, &mut rng, scratch),
            };
            observe.add(i, start);
        }
        shape
    }

    /// The pixel ops' names, in order (the stages after reading).
    pub fn op_names(&self) -> &[&'static str] {
        &self.op_names
    }

    /// The chain on one sample — the one entry to it: the pixel ops, then, `Target::Tensor`,
    /// to_tensor (CHW float32 / 255) and normalize into the floats given
    /// ([`Pipeline::output_shape`]`.len()` of them; the chain's output shape is fixed, checked
    /// at validate time, so every sample fills them exactly), or, `Target::Pixels`, the 8-bit
    /// result left in `scratch` ([`Scratch::pixels`]). Its stages (every op, then to_tensor) are
    /// timed and drawn as `observe` asks (a profiled run's sampled images). Returns the
    /// parameters drawn.
    pub fn apply<'s>(
        &self,
        sample: Input,
        scratch: &'s mut Scratch,
        into: Target,
        mut observe: Observe,
    ) -> &'s SampleParams {
        let Input {
            pixels: src,
            shape: input,
            region,
            epoch,
            index,
        } = sample;
        let out = match into {
            Target::Pixels => {
                scratch.shape =
                    self.run_ops(src, input, region, epoch, index, scratch, &mut observe);
                return &scratch.params;
            }
            Target::Tensor(out) => out,
        };
        let plane = self.output.plane();
        let shape = self.run_ops(src, input, region, epoch, index, scratch, &mut observe);
        scratch.shape = shape;
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

/// Spin until this thread has used `ns` more ns of CPU time (never sleeping): `cpu_work`'s
/// cost per image.
pub fn burn_cpu(ns: u64) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::seed_transforms;
    use crate::transforms::ops::CpuWorkSpec;

    #[test]
    fn cpu_work_burns_its_cpu_time_and_changes_no_pixel() {
        let mut specs = seed_transforms();
        let plain = Pipeline::new(&specs, 42, ImageShape::GREY_28);
        specs.insert(1, TransformSpec::CpuWork(CpuWorkSpec { us: 3000.0 }));
        let busy = Pipeline::new(&specs, 42, ImageShape::GREY_28);
        let src: Vec<u8> = (0..784).map(|i| (i * 7 % 256) as u8).collect();
        let (mut a, mut b) = (vec![0f32; 784], vec![0f32; 784]);
        plain.apply(
            Input::new(&src, plain.input_shape(), 0, 5),
            &mut Scratch::default(),
            Target::Tensor(&mut a),
            Observe::default(),
        );
        let before = thread_cpu_ns();
        busy.apply(
            Input::new(&src, busy.input_shape(), 0, 5),
            &mut Scratch::default(),
            Target::Tensor(&mut b),
            Observe::default(),
        );
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
        let pa = p
            .apply(
                Input::new(&src, p.input_shape(), 0, 5),
                &mut s1,
                Target::Tensor(&mut a),
                Observe::default(),
            )
            .clone();
        let _ = p.apply(
            Input::new(&src, p.input_shape(), 0, 6),
            &mut s2,
            Target::Tensor(&mut b),
            Observe::default(),
        );
        let pb = p
            .apply(
                Input::new(&src, p.input_shape(), 0, 5),
                &mut s2,
                Target::Tensor(&mut b),
                Observe::default(),
            )
            .clone();
        assert_eq!(pa, pb);
        assert_eq!(a, b);
        let pc = p
            .apply(
                Input::new(&src, p.input_shape(), 1, 5),
                &mut s2,
                Target::Tensor(&mut b),
                Observe::default(),
            )
            .clone();
        assert_ne!(pa, pc, "another epoch draws other parameters");
        assert!(a.iter().all(|v| (0.0..=1.0).contains(v)));
    }
}
