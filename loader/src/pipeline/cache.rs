//! The decoded cache: each sample's decoded pixels and fields, kept after its first
//! decode so that later epochs neither read nor decode it and run only the
//! transforms, up to a byte bound, first come first kept.
//!
//! One slot per sample index, set once and never replaced or freed while the loader
//! lives, so workers share it without a lock; an atomic count of the bytes held
//! reserves room before a slot is set.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use stoker_augment::ImageView;

use crate::sample::{Annotation, MaskData};

/// One sample as decoded, before any transform.
pub(crate) struct Decoded {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub pixels: Vec<u8>,
    /// Its fields as the source read them (empty for classification).
    pub ann: Annotation,
}

impl Decoded {
    pub fn view(&self) -> ImageView<'_> {
        ImageView {
            width: self.width,
            height: self.height,
            channels: self.channels,
            data: &self.pixels,
        }
    }

    /// The bytes this entry holds, as the bound counts them.
    fn bytes(&self) -> u64 {
        let a = &self.ann;
        let mask_bytes = |m: &MaskData| match m {
            MaskData::Png(b) => b.len(),
            MaskData::Raw { data, .. } => data.len(),
        };
        // Instance masks are counted too: at M x H x W a sample they can outweigh the image.
        let mask =
            a.mask.as_ref().map_or(0, mask_bytes) + a.masks.iter().map(mask_bytes).sum::<usize>();
        let fields = a.labels.len() * 4
            + a.text.as_ref().map_or(0, String::len)
            + a.boxes.len() * 16
            + a.box_labels.len() * 4
            + mask
            + a.keypoints.len() * 4
            + a.raw.as_ref().map_or(0, Vec::len);
        (self.pixels.len() + fields + std::mem::size_of::<Decoded>()) as u64
    }
}

/// What [`DecodedCache::keep`] did with a sample.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Keep {
    Done,
    /// It did not fit in what is left of the bound.
    NoRoom,
    /// Another worker kept the same sample first (the same pixels).
    Already,
}

pub(crate) struct DecodedCache {
    slots: Box<[OnceLock<Arc<Decoded>>]>,
    capacity: u64,
    held: AtomicU64,
}

impl DecodedCache {
    /// A cache for samples `0..len`, holding at most `capacity` bytes.
    pub fn new(len: usize, capacity: u64) -> DecodedCache {
        DecodedCache {
            slots: (0..len).map(|_| OnceLock::new()).collect(),
            capacity,
            held: AtomicU64::new(0),
        }
    }

    pub fn get(&self, index: usize) -> Option<Arc<Decoded>> {
        self.slots.get(index)?.get().cloned()
    }

    /// Whether any room is left (a sample decoded now might be kept).
    pub fn has_room(&self) -> bool {
        self.held.load(Ordering::Relaxed) < self.capacity
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The most bytes held.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Keeps `d` as sample `index` if it fits in what is left of the bound.
    pub fn keep(&self, index: usize, d: Decoded) -> Keep {
        let Some(slot) = self.slots.get(index) else {
            return Keep::NoRoom;
        };
        if slot.get().is_some() {
            return Keep::Already;
        }
        let cost = d.bytes();
        let reserved = self
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |h| {
                h.checked_add(cost).filter(|&n| n <= self.capacity)
            });
        if reserved.is_err() {
            return Keep::NoRoom;
        }
        match slot.set(Arc::new(d)) {
            Ok(()) => Keep::Done,
            Err(_) => {
                self.held.fetch_sub(cost, Ordering::AcqRel);
                Keep::Already
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(n: usize) -> Decoded {
        Decoded {
            width: n,
            height: 1,
            channels: 1,
            pixels: vec![7; n],
            ann: Annotation::default(),
        }
    }

    #[test]
    fn keeps_what_fits_first_come_first_kept() {
        let each = image(100).bytes();
        let cache = DecodedCache::new(4, 2 * each + 10);
        assert_eq!(cache.keep(0, image(100)), Keep::Done);
        assert_eq!(cache.keep(0, image(100)), Keep::Already);
        assert_eq!(cache.keep(1, image(100)), Keep::Done);
        assert_eq!(cache.held(), 2 * each);
        assert!(cache.has_room());
        // The third does not fit; a smaller one still does.
        assert_eq!(cache.keep(2, image(100)), Keep::NoRoom);
        assert_eq!(cache.keep(3, image(1)), Keep::NoRoom);
        assert_eq!(cache.held(), 2 * each);
        assert_eq!(cache.keep(9, image(1)), Keep::NoRoom, "no such sample");
        assert_eq!(cache.get(1).unwrap().pixels, vec![7; 100]);
        assert!(cache.get(2).is_none() && cache.get(9).is_none());
    }

    #[test]
    fn fields_count_in_the_bound() {
        let mut d = image(10);
        let plain = d.bytes();
        d.ann.boxes = vec![[0.0; 4]; 3];
        d.ann.mask = Some(MaskData::Raw {
            width: 10,
            height: 1,
            data: vec![1; 10],
        });
        assert_eq!(d.bytes(), plain + 48 + 10);
    }
}
