//! Large images take turns: one at a time in the process, so that peak memory is set
//! by the largest image and not by how often large ones coincide across workers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::decode::{self, Format};

/// Images of more than this many pixels (16 megapixels) are decoded and transformed
/// one at a time in the process: the rest of a data set goes on in parallel, but two
/// workers never hold two such images (each up to three buffers of its decoded size)
/// at once, so peak memory is set by the largest image, not by how often large ones
/// happen to coincide (the soak benchmark's peak crept up over 50 epochs without it).
pub const LARGE_PIXELS: usize = 1 << 24;

/// A JPEG this small cannot hold [`LARGE_PIXELS`] pixels in practice (every 8x8 block
/// costs at least a few bits), so its markers are not scanned at all.
const LARGE_JPEG_BYTES: usize = 64 << 10;

/// The process holding the turn, 0 when it is free. A PID rather than a lock: a fork
/// copies a held lock into the child, where no thread would ever release it; a turn
/// held by another process is such an orphan, and is ignored.
static LARGE_IMAGE: AtomicU32 = AtomicU32::new(0);

/// The large-image turn, given back when dropped.
#[derive(Debug)]
pub(crate) struct Turn(&'static AtomicU32);

impl Drop for Turn {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

/// Waits for the turn kept in `cell`: `None` when it is held by a thread that is not
/// in this process (the process is a fork of the one that took it), which then never
/// ends.
fn take_turn(cell: &'static AtomicU32) -> Option<Turn> {
    let me = std::process::id();
    loop {
        match cell.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Some(Turn(cell)),
            Err(holder) if holder != me => return None,
            // Large images take tens of milliseconds: a short sleep costs nothing.
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// Holds the process's large-image turn while the sample in `bytes` is processed, when
/// its header says it is larger than [`LARGE_PIXELS`]. A header that cannot be read
/// takes no turn: the decode reports it.
pub(crate) fn large_image_turn(bytes: &[u8]) -> Option<Turn> {
    let (w, h) = match decode::sniff(bytes) {
        Ok(Format::Png) => decode::probe_limited(bytes, usize::MAX).ok()?,
        Ok(Format::Jpeg) if bytes.len() >= LARGE_JPEG_BYTES => jpeg_frame_size(bytes)?,
        _ => return None,
    };
    // A panic while the turn is held gives it back as the guard unwinds.
    if w.saturating_mul(h) > LARGE_PIXELS {
        take_turn(&LARGE_IMAGE)
    } else {
        None
    }
}

/// Width and height from a JPEG's frame header, found by walking the marker segments
/// (a few length fields: no Huffman tables are built, unlike a decoder's header read,
/// which cost about 1% of an rrc sample in a profile). `None` when no frame header
/// comes before the first scan or the data ends first; the decoder then says what is
/// wrong.
fn jpeg_frame_size(bytes: &[u8]) -> Option<(usize, usize)> {
    let mut at = 2; // past SOI
    loop {
        // A marker is 0xFF, any number of 0xFF fill bytes, then the marker code.
        if *bytes.get(at)? != 0xFF {
            return None;
        }
        while *bytes.get(at)? == 0xFF {
            at += 1;
        }
        let code = *bytes.get(at)?;
        at += 1;
        match code {
            // Markers without a segment: TEM and the restart markers.
            0x01 | 0xD0..=0xD7 => continue,
            // Start of scan or end of image before any frame header.
            0xDA | 0xD9 => return None,
            _ => {}
        }
        let len = usize::from(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]));
        // SOF0..SOF15 except DHT (C4), JPG (C8) and DAC (CC): precision, height, width.
        if matches!(code, 0xC0..=0xCF) && !matches!(code, 0xC4 | 0xC8 | 0xCC) {
            let field = |k: usize| -> Option<usize> {
                Some(usize::from(u16::from_be_bytes([
                    *bytes.get(at + k)?,
                    *bytes.get(at + k + 1)?,
                ])))
            };
            return Some((field(5)?, field(3)?));
        }
        if len < 2 {
            return None;
        }
        at += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

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
        // Whether the waiter has asked, and whether the first turn was given back: the
        // waiter must see the second when it gets the turn (no clock involved).
        let asked = Arc::new(AtomicBool::new(false));
        let released = Arc::new(AtomicBool::new(false));
        let waiter = std::thread::spawn({
            let (asked, released) = (asked.clone(), released.clone());
            move || {
                asked.store(true, Ordering::SeqCst);
                let second = large_image_turn(&png_header(8000, 6000));
                (second.is_some(), released.load(Ordering::SeqCst))
            }
        });
        while !asked.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        released.store(true, Ordering::SeqCst);
        drop(turn);
        let (got, after_release) = waiter.join().unwrap();
        assert!(got, "the second image gets the turn once it is free");
        assert!(after_release, "only one turn at a time");
        assert!(large_image_turn(&png_header(8000, 6000)).is_some());
    }

    #[test]
    fn a_turn_orphaned_by_a_fork_is_ignored() {
        // As a forked child sees a turn its parent's thread held at the fork: held by
        // another process, so it is not waited for.
        static CELL: AtomicU32 = AtomicU32::new(0);
        let turn = take_turn(&CELL).expect("free");
        assert_eq!(CELL.load(Ordering::Relaxed), std::process::id());
        drop(turn);
        assert_eq!(CELL.load(Ordering::Relaxed), 0);
        CELL.store(std::process::id() + 1, Ordering::Relaxed);
        assert!(take_turn(&CELL).is_none());
    }

    #[test]
    fn jpeg_frame_size_agrees_with_the_decoder() {
        let img = image::RgbImage::from_fn(37, 21, |x, y| image::Rgb([x as u8, y as u8, 9]));
        let mut jpeg = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut jpeg, 90)
            .encode_image(&img)
            .unwrap();
        assert_eq!(jpeg_frame_size(&jpeg), Some((37, 21)));
        assert_eq!(decode::probe(&jpeg).unwrap(), (37, 21));
        // Cut anywhere before the frame header: no size, and never a panic.
        let sof = (2..jpeg.len())
            .find(|&i| jpeg[i - 1] == 0xFF && jpeg[i] == 0xC0)
            .unwrap();
        for cut in 0..sof + 8 {
            assert_eq!(jpeg_frame_size(&jpeg[..cut]), None, "cut at {cut}");
        }
        // A scan before any frame header ends the walk.
        assert_eq!(jpeg_frame_size(&[0xFF, 0xD8, 0xFF, 0xDA, 0, 2]), None);
        // Fill bytes and a restart marker before the frame are skipped.
        let mut filled = vec![0xFF, 0xD8, 0xFF, 0xFF, 0xD0];
        filled.extend_from_slice(&jpeg[2..]);
        assert_eq!(jpeg_frame_size(&filled), Some((37, 21)));
    }
}
