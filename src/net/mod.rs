//! The networks loaderlab trains, described as data: which layers in which order, every
//! parameter's name and shape in PyTorch's `named_parameters()` order, how PyTorch initialises
//! it, and the feature-map sizes from the input on. One description serves validation (a shape
//! the data cannot feed is an error naming the key), the initial weights, the forward pass on
//! either implementation of the layers, and the report's setup table.
//!
//! The input follows the data: channels and size come from the transforms' output, the last
//! layer's outputs from the dataset's classes.

use serde::{Deserialize, Serialize};

use crate::shape::ImageShape;

mod build;
mod check;

pub use check::check;

/// ResNet's first layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stem {
    /// torchvision's: 7×7 stride-2 convolution, BatchNorm, ReLU, 3×3 stride-2 max-pool.
    Imagenet,
    /// The usual CIFAR variant: 3×3 stride-1 convolution, BatchNorm, ReLU, no pooling.
    Cifar,
}

/// Which network, with its sizes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Architecture {
    /// The seed's SmallCNN with its channels and hidden units multiplied by `width`:
    /// Conv(C→16w, 3)–ReLU–Pool–Conv(16w→32w, 3)–ReLU–Pool–Linear(→64w)–ReLU–Linear(→classes).
    SmallCnn { width: usize },
    /// One Conv(k×k, padding k/2)–ReLU–MaxPool(2) block per entry of `channels`, then a
    /// Linear–ReLU per entry of `hidden`, then Linear(→classes).
    Cnn {
        channels: Vec<usize>,
        kernel: usize,
        hidden: Vec<usize>,
    },
    /// torchvision's ResNet with BasicBlocks ([2, 2, 2, 2] for depth 18, [3, 4, 6, 3] for 34),
    /// stage widths `width`·(1, 2, 4, 8), global average pooling and Linear(→classes).
    Resnet {
        depth: usize,
        width: usize,
        stem: Stem,
    },
    /// Flatten, a Linear–ReLU per entry of `hidden`, Linear(→classes).
    Mlp { hidden: Vec<usize> },
}

impl Architecture {
    /// The seed article's model.
    pub const SEED: Architecture = Architecture::SmallCnn { width: 1 };

    /// "SmallCNN", "SmallCNN ×4", "CNN [32, 64] 5×5, hidden [128]", "ResNet-18 (CIFAR stem,
    /// width 64)", "MLP [512, 256]".
    pub fn name(&self) -> String {
        let list = |v: &[usize]| {
            let items: Vec<String> = v.iter().map(|c| c.to_string()).collect();
            format!("[{}]", items.join(", "))
        };
        match self {
            Architecture::SmallCnn { width: 1 } => "SmallCNN".into(),
            Architecture::SmallCnn { width } => format!("SmallCNN ×{width}"),
            Architecture::Cnn {
                channels,
                kernel,
                hidden,
            } => format!(
                "CNN {} {kernel}×{kernel}, hidden {}",
                list(channels),
                list(hidden)
            ),
            Architecture::Resnet { depth, width, stem } => format!(
                "ResNet-{depth} ({} stem, width {width})",
                match stem {
                    Stem::Imagenet => "ImageNet",
                    Stem::Cifar => "CIFAR",
                }
            ),
            Architecture::Mlp { hidden } => format!("MLP {}", list(hidden)),
        }
    }

    /// BasicBlocks per stage.
    fn resnet_blocks(depth: usize) -> Option<[usize; 4]> {
        match depth {
            18 => Some([2, 2, 2, 2]),
            34 => Some([3, 4, 6, 3]),
            _ => None,
        }
    }

    /// The conv blocks and hidden sizes of the plain CNNs (SmallCNN is one).
    fn plain(&self) -> Option<(Vec<usize>, usize, Vec<usize>)> {
        match self {
            Architecture::SmallCnn { width } => {
                Some((vec![16 * width, 32 * width], 3, vec![64 * width]))
            }
            Architecture::Cnn {
                channels,
                kernel,
                hidden,
            } => Some((channels.clone(), *kernel, hidden.clone())),
            _ => None,
        }
    }
}

/// What a model is built for: the tensors the transforms hand it, and the number of classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ModelInput {
    pub shape: ImageShape,
    pub classes: usize,
}

impl ModelInput {
    /// The seed article's: 28×28 grey FashionMNIST, 10 classes.
    pub const SEED: ModelInput = ModelInput {
        shape: ImageShape::GREY_28,
        classes: 10,
    };
}

/// How PyTorch initialises a parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Uniform in ±bound: Conv2d's and Linear's defaults (kaiming_uniform with a = √5 for the
    /// weight, ±1/√fan_in for the bias, which is the same bound).
    Uniform(f64),
    /// Normal with this standard deviation: torchvision's ResNet convolutions
    /// (kaiming_normal, fan_out, ReLU: √(2 / (out·k·k))).
    Normal(f64),
    /// Every element this value: BatchNorm's weight (1) and bias (0).
    Constant(f64),
}

/// One trainable tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    pub name: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

impl Param {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One layer of the forward pass; parameters are referred to by their index in
/// [`Network::params`], BatchNorm's running statistics by their index in [`Network::norms`].
#[derive(Debug, Clone, PartialEq)]
pub enum Layer {
    Conv {
        weight: usize,
        bias: Option<usize>,
        kernel: usize,
        stride: usize,
        padding: usize,
    },
    /// Training-mode BatchNorm2d: batch statistics normalise, running statistics are updated
    /// as PyTorch does (momentum 0.1, the unbiased variance). `weight`, `weight + 1` = bias.
    BatchNorm {
        weight: usize,
        norm: usize,
    },
    Relu,
    /// 2×2, stride 2, odd last row or column dropped (PyTorch's floor mode).
    MaxPool2,
    /// 3×3, stride 2, padding 1: ResNet's stem.
    MaxPool3,
    /// relu(body(x) + shortcut(x)); an empty shortcut is the identity.
    Residual {
        body: Vec<Layer>,
        shortcut: Vec<Layer>,
    },
    /// Mean over the spatial positions: N×C×H×W → N×C.
    GlobalAvgPool,
    /// N×C×H×W → N×(C·H·W), PyTorch's order.
    Flatten,
    Linear {
        weight: usize,
        bias: usize,
    },
}

/// A BatchNorm layer's running statistics, as PyTorch keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Norm {
    /// "layer1.0.bn1": the buffers are `<name>.running_mean` and `<name>.running_var`.
    pub name: String,
    pub channels: usize,
}

/// BatchNorm's defaults in PyTorch.
pub const BN_EPS: f64 = 1e-5;
pub const BN_MOMENTUM: f64 = 0.1;

/// Why a network cannot take the data: the `[model]` key at fault and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeError {
    pub key: &'static str,
    pub message: String,
}

/// A network built for one input: its layers and parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    pub arch: Architecture,
    pub input: ModelInput,
    pub params: Vec<Param>,
    pub norms: Vec<Norm>,
    pub layers: Vec<Layer>,
}

impl Network {
    /// The network as the layer list PyTorch's builder (`pytorch_model.py`'s `build`) makes a
    /// torch module from: `bench step` and the pytorch engine train the same network.
    pub fn torch_layers(&self) -> serde_json::Value {
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
        serde_json::Value::Array(walk(&self.layers, self))
    }

    /// The seed's SmallCNN on 28×28 grey FashionMNIST.
    pub fn seed() -> Network {
        Network::new(&Architecture::SEED, ModelInput::SEED).expect("the seed's model fits")
    }

    /// Number of trainable parameters.
    pub fn parameter_count(&self) -> usize {
        self.params.iter().map(Param::len).sum()
    }

    /// "SmallCNN, input 3×32×32, 10 classes, 136,874 parameters".
    pub fn describe(&self) -> String {
        format!(
            "{}, input {}, {} classes, {} parameters",
            self.arch.name(),
            self.input.shape,
            self.input.classes,
            crate::format::thousands(self.parameter_count() as f64)
        )
    }

    /// Multiply–adds of one image's forward pass: convolutions and linear layers (what sets a
    /// step's compute; the backward pass costs about twice as much again).
    pub fn forward_macs(&self) -> u64 {
        fn walk(
            layers: &[Layer],
            params: &[Param],
            (c, h, w): (usize, usize, usize),
        ) -> (u64, (usize, usize, usize)) {
            let mut macs = 0u64;
            let mut s = (c, h, w);
            for layer in layers {
                match layer {
                    Layer::Conv {
                        weight,
                        kernel,
                        stride,
                        padding,
                        ..
                    } => {
                        let out = params[*weight].shape[0];
                        let oh = window_out(s.1, *kernel, *stride, *padding);
                        let ow = window_out(s.2, *kernel, *stride, *padding);
                        macs += (out * oh * ow * s.0 * kernel * kernel) as u64;
                        s = (out, oh, ow);
                    }
                    Layer::MaxPool2 => s = (s.0, s.1 / 2, s.2 / 2),
                    Layer::MaxPool3 => {
                        s = (s.0, window_out(s.1, 3, 2, 1), window_out(s.2, 3, 2, 1))
                    }
                    Layer::Residual { body, shortcut } => {
                        let (m, out) = walk(body, params, s);
                        let (m2, _) = walk(shortcut, params, s);
                        macs += m + m2;
                        s = out;
                    }
                    Layer::GlobalAvgPool | Layer::Flatten => s = (s.0 * s.1 * s.2, 1, 1),
                    Layer::Linear { weight, .. } => {
                        let shape = &params[*weight].shape;
                        macs += (shape[0] * shape[1]) as u64;
                        s = (shape[0], 1, 1);
                    }
                    Layer::BatchNorm { .. } | Layer::Relu => {}
                }
            }
            (macs, s)
        }
        let ImageShape {
            channels,
            height,
            width,
        } = self.input.shape;
        walk(&self.layers, &self.params, (channels, height, width)).0
    }
}

/// Output side of a convolution or pooling window.
fn window_out(side: usize, kernel: usize, stride: usize, padding: usize) -> usize {
    (side + 2 * padding).saturating_sub(kernel) / stride + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(c: usize, h: usize, w: usize) -> ModelInput {
        ModelInput {
            shape: ImageShape::new(c, h, w),
            classes: 10,
        }
    }

    #[test]
    fn parameter_counts_match_pytorch() {
        // sum(p.numel() for p in model.parameters()) in PyTorch 2.5.1 / torchvision 0.20.1.
        let count =
            |arch: Architecture, i: ModelInput| Network::new(&arch, i).unwrap().parameter_count();
        assert_eq!(Network::seed().parameter_count(), 105_866);
        assert_eq!(count(Architecture::SEED, input(3, 32, 32)), 136_874);
        // torchvision.models.resnet18(num_classes=10) / resnet34(num_classes=10).
        let resnet = |depth, stem| Architecture::Resnet {
            depth,
            width: 64,
            stem,
        };
        assert_eq!(
            count(resnet(18, Stem::Imagenet), input(3, 224, 224)),
            11_181_642
        );
        assert_eq!(
            count(resnet(34, Stem::Imagenet), input(3, 224, 224)),
            21_289_802
        );
        // The CIFAR stem: conv1 3×3 instead of 7×7 (3·64·(49 − 9) fewer weights).
        assert_eq!(
            count(resnet(18, Stem::Cifar), input(3, 32, 32)),
            11_181_642 - 7_680
        );
        assert_eq!(
            Network::new(&Architecture::SmallCnn { width: 4 }, input(3, 32, 32))
                .unwrap()
                .describe(),
            "SmallCNN ×4, input 3×32×32, 10 classes, 2,175,626 parameters"
        );
    }

    #[test]
    fn names_follow_pytorch() {
        let net = Network::new(
            &Architecture::Resnet {
                depth: 18,
                width: 8,
                stem: Stem::Cifar,
            },
            input(3, 8, 8),
        )
        .unwrap();
        let names: Vec<&str> = net.params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            &names[..6],
            [
                "conv1.weight",
                "bn1.weight",
                "bn1.bias",
                "layer1.0.conv1.weight",
                "layer1.0.bn1.weight",
                "layer1.0.bn1.bias"
            ]
        );
        assert!(names.contains(&"layer2.0.downsample.0.weight"));
        assert_eq!(names.last(), Some(&"fc.bias"));
        assert_eq!(net.norms.len(), 1 + 8 * 2 + 3);
        let mlp = Network::new(&Architecture::Mlp { hidden: vec![32] }, input(1, 4, 4)).unwrap();
        assert_eq!(mlp.params[0].shape, [32, 16]);
        assert_eq!(mlp.params[2].name, "fc2.weight");
    }

    #[test]
    fn shapes_the_data_cannot_feed_name_the_key() {
        let cnn = Architecture::Cnn {
            channels: vec![8, 8, 8, 8],
            kernel: 3,
            hidden: vec![],
        };
        let e = Network::new(&cnn, input(3, 8, 8)).unwrap_err();
        assert_eq!(e.key, "channels");
        assert!(
            e.message.contains("at least 16×16") && e.message.contains("at most 3 blocks"),
            "{}",
            e.message
        );
        let stem = Architecture::Resnet {
            depth: 18,
            width: 64,
            stem: Stem::Imagenet,
        };
        let e = Network::new(&stem, input(3, 6, 6)).unwrap_err();
        assert_eq!(e.key, "stem");
        assert!(e.message.contains("stem = \"cifar\""), "{}", e.message);
        let depth = Architecture::Resnet {
            depth: 50,
            width: 64,
            stem: Stem::Cifar,
        };
        assert_eq!(
            Network::new(&depth, input(3, 32, 32)).unwrap_err().key,
            "depth"
        );
        let kernel = Architecture::Cnn {
            channels: vec![8],
            kernel: 4,
            hidden: vec![],
        };
        assert_eq!(
            Network::new(&kernel, input(3, 32, 32)).unwrap_err().key,
            "kernel"
        );
        let small = Network::new(&Architecture::SEED, input(1, 3, 3)).unwrap_err();
        assert_eq!(small.key, "width");
    }
}
