//! Pipelines end to end: shapes, determinism, and the invariants of each transform.

use crate::common;

use common::*;
use proptest::prelude::*;
use stoker_augment::transform::crop::rrc_box;
use stoker_augment::{AugmentError, ImageView, Pipeline, SampleRng, Scratch};

fn run(spec: &str, img: ImageView<'_>, seed: u64) -> Vec<u8> {
    let p = Pipeline::parse(spec).unwrap();
    let (w, h) = p.output_size(img.width, img.height);
    let mut out = vec![0u8; w * h * img.channels];
    let mut rng = SampleRng::new(seed, 0, 7);
    p.run_image(img, &mut rng, &mut Scratch::default(), &mut out)
        .unwrap();
    out
}

/// `p` on `img` into `out`, seed 0, fresh scratch.
fn run_into(p: &Pipeline, img: ImageView<'_>, out: &mut [u8]) -> Result<(), AugmentError> {
    p.run_image(
        img,
        &mut SampleRng::from_seed(0),
        &mut Scratch::default(),
        out,
    )
}

#[test]
fn output_shapes() {
    let (w, h) = (50, 40);
    let data = gradient(w, h);
    let img = ImageView::new(w, h, 3, &data).unwrap();
    for (spec, want) in [
        ("rrc:24", (24, 24)),
        ("rrc:24x16,flip", (24, 16)),
        ("resize:20", (25, 20)),
        ("resize:20,center:16", (16, 16)),
        ("resize:64x48", (64, 48)),
        ("center:60", (60, 60)),
        (
            "crop:32:pad=4,flip,jitter:0.4,gray:p=0.5,erase:p=1,cutout:8",
            (32, 32),
        ),
        ("none", (50, 40)),
        ("flip:p=1", (50, 40)),
    ] {
        let p = Pipeline::parse(spec).unwrap();
        assert_eq!(p.output_size(w, h), want, "{spec}");
        assert_eq!(run(spec, img, 1).len(), want.0 * want.1 * 3, "{spec}");
    }
}

#[test]
fn wrong_output_length_is_an_error() {
    let data = gradient(10, 10);
    let img = ImageView::new(10, 10, 3, &data).unwrap();
    let p = Pipeline::parse("rrc:8").unwrap();
    let mut out = vec![0u8; 8 * 8 * 3 + 1];
    let e = run_into(&p, img, &mut out).unwrap_err();
    assert!(matches!(
        e,
        AugmentError::OutputSize {
            width: 8,
            height: 8,
            channels: 3,
            got: 193
        }
    ));
    let msg = e.to_string();
    assert!(
        msg.contains("8x8x3 after the transforms") && msg.contains("holds 193 bytes"),
        "{msg}"
    );
    let jpg = rgb_jpeg(10, 10);
    let e = p
        .run_encoded(
            &jpg,
            1,
            &mut SampleRng::from_seed(0),
            &mut Scratch::default(),
            &mut out,
        )
        .unwrap_err();
    assert!(e.to_string().contains("8x8x1"), "{e}");
}

#[test]
fn a_resize_that_would_make_a_huge_image_is_an_error() {
    // Found by fuzzing (benches/fuzz/regressions/decode/crash-9445afbd6ad0434c): a
    // 35088x1 image under `resize:256` keeps its aspect ratio, 8982528x256, before
    // the crop takes 224x224 of it.
    let data = vec![7u8; 35088];
    let img = ImageView::new(35088, 1, 1, &data).unwrap();
    let mut out = vec![0u8; 224 * 224];
    let p = Pipeline::parse("resize:256,crop:224").unwrap();
    let e = run_into(&p, img, &mut out).unwrap_err();
    assert!(
        matches!(&e, AugmentError::Resize { reason, .. } if reason.contains("8982528x256")),
        "{e}"
    );
    // Fused with a centre crop, the resize makes only the crop: still fine.
    let p = Pipeline::parse("resize:256,center:224").unwrap();
    run_into(&p, img, &mut out).unwrap();
    assert!(out.iter().all(|&v| v == 7));
}

#[test]
fn identity_copies_and_flip_twice_is_identity() {
    let (w, h) = (13, 7);
    let data = gradient(w, h);
    let img = ImageView::new(w, h, 3, &data).unwrap();
    assert_eq!(run("none", img, 0), data);
    assert_eq!(run("flip:p=1,flip:p=1", img, 0), data);
    let once = run("flip:p=1", img, 0);
    assert_ne!(once, data);
    // Row 0, first pixel is the old last pixel.
    assert_eq!(once[..3], data[(w - 1) * 3..w * 3]);
    assert_eq!(run("flip:p=0", img, 0), data);
}

#[test]
fn constant_images_stay_constant() {
    let data = vec![123u8; 97 * 61 * 3];
    let img = ImageView::new(97, 61, 3, &data).unwrap();
    for spec in [
        "resize:30",
        "resize:200x150",
        "rrc:40",
        "resize:40,center:32",
        "rrc:13x29,flip",
    ] {
        for seed in 0..20 {
            assert!(
                run(spec, img, seed).iter().all(|&v| v == 123),
                "{spec} seed {seed}"
            );
        }
    }
}

#[test]
fn same_seed_same_output_different_seeds_differ() {
    let (w, h) = (64, 48);
    let data = gradient(w, h);
    let img = ImageView::new(w, h, 3, &data).unwrap();
    let spec = "rrc:32,flip,jitter:b=0.4:c=0.4:s=0.4:h=0.1,erase";
    let a = run(spec, img, 5);
    assert_eq!(a, run(spec, img, 5));
    let distinct: std::collections::HashSet<Vec<u8>> = (0..10).map(|s| run(spec, img, s)).collect();
    assert!(distinct.len() >= 9, "{}", distinct.len());
}

#[test]
fn scratch_reuse_does_not_change_results() {
    let p = Pipeline::parse("resize:40,center:32,flip,jitter:0.3").unwrap();
    let mut scratch = Scratch::default();
    for (i, (w, h)) in [(80, 60), (33, 90), (200, 150), (40, 40)]
        .into_iter()
        .enumerate()
    {
        let data = gradient(w, h);
        let img = ImageView::new(w, h, 3, &data).unwrap();
        let mut out = vec![0u8; 32 * 32 * 3];
        let mut fresh = out.clone();
        p.run_image(
            img,
            &mut SampleRng::new(1, 2, i as u64),
            &mut scratch,
            &mut out,
        )
        .unwrap();
        p.run_image(
            img,
            &mut SampleRng::new(1, 2, i as u64),
            &mut Scratch::default(),
            &mut fresh,
        )
        .unwrap();
        assert_eq!(out, fresh);
    }
}

#[test]
fn fused_resize_center_matches_separate_steps() {
    // A no-op step between them stops the fusion, so the two runs take different
    // paths; the soft crop box makes them agree exactly.
    for (w, h) in [(123, 77), (77, 123), (500, 375), (41, 41)] {
        let data = gradient(w, h);
        let img = ImageView::new(w, h, 3, &data).unwrap();
        let fused = run("resize:50,center:40x30", img, 0);
        let split = run("resize:50,gray:p=0,center:40x30", img, 0);
        assert!(
            max_diff(&fused, &split) <= 1,
            "{w}x{h}: {}",
            max_diff(&fused, &split)
        );
    }
}

#[test]
fn rrc_is_crop_then_resize() {
    // With scale and ratio pinned so the box is the whole image, rrc equals resize.
    let (w, h) = (60, 60);
    let data = gradient(w, h);
    let img = ImageView::new(w, h, 3, &data).unwrap();
    assert_eq!(
        run("rrc:30:scale=1-1:ratio=1-1", img, 3),
        run("resize:30x30", img, 0)
    );
}

#[test]
fn one_and_three_channel_paths() {
    let (w, h) = (40, 30);
    let data = gradient(w, h);
    let gray: Vec<u8> = data
        .chunks(3)
        .map(|p| stoker_augment::decode::luma(p[0], p[1], p[2]))
        .collect();
    let img1 = ImageView::new(w, h, 1, &gray).unwrap();
    let out = run("rrc:16,flip,jitter:0.4:h=0.2,gray,erase:p=1", img1, 9);
    assert_eq!(out.len(), 16 * 16);
    // gray keeps 3 channels, all equal.
    let img3 = ImageView::new(w, h, 3, &data).unwrap();
    let g3 = run("gray", img3, 0);
    assert!(g3.chunks(3).zip(&gray).all(|(p, &v)| p == [v, v, v]));

    let jpg = rgb_jpeg(w, h);
    let p = Pipeline::parse("resize:20").unwrap();
    let mut scratch = Scratch::default();
    let mut o1 = vec![0u8; 26 * 20];
    let mut o3 = vec![0u8; 26 * 20 * 3];
    let mut rng = SampleRng::from_seed(0);
    p.run_encoded(&jpg, 1, &mut rng, &mut scratch, &mut o1)
        .unwrap();
    p.run_encoded(&jpg, 3, &mut rng, &mut scratch, &mut o3)
        .unwrap();
    let l: Vec<u8> = o3
        .chunks(3)
        .map(|p| stoker_augment::decode::luma(p[0], p[1], p[2]))
        .collect();
    assert!(max_diff(&o1, &l) <= 2, "{}", max_diff(&o1, &l));
}

#[test]
fn random_crop_with_padding_stays_in_the_padded_image() {
    // A white image: every output pixel is either white (image) or black (padding),
    // and a 32 crop of a 32 image padded by 4 is shifted by at most 4.
    let data = vec![255u8; 32 * 32 * 3];
    let img = ImageView::new(32, 32, 3, &data).unwrap();
    for seed in 0..50 {
        let out = run("crop:32:pad=4", img, seed);
        assert!(out.iter().all(|&v| v == 0 || v == 255));
        let white_rows = out.chunks(32 * 3).filter(|r| r.contains(&255)).count();
        assert!(white_rows >= 28);
    }
}

#[test]
fn cutout_and_erasing_zero_a_box() {
    let data = vec![200u8; 20 * 20 * 3];
    let img = ImageView::new(20, 20, 3, &data).unwrap();
    let out = run("cutout:6", img, 1);
    let zeros = out.iter().filter(|&&v| v == 0).count() / 3;
    assert!((1..=36).contains(&zeros), "{zeros}");
    let out = run("erase:p=1", img, 2);
    assert!(out.contains(&0));
    assert_eq!(run("erase:p=0", img, 2), data);
}

#[test]
fn end_to_end_from_jpeg() {
    let jpg = rgb_jpeg(300, 200);
    let p = Pipeline::parse("rrc:64,flip").unwrap();
    let mut scratch = Scratch::default();
    let mut a = vec![0u8; 64 * 64 * 3];
    let mut b = a.clone();
    p.run_encoded(&jpg, 3, &mut SampleRng::new(1, 0, 0), &mut scratch, &mut a)
        .unwrap();
    p.run_encoded(&jpg, 3, &mut SampleRng::new(1, 0, 0), &mut scratch, &mut b)
        .unwrap();
    assert_eq!(a, b);
    p.run_encoded(&jpg, 3, &mut SampleRng::new(1, 0, 1), &mut scratch, &mut b)
        .unwrap();
    assert_ne!(a, b);
}

/// What a decoded cache relies on: `run_encoded_keep` writes what `run_encoded` writes,
/// and `run_image` on the kept image with the same seed writes it again; a sample that
/// libjpeg-turbo decoded only in part is not kept.
#[test]
fn kept_decode_transforms_to_the_same_bytes() {
    let jpg = rgb_jpeg(300, 200);
    let pixels = gradient(300, 200);
    let png = png(&pixels, 300, 200, image::ExtendedColorType::Rgb8);
    for (bytes, spec, out_len) in [
        (&jpg, "crop:64:pad=4,flip", 64 * 64 * 3),
        (&png, "crop:64:pad=4,flip", 64 * 64 * 3),
        (&png, "rrc:64,flip", 64 * 64 * 3),
        (&jpg, "rrc:64,flip", 64 * 64 * 3),
        (&jpg, "resize:80,center:64", 64 * 64 * 3),
    ] {
        let p = Pipeline::parse(spec).unwrap();
        let mut scratch = Scratch::default();
        for index in 0..4 {
            let mut plain = vec![0u8; out_len];
            let mut kept_out = vec![0u8; out_len];
            let mut again = vec![0u8; out_len];
            let rng = || SampleRng::new(7, 1, index);
            p.run_encoded(bytes, 3, &mut rng(), &mut scratch, &mut plain)
                .unwrap();
            let mut keep = stoker_augment::Image::default();
            let kept = p
                .run_encoded_keep(bytes, 3, &mut rng(), &mut scratch, &mut kept_out, &mut keep)
                .unwrap();
            assert_eq!(plain, kept_out, "{spec}");
            let window = stoker_augment::TURBO
                && std::ptr::eq(bytes, &jpg)
                && (spec.starts_with("rrc") || spec.starts_with("resize"));
            assert_eq!(kept, !window, "{spec}");
            if kept {
                assert_eq!((keep.width, keep.height, keep.channels), (300, 200, 3));
                p.run_image(keep.view(), &mut rng(), &mut scratch, &mut again)
                    .unwrap();
                assert_eq!(plain, again, "{spec}");
            } else {
                assert!(keep.data.is_empty(), "{spec}");
            }
        }
    }
}

proptest! {
    #[test]
    fn rrc_boxes_stay_inside(w in 1usize..2000, h in 1usize..2000, seed: u64,
                             lo in 0.01f64..1.0, span in 0.0f64..1.0) {
        let hi = (lo + span).min(1.0);
        let mut rng = SampleRng::from_seed(seed);
        let r = rrc_box(&mut rng, w, h, (lo, hi), (0.75, 4.0 / 3.0));
        prop_assert!(r.width >= 1 && r.height >= 1);
        prop_assert!(r.left + r.width <= w && r.top + r.height <= h);
    }

    #[test]
    fn any_small_image_runs(w in 1usize..40, h in 1usize..40, c in prop::sample::select(vec![1usize, 3]),
                            seed: u64) {
        let data: Vec<u8> = (0..w * h * c).map(|i| (i * 7) as u8).collect();
        let img = ImageView::new(w, h, c, &data).unwrap();
        for spec in ["rrc:8,flip", "resize:9,center:8", "center:50x3", "crop:8:pad=2,jitter:0.5:h=0.5,gray:p=0.5,erase:p=1,cutout:5",
                     "randaugment:n=4:m=30,trivialaugment,autoaugment:policy=svhn", "blur:31:sigma=0.5-9,sharpness:3,equalize,autocontrast",
                     "rotate:33:fill=9,affine:deg=-20:tx=3.5:ty=-60:shear=70,posterize:1,solarize:0,contrast:2,color:3"] {
            let p = Pipeline::parse(spec).unwrap();
            let (ow, oh) = p.output_size(w, h);
            let mut out = vec![0u8; ow * oh * c];
            p.run_image(img, &mut SampleRng::from_seed(seed), &mut Scratch::default(), &mut out).unwrap();
        }
    }
}

#[test]
fn pipeline_and_scratch_can_cross_threads() {
    fn send_sync<T: Clone + Send + Sync + std::fmt::Debug>() {}
    fn send<T: Send + Default>() {}
    send_sync::<Pipeline>();
    send::<Scratch>();
}

#[test]
fn policies_are_deterministic_per_sample_and_vary_between_samples() {
    let (w, h) = (40, 30);
    let img = gradient(w, h);
    let view = ImageView::new(w, h, 3, &img).unwrap();
    for spec in [
        "randaugment",
        "randaugment:n=3:m=15:fill=128",
        "trivialaugment",
        "autoaugment",
        "autoaugment:policy=cifar10",
        "blur:5:sigma=0.1-2",
    ] {
        let p = Pipeline::parse(spec).unwrap();
        let run = |i: u64, scratch: &mut Scratch| {
            let mut out = vec![0u8; img.len()];
            p.run_image(view, &mut SampleRng::new(5, 1, i), scratch, &mut out)
                .unwrap();
            out
        };
        let mut scratch = Scratch::default();
        let first: Vec<Vec<u8>> = (0..40).map(|i| run(i, &mut scratch)).collect();
        // A used scratch gives the same bytes as a fresh one.
        for (i, want) in first.iter().enumerate() {
            assert_eq!(
                &run(i as u64, &mut Scratch::default()),
                want,
                "{spec} sample {i}"
            );
        }
        let distinct: std::collections::HashSet<&Vec<u8>> = first.iter().collect();
        assert!(
            distinct.len() > 5,
            "{spec}: only {} distinct outputs",
            distinct.len()
        );
    }
}

#[test]
fn new_ops_compose_with_size_changing_steps() {
    // The warps and the blur sit between resamples and crops: every buffer location.
    let (w, h) = (64, 48);
    let jpg = rgb_jpeg(w, h);
    for spec in [
        "rotate:30,rrc:16",
        "rrc:32,rotate:30,center:16,blur:3",
        "resize:20,randaugment:n=3,crop:16:pad=2,sharpness:2",
        "trivialaugment,resize:16x12",
    ] {
        let p = Pipeline::parse(spec).unwrap();
        let (ow, oh) = p.output_size(w, h);
        let mut out = vec![0u8; ow * oh * 3];
        let mut scratch = Scratch::default();
        p.run_encoded(
            &jpg,
            3,
            &mut SampleRng::new(3, 0, 0),
            &mut scratch,
            &mut out,
        )
        .unwrap();
        let mut again = vec![0u8; ow * oh * 3];
        p.run_encoded(
            &jpg,
            3,
            &mut SampleRng::new(3, 0, 0),
            &mut scratch,
            &mut again,
        )
        .unwrap();
        assert_eq!(out, again, "{spec}");
    }
}

#[test]
fn rotate_fills_the_uncovered_corners() {
    let (w, h) = (20, 20);
    let img = vec![200u8; w * h * 3];
    let view = ImageView::new(w, h, 3, &img).unwrap();
    let p = Pipeline::parse("rotate:45:fill=7").unwrap();
    let mut out = vec![0u8; img.len()];
    p.run_image(
        view,
        &mut SampleRng::from_seed(0),
        &mut Scratch::default(),
        &mut out,
    )
    .unwrap();
    assert_eq!(
        &out[..3],
        &[7, 7, 7],
        "a corner is outside the rotated image"
    );
    let c = (10 * w + 10) * 3;
    assert_eq!(&out[c..c + 3], &[200, 200, 200], "the centre stays");
}
