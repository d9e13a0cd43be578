//! A running hash of every batch's images and labels, to compare runs byte for byte.

use xxhash_rust::xxh3::Xxh3;

use crate::Batch;

/// Hashes batches in order: two runs agree iff they delivered the same pixels and
/// labels in the same batches.
#[derive(Default, Clone)]
pub struct Digest {
    hasher: Xxh3,
}

impl Digest {
    pub fn new() -> Digest {
        Digest::default()
    }

    pub fn update(&mut self, batch: &Batch) {
        self.update_parts(&batch.images, &batch.labels);
    }

    /// The same as [`Digest::update`] for a batch held as its parts (u8 NHWC images
    /// and one label per image), e.g. one handed to another language.
    pub fn update_parts(&mut self, images: &[u8], labels: &[u32]) {
        // The length first, so that batch boundaries count.
        self.hasher.update(&(labels.len() as u64).to_le_bytes());
        self.hasher.update(images);
        for l in labels {
            self.hasher.update(&l.to_le_bytes());
        }
    }

    /// The digest so far, as 32 hex digits.
    pub fn hex(&self) -> String {
        format!("{:032x}", self.hasher.digest128())
    }
}
