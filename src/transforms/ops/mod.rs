//! Every transform op in one place: a file per op family holds each op's spec (what a file
//! writes, with torchvision's defaults), its checks, the shape it hands on, its compiled form
//! and what it records of each sample. Adding an op is its file and its line in the
//! `registry!` below (and, if it draws anything, its line in `drawn!`, naming the struct of
//! what it drew, in its file).
//! (ripgrep's one `impl Flag` per flag is the pattern.)

mod cpu_work;
mod crop;
mod flip;
mod grey;
mod jitter;
mod resized;
mod rotation;
mod tensor;

pub use cpu_work::CpuWorkSpec;
pub use crop::{CenterCropSpec, PaddingMode, RandomCropSpec};
pub use flip::{RandomHorizontalFlipSpec, RandomVerticalFlipSpec};
pub use grey::{GrayscaleSpec, RandomGrayscaleSpec};
pub use jitter::ColorJitterSpec;
pub use resized::{RandomResizedCropSpec, ResizeSpec, resize_output};
pub use rotation::RandomRotationSpec;
pub use tensor::{NormalizeSpec, ToTensorSpec};

use serde::{Deserialize, Serialize};

use super::Scratch;
use crate::hash::SplitMix64;
use crate::shape::ImageShape;

/// The registry of ops, one line each: the variant a file names (`op = "…"`, snake_case) and
/// the spec type that is the op (its file in this folder). It declares [`TransformSpec`],
/// [`TransformSpec::op`] and [`TransformSpec::all`], so registering an op is its line here.
macro_rules! registry {
    ($($variant:ident($spec:ty)),+ $(,)?) => {
        /// One op of the CPU transform pipeline, applied per sample in order: the list of ops,
        /// as files write them (`op = "…"` picks the variant).
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
        pub enum TransformSpec {
            $($variant($spec),)+
        }

        impl TransformSpec {
            /// The op behind the spec.
            pub fn op(&self) -> &dyn Op {
                match self {
                    $(TransformSpec::$variant(s) => s,)+
                }
            }

            /// Every op with torchvision's defaults for its parameters.
            pub fn all() -> Vec<TransformSpec> {
                vec![$(TransformSpec::$variant(<$spec>::default()),)+]
            }
        }
    };
}

/// What each random op draws, one line each: the op's variant and the struct of its draws (in
/// its file). It declares [`OpParams`].
macro_rules! drawn {
    ($($variant:ident($drawn:ty)),+ $(,)?) => {
        /// The random parameters one op drew for one sample, named by the op (samples.json:
        /// `{"op": "random_rotation", "angle": …}`).
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "op", rename_all = "snake_case")]
        pub enum OpParams {
            $($variant($drawn),)+
        }
    };
}

drawn! {
    RandomResizedCrop(crate::transforms::CropBox),
    RandomRotation(rotation::RotationDrawn),
    RandomHorizontalFlip(flip::FlipDrawn),
    RandomVerticalFlip(flip::FlipDrawn),
    RandomCrop(crop::RandomCropDrawn),
    ColorJitter(jitter::JitterDrawn),
    RandomGrayscale(grey::GreyDrawn),
}

registry! {
    RandomResizedCrop(RandomResizedCropSpec),
    RandomRotation(RandomRotationSpec),
    RandomHorizontalFlip(RandomHorizontalFlipSpec),
    RandomVerticalFlip(RandomVerticalFlipSpec),
    Resize(ResizeSpec),
    CenterCrop(CenterCropSpec),
    RandomCrop(RandomCropSpec),
    ColorJitter(ColorJitterSpec),
    Grayscale(GrayscaleSpec),
    RandomGrayscale(RandomGrayscaleSpec),
    ToTensor(ToTensorSpec),
    Normalize(NormalizeSpec),
    CpuWork(CpuWorkSpec),
}

impl TransformSpec {
    /// Whether the op works on 8-bit images (before `to_tensor`).
    pub fn is_pixel_op(&self) -> bool {
        self.op().stage() == Stage::Pixels
    }

    /// The op names a user may write, in [`TransformSpec::all`]'s order.
    pub fn ops() -> Vec<&'static str> {
        Self::all().iter().map(Self::op_name).collect()
    }

    /// The op with torchvision's defaults for its parameters.
    pub fn with_defaults(op: &str) -> Option<TransformSpec> {
        Self::all().into_iter().find(|t| t.op_name() == op)
    }

    /// The name a file writes (serde's tag for the variant).
    pub fn op_name(&self) -> &'static str {
        self.op().name()
    }
}

/// Where in the chain an op works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// On 8-bit images, before `to_tensor`.
    Pixels,
    /// `to_tensor` itself.
    ToTensor,
    /// On the tensor, after `to_tensor`.
    Tensor,
    /// Touches no data: anywhere.
    Anywhere,
}

/// What reaches an op in the chain, for its checks.
#[derive(Debug, Clone, Copy)]
pub struct Reaching {
    /// The shape of the images (0 × 0: an image folder's, which vary until an op fixes them).
    pub shape: ImageShape,
    /// A `to_tensor` came before the op (or is it).
    pub after_tensor: bool,
}

/// One transform op: everything the rest of the program asks of it.
pub trait Op {
    /// The name a file writes: `op = "…"`, also its stage span in a profiled run.
    fn name(&self) -> &'static str;

    fn stage(&self) -> Stage {
        Stage::Pixels
    }

    /// Range checks the types cannot express, as (key inside the op, message).
    fn check(&self, _reaching: Reaching, _bad: &mut dyn FnMut(&'static str, String)) {}

    /// The shape it hands on.
    fn output(&self, input: ImageShape) -> ImageShape {
        input
    }

    /// Whether it fixes the output size whatever the input's (a crop or resize to a size).
    fn sets_size(&self) -> bool {
        false
    }

    /// Its compiled form; None for the tensor ops, which the pipeline applies when it writes
    /// the batch.
    fn compile(&self) -> Option<Box<dyn PixelOp>>;

    /// Whether `bench`'s same-run comparison (`bench/pillow_chain.py`) implements it.
    fn in_pillow_chain(&self) -> bool {
        false
    }

    /// Its twin on the pytorch engine: the torchvision transform the child builds for it, with
    /// every parameter (None: no twin; `validate` refuses the op on that engine).
    fn torchvision(&self) -> Option<TorchvisionCall> {
        None
    }

    /// Whether it has a twin on the pytorch engine.
    fn pytorch_twin(&self) -> bool {
        self.torchvision().is_some()
    }
}

/// An op's twin on the pytorch engine, as the child builds it: a class of
/// `torchvision.transforms` (or the child's own `CpuWork`) and its keyword arguments, an
/// `interpolation` by its `InterpolationMode` value ("bilinear", "nearest"). The Rust side says
/// every parameter; the child only calls.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TorchvisionCall {
    pub class: &'static str,
    pub kwargs: serde_json::Map<String, serde_json::Value>,
}

impl TorchvisionCall {
    pub fn new(class: &'static str) -> Self {
        TorchvisionCall {
            class,
            kwargs: serde_json::Map::new(),
        }
    }

    /// With the keyword argument `name = value` (None is Python's None).
    pub fn arg(mut self, name: &str, value: impl Serialize) -> Self {
        let value = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        self.kwargs.insert(name.to_string(), value);
        self
    }
}

/// A compiled op of the pipeline.
pub trait PixelOp: Send + Sync + std::fmt::Debug {
    /// Apply to `s.a` (of `shape`), leaving the result in `s.a` (ops that write a new image
    /// write into `s.b` and swap) and what was drawn in `s.params`; returns the new shape.
    fn apply(&self, shape: ImageShape, rng: &mut SplitMix64, s: &mut Scratch) -> ImageShape;

    /// For a RandomResizedCrop: the op, whose box a reader can decode alone.
    fn as_resized_crop(&self) -> Option<&resized::ResizedCrop> {
        None
    }

    /// The op's stage span (tracing names spans at compile time: each op has its call site).
    fn span(&self) -> tracing::Span;
}

/// An output size as torchvision takes it: one number, or `[height, width]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Size {
    /// A square of this side (for `resize`: the shorter side, the aspect ratio kept).
    Side(u64),
    /// `[height, width]`.
    Pair([u64; 2]),
}

impl Size {
    /// (height, width) of a square or a pair.
    pub fn fixed(&self) -> (usize, usize) {
        match *self {
            Size::Side(s) => (s as usize, s as usize),
            Size::Pair([h, w]) => (h as usize, w as usize),
        }
    }

    /// `input` brought to this size (its channels kept).
    fn of(self, input: ImageShape) -> ImageShape {
        let (h, w) = self.fixed();
        input.with_size(h, w)
    }

    /// At least one pixel.
    fn check(self, bad: &mut dyn FnMut(&'static str, String)) {
        let (h, w) = self.fixed();
        if h == 0 || w == 0 {
            bad("size", "expected at least 1 pixel, found 0".into());
        }
    }
}

/// A probability `p` in [0, 1].
fn check_probability(p: f64, bad: &mut dyn FnMut(&'static str, String)) {
    if !(0.0..=1.0).contains(&p) {
        bad(
            "p",
            format!("expected a probability from 0 to 1, found {p}"),
        );
    }
}

/// `torch.rand(1) < p`.
fn coin(rng: &mut SplitMix64, p: f64) -> bool {
    rand::Rng::random::<f64>(rng) < p
}

/// The shape after op `spec`, given the shape before it.
pub fn op_output(spec: &TransformSpec, input: ImageShape) -> ImageShape {
    spec.op().output(input)
}

/// Whether the op fixes the output size whatever the input's (a crop or resize to a size).
pub fn sets_size(spec: &TransformSpec) -> bool {
    spec.op().sets_size()
}

/// The shape of the tensors the transform chain hands the model, for `input` images.
pub fn chain_output(specs: &[TransformSpec], input: ImageShape) -> ImageShape {
    specs.iter().fold(input, |shape, t| op_output(t, shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_named_by_its_serde_tag_and_compiles_as_its_stage_says() {
        for t in TransformSpec::all() {
            let value = toml::Value::try_from(&t).unwrap();
            assert_eq!(value["op"].as_str(), Some(t.op_name()));
            assert_eq!(TransformSpec::with_defaults(t.op_name()), Some(t.clone()));
            let compiled = t.op().compile().is_some();
            let tensor_side = matches!(t.op().stage(), Stage::ToTensor | Stage::Tensor);
            assert_eq!(compiled, !tensor_side, "{}", t.op_name());
        }
    }
}
