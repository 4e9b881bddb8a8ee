//! The transforms against Pillow's own output (tests/fixtures/make_transform_fixture.py and
//! make_colour_fixture.py): for the same parameters, every pixel identical.

use loaderlab::config::{Size, resize_output};
use loaderlab::shape::{ImageShape, Padding};
use loaderlab::transforms::{CropBox, ResizeScratch, crop_resize, rotate_nearest};
use serde_json::Value;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn crop_resize_and_rotate_match_pillow() {
    let text = std::fs::read_to_string("tests/fixtures/transform_fixture.json").unwrap();
    let fixture: Value = serde_json::from_str(&text).unwrap();
    let sources: Vec<Vec<u8>> = fixture["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| hex(s.as_str().unwrap()))
        .collect();
    let mut scratch = ResizeScratch::default();
    let (mut total, mut exact, mut worst) = (0usize, 0usize, 0i32);
    let mut counts = [0usize; 2];
    for (n, case) in fixture["cases"].as_array().unwrap().iter().enumerate() {
        let src = &sources[case["source"].as_u64().unwrap() as usize];
        let expected = hex(case["expected"].as_str().unwrap());
        let mut got = vec![0u8; expected.len()];
        match case["op"].as_str().unwrap() {
            "crop_resize" => {
                let b = CropBox {
                    top: case["top"].as_u64().unwrap() as usize,
                    left: case["left"].as_u64().unwrap() as usize,
                    height: case["height"].as_u64().unwrap() as usize,
                    width: case["width"].as_u64().unwrap() as usize,
                };
                let out = case["out"].as_u64().unwrap() as usize;
                crop_resize(src, 28, b, out, out, &mut got, &mut scratch);
                counts[0] += 1;
            }
            "rotate" => {
                let angle = case["angle"].as_f64().unwrap();
                let fill = case["fill"].as_u64().unwrap() as u8;
                rotate_nearest(src, 28, 28, angle, fill, &mut got);
                counts[1] += 1;
            }
            other => panic!("unknown op {other}"),
        }
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            let d = (*g as i32 - *e as i32).abs();
            assert!(d <= 1, "case {n} ({case}): pixel {i}: {g} vs Pillow {e}");
            worst = worst.max(d);
            exact += (d == 0) as usize;
            total += 1;
        }
    }
    assert!(counts[0] >= 20 && counts[1] >= 20, "{counts:?}");
    assert_eq!(
        exact, total,
        "{exact} of {total} pixels exact (worst difference {worst})"
    );
    eprintln!("fidelity: {exact} of {total} pixels exact, worst difference {worst}");
}

/// Interleaved (Pillow's `tobytes`) to planar.
fn planar(bytes: &[u8], channels: usize) -> Vec<u8> {
    let n = bytes.len() / channels;
    let mut out = vec![0u8; bytes.len()];
    for (i, px) in bytes.chunks_exact(channels).enumerate() {
        for (c, v) in px.iter().enumerate() {
            out[c * n + i] = *v;
        }
    }
    out
}

fn channels_of(mode: &str) -> usize {
    match mode {
        "L" => 1,
        "RGB" => 3,
        other => panic!("mode {other}"),
    }
}

fn usize_at(v: &Value, i: usize) -> usize {
    v.as_array().unwrap()[i].as_u64().unwrap() as usize
}

/// One fixture case through our op with the case's parameters.
fn run_case(case: &Value, src: &[u8], shape: ImageShape, scratch: &mut ResizeScratch) -> Vec<u8> {
    use loaderlab::transforms as t;
    let out_shape = ImageShape::new(
        channels_of(case["mode"].as_str().unwrap()),
        case["height"].as_u64().unwrap() as usize,
        case["width"].as_u64().unwrap() as usize,
    );
    let mut got = vec![0u8; out_shape.len()];
    let plane = shape.plane();
    let factor = || case["factor"].as_f64().unwrap();
    match case["op"].as_str().unwrap() {
        "crop_resize" | "resize" => {
            let b = if case["op"] == "resize" {
                CropBox::whole(shape)
            } else {
                let bx = &case["box"];
                CropBox {
                    top: usize_at(bx, 0),
                    left: usize_at(bx, 1),
                    height: usize_at(bx, 2),
                    width: usize_at(bx, 3),
                }
            };
            if case["op"] == "resize" {
                // Our output size rule against torchvision's (the fixture's).
                let size = match &case["size"] {
                    Value::Array(_) => Size::Pair([
                        usize_at(&case["size"], 0) as u64,
                        usize_at(&case["size"], 1) as u64,
                    ]),
                    v => Size::Side(v.as_u64().unwrap()),
                };
                let max = case["max_size"].as_u64().unwrap_or(0);
                assert_eq!(
                    resize_output(shape.height, shape.width, size, max),
                    (out_shape.height, out_shape.width),
                    "{case}"
                );
            }
            for c in 0..shape.channels {
                t::crop_resize(
                    &src[c * plane..],
                    shape.width,
                    b,
                    out_shape.width,
                    out_shape.height,
                    &mut got[c * out_shape.plane()..][..out_shape.plane()],
                    scratch,
                );
            }
        }
        "rotate" => {
            let mut padded = src.to_vec();
            padded.extend_from_slice(&[0, 0, 0]);
            for c in 0..shape.channels {
                t::rotate_nearest(
                    &padded[c * plane..],
                    shape.width,
                    shape.height,
                    case["angle"].as_f64().unwrap(),
                    case["fill"].as_u64().unwrap() as u8,
                    &mut got[c * plane..][..plane],
                );
            }
        }
        "hflip" => t::flip_horizontal(src, shape, &mut got),
        "vflip" => t::flip_vertical(src, shape, &mut got),
        "center_crop" => {
            let (h, w) = (usize_at(&case["size"], 0), usize_at(&case["size"], 1));
            let (padding, top, left) = t::center_crop_geometry(shape, h, w);
            let padded_shape = padding.apply_to(shape);
            let mut padded = vec![0u8; padded_shape.len()];
            t::pad(src, shape, padding, t::PadMode::Constant, 0, &mut padded);
            t::crop(&padded, padded_shape, top, left, h, w, &mut got);
        }
        "pad" => {
            let ltrb: Vec<u64> = (0..4).map(|i| usize_at(&case["ltrb"], i) as u64).collect();
            let mode = match case["padding_mode"].as_str().unwrap() {
                "constant" => t::PadMode::Constant,
                "edge" => t::PadMode::Edge,
                "reflect" => t::PadMode::Reflect,
                _ => t::PadMode::Symmetric,
            };
            let fill = case["fill"].as_u64().unwrap() as u8;
            t::pad(
                src,
                shape,
                Padding::from_values(&ltrb),
                mode,
                fill,
                &mut got,
            );
        }
        "grayscale" => t::grey_plane(src, shape, &mut got),
        "brightness" => {
            got.copy_from_slice(src);
            t::brightness(&mut got, factor());
        }
        "contrast" => {
            got.copy_from_slice(src);
            t::contrast(&mut got, shape, factor(), &mut Vec::new());
        }
        "saturation" => {
            got.copy_from_slice(src);
            t::saturation(&mut got, shape, factor(), &mut Vec::new());
        }
        "hue" => {
            got.copy_from_slice(src);
            t::hue(&mut got, shape, factor());
        }
        other => panic!("unknown op {other}"),
    }
    got
}

/// Every pixel op on colour and grey images of a non-square size, against Pillow through
/// torchvision's own steps (tests/fixtures/make_colour_fixture.py): identical pixels.
#[test]
fn every_op_matches_pillow_on_colour_and_grey_images() {
    let text = std::fs::read_to_string("tests/fixtures/colour_fixture.json").unwrap();
    let fixture: Value = serde_json::from_str(&text).unwrap();
    let sources: Vec<(Vec<u8>, ImageShape)> = fixture["sources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let c = channels_of(s["mode"].as_str().unwrap());
            let shape = ImageShape::new(
                c,
                s["height"].as_u64().unwrap() as usize,
                s["width"].as_u64().unwrap() as usize,
            );
            (planar(&hex(s["pixels"].as_str().unwrap()), c), shape)
        })
        .collect();
    let mut scratch = ResizeScratch::default();
    let mut per_op: std::collections::BTreeMap<String, (usize, usize, i32)> = Default::default();
    let mut failures = Vec::new();
    for (n, case) in fixture["cases"].as_array().unwrap().iter().enumerate() {
        let (src, shape) = &sources[case["source"].as_u64().unwrap() as usize];
        let c = channels_of(case["mode"].as_str().unwrap());
        let expected = planar(&hex(case["expected"].as_str().unwrap()), c);
        let got = run_case(case, src, *shape, &mut scratch);
        assert_eq!(got.len(), expected.len(), "case {n}");
        let op = case["op"].as_str().unwrap().to_string();
        let entry = per_op
            .entry(format!("{op} ({} ch)", shape.channels))
            .or_default();
        for (g, e) in got.iter().zip(&expected) {
            let d = (*g as i32 - *e as i32).abs();
            entry.0 += (d == 0) as usize;
            entry.1 += 1;
            entry.2 = entry.2.max(d);
        }
        if got != expected {
            failures.push(format!("case {n}: {op} {}", {
                let mut c = case.clone();
                c.as_object_mut().unwrap().remove("expected");
                c
            }));
        }
    }
    for (op, (exact, total, worst)) in &per_op {
        eprintln!("{op}: {exact} of {total} pixels identical, worst difference {worst}");
    }
    assert!(per_op.len() >= 20, "{per_op:?}");
    assert!(
        failures.is_empty(),
        "{} cases differ from Pillow:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Pillow's rotation at every size class (tests/fixtures/make_rotate_fixture.py): small images,
/// ones around 32,768 px where Pillow leaves fixed point for doubles, and ones past 65,536 px
/// (a RandomResizedCrop to [2, 70000] before a RandomRotation), with and without the slack that
/// lets runs be gathered.
#[test]
fn rotate_matches_pillow_at_every_size() {
    use md5::{Digest, Md5};
    let text = std::fs::read_to_string("tests/fixtures/rotate_fixture.json").unwrap();
    let fixture: Value = serde_json::from_str(&text).unwrap();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() > 400);
    let mut wide = 0;
    for case in cases {
        let size = |key: &str| case[key].as_u64().unwrap() as usize;
        let (w, h) = (size("width"), size("height"));
        let angle = case["angle"].as_f64().unwrap();
        let fill = case["fill"].as_u64().unwrap() as u8;
        let mut src: Vec<u8> = (0..w * h)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        let mut plain = vec![0u8; w * h];
        rotate_nearest(&src, w, h, angle, fill, &mut plain);
        src.extend_from_slice(&[0; 3]);
        let mut gathered = vec![0u8; w * h];
        rotate_nearest(&src, w, h, angle, fill, &mut gathered);
        assert_eq!(plain, gathered, "{w}x{h} at {angle}: gathered != scalar");
        let digest = format!("{:x}", Md5::digest(&plain));
        assert_eq!(
            digest,
            case["md5"].as_str().unwrap(),
            "{w}x{h} at {angle}° (fill {fill})"
        );
        wide += (w.max(h) >= 65_536) as usize;
    }
    assert!(wide >= 50, "only {wide} cases past 65,536 px");
}
