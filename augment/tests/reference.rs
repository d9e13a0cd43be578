//! Our resize and colour ops against values computed independently with PIL and
//! torchvision (`benches/peers/reference.py` wrote `tests/data/pil_reference.json`;
//! each case carries its tolerance and why).

use fast_image_resize::Resizer;
use serde_json::Value;
use stoker_augment::decode::luma;
use stoker_augment::transform::color;
use stoker_augment::transform::resize::{resample, Rect};
use stoker_augment::ImageView;

fn load() -> Value {
    let text = include_str!("data/pil_reference.json");
    serde_json::from_str(text).expect("reference JSON parses")
}

fn bytes(v: &Value) -> Vec<u8> {
    v.as_array()
        .expect("a list of samples")
        .iter()
        .map(|x| x.as_u64().expect("a sample") as u8)
        .collect()
}

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("param {key} missing"))
}

/// The expected output of a case (or of one of its variants).
fn expected(case: &Value) -> Vec<u8> {
    let out = &case["output"];
    bytes(if out.is_object() { &out["data"] } else { out })
}

fn run(case: &Value, images: &Value) -> Vec<u8> {
    let img = &images[case["input"].as_str().expect("input name")];
    let (w, h, c) = (
        num(img, "w") as usize,
        num(img, "h") as usize,
        num(img, "c") as usize,
    );
    let mut data = bytes(&img["data"]);
    let p = &case["params"];
    let view = ImageView::new(w, h, c, &data).expect("shape");
    let resize = |hard: Rect, ow: usize, oh: usize| {
        let mut out = vec![0u8; ow * oh * c];
        resample(&mut Resizer::new(), view, hard, None, &mut out, ow, oh).expect("resample");
        out
    };
    match case["op"].as_str().expect("op") {
        "resize" => resize(
            Rect::full(w, h),
            num(p, "width") as usize,
            num(p, "height") as usize,
        ),
        "resized_crop" => resize(
            Rect {
                left: num(p, "left") as usize,
                top: num(p, "top") as usize,
                width: num(p, "crop_width") as usize,
                height: num(p, "crop_height") as usize,
            },
            num(p, "width") as usize,
            num(p, "height") as usize,
        ),
        "brightness" => {
            color::brightness(&mut data, num(p, "factor"));
            data
        }
        "contrast" => {
            color::contrast(&mut data, c, num(p, "factor"));
            data
        }
        "saturation" => {
            color::saturation(&mut data, c, num(p, "factor"));
            data
        }
        "hue" => {
            color::hue(&mut data, c, num(p, "shift"));
            data
        }
        "grayscale_l" => data.chunks(c).map(|px| luma(px[0], px[1], px[2])).collect(),
        "grayscale3" => {
            color::grayscale(&mut data, c);
            data
        }
        op => panic!("unknown op {op} in the reference file"),
    }
}

#[test]
fn transforms_match_pil_and_torchvision_within_stated_tolerance() {
    let doc = load();
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 10, "the reference file lost its cases");
    let mut failures = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap_or("?");
        let got = run(case, &doc["images"]);
        // We follow PIL's rounded luma for grayscale; torchvision's tensor path uses
        // other weights and truncation, so compare with its PIL-path variant.
        let want = if case["op"] == "grayscale3" {
            let v = &case["variants"]["torchvision_pil_path"]["output"];
            bytes(if v.is_object() { &v["data"] } else { v })
        } else {
            expected(case)
        };
        let tol = case["tolerance"]["max_abs_diff"]
            .as_u64()
            .expect("tolerance") as i32;
        assert_eq!(got.len(), want.len(), "{name}: output size");
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (*a as i32 - *b as i32).abs())
            .max()
            .unwrap_or(0);
        if worst > tol {
            failures.push(format!("{name}: max abs diff {worst} > {tol}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
