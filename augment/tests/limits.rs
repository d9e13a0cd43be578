//! Images larger than the decode limit are refused from their header, before any
//! pixel buffer is allocated, through every entry point.

use crate::common;

use common::*;
use stoker_augment::decode;
use stoker_augment::{AugmentError, Image, Pipeline, SampleRng, Scratch, DEFAULT_MAX_PIXELS};

fn too_large(r: Result<impl std::fmt::Debug, AugmentError>) -> String {
    match r {
        Err(e @ AugmentError::TooLarge { .. }) => e.to_string(),
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

#[test]
fn a_65000_pixel_square_header_is_refused() {
    for bytes in [jpeg_claiming(65000, 65000), png_claiming(65000, 65000)] {
        let msg = too_large(decode::probe(&bytes));
        assert!(msg.contains("65000x65000"), "{msg}");
        assert!(msg.contains(&DEFAULT_MAX_PIXELS.to_string()), "{msg}");
        let mut img = Image::default();
        too_large(decode::decode_into(&bytes, 3, &mut img));
        assert_eq!(img.data.capacity(), 0, "nothing was allocated for pixels");

        let p = Pipeline::parse("rrc:32,flip").unwrap();
        let mut scratch = Scratch::default();
        let mut out = vec![0u8; 32 * 32 * 3];
        let mut rng = SampleRng::new(0, 0, 0);
        too_large(p.run_encoded(&bytes, 3, &mut rng, &mut scratch, &mut out));
        assert!(scratch.capacity_bytes() < 1 << 20, "{scratch:?}");
    }
}

#[test]
fn the_limit_is_configurable() {
    let bytes = rgb_jpeg(40, 40); // 1,600 pixels
    let mut out = vec![0u8; 8 * 8 * 3];
    let mut scratch = Scratch::default();
    let mut rng = SampleRng::new(0, 0, 0);
    let strict = Pipeline::parse("resize:8x8")
        .unwrap()
        .with_max_pixels(1_000);
    assert_eq!(strict.max_pixels(), 1_000);
    let msg = too_large(strict.run_encoded(&bytes, 3, &mut rng, &mut scratch, &mut out));
    assert!(msg.contains("40x40") && msg.contains("1000"), "{msg}");
    let loose = strict.clone().with_max_pixels(1_600);
    loose
        .run_encoded(&bytes, 3, &mut rng, &mut scratch, &mut out)
        .expect("exactly at the limit decodes");
    assert!(decode::probe_limited(&bytes, 1_599).is_err());
    assert_eq!(decode::probe_limited(&bytes, 1_600).unwrap(), (40, 40));
}

#[test]
fn an_outliers_scratch_is_released_later() {
    let big = rgb_jpeg(2000, 1500); // 9 MB decoded
    let small = rgb_jpeg(64, 48);
    // Flip first: the whole image is decoded at full size on every build.
    let p = Pipeline::parse("flip,resize:16x16").unwrap();
    let mut out = vec![0u8; 16 * 16 * 3];
    let mut scratch = Scratch::default();
    let mut rng = SampleRng::new(0, 0, 0);
    p.run_encoded(&big, 3, &mut rng, &mut scratch, &mut out)
        .unwrap();
    let after_big = scratch.capacity_bytes();
    assert!(after_big >= 2000 * 1500 * 3, "{after_big}");
    for _ in 0..2 * stoker_augment::retain::WINDOW {
        p.run_encoded(&small, 3, &mut rng, &mut scratch, &mut out)
            .unwrap();
    }
    assert!(
        scratch.capacity_bytes() < 2 << 20,
        "still holds {} bytes after {} small images",
        scratch.capacity_bytes(),
        2 * stoker_augment::retain::WINDOW
    );
}
