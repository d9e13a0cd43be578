//! A running hash of every batch's images and labels (and its other fields, when it
//! has them), to compare runs byte for byte.

use xxhash_rust::xxh3::Xxh3;

use crate::Batch;

/// Hashes batches in order: two runs agree iff they delivered the same pixels and
/// labels in the same batches.
#[derive(Default, Clone)]
pub struct Digest {
    hasher: Xxh3,
}

impl Digest {
    /// A digest of no batches yet.
    pub fn new() -> Digest {
        Digest::default()
    }

    /// Adds a batch: its images and labels, and its soft labels and fields when it has
    /// them.
    pub fn update(&mut self, batch: &Batch) {
        self.update_parts(&batch.images, &batch.labels);
        if let Some(soft) = &batch.soft_labels {
            self.update_soft(soft);
        }
        // Classification batches have no fields: their digest is what it always was.
        if let Some(f) = &batch.fields {
            self.update_fields(f, batch.masks().unwrap_or(&[]));
            // Batches without instance masks hash as they always did.
            if let Some(m) = batch.instance_masks() {
                self.hasher.update(m);
            }
        }
    }

    /// Adds a mixed batch's soft labels (after its [`update_parts`](Self::update_parts));
    /// batches without them hash as before.
    pub fn update_soft(&mut self, soft: &[f32]) {
        for v in soft {
            self.hasher.update(&v.to_bits().to_le_bytes());
        }
    }

    /// Adds a batch's fields beyond images and labels (and its masks' bytes).
    pub fn update_fields(&mut self, f: &crate::BatchFields, masks: &[u8]) {
        let h = &mut self.hasher;
        h.update(f.fields.to_string().as_bytes());
        h.update(masks);
        for tags in &f.labels {
            h.update(&(tags.len() as u64).to_le_bytes());
            tags.iter().for_each(|t| h.update(&t.to_le_bytes()));
        }
        for bytes in f
            .text
            .iter()
            .map(String::as_bytes)
            .chain(f.raw.iter().map(Vec::as_slice))
        {
            h.update(&(bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        }
        let b = &f.boxes;
        b.count.iter().for_each(|c| h.update(&c.to_le_bytes()));
        b.boxes
            .iter()
            .flatten()
            .for_each(|v| h.update(&v.to_le_bytes()));
        b.labels.iter().for_each(|l| h.update(&l.to_le_bytes()));
        let k = &f.keypoints;
        k.count.iter().for_each(|c| h.update(&c.to_le_bytes()));
        k.points.iter().for_each(|v| h.update(&v.to_le_bytes()));
        // Arrays of user steps: name, type, shape, counts and elements.
        for (name, b) in &f.extra {
            use crate::step::ArrayData;
            h.update(name.as_bytes());
            h.update(b.array.data.dtype().as_bytes());
            b.array
                .shape
                .iter()
                .for_each(|d| h.update(&(*d as u64).to_le_bytes()));
            b.count
                .iter()
                .flatten()
                .for_each(|c| h.update(&c.to_le_bytes()));
            match &b.array.data {
                ArrayData::U8(v) => h.update(v),
                ArrayData::I32(v) => v.iter().for_each(|x| h.update(&x.to_le_bytes())),
                ArrayData::I64(v) => v.iter().for_each(|x| h.update(&x.to_le_bytes())),
                ArrayData::F32(v) => v.iter().for_each(|x| h.update(&x.to_le_bytes())),
            }
        }
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
