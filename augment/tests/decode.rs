//! Decoding JPEG and PNG end to end, and refusing bad bytes without panicking.

use crate::common;

use common::*;
use image::ExtendedColorType;
use stoker_augment::decode::{self, luma};
use stoker_augment::{AugmentError, Image, Pipeline, SampleRng, Scratch};

#[test]
fn jpeg_round_trips_shape_and_pixels() {
    let (w, h) = (67, 45);
    let src = gradient(w, h);
    let bytes = jpeg(&src, w, h, ExtendedColorType::Rgb8);
    assert_eq!(decode::probe(&bytes).unwrap(), (w, h));
    let img = decode::decode(&bytes, 3).unwrap();
    assert_eq!((img.width, img.height, img.channels), (w, h, 3));
    assert!(
        mean_diff(&img.data, &src) < 3.0,
        "{}",
        mean_diff(&img.data, &src)
    );

    // 1 channel is PIL's luma of the RGB decode.
    let gray = decode::decode(&bytes, 1).unwrap();
    assert_eq!((gray.width, gray.height, gray.channels), (w, h, 1));
    let want: Vec<u8> = img.data.chunks(3).map(|p| luma(p[0], p[1], p[2])).collect();
    assert_eq!(gray.data, want);
}

#[test]
fn lossless_webp_round_trips_exactly_and_cut_files_are_errors() {
    let (w, h) = (29, 13);
    let src = gradient(w, h);
    let mut bytes = Vec::new();
    image::codecs::webp::WebPEncoder::new_lossless(&mut bytes)
        .encode(&src, w as u32, h as u32, ExtendedColorType::Rgb8)
        .unwrap();
    assert_eq!(decode::probe(&bytes).unwrap(), (w, h));
    let img = decode::decode(&bytes, 3).unwrap();
    assert_eq!((img.width, img.height), (w, h));
    assert_eq!(img.data, src);
    // Through a pipeline too (the loader's path).
    let p = Pipeline::parse("center:8").unwrap();
    let mut out = vec![0u8; 8 * 8 * 3];
    p.run_encoded(
        &bytes,
        3,
        &mut SampleRng::new(0, 0, 0),
        &mut Scratch::default(),
        &mut out,
    )
    .unwrap();
    let cut = &bytes[..bytes.len() - 10];
    let e = decode::decode(cut, 3).unwrap_err();
    assert!(matches!(e, AugmentError::WebP { .. }), "{e}");
}

#[test]
fn png_round_trips_exactly() {
    let (w, h) = (31, 17);
    let src = gradient(w, h);
    let bytes = png(&src, w, h, ExtendedColorType::Rgb8);
    assert_eq!(decode::probe(&bytes).unwrap(), (w, h));
    let img = decode::decode(&bytes, 3).unwrap();
    assert_eq!(img.data, src);
    let gray = decode::decode(&bytes, 1).unwrap();
    let want: Vec<u8> = src.chunks(3).map(|p| luma(p[0], p[1], p[2])).collect();
    assert_eq!(gray.data, want);
}

#[test]
fn gray_sources_grow_to_three_channels() {
    let (w, h) = (20, 10);
    let g: Vec<u8> = (0..w * h).map(|i| (i * 255 / (w * h)) as u8).collect();
    let p = png(&g, w, h, ExtendedColorType::L8);
    let rgb = decode::decode(&p, 3).unwrap();
    assert!(rgb.data.chunks(3).zip(&g).all(|(px, &v)| px == [v, v, v]));
    assert_eq!(decode::decode(&p, 1).unwrap().data, g);

    let j = jpeg(&g, w, h, ExtendedColorType::L8);
    let rgb = decode::decode(&j, 3).unwrap();
    let one = decode::decode(&j, 1).unwrap();
    assert_eq!(one.data.len(), w * h);
    assert!(rgb
        .data
        .chunks(3)
        .zip(&one.data)
        .all(|(px, &v)| px == [v, v, v]));
    assert!(mean_diff(&one.data, &g) < 3.0);
}

#[test]
fn rgba_and_16_bit_pngs_become_8_bit_rgb() {
    let (w, h) = (5, 4);
    let rgba: Vec<u8> = (0..w * h * 4).map(|i| (i * 3) as u8).collect();
    let img = decode::decode(&png(&rgba, w, h, ExtendedColorType::Rgba8), 3).unwrap();
    let want: Vec<u8> = rgba.chunks(4).flat_map(|p| [p[0], p[1], p[2]]).collect();
    assert_eq!(img.data, want);

    // PNG stores 16-bit samples big-endian; the encoder takes native-endian u16.
    let vals: Vec<u16> = (0..w * h * 3).map(|i| (i * 3001) as u16).collect();
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_ne_bytes()).collect();
    let img = decode::decode(&png(&bytes, w, h, ExtendedColorType::Rgb16), 3).unwrap();
    let want: Vec<u8> = vals.iter().map(|v| (v >> 8) as u8).collect();
    assert_eq!(img.data, want);
}

#[test]
fn decode_into_reuses_the_buffer() {
    let big = rgb_jpeg(64, 64);
    let small = rgb_jpeg(16, 8);
    let mut img = Image::default();
    decode::decode_into(&big, 3, &mut img).unwrap();
    let ptr = img.data.as_ptr();
    let cap = img.data.capacity();
    decode::decode_into(&small, 3, &mut img).unwrap();
    assert_eq!((img.width, img.height, img.data.len()), (16, 8, 16 * 8 * 3));
    decode::decode_into(&big, 1, &mut img).unwrap();
    assert_eq!(img.data.len(), 64 * 64);
    assert_eq!((img.data.as_ptr(), img.data.capacity()), (ptr, cap));
}

#[test]
fn a_reused_buffer_gives_the_same_pixels_as_a_fresh_one() {
    // Found by fuzzing (benches/fuzz/regressions/decode/crash-211b749811da4ad3): a
    // damaged 24x10 JPEG that ends with EOI decodes leniently, but zune-jpeg stops
    // two rows short without an error; a reused buffer kept the last image's pixels
    // there, so the output depended on what the worker decoded before.
    // libjpeg-turbo reports the short scan ("premature end of data segment"), and the
    // default path refuses the file as truncated; zune-jpeg alone still decodes it.
    let bytes = include_bytes!("data/damaged_short_rows.jpg");
    if stoker_augment::TURBO {
        let e = decode::decode(bytes, 3).unwrap_err();
        assert!(matches!(e, AugmentError::TruncatedJpeg { .. }), "{e}");
    }
    for channels in [1, 3] {
        let mut fresh = Image::default();
        decode::decode_into_zune(bytes, channels, &mut fresh).unwrap();
        let mut reused = Image {
            width: 0,
            height: 0,
            channels: 0,
            data: vec![0xaa; 24 * 10 * 3],
        };
        decode::decode_into_zune(bytes, channels, &mut reused).unwrap();
        assert_eq!(reused, fresh, "{channels} channels");
    }
}

#[test]
fn a_jpeg_that_panics_inside_zune_jpeg_is_an_error() {
    // Found by fuzzing (benches/fuzz/regressions/decode/crash-059cacc724d8033a): on
    // this damaged JPEG zune-jpeg 0.5.15 unwraps a `None` in its AVX2 IDCT. The panic
    // is contained and reported as an error of this file.
    let bytes = include_bytes!("data/zune_idct_panic.jpg");
    let mut img = Image::default();
    let e = decode::decode_into_zune(bytes, 3, &mut img).unwrap_err();
    // The lenient retry is the one that panicked; the strict pass's reason is kept.
    assert!(matches!(e, AugmentError::Jpeg { .. }), "{e}");
    // The default path (libjpeg-turbo where the build has it) decodes it or refuses
    // it, but does not panic; and the thread can go on decoding.
    let _ = decode::decode(bytes, 3);
    let good = rgb_jpeg(16, 12);
    assert_eq!(decode::decode(&good, 3).unwrap().width, 16);
}

#[test]
fn truncated_jpeg_is_an_error_not_grey() {
    let bytes = rgb_jpeg(128, 96);
    let half = &bytes[..bytes.len() / 2];
    let e = decode::decode(half, 3).unwrap_err();
    assert!(matches!(e, AugmentError::TruncatedJpeg { .. }), "{e}");
    assert!(e.to_string().contains("truncated JPEG data"), "{e}");
    // Any cut that loses scan data is an error, however near the end.
    for frac in [0.05, 0.3, 0.7, 0.9, 0.97] {
        let cut = (bytes.len() as f64 * frac) as usize;
        assert!(decode::decode(&bytes[..cut], 3).is_err(), "cut at {cut}");
        assert!(decode::decode(&bytes[..cut], 1).is_err(), "cut at {cut}");
    }
    assert!(decode::decode(&bytes[..bytes.len() - 40], 3).is_err());
}

#[test]
fn progressive_style_garbage_after_eoi_is_fine() {
    let mut bytes = rgb_jpeg(32, 32);
    let clean = decode::decode(&bytes, 3).unwrap();
    bytes.extend_from_slice(&[0, 0, b'\n']);
    assert_eq!(decode::decode(&bytes, 3).unwrap(), clean);
}

#[test]
fn bad_inputs_say_what_is_wrong() {
    let msg = |b: &[u8]| decode::decode(b, 3).unwrap_err().to_string();
    assert_eq!(msg(b""), "empty input (0 bytes)");
    let m = msg(b"hello, this is a text file\n");
    assert!(
        m.starts_with("not a JPEG, PNG or WebP file (starts with 68 65 6c"),
        "{m}"
    );
    assert!(m.contains("hello, t"), "{m}");
    let m = msg(b"GIF89a....");
    assert!(m.contains("GIF89a"), "{m}");
    let m = msg(&[0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n', 0, 0]);
    assert!(m.contains("PNG"), "{m}");
    let e = decode::decode(&rgb_jpeg(8, 8), 2).unwrap_err();
    assert!(e.to_string().contains("2 channels"), "{e}");
}

#[test]
fn truncated_png_is_an_error() {
    let (w, h) = (40, 40);
    let bytes = png(&gradient(w, h), w, h, ExtendedColorType::Rgb8);
    for cut in [10, 30, bytes.len() / 2, bytes.len() - 5] {
        assert!(decode::decode(&bytes[..cut], 3).is_err(), "cut at {cut}");
    }
}

/// A small deterministic generator so that the fuzz cases are the same every run.
fn lcg(state: &mut u64) -> u8 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*state >> 56) as u8
}

#[test]
fn no_input_makes_it_panic() {
    let jpg = rgb_jpeg(24, 16);
    let (w, h) = (24, 16);
    let pngb = png(&gradient(w, h), w, h, ExtendedColorType::Rgb8);
    let pipe = Pipeline::parse("rrc:8,flip").unwrap();
    let mut scratch = Scratch::default();
    let mut out = vec![0u8; 8 * 8 * 3];
    let mut try_all = |b: &[u8]| {
        let _ = decode::probe(b);
        let _ = decode::decode(b, 3);
        let _ = decode::decode(b, 1);
        let mut rng = SampleRng::from_seed(0);
        let _ = pipe.run_encoded(b, 3, &mut rng, &mut scratch, &mut out);
    };
    // Every prefix of a real JPEG and PNG.
    for cut in 0..jpg.len() {
        try_all(&jpg[..cut]);
    }
    for cut in 0..pngb.len() {
        try_all(&pngb[..cut]);
    }
    let mut s = 1u64;
    for round in 0..300 {
        // Random bytes behind each signature, and corrupted real files.
        let n = 1 + (lcg(&mut s) as usize) * 4;
        let mut junk: Vec<u8> = (0..n).map(|_| lcg(&mut s)).collect();
        try_all(&junk);
        junk.splice(0..0, [0xff, 0xd8, 0xff]);
        try_all(&junk);
        junk.splice(0..3, [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n']);
        try_all(&junk);
        let mut bad = if round % 2 == 0 {
            jpg.clone()
        } else {
            pngb.clone()
        };
        for _ in 0..1 + round % 8 {
            let i = lcg(&mut s) as usize * bad.len() / 256;
            bad[i] = lcg(&mut s);
        }
        try_all(&bad);
    }
}

/// Every way a JPEG is decoded: decode (libjpeg-turbo where the build has it),
/// zune-jpeg alone, and the pipeline with a shrinking first step (libjpeg-turbo's
/// window path) with and without libjpeg-turbo.
fn every_decoder(bytes: &[u8]) -> Vec<(&'static str, Result<(), AugmentError>)> {
    let mut out = vec![
        ("decode", decode::decode(bytes, 3).map(|_| ())),
        (
            "zune",
            decode::decode_into_zune(bytes, 3, &mut Image::default()),
        ),
    ];
    for (name, turbo) in [("pipeline", true), ("pipeline without turbo", false)] {
        let p = Pipeline::parse("rrc:16").unwrap();
        let mut scratch = Scratch::default();
        scratch.set_turbo(turbo);
        let mut img = vec![0u8; 16 * 16 * 3];
        let r = p.run_encoded(
            bytes,
            3,
            &mut SampleRng::new(1, 0, 0),
            &mut scratch,
            &mut img,
        );
        out.push((name, r));
    }
    out
}

#[test]
fn a_small_jpeg_cut_by_a_few_bytes_is_an_error_for_every_decoder() {
    // Small (one row of MCUs), so that a few bytes are the end of its only scan.
    let bytes = rgb_jpeg(40, 8);
    for (name, r) in every_decoder(&bytes) {
        assert!(r.is_ok(), "{name}: the whole file decodes: {r:?}");
    }
    for cut in 1..=24 {
        let short = &bytes[..bytes.len() - cut];
        for (name, r) in every_decoder(short) {
            match r {
                Err(AugmentError::TruncatedJpeg { .. }) => {}
                other => panic!("{name}, cut by {cut} bytes: {other:?}"),
            }
        }
    }
}

#[test]
fn scan_data_cut_short_before_an_end_marker_is_an_error_with_libjpeg_turbo() {
    // A file cut inside its scan with an end marker put back after the cut: it ends
    // "cleanly", but the scan is short (libjpeg: premature end of data segment).
    let bytes = rgb_jpeg(64, 64);
    let mut patched = bytes[..bytes.len() * 2 / 3].to_vec();
    patched.extend_from_slice(&[0xFF, 0xD9]);
    if !stoker_augment::TURBO {
        println!("SKIPPED: this build has no libjpeg-turbo (zune-jpeg pads such a scan)");
        return;
    }
    for (name, r) in every_decoder(&patched) {
        if name.contains("without turbo") || name == "zune" {
            continue;
        }
        match r {
            Err(AugmentError::TruncatedJpeg { reason, .. }) => {
                assert!(reason.contains("premature end"), "{name}: {reason}")
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

#[test]
fn data_after_the_end_marker_is_not_a_cut() {
    let bytes = rgb_jpeg(40, 24);
    let clean = decode::decode(&bytes, 3).unwrap();
    // Some cameras and tools append data (a trailer, a thumbnail) after EOI.
    let mut trailed = bytes.clone();
    trailed.extend((0..300u32).map(|i| (i * 7 + 1) as u8));
    for (name, r) in every_decoder(&trailed) {
        assert!(r.is_ok(), "{name}: {r:?}");
    }
    // Such a file goes to zune-jpeg (libjpeg-turbo takes only files that end with
    // their marker), as before: the same pixels as zune-jpeg's of the clean file.
    let mut zune = Image::default();
    decode::decode_into_zune(&bytes, 3, &mut zune).unwrap();
    assert_eq!(decode::decode(&trailed, 3).unwrap(), zune);
    assert_eq!(clean.width, zune.width);
}
