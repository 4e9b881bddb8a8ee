//! The CPU transform pipeline: 8-bit pixel ops (crop-resize, rotation, flip) followed by
//! `to_tensor` and `normalize`, with torchvision's semantics.
//!
//! Invariant: every random parameter of sample `i` in epoch `e` comes from one RNG seeded by
//! (experiment seed, e, i), drawn in op order, so the output never depends on which thread or
//! loader condition produced it. Buffers live in a [`Scratch`] reused from sample to sample.

mod resize;
mod rotate;

use serde::{Deserialize, Serialize};

pub use resize::{CropBox, ResizeScratch, crop_resize, sample_crop, uniform};
pub use rotate::rotate_nearest;

use crate::config::TransformSpec;
use crate::hash::{SplitMix64, splitmix as mix};

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

/// The random parameters one sample received, for previews and fidelity checks.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleParams {
    pub crop: Option<CropBox>,
    pub angle: Option<f64>,
    pub flip: Option<bool>,
}

#[derive(Debug, Clone)]
enum PixelOp {
    Crop {
        size: usize,
        scale: [f64; 2],
        ratio: [f64; 2],
    },
    Rotate {
        degrees: f64,
        fill: u8,
    },
    Flip {
        p: f64,
    },
}

/// A compiled pipeline.
#[derive(Debug, Clone)]
pub struct Pipeline {
    ops: Vec<PixelOp>,
    /// (mean, std) applied after to_tensor, if any.
    normalize: Option<(f32, f32)>,
    seed: u64,
    in_side: usize,
    out_side: usize,
}

/// Per-thread buffers.
#[derive(Debug, Default)]
pub struct Scratch {
    a: Vec<u8>,
    b: Vec<u8>,
    resize: ResizeScratch,
}

impl Pipeline {
    /// Compile validated specs for `in_side`×`in_side` inputs.
    pub fn new(specs: &[TransformSpec], seed: u64, in_side: usize) -> Self {
        let mut ops = Vec::new();
        let mut normalize = None;
        let mut side = in_side;
        for spec in specs {
            match spec {
                TransformSpec::RandomResizedCrop(c) => {
                    side = c.size as usize;
                    ops.push(PixelOp::Crop {
                        size: side,
                        scale: c.scale,
                        ratio: c.ratio,
                    });
                }
                TransformSpec::RandomRotation(r) => ops.push(PixelOp::Rotate {
                    degrees: r.degrees,
                    fill: r.fill,
                }),
                TransformSpec::RandomHorizontalFlip(f) => ops.push(PixelOp::Flip { p: f.p }),
                TransformSpec::ToTensor(_) => {}
                TransformSpec::Normalize(n) => {
                    normalize = Some((
                        n.mean.first().copied().unwrap_or(0.0) as f32,
                        n.std.first().copied().unwrap_or(1.0) as f32,
                    ))
                }
            }
        }
        Pipeline {
            ops,
            normalize,
            seed,
            in_side,
            out_side: side,
        }
    }

    /// Side of the output images.
    pub fn out_side(&self) -> usize {
        self.out_side
    }

    /// Apply the pixel ops to `src`; returns the 8-bit result (a view into `scratch`) and the
    /// parameters drawn.
    pub fn augment<'s>(
        &self,
        src: &[u8],
        epoch: u64,
        index: u64,
        scratch: &'s mut Scratch,
    ) -> (&'s [u8], SampleParams) {
        let mut rng = sample_rng(self.seed, epoch, index);
        let mut params = SampleParams::default();
        let Scratch { a, b, resize } = scratch;
        let mut side = self.in_side;
        a.clear();
        a.extend_from_slice(&src[..side * side]);
        for op in &self.ops {
            match op {
                PixelOp::Crop { size, scale, ratio } => {
                    let cb = sample_crop(&mut rng, side, side, *scale, *ratio);
                    b.resize(size * size, 0);
                    crop_resize(a, side, cb, *size, *size, b, resize);
                    side = *size;
                    params.crop = Some(cb);
                }
                PixelOp::Rotate { degrees, fill } => {
                    let angle = uniform(&mut rng, -degrees, *degrees);
                    b.resize(side * side, 0);
                    // Slack after the image lets the rotation gather 4 bytes at a time.
                    a.resize(side * side + 3, 0);
                    rotate_nearest(a, side, side, angle, *fill, b);
                    params.angle = Some(angle);
                }
                PixelOp::Flip { p } => {
                    let flip = rand::Rng::random::<f64>(&mut rng) < *p;
                    b.resize(side * side, 0);
                    for y in 0..side {
                        let row = &a[y * side..][..side];
                        let out = &mut b[y * side..][..side];
                        if flip {
                            for (o, v) in out.iter_mut().zip(row.iter().rev()) {
                                *o = *v;
                            }
                        } else {
                            out.copy_from_slice(row);
                        }
                    }
                    params.flip = Some(flip);
                }
            }
            std::mem::swap(a, b);
        }
        (&a[..side * side], params)
    }

    /// The full pipeline for one sample: pixel ops, then to_tensor (CHW float32 / 255) and
    /// normalize, written into `out` (`out_side²` floats).
    pub fn apply(
        &self,
        src: &[u8],
        epoch: u64,
        index: u64,
        scratch: &mut Scratch,
        out: &mut [f32],
    ) -> SampleParams {
        let normalize = self.normalize;
        let (pixels, params) = self.augment(src, epoch, index, scratch);
        let table = &*TO_TENSOR;
        match normalize {
            None => {
                for (o, &p) in out.iter_mut().zip(pixels) {
                    *o = table[p as usize];
                }
            }
            Some((mean, std)) => {
                for (o, &p) in out.iter_mut().zip(pixels) {
                    *o = (table[p as usize] - mean) / std;
                }
            }
        }
        params
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::seed_transforms;

    #[test]
    fn same_sample_same_output_whatever_the_order() {
        let p = Pipeline::new(&seed_transforms(), 42, 28);
        let src: Vec<u8> = (0..784).map(|i| (i * 7 % 256) as u8).collect();
        let mut s1 = Scratch::default();
        let mut s2 = Scratch::default();
        let mut a = vec![0f32; 784];
        let mut b = vec![0f32; 784];
        let pa = p.apply(&src, 0, 5, &mut s1, &mut a);
        let _ = p.apply(&src, 0, 6, &mut s2, &mut b);
        let pb = p.apply(&src, 0, 5, &mut s2, &mut b);
        assert_eq!(pa, pb);
        assert_eq!(a, b);
        let pc = p.apply(&src, 1, 5, &mut s2, &mut b);
        assert_ne!(pa, pc, "another epoch draws other parameters");
        assert!(a.iter().all(|v| (0.0..=1.0).contains(v)));
    }
}
