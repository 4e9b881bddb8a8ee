//! Laying a network out: its layers in order and every parameter in PyTorch's
//! `named_parameters()` order, with the feature-map sizes from the input on.

use super::*;

/// Collects parameters while the layers are laid out.
struct Builder {
    params: Vec<Param>,
    norms: Vec<Norm>,
}

impl Builder {
    fn param(&mut self, name: String, shape: Vec<usize>, init: Init) -> usize {
        self.params.push(Param { name, shape, init });
        self.params.len() - 1
    }

    /// PyTorch's default Conv2d: uniform ±1/√(in·k·k) weight and bias.
    fn conv(&mut self, name: &str, cin: usize, cout: usize, kernel: usize) -> Layer {
        let bound = 1.0 / ((cin * kernel * kernel) as f64).sqrt();
        let weight = self.param(
            format!("{name}.weight"),
            vec![cout, cin, kernel, kernel],
            Init::Uniform(bound),
        );
        let bias = self.param(format!("{name}.bias"), vec![cout], Init::Uniform(bound));
        Layer::Conv {
            weight,
            bias: Some(bias),
            kernel,
            stride: 1,
            padding: kernel / 2,
        }
    }

    /// torchvision ResNet's convolutions: no bias, kaiming_normal over fan_out.
    fn resnet_conv(
        &mut self,
        name: &str,
        cin: usize,
        cout: usize,
        kernel: usize,
        stride: usize,
    ) -> Layer {
        let std = (2.0 / (cout * kernel * kernel) as f64).sqrt();
        let weight = self.param(
            format!("{name}.weight"),
            vec![cout, cin, kernel, kernel],
            Init::Normal(std),
        );
        Layer::Conv {
            weight,
            bias: None,
            kernel,
            stride,
            padding: kernel / 2,
        }
    }

    fn batch_norm(&mut self, name: &str, channels: usize) -> Layer {
        let weight = self.param(
            format!("{name}.weight"),
            vec![channels],
            Init::Constant(1.0),
        );
        self.param(format!("{name}.bias"), vec![channels], Init::Constant(0.0));
        self.norms.push(Norm {
            name: name.to_string(),
            channels,
        });
        Layer::BatchNorm {
            weight,
            norm: self.norms.len() - 1,
        }
    }

    fn linear(&mut self, name: &str, inputs: usize, outputs: usize) -> Layer {
        let bound = 1.0 / (inputs.max(1) as f64).sqrt();
        let weight = self.param(
            format!("{name}.weight"),
            vec![outputs, inputs],
            Init::Uniform(bound),
        );
        let bias = self.param(format!("{name}.bias"), vec![outputs], Init::Uniform(bound));
        Layer::Linear { weight, bias }
    }

    /// `fc1 … fcN` over `inputs` features: a Linear–ReLU per hidden size, then the classifier.
    fn head(&mut self, layers: &mut Vec<Layer>, inputs: usize, hidden: &[usize], classes: usize) {
        let mut width = inputs;
        for (i, &h) in hidden.iter().enumerate() {
            layers.push(self.linear(&format!("fc{}", i + 1), width, h));
            layers.push(Layer::Relu);
            width = h;
        }
        layers.push(self.linear(&format!("fc{}", hidden.len() + 1), width, classes));
    }
}

impl Network {
    /// The network `arch` for `input`, or why the input cannot feed it.
    pub fn new(arch: &Architecture, input: ModelInput) -> Result<Network, ShapeError> {
        check(arch, input)?;
        let mut b = Builder {
            params: Vec::new(),
            norms: Vec::new(),
        };
        let ImageShape {
            channels,
            height,
            width,
        } = input.shape;
        let mut layers = Vec::new();
        if let Some((convs, kernel, hidden)) = arch.plain() {
            let (mut c, mut h, mut w) = (channels, height, width);
            for (i, &out) in convs.iter().enumerate() {
                layers.push(b.conv(&format!("conv{}", i + 1), c, out, kernel));
                layers.push(Layer::Relu);
                layers.push(Layer::MaxPool2);
                (c, h, w) = (out, h / 2, w / 2);
            }
            layers.push(Layer::Flatten);
            b.head(&mut layers, c * h * w, &hidden, input.classes);
        } else if let Architecture::Mlp { hidden } = arch {
            layers.push(Layer::Flatten);
            b.head(&mut layers, input.shape.len(), hidden, input.classes);
        } else if let Architecture::Resnet { depth, width, stem } = arch {
            let blocks = Architecture::resnet_blocks(*depth).expect("checked");
            match stem {
                Stem::Imagenet => layers.push(b.resnet_conv("conv1", channels, *width, 7, 2)),
                Stem::Cifar => layers.push(b.resnet_conv("conv1", channels, *width, 3, 1)),
            }
            layers.push(b.batch_norm("bn1", *width));
            layers.push(Layer::Relu);
            if *stem == Stem::Imagenet {
                layers.push(Layer::MaxPool3);
            }
            let mut cin = *width;
            for (stage, &count) in blocks.iter().enumerate() {
                let cout = width << stage;
                for i in 0..count {
                    let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                    let name = format!("layer{}.{i}", stage + 1);
                    let body = vec![
                        b.resnet_conv(&format!("{name}.conv1"), cin, cout, 3, stride),
                        b.batch_norm(&format!("{name}.bn1"), cout),
                        Layer::Relu,
                        b.resnet_conv(&format!("{name}.conv2"), cout, cout, 3, 1),
                        b.batch_norm(&format!("{name}.bn2"), cout),
                    ];
                    let shortcut = if stride != 1 || cin != cout {
                        vec![
                            b.resnet_conv(&format!("{name}.downsample.0"), cin, cout, 1, stride),
                            b.batch_norm(&format!("{name}.downsample.1"), cout),
                        ]
                    } else {
                        Vec::new()
                    };
                    layers.push(Layer::Residual { body, shortcut });
                    cin = cout;
                }
            }
            layers.push(Layer::GlobalAvgPool);
            layers.push(b.linear("fc", cin, input.classes));
        }
        Ok(Network {
            arch: arch.clone(),
            input,
            params: b.params,
            norms: b.norms,
            layers,
        })
    }
}
