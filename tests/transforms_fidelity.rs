//! The transforms against Pillow's own output (tests/fixtures/make_transform_fixture.py): for
//! the same crop box and angle, every pixel within 1 grey level and at least 99 % exact.

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
    let share = exact as f64 / total as f64;
    assert!(
        share >= 0.99,
        "{share} of pixels exact (worst difference {worst})"
    );
    eprintln!("fidelity: {exact} of {total} pixels exact, worst difference {worst}");
}
