//! Transform specs: the input is the spec text (invalid UTF-8 replaced), parsed with
//! `Pipeline::parse`; a spec that parses is then run over a small image whose size,
//! channels and pixels (and the pipeline's draws) come from a hash of the input.
//!
//! Checked for every spec that parses: its canonical form (`Display`) parses back to
//! the same pipeline and prints the same again; the pipeline runs on a valid image
//! without error and gives the same bytes twice from the same seed.

use stoker_augment::{ImageView, Pipeline, SampleRng, Scratch};
use xxhash_rust::xxh3::xxh3_64;

use crate::Outcome;

/// Pipelines whose image at any step has more pixels than this are parsed but not
/// run: a spec may ask for 65536x65536, which is valid and is 12 GiB.
pub const MAX_RUN_PIXELS: usize = 1 << 20;

pub fn run(data: &[u8]) {
    let _ = exercise(data);
}

pub fn exercise(data: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(data);
    let pipeline = match Pipeline::parse(&text) {
        Ok(p) => p,
        Err(e) => return Outcome::rejected(e),
    };
    let canonical = pipeline.to_string();
    match Pipeline::parse(&canonical) {
        Ok(again) => {
            assert_eq!(
                again, pipeline,
                "{text:?} -> {canonical:?} parses differently"
            );
            assert_eq!(
                again.to_string(),
                canonical,
                "canonical form of {text:?} is unstable"
            );
        }
        Err(e) => panic!("{text:?} parses, its canonical form {canonical:?} does not: {e}"),
    }

    let seed = xxh3_64(data);
    let (w, h, c) = (
        1 + (seed % 24) as usize,
        1 + ((seed >> 8) % 24) as usize,
        1 + ((seed >> 16) % 4) as usize,
    );
    let mut size = (w, h);
    for t in pipeline.transforms() {
        size = t.output_size(size.0, size.1);
        if size.0.saturating_mul(size.1) > MAX_RUN_PIXELS {
            return Outcome::Skipped(format!("{t} makes a {}x{} image", size.0, size.1));
        }
    }
    let mut rng = SampleRng::from_seed(seed);
    let pixels: Vec<u8> = (0..w * h * c).map(|_| rng.next_u64() as u8).collect();
    let img = ImageView {
        width: w,
        height: h,
        channels: c,
        data: &pixels,
    };
    let (ow, oh) = pipeline.output_size(w, h);
    let mut scratch = Scratch::default();
    let mut outs = [vec![0u8; ow * oh * c], vec![0u8; ow * oh * c]];
    for out in &mut outs {
        let mut rng = SampleRng::new(seed, 1, 2);
        if let Err(e) = pipeline.run_image(img, &mut rng, &mut scratch, out) {
            panic!("{canonical} fails on a valid {w}x{h}x{c} image: {e}");
        }
    }
    assert!(
        outs[0] == outs[1],
        "{canonical} is not deterministic on {w}x{h}x{c}"
    );
    Outcome::Accepted
}
