//! The `turbo` feature: libjpeg-turbo window / DCT-scaled decode against the
//! zune-jpeg full-decode path (tolerance, determinism, fallbacks, bad input).
#![cfg(stoker_turbo)]

use crate::common;

use common::{max_diff, mean_diff};
use image::ExtendedColorType;
use stoker_augment::transform::crop::rrc_box;
use stoker_augment::transform::resize::Rect;
use stoker_augment::turbo::{scale_denom, Header, TurboDecoder};
use stoker_augment::{decode, AugmentError, Image, Pipeline, SampleRng, Scratch, Transform};

/// The stated tolerance of the turbo path against full decode + crop + resize: mean
/// absolute difference per image, and the largest single difference. Unscaled
/// windows differ by ~0.02 levels (the two IDCTs); DCT-scaled ones by ~1-2 on these
/// grainy test images (a scaled IDCT is a different low-pass than bilinear), less on
/// photographs (augment/README.md, "The libjpeg-turbo path: decode only the crop
/// window").
const MEAN_TOL: f64 = 3.0;
const MAX_TOL: u8 = 24;

// Fixtures written by PIL (libjpeg-turbo's encoder) from synthetic textures (waves,
// checks and Gaussian grain; no third-party pictures): kinds the `image` crate's
// encoder cannot write (progressive, 4:2:2, 4:4:4, CMYK).
const PROGRESSIVE: &[u8] = include_bytes!("data/turbo_progressive_420.jpg");
const S444: &[u8] = include_bytes!("data/turbo_444.jpg");
const S422: &[u8] = include_bytes!("data/turbo_422.jpg");
const GRAY: &[u8] = include_bytes!("data/turbo_gray.jpg");
const CMYK: &[u8] = include_bytes!("data/turbo_cmyk.jpg");

/// A photo-like RGB image: waves, hard edges and grain (a cheap hash), so that JPEG
/// has real work and decoders' differences show.
fn textured(w: usize, h: usize, seed: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            for c in 0..3u64 {
                let (fx, fy) = (x as f64, y as f64);
                let wave = 50.0 * (fx / (7.0 + 3.0 * c as f64) + fy / (11.0 + c as f64)).sin();
                let edge = if (x / (20 + 5 * c as usize) + y / 30) % 2 == 0 {
                    25.0
                } else {
                    0.0
                };
                let mut z = (x as u64 * 0x9E37_79B9 + y as u64 * 0x85EB_CA6B + c + seed)
                    .wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
                z ^= z >> 29;
                let grain = (z % 25) as f64 - 12.0;
                v.push((110.0 + wave + edge + grain).clamp(0.0, 255.0) as u8);
            }
        }
    }
    v
}

fn textured_jpeg(w: usize, h: usize, seed: u64) -> Vec<u8> {
    common::jpeg(&textured(w, h, seed), w, h, ExtendedColorType::Rgb8)
}

fn run(p: &Pipeline, bytes: &[u8], c: usize, rng: &mut SampleRng, turbo: bool) -> Vec<u8> {
    let (w, h) = decode::probe(bytes).unwrap();
    let (ow, oh) = p.output_size(w, h);
    let mut out = vec![0u8; ow * oh * c];
    let mut scratch = Scratch::default();
    scratch.set_turbo(turbo);
    p.run_encoded(bytes, c, rng, &mut scratch, &mut out)
        .unwrap();
    out
}

#[test]
fn rrc_window_is_close_to_full_decode() {
    let photo = textured_jpeg(500, 375, 1);
    let large = textured_jpeg(1600, 1200, 2);
    let cases: [(&str, &[u8], &str); 7] = [
        ("photo", &photo, "rrc:224,flip"),
        ("photo", &photo, "rrc:64"),
        ("large", &large, "rrc:224,flip"),
        ("large", &large, "rrc:32:scale=0.3-1"),
        ("progressive", PROGRESSIVE, "rrc:96x80,flip"),
        ("444", S444, "rrc:100"),
        ("422", S422, "rrc:80,flip"),
    ];
    let mut scaled = [0usize; 4];
    for (name, bytes, spec) in cases {
        let p = Pipeline::parse(spec).unwrap();
        let Transform::RandomResizedCrop {
            width,
            height,
            scale,
            ratio,
        } = p.transforms()[0]
        else {
            unreachable!()
        };
        let (w, h) = decode::probe(bytes).unwrap();
        let (mut worst_mean, mut worst_max) = (0.0f64, 0u8);
        for seed in 0..40 {
            for c in [3, 1] {
                let mut ra = SampleRng::new(seed, 0, 7);
                let mut rb = ra.clone();
                let a = run(&p, bytes, c, &mut ra, true);
                let b = run(&p, bytes, c, &mut rb, false);
                // Both paths leave the generator in the same state.
                assert_eq!(ra.next_u64(), rb.next_u64(), "{name} {spec} seed {seed}");
                let (m, x) = (mean_diff(&a, &b), max_diff(&a, &b));
                assert!(
                    m < MEAN_TOL && x <= MAX_TOL,
                    "{name} {spec} seed {seed} c {c}: mean {m:.3}, max {x}"
                );
                (worst_mean, worst_max) = (worst_mean.max(m), worst_max.max(x));
            }
            let r = rrc_box(&mut SampleRng::new(seed, 0, 7), w, h, scale, ratio);
            scaled[scale_denom(r, width, height).trailing_zeros() as usize] += 1;
        }
        println!("{name} {spec}: worst mean {worst_mean:.3}, worst max {worst_max}");
    }
    // Every scale was exercised.
    assert!(scaled.iter().all(|&n| n > 0), "{scaled:?}");
}

#[test]
fn gray_jpeg_window_is_close_to_full_decode() {
    let p = Pipeline::parse("rrc:64,flip").unwrap();
    for seed in 0..20 {
        for c in [1, 3] {
            let a = run(&p, GRAY, c, &mut SampleRng::new(seed, 1, 2), true);
            let b = run(&p, GRAY, c, &mut SampleRng::new(seed, 1, 2), false);
            let (m, x) = (mean_diff(&a, &b), max_diff(&a, &b));
            assert!(m < MEAN_TOL && x <= MAX_TOL, "seed {seed}: {m:.3} {x}");
        }
    }
}

#[test]
fn turbo_path_is_deterministic() {
    let photo = textured_jpeg(640, 480, 3);
    let p = Pipeline::parse("rrc:112,flip,jitter:0.3").unwrap();
    let mut shared = Scratch::default();
    for seed in 0..10 {
        let a = run(&p, &photo, 3, &mut SampleRng::new(seed, 0, 0), true);
        let mut b = vec![0u8; a.len()];
        p.run_encoded(
            &photo,
            3,
            &mut SampleRng::new(seed, 0, 0),
            &mut shared,
            &mut b,
        )
        .unwrap();
        assert_eq!(a, b, "seed {seed}");
    }
    // The same on another thread (its own libjpeg decoder).
    let on_thread = std::thread::scope(|s| {
        s.spawn(|| run(&p, &photo, 3, &mut SampleRng::new(3, 0, 0), true))
            .join()
            .unwrap()
    });
    assert_eq!(
        on_thread,
        run(&p, &photo, 3, &mut SampleRng::new(3, 0, 0), true)
    );
}

#[test]
fn plain_decode_is_close_to_zune() {
    let photo = textured_jpeg(500, 375, 4);
    for bytes in [&photo[..], PROGRESSIVE, S444, S422, GRAY] {
        for c in [3, 1] {
            let (mut a, mut b) = (Image::default(), Image::default());
            decode::decode_into(bytes, c, &mut a).unwrap();
            decode::decode_into_zune(bytes, c, &mut b).unwrap();
            assert_eq!(
                (a.width, a.height, a.channels),
                (b.width, b.height, b.channels)
            );
            let (m, x) = (mean_diff(&a.data, &b.data), max_diff(&a.data, &b.data));
            assert!(m < MEAN_TOL && x <= MAX_TOL, "mean {m:.3} max {x}");
        }
    }
}

#[test]
fn cmyk_falls_back_to_zune() {
    let mut d = TurboDecoder::new().unwrap();
    assert!(matches!(d.header(CMYK), Ok(Header::Unsupported)));
    let p = Pipeline::parse("rrc:32,flip").unwrap();
    for seed in 0..5 {
        let a = run(&p, CMYK, 3, &mut SampleRng::new(seed, 0, 0), true);
        let b = run(&p, CMYK, 3, &mut SampleRng::new(seed, 0, 0), false);
        assert_eq!(a, b);
    }
    let (mut a, mut b) = (Image::default(), Image::default());
    decode::decode_into(CMYK, 3, &mut a).unwrap();
    decode::decode_into_zune(CMYK, 3, &mut b).unwrap();
    assert_eq!(a, b);
}

#[test]
fn downscaling_keeps_antialiasing() {
    // One-pixel stripes average to mid-grey; without antialiasing (or with a scaled
    // decode that point-samples) the output would alias into strong stripes.
    let (w, h) = (512, 384);
    let stripes: Vec<u8> = (0..w * h)
        .flat_map(|i| [if i % 2 == 0 { 40 } else { 216 }; 3])
        .collect();
    let bytes = common::jpeg(&stripes, w, h, ExtendedColorType::Rgb8);
    let p = Pipeline::parse("rrc:32:scale=0.9-1").unwrap();
    for turbo in [true, false] {
        for seed in 0..5 {
            let out = run(&p, &bytes, 3, &mut SampleRng::new(seed, 0, 0), turbo);
            let mean = out.iter().map(|&v| v as f64).sum::<f64>() / out.len() as f64;
            let dev = out
                .iter()
                .map(|&v| (v as f64 - mean).abs())
                .fold(0.0, f64::max);
            assert!(
                dev < 24.0,
                "turbo {turbo} seed {seed}: mean {mean:.1}, dev {dev:.1}"
            );
        }
    }
}

/// Every input: the pipeline with the feature gives an error exactly when it gives
/// one without, and nothing panics or aborts, with one exception: a scan cut short
/// before an end marker (a cut file with the marker put back) is an error from
/// libjpeg-turbo ("premature end of data segment"), while zune-jpeg pads it without
/// a word. The decoder's own API (which does not fall back) returns errors or flags
/// warnings.
fn check_bad(bytes: &[u8], p: &Pipeline, dec: &mut TurboDecoder) {
    let mut outcome = [false; 2];
    let mut short_scan = false;
    for (k, turbo) in [true, false].into_iter().enumerate() {
        let mut scratch = Scratch::default();
        scratch.set_turbo(turbo);
        let mut out = vec![0u8; 48 * 48 * 3];
        let r = p.run_encoded(
            bytes,
            3,
            &mut SampleRng::new(1, 0, 0),
            &mut scratch,
            &mut out,
        );
        outcome[k] = r.is_ok();
        let mut img = Image::default();
        let d = if turbo {
            decode::decode_into(bytes, 3, &mut img)
        } else {
            decode::decode_into_zune(bytes, 3, &mut img)
        };
        for e in [r.as_ref().err(), d.as_ref().err()].into_iter().flatten() {
            if let AugmentError::TruncatedJpeg { reason, .. } = e {
                short_scan |= turbo && reason.contains("premature end");
            }
        }
        // The window path reads the rows it keeps: a short scan below them is seen
        // only by the full decode.
        if !short_scan {
            assert_eq!(r.is_ok(), d.is_ok(), "pipeline and decode disagree");
        }
    }
    if short_scan {
        assert!(
            bytes.ends_with(&[0xff, 0xd9]),
            "only a file with an end marker can hide a short scan"
        );
    } else {
        assert_eq!(
            outcome[0],
            outcome[1],
            "verdicts differ on {} bytes",
            bytes.len()
        );
    }
    if let Ok(Header::Ready(hdr)) = dec.header(bytes) {
        let r = Rect::full(hdr.width, hdr.height);
        if hdr.width * hdr.height <= decode::DEFAULT_MAX_PIXELS {
            let mut buf = Vec::new();
            let _: Result<_, AugmentError> = hdr.decode_window(r, 2, &mut buf);
        }
    }
}

#[test]
fn bad_input_is_an_error_never_a_crash() {
    let p = Pipeline::parse("rrc:48,flip").unwrap();
    let mut dec = TurboDecoder::new().unwrap();
    let photo = textured_jpeg(200, 150, 5);
    check_bad(&[], &p, &mut dec);
    check_bad(&[0xff, 0xd8], &p, &mut dec);
    check_bad(&[0xff, 0xd8, 0xff], &p, &mut dec);
    check_bad(&[0xff, 0xd8, 0xff, 0xd9], &p, &mut dec);
    // Truncated at many points, with and without a forged end marker.
    for cut in (0..photo.len()).step_by(97) {
        check_bad(&photo[..cut], &p, &mut dec);
        let mut forged = photo[..cut].to_vec();
        forged.extend_from_slice(&[0xff, 0xd9]);
        check_bad(&forged, &p, &mut dec);
    }
    // Random bytes, alone and behind a JPEG signature.
    let mut z = 0x1234_5678_9abc_def0u64;
    let mut next = move || {
        z ^= z << 13;
        z ^= z >> 7;
        z ^= z << 17;
        z
    };
    for len in [1, 7, 100, 1000, 5000] {
        let junk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        check_bad(&junk, &p, &mut dec);
        let mut signed = vec![0xff, 0xd8, 0xff];
        signed.extend_from_slice(&junk);
        check_bad(&signed, &p, &mut dec);
        signed.extend_from_slice(&[0xff, 0xd9]);
        check_bad(&signed, &p, &mut dec);
    }
    // Corrupted bytes in a complete file: no crash (the verdicts may differ only
    // where libjpeg never reads the damage, which check_bad would flag).
    for i in 0..200 {
        let mut bad = photo.clone();
        let at = 2 + (next() as usize) % (bad.len() - 4);
        bad[at] ^= 1 << (i % 8);
        let mut scratch = Scratch::default();
        let mut out = vec![0u8; 48 * 48 * 3];
        let _ = p.run_encoded(
            &bad,
            3,
            &mut SampleRng::new(i, 0, 0),
            &mut scratch,
            &mut out,
        );
        if let Ok(Header::Ready(hdr)) = dec.header(&bad) {
            let r = Rect::full(hdr.width, hdr.height);
            let _ = hdr.decode_window(r, 1, &mut Vec::new());
        };
    }
    // The decoder still works after all that.
    let Ok(Header::Ready(hdr)) = dec.header(&photo) else {
        panic!("header")
    };
    let win = hdr
        .decode_window(Rect::full(200, 150), 1, &mut Vec::new())
        .unwrap();
    assert_eq!((win.width, win.height, win.warnings), (200, 150, false));
}

#[test]
fn truncated_file_is_flagged_by_the_decoder() {
    let photo = textured_jpeg(200, 150, 6);
    let mut dec = TurboDecoder::new().unwrap();
    let cut = &photo[..photo.len() / 2];
    let Ok(Header::Ready(hdr)) = dec.header(cut) else {
        panic!("header")
    };
    // libjpeg pads a cut file with grey and warns; the window decode reports it.
    let win = hdr
        .decode_window(Rect::full(200, 150), 1, &mut Vec::new())
        .unwrap();
    assert!(win.warnings);
    // The pipeline reports the cut file as truncated, as without the feature.
    let p = Pipeline::parse("rrc:48").unwrap();
    let mut out = vec![0u8; 48 * 48 * 3];
    let e = p
        .run_encoded(
            cut,
            3,
            &mut SampleRng::new(0, 0, 0),
            &mut Scratch::default(),
            &mut out,
        )
        .unwrap_err();
    assert!(matches!(e, AugmentError::TruncatedJpeg { .. }), "{e}");
}

#[test]
fn window_geometry() {
    let photo = textured_jpeg(500, 375, 7);
    let mut dec = TurboDecoder::new().unwrap();
    let b = Rect {
        left: 123,
        top: 45,
        width: 200,
        height: 150,
    };
    for denom in [1, 2, 4, 8] {
        let Ok(Header::Ready(hdr)) = dec.header(&photo) else {
            panic!("header")
        };
        let mut buf = Vec::new();
        let win = hdr.decode_window(b, denom, &mut buf).unwrap();
        assert_eq!(buf.len(), win.width * win.height * 3);
        // The hard box holds the scaled box and lies inside what was decoded.
        let h = win.hard;
        assert!(h.left + h.width <= win.width && h.top + h.height <= win.height);
        let s = denom as f64;
        assert!(h.width as f64 >= 200.0 / s && h.width as f64 <= 200.0 / s + 2.0);
        assert!(h.height as f64 >= 150.0 / s && h.height as f64 <= 150.0 / s + 2.0);
        assert_eq!(win.soft.is_some(), denom > 1);
        if denom == 1 {
            // Unscaled, the window holds exactly the box's pixels of a full decode.
            let mut full = Image::default();
            decode::decode_into(&photo, 3, &mut full).unwrap();
            for y in 0..b.height {
                let row = &buf[((h.top + y) * win.width + h.left) * 3..][..b.width * 3];
                let want = &full.data[((b.top + y) * 500 + b.left) * 3..][..b.width * 3];
                assert_eq!(row, want, "row {y}");
            }
        }
    }
    let Ok(Header::Ready(hdr)) = dec.header(&photo) else {
        panic!("header")
    };
    let outside = Rect {
        left: 400,
        top: 0,
        width: 101,
        height: 10,
    };
    assert!(hdr.decode_window(outside, 1, &mut Vec::new()).is_err());
}

#[test]
fn scaled_decode_is_aligned() {
    // Smooth waves (periods 48 and 40 px): the scaled path must agree best with the
    // full-decode path where it lies, not one output pixel to either side (a box
    // mapped half a pixel off would fail this).
    let (w, h) = (1200, 900);
    let mut data = Vec::with_capacity(w * h * 3);
    for y in 0..h {
        for x in 0..w {
            let v = 128.0 + 90.0 * (x as f64 * std::f64::consts::TAU / 48.0).sin();
            let u = 128.0 + 90.0 * (y as f64 * std::f64::consts::TAU / 40.0).cos();
            data.extend_from_slice(&[v as u8, u as u8, ((v + u) / 2.0) as u8]);
        }
    }
    let bytes = common::jpeg(&data, w, h, ExtendedColorType::Rgb8);
    let n = 40;
    let p = Pipeline::parse("rrc:40:scale=0.3-1").unwrap();
    for seed in 0..20 {
        let r = rrc_box(
            &mut SampleRng::new(seed, 0, 0),
            w,
            h,
            (0.3, 1.0),
            (0.75, 4.0 / 3.0),
        );
        assert!(scale_denom(r, n, n) > 1);
        let a = run(&p, &bytes, 3, &mut SampleRng::new(seed, 0, 0), true);
        let b = run(&p, &bytes, 3, &mut SampleRng::new(seed, 0, 0), false);
        // Mean abs difference of a against b moved by (dx, dy), inner pixels only.
        let moved = |dx: i64, dy: i64| {
            let (mut t, mut k) = (0.0, 0.0);
            for y in 2..n as i64 - 2 {
                for x in 2..n as i64 - 2 {
                    for c in 0..3 {
                        let i = |x: i64, y: i64| ((y * n as i64 + x) * 3 + c) as usize;
                        t += (a[i(x, y)] as f64 - b[i(x + dx, y + dy)] as f64).abs();
                        k += 1.0;
                    }
                }
            }
            t / k
        };
        let here = moved(0, 0);
        assert!(here < MEAN_TOL, "seed {seed}: {here:.3}");
        for (dx, dy) in [(-1, 0), (1, 0), (0, -1), (0, 1)] {
            let off = moved(dx, dy);
            assert!(
                off > 3.0 * here,
                "seed {seed}: {here:.3} here, {off:.3} at ({dx}, {dy})"
            );
        }
    }
}

/// `resize` and `resize` + `center` (validation pipelines) decode at reduced scale
/// when the image is at least twice the target, and stay within the tolerance of the
/// full decode.
#[test]
fn resize_and_center_use_scaled_decode_and_stay_close() {
    let photo = textured_jpeg(500, 375, 3);
    let large = textured_jpeg(1600, 1200, 4);
    let cases: [(&str, &[u8], &str, usize); 8] = [
        ("photo", &photo, "resize:256,center:224", 1),
        ("photo", &photo, "resize:128,center:112", 2),
        ("photo", &photo, "resize:64", 4),
        ("large", &large, "resize:256,center:224", 4),
        ("large", &large, "resize:32x32,flip", 8),
        ("large", &large, "resize:600,center:500,flip", 2),
        ("progressive", PROGRESSIVE, "resize:48,center:40", 0),
        ("444", S444, "resize:64x48", 0),
    ];
    for (name, bytes, spec, want_denom) in cases {
        let p = Pipeline::parse(spec).unwrap();
        let (w, h) = decode::probe(bytes).unwrap();
        let (ow, oh) = p.output_size(w, h);
        for c in [3, 1] {
            let mut out = vec![0u8; ow * oh * c];
            let mut scratch = Scratch::default();
            p.run_encoded(
                bytes,
                c,
                &mut SampleRng::new(1, 0, 0),
                &mut scratch,
                &mut out,
            )
            .unwrap();
            let (_, _, denom) = scratch.last_window().expect("the turbo path ran");
            if want_denom > 0 {
                assert_eq!(denom, want_denom, "{name} {spec}");
            }
            let full = run(&p, bytes, c, &mut SampleRng::new(1, 0, 0), false);
            let (m, x) = (mean_diff(&out, &full), max_diff(&out, &full));
            assert!(
                m < MEAN_TOL && x <= MAX_TOL,
                "{name} {spec} c {c}: mean {m:.3}, max {x}"
            );
            println!("{name} {spec} c {c}: 1/{denom}, mean {m:.3}, max {x}");
        }
    }
    // A pipeline whose first step keeps everything at full size takes the full decode.
    let p = Pipeline::parse("flip,resize:64").unwrap();
    let mut out = vec![0u8; 85 * 64 * 3];
    let mut scratch = Scratch::default();
    p.run_encoded(
        &photo,
        3,
        &mut SampleRng::new(1, 0, 0),
        &mut scratch,
        &mut out,
    )
    .unwrap();
    assert_eq!(scratch.last_window(), None);
}

/// The window path as plain steps over three-byte RGB: libjpeg's window, the
/// resampler at three channels, then the flip in place. What the pipeline's four-byte
/// (RGBX) decode, resample and packing must reproduce byte for byte.
fn rrc_flip_rgb_steps(bytes: &[u8], size: usize, seed: u64, mirror_p: f64) -> Vec<u8> {
    use fast_image_resize::Resizer;
    use stoker_augment::transform::{flip, resize};
    let mut rng = SampleRng::new(seed, 0, 0);
    let (w, h) = decode::probe(bytes).unwrap();
    let r = rrc_box(&mut rng, w, h, (0.08, 1.0), (0.75, 4.0 / 3.0));
    let mut dec = TurboDecoder::new().unwrap();
    let Ok(Header::Ready(hdr)) = dec.header(bytes) else {
        panic!("header")
    };
    let mut buf = Vec::new();
    let win = hdr
        .decode_window(r, scale_denom(r, size, size), &mut buf)
        .unwrap();
    let view = stoker_augment::ImageView::new(win.width, win.height, 3, &buf).unwrap();
    let mut out = vec![0u8; size * size * 3];
    let mut resizer = Resizer::new();
    resize::resample(&mut resizer, view, win.hard, win.soft, &mut out, size, size).unwrap();
    flip::random_hflip(&mut rng, mirror_p, &mut out, size, 3);
    out
}

#[test]
fn rgbx_window_path_equals_the_rgb_steps() {
    // Baseline 4:2:0 (the photos' layout), progressive, 4:4:4, 4:2:2 and grey; sizes
    // that upsample and downsample, at full and at reduced DCT scale.
    let photo = textured_jpeg(500, 375, 3);
    let big = textured_jpeg(1200, 900, 4);
    let cases: [(&str, &[u8]); 6] = [
        ("photo", &photo),
        ("big", &big),
        ("progressive", PROGRESSIVE),
        ("444", S444),
        ("422", S422),
        ("gray", GRAY),
    ];
    // Both of the flip's outcomes must come up, or the flip would go untested.
    let (mut mirrored, mut kept) = (0, 0);
    for (name, bytes) in cases {
        for size in [37, 224] {
            for (spec, p) in [
                (format!("rrc:{size},flip"), 0.5),
                (format!("rrc:{size}"), 0.0),
            ] {
                let pipe = Pipeline::parse(&spec).unwrap();
                for seed in 0..12 {
                    let want = rrc_flip_rgb_steps(bytes, size, seed, p);
                    let got = run(&pipe, bytes, 3, &mut SampleRng::new(seed, 0, 0), true);
                    assert!(got == want, "{name} `{spec}` seed {seed}");
                    if p > 0.0 {
                        if want == rrc_flip_rgb_steps(bytes, size, seed, 0.0) {
                            kept += 1;
                        } else {
                            mirrored += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(mirrored > 0 && kept > 0, "{mirrored} mirrored, {kept} kept");
}
