//! JPEG/PNG: probe, decode to 1 or 3 channels, then a transform pipeline, all from the
//! input's bytes. The seed of every random choice (channels, which pipeline, the
//! pipeline's draws) is a hash of the input, so each input is one reproducible case.
//!
//! Checked for every input the decoder accepts: the decoded image has the size the
//! header announced, and the same pixels when decoded into a used buffer;
//! `run_encoded` and decoding then `run_image` with the same seed
//! both succeed with the same bytes, or both fail with the same error (the loader
//! relies on both).

use std::sync::OnceLock;

use stoker_augment::{decode, Pipeline, SampleRng, Scratch};
use xxhash_rust::xxh3::xxh3_64;

use crate::Outcome;

/// Headers claiming more pixels than this are left out: the decoder's own limit is
/// far larger and decoding that much per input would make fuzzing crawl (and could
/// exhaust the fuzz target's memory limit). The claim is read from the header alone.
pub const MAX_FUZZ_PIXELS: usize = 1 << 22;

/// Pipelines whose image at some step would have more pixels than this, but not more
/// than the library's own limit, are not run: a 16384x6 image under `resize:256` is
/// 699050x256 before the crop, within the limit, and takes seconds, which is honest
/// work but slows fuzzing to a crawl (and AFL calls it a hang). Above the library's
/// limit they are run: the pipeline must refuse them, at once.
pub const MAX_RUN_PIXELS: usize = 1 << 24;

/// The pipelines an input is run through (one per input, chosen by its hash): every
/// transform appears at least once, and the usual recipes (random-resized crop; resize
/// and centre crop, which run fused; resize and random crop, which do not).
pub const PIPELINES: [&str; 5] = [
    "rrc:32,flip",
    "resize:24,center:20,jitter:0.4:h=0.1,erase:p=1",
    "crop:16:pad=4,gray:p=0.5,cutout:8",
    "resize:12x10,flip:p=1",
    "resize:256,crop:224,flip",
];

fn pipelines() -> &'static [Pipeline] {
    static PARSED: OnceLock<Vec<Pipeline>> = OnceLock::new();
    PARSED.get_or_init(|| {
        PIPELINES
            .iter()
            .map(|s| Pipeline::parse(s).unwrap_or_else(|e| panic!("built-in spec {s}: {e}")))
            .collect()
    })
}

pub fn run(data: &[u8]) {
    let _ = exercise(data);
}

pub fn exercise(data: &[u8]) -> Outcome {
    let (w, h) = match decode::probe(data) {
        Ok(size) => size,
        Err(e) => return Outcome::rejected(e),
    };
    if w.saturating_mul(h) > MAX_FUZZ_PIXELS {
        return Outcome::Skipped(format!(
            "header claims {w}x{h}, more than {MAX_FUZZ_PIXELS} pixels"
        ));
    }
    let seed = xxh3_64(data);
    let channels = if seed & 1 == 0 { 3 } else { 1 };
    let img = match decode::decode(data, channels) {
        Ok(img) => img,
        Err(e) => return Outcome::rejected(e),
    };
    assert_eq!(
        (img.width, img.height, img.channels, img.data.len()),
        (w, h, channels, w * h * channels),
        "decoded image does not match the probed size"
    );
    // Workers reuse their buffers: what a buffer held before must not show through.
    let mut reused = stoker_augment::Image {
        data: vec![0xa5; w * h * 3],
        ..Default::default()
    };
    match decode::decode_into(data, channels, &mut reused) {
        Ok(()) => assert!(
            reused == img,
            "decoding into a used buffer changes the pixels"
        ),
        Err(e) => panic!("decodes into a fresh buffer, not into a used one: {e}"),
    }

    let all = pipelines();
    let pipeline = &all[(seed >> 1) as usize % all.len()];
    let (mut sw, mut sh) = (w, h);
    let mut largest = 0usize;
    for t in pipeline.transforms() {
        (sw, sh) = t.output_size(sw, sh);
        largest = largest.max(sw.saturating_mul(sh));
    }
    if largest > MAX_RUN_PIXELS && largest <= pipeline.max_pixels() {
        return Outcome::Skipped(format!(
            "{pipeline} makes a {largest}-pixel image from {w}x{h}"
        ));
    }
    let (ow, oh) = pipeline.output_size(w, h);
    let mut scratch = Scratch::default();
    let mut from_bytes = vec![0u8; ow * oh * channels];
    let mut rng = SampleRng::from_seed(seed);
    let encoded = pipeline.run_encoded(data, channels, &mut rng, &mut scratch, &mut from_bytes);

    // With libjpeg-turbo the default path differs slightly by design; the identity
    // below is checked on the pure-Rust path, against a pure-Rust decode.
    let (reference, from_bytes, encoded) = if stoker_augment::TURBO {
        let mut zune = stoker_augment::Image::default();
        if let Err(e) = decode::decode_into_zune(data, channels, &mut zune) {
            return match encoded {
                Ok(()) => Outcome::Accepted,
                Err(_) => Outcome::rejected(e),
            };
        }
        scratch.set_turbo(false);
        let mut out = vec![0u8; from_bytes.len()];
        let mut rng = SampleRng::from_seed(seed);
        let zune_path = pipeline.run_encoded(data, channels, &mut rng, &mut scratch, &mut out);
        (zune, out, zune_path)
    } else {
        (img, from_bytes, encoded)
    };

    let mut from_image = vec![0u8; from_bytes.len()];
    let mut rng = SampleRng::from_seed(seed);
    let decoded = pipeline.run_image(reference.view(), &mut rng, &mut scratch, &mut from_image);
    let what = format!("{pipeline} on a {w}x{h}x{channels} image");
    match (encoded, decoded) {
        (Ok(()), Ok(())) => {
            assert!(
                from_bytes == from_image,
                "{what}: run_encoded and decode + run_image differ"
            );
            Outcome::Accepted
        }
        // A pipeline may refuse an image that decodes (one it would blow up, say), as
        // long as both ways refuse it alike.
        (Err(a), Err(b)) => {
            assert_eq!(
                a.to_string(),
                b.to_string(),
                "{what}: the two ways fail differently"
            );
            Outcome::rejected(a)
        }
        (Ok(()), Err(e)) => panic!("{what}: run_encoded works, run_image fails: {e}"),
        (Err(e), Ok(())) => panic!("{what}: run_image works, run_encoded fails: {e}"),
    }
}
