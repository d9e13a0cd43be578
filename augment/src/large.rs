//! Large images take turns: one at a time in the process, so that peak memory is set
//! by the largest image and not by how often large ones coincide across workers.

use std::sync::{Mutex, MutexGuard};

use crate::decode::{self, Format};

/// Images of more than this many pixels (16 megapixels) are decoded and transformed
/// one at a time in the process: the rest of a data set goes on in parallel, but two
/// workers never hold two such images (each up to three buffers of its decoded size)
/// at once, so peak memory is set by the largest image, not by how often large ones
/// happen to coincide (the soak benchmark's peak crept up over 50 epochs without it).
pub const LARGE_PIXELS: usize = 1 << 24;

/// A JPEG this small cannot hold [`LARGE_PIXELS`] pixels in practice (every 8x8 block
/// costs at least a few bits), so its header is not read twice.
const LARGE_JPEG_BYTES: usize = 64 << 10;

static LARGE_IMAGE: Mutex<()> = Mutex::new(());

/// Holds the process's large-image turn while the sample in `bytes` is processed, when
/// its header says it is larger than [`LARGE_PIXELS`]. A header that cannot be read
/// takes no turn: the decode reports it.
pub(crate) fn large_image_turn(bytes: &[u8]) -> Option<MutexGuard<'static, ()>> {
    let may_be_large = match decode::sniff(bytes) {
        Ok(Format::Png) => true,
        Ok(Format::Jpeg) => bytes.len() >= LARGE_JPEG_BYTES,
        _ => false,
    };
    if !may_be_large {
        return None;
    }
    let (w, h) = decode::probe_limited(bytes, usize::MAX).ok()?;
    // A panic while the turn was held poisons nothing we rely on: the lock guards no data.
    (w.saturating_mul(h) > LARGE_PIXELS)
        .then(|| LARGE_IMAGE.lock().unwrap_or_else(|e| e.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_header(w: u32, h: u32) -> Vec<u8> {
        let mut v = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        v.extend_from_slice(&w.to_be_bytes());
        v.extend_from_slice(&h.to_be_bytes());
        v.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
        v
    }

    #[test]
    fn large_images_take_turns_and_others_do_not() {
        assert!(
            large_image_turn(&png_header(4000, 4000)).is_none(),
            "16 MP is not over"
        );
        assert!(large_image_turn(b"not an image").is_none());
        let turn = large_image_turn(&png_header(8000, 6000)).expect("48 MP takes a turn");
        assert!(LARGE_IMAGE.try_lock().is_err(), "only one turn at a time");
        drop(turn);
        assert!(large_image_turn(&png_header(8000, 6000)).is_some());
    }
}
