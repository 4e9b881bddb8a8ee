//! Every model kind and optimizer against PyTorch (tests/fixtures/make_model_fixture.py): the
//! same formula weights and batch give the same parameter names and shapes, the same gradients
//! at the first step, the same losses over 5 steps, the same parameters after them and the
//! same BatchNorm running statistics, within 1e-4 (relative to each tensor's largest value).
//! Every network runs on both implementations of the layers.
//!
//! ResNet-18 (CIFAR stem, 16×16, width 4, batch 16) is checked in full like the others.
//!
//! ResNet-34 (ImageNet stem, 64×64, width 8, batch 32) is checked in full at the first step
//! (structure, every gradient, the first loss) and its losses for the first three steps; after
//! that its trajectory is ill-conditioned and no float32 implementation can be held to 1e-4.
//! The fixture says so itself: PyTorch's own float32 trajectory, set beside its float64 one
//! from the same start, drifts apart by up to 1.3e-3 by the fifth step (at most 3.6e-7 for
//! the first three), and ours drifts by the same order from both (measured at the fifth step,
//! SGD with Nesterov: 8.0e-3 from float64, 8.4e-3 from PyTorch's float32). At width 4 and
//! batch 16 PyTorch's float32 and float64 differed by up to 1.5e-1.
//!
//! The same fixture found a real precision fault: with BatchNorm's reductions in float32,
//! candle's sums over the 32,768 values of a stem channel put the stem's bias gradient 4.9e-4
//! (relative to the tensor) from float64, where PyTorch's float32 is 3e-6 away; BatchNorm now
//! reduces in float64 on the CPU and the worst gradient is 1.3e-5 from PyTorch's.

use candle_core::{Device, Tensor};
use loaderlab::config::{ModelSection, OptimizerSection};
use loaderlab::net::{ModelInput, Network};
use loaderlab::shape::ImageShape;
use loaderlab::train::{InitialWeights, Layers, Trainer};
use serde_json::Value;

fn fixture() -> Value {
    serde_json::from_str(&std::fs::read_to_string("tests/fixtures/model_fixture.json").unwrap())
        .unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// `got` equals `want` within 1e-4 of want's largest magnitude (and a floor for all-zero tensors).
fn close(what: &str, got: &[f64], want: &[f64]) {
    close_to(what, got, want, 1e-4, 1e-6);
}

/// `got` equals `want` within `tol` of max(want's largest magnitude, `floor`).
fn close_to(what: &str, got: &[f64], want: &[f64], tol: f64, floor: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(floor);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}[{i}]: {g} vs PyTorch {w} (scale {scale})"
        );
    }
}

/// How many of the 6 losses to compare (see the file's doc); None: all, and the parameters and
/// running statistics after the steps too.
fn well_conditioned_losses(entry: &Value) -> Option<usize> {
    (entry["name"] == "resnet34_imagenet").then_some(3)
}

fn to_vec(t: &Tensor) -> Vec<f64> {
    t.flatten_all()
        .unwrap()
        .to_vec1::<f32>()
        .unwrap()
        .into_iter()
        .map(f64::from)
        .collect()
}

/// The network of a fixture entry, its formula weights (names and shapes checked against
/// PyTorch's) and the formula batch.
fn setup(entry: &Value, batch: usize) -> (InitialWeights, Tensor, Tensor) {
    let section: ModelSection = serde_json::from_value(entry["model"].clone()).unwrap();
    let dims: Vec<usize> = floats(&entry["input"])
        .iter()
        .map(|v| *v as usize)
        .collect();
    let classes = entry["classes"].as_u64().unwrap() as usize;
    let input = ModelInput {
        shape: ImageShape::new(dims[0], dims[1], dims[2]),
        classes,
    };
    let net = Network::new(&section.architecture().unwrap(), input).unwrap();
    let params = entry["params"].as_array().unwrap();
    let names: Vec<&str> = net.params.iter().map(|p| p.name.as_str()).collect();
    let theirs: Vec<&str> = params.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, theirs, "{}: parameter names", entry["name"]);
    let values = net
        .params
        .iter()
        .zip(params)
        .enumerate()
        .map(|(k, (p, f))| {
            let shape: Vec<usize> = floats(&f["shape"]).iter().map(|v| *v as usize).collect();
            assert_eq!(p.shape, shape, "{}", p.name);
            let (offset, amp) = (f["offset"].as_f64().unwrap(), f["amp"].as_f64().unwrap());
            (0..p.len())
                .map(|i| (offset + amp * (0.7 * i as f64 + k as f64).sin()) as f32)
                .collect()
        })
        .collect();
    let shape = input.shape;
    let pixels: Vec<f32> = (0..batch * shape.len())
        .map(|i| (0.5 + 0.5 * (0.13 * i as f64 + 1.0).sin()) as f32)
        .collect();
    let labels: Vec<u32> = (0..batch as u32).map(|n| n % classes as u32).collect();
    (
        InitialWeights { net, values },
        Tensor::from_vec(
            pixels,
            (batch, shape.channels, shape.height, shape.width),
            &Device::Cpu,
        )
        .unwrap(),
        Tensor::from_vec(labels, batch, &Device::Cpu).unwrap(),
    )
}

/// Both implementations: the fast CPU layers fuse plain CNN blocks where they fit and use the
/// im2col convolution inside candle's graph elsewhere (the ResNets).
fn implementations(_init: &InitialWeights) -> Vec<Layers> {
    vec![Layers::Candle, Layers::FastCpu]
}

/// A stored gradient: every value, or every `stride`-th one from the first.
fn gradient(v: &Value) -> (usize, Vec<f64>) {
    match v.as_array() {
        Some(_) => (1, floats(v)),
        None => (v["stride"].as_u64().unwrap() as usize, floats(&v["values"])),
    }
}

fn check_model(name: &str) {
    let f = fixture();
    let entry = f["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{name} not in the fixture"));
    let batch = entry["batch"].as_u64().or(f["batch"].as_u64()).unwrap() as usize;
    let (init, x, y) = setup(entry, batch);
    let prefix = well_conditioned_losses(entry);
    for layers in implementations(&init) {
        // Gradients at the first step (they do not depend on the optimizer).
        let trainer = Trainer::with_layers(
            init.clone(),
            &OptimizerSection::default(),
            Device::Cpu,
            layers,
        )
        .unwrap();
        let logits = trainer.model().forward(&x).unwrap();
        let loss = candle_nn::loss::cross_entropy(&logits, &y).unwrap();
        let grads = loss.backward().unwrap();
        for (var, p) in trainer.model().vars().iter().zip(&init.net.params) {
            let (stride, want) = gradient(&entry["grads"][&p.name]);
            let got: Vec<f64> = to_vec(grads.get(var).unwrap())
                .into_iter()
                .step_by(stride)
                .collect();
            let what = format!("{name} {layers:?} grad {} (every {stride})", p.name);
            close(&what, &got, &want);
        }
        for case in entry["cases"].as_array().unwrap() {
            let opt: OptimizerSection = serde_json::from_value(case["optimizer"].clone()).unwrap();
            let which = format!("{name} {layers:?} {}", case["optimizer_name"]);
            let mut trainer =
                Trainer::with_layers(init.clone(), &opt, Device::Cpu, layers).unwrap();
            let mut losses = Vec::new();
            for _ in 0..f["steps"].as_u64().unwrap() {
                losses.push(trainer.step(&x, &y).unwrap().to_scalar::<f32>().unwrap() as f64);
            }
            let logits = trainer.model().forward(&x).unwrap();
            let last = candle_nn::loss::cross_entropy(&logits, &y).unwrap();
            losses.push(last.to_scalar::<f32>().unwrap() as f64);
            let want = floats(&case["losses"]);
            let compared = prefix.unwrap_or(want.len());
            for (i, (g, w)) in losses.iter().zip(&want).take(compared).enumerate() {
                assert!(
                    (g - w).abs() < 1e-4,
                    "{which}: loss {i} {g} vs PyTorch {w}\nours {losses:?}\ntheirs {want:?}"
                );
            }
            if prefix.is_some() {
                continue;
            }
            for (var, p) in trainer.model().vars().iter().zip(&init.net.params) {
                let after = &case["after"][&p.name];
                let got = to_vec(var.as_tensor());
                let norm = got.iter().map(|v| v * v).sum::<f64>().sqrt();
                let want_norm = after["norm"].as_f64().unwrap();
                assert!(
                    (norm - want_norm).abs() <= 1e-4 * want_norm.max(1e-6),
                    "{which}: {} norm after the steps {norm} vs {want_norm}",
                    p.name
                );
                let head = floats(&after["head"]);
                close(
                    &format!("{which} {} after", p.name),
                    &got[..head.len()],
                    &head,
                );
            }
            let running = trainer.model().running_stats();
            assert_eq!(running.len(), init.net.norms.len());
            for (norm, (mean, var)) in init.net.norms.iter().zip(&running) {
                let want = &case["running"][&norm.name];
                close(
                    &format!("{which} {}.running_mean", norm.name),
                    &to_vec(mean),
                    &floats(&want["mean"]),
                );
                close(
                    &format!("{which} {}.running_var", norm.name),
                    &to_vec(var),
                    &floats(&want["var"]),
                );
            }
        }
    }
}

#[test]
fn small_cnn_width_2() {
    check_model("small_cnn_w2");
}

#[test]
fn cnn_kernel_5() {
    check_model("cnn_k5");
}

#[test]
fn cnn_kernel_3_odd_sides() {
    check_model("cnn_k3_odd");
}

#[test]
fn resnet18_cifar_stem() {
    check_model("resnet18_cifar");
}

#[test]
fn resnet34_imagenet_stem() {
    check_model("resnet34_imagenet");
}

#[test]
fn mlp() {
    check_model("mlp");
}

#[test]
fn the_fixture_covers_every_kind_and_optimizer() {
    let f = fixture();
    let models = f["models"].as_array().unwrap();
    let kinds: std::collections::BTreeSet<&str> = models
        .iter()
        .map(|m| m["model"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        ["cnn", "mlp", "resnet", "small_cnn"]
    );
    for m in models {
        let opts: Vec<&str> = m["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["optimizer"]["kind"].as_str().unwrap())
            .collect();
        for kind in ["adam", "adamw", "sgd"] {
            assert!(opts.contains(&kind), "{}: {kind}", m["name"]);
        }
    }
}
