//! A batch: u8 NHWC images in a pooled buffer, with labels and sample indices, and
//! the other fields of sources that have them (masks beside the images in the same
//! buffer; see [`crate::sample`]).

use std::ops::Deref;

use crate::pool::{Pool, PooledBuf};

/// Images of one batch, u8 (N, H, W, C). Dereferences to the image bytes; dropping it
/// returns the buffer to the loader's pool.
pub struct Images {
    buf: PooledBuf,
    len: usize,
    /// Where the masks lie in the buffer (`None` without masks; boxed, so that a
    /// batch stays small).
    masks: Option<Box<MaskRanges>>,
    /// Counted as held by the consumer (see [`Batch::deliver`]).
    delivered: bool,
}

/// Where a batch's masks lie in its buffer.
#[derive(Default)]
struct MaskRanges {
    /// The class maps.
    map: std::ops::Range<usize>,
    /// The instance masks.
    instances: std::ops::Range<usize>,
}

impl Images {
    pub(crate) fn new(buf: PooledBuf, len: usize) -> Self {
        // Deref slices the buffer to `len`: a longer one would panic there instead.
        debug_assert!(
            len <= buf.as_slice().len(),
            "{len} bytes in a smaller buffer"
        );
        Images {
            buf,
            len,
            masks: None,
            delivered: false,
        }
    }

    pub(crate) fn with_masks(mut self, masks: std::ops::Range<usize>) -> Self {
        self.masks.get_or_insert_default().map = masks;
        self
    }

    pub(crate) fn with_instance_masks(mut self, masks: std::ops::Range<usize>) -> Self {
        self.masks.get_or_insert_default().instances = masks;
        self
    }

    /// The masks, u8 (N, H, W), when the batch has them; they share the images'
    /// buffer.
    pub fn masks(&self) -> &[u8] {
        let r = self.masks.as_ref().map_or(0..0, |m| m.map.clone());
        &self.buf.as_slice()[r]
    }

    /// The instance masks, u8 (N, M, H, W), when the batch has them; they share the
    /// images' buffer.
    pub fn instance_masks(&self) -> &[u8] {
        let r = self.masks.as_ref().map_or(0..0, |m| m.instances.clone());
        &self.buf.as_slice()[r]
    }
}

impl Deref for Images {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf.as_slice()[..self.len]
    }
}

impl Drop for Images {
    fn drop(&mut self) {
        if self.delivered {
            self.buf.unmark_consumer();
        }
    }
}

impl std::fmt::Debug for Images {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Images({} bytes)", self.len)
    }
}

/// One batch of an epoch.
#[derive(Debug)]
pub struct Batch {
    /// u8 pixels, (N, H, W, C), row-major.
    pub images: Images,
    /// One label per sample.
    pub labels: Vec<u32>,
    /// With MixUp/CutMix on ([`crate::LoaderConfig::mix`]): float32 (N, classes)
    /// row-major, each row the weights of the labels mixed into that image.
    pub soft_labels: Option<Vec<f32>>,
    /// The source index of each sample.
    pub indices: Vec<usize>,
    /// Samples of this batch left out under `on_error = skip`.
    pub skipped: usize,
    /// The epoch this batch belongs to.
    pub epoch: u64,
    /// The batch's position in this rank's epoch, from 0.
    pub step: usize,
    /// (height, width, channels) of each image.
    pub image_shape: (usize, usize, usize),
    /// The fields beyond images and labels, for a source that has them (`None` for
    /// classification).
    pub fields: Option<Box<crate::BatchFields>>,
}

impl Batch {
    /// Marks the batch as handed to the consumer: from now on its buffer counts as
    /// the consumer's (which lets the pool see a consumer that holds everything).
    pub(crate) fn deliver(&mut self) {
        if !self.images.delivered {
            Pool::mark_consumer(&mut self.images.buf);
            self.images.delivered = true;
        }
    }

    /// Number of samples (fewer than the batch size only for the last batch, or when
    /// samples were skipped).
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether the batch holds no samples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// (N, H, W, C).
    pub fn shape(&self) -> [usize; 4] {
        let (h, w, c) = self.image_shape;
        [self.len(), h, w, c]
    }

    /// The soft label row of sample `i`, when the batch is mixed.
    pub fn soft_label(&self, i: usize) -> Option<&[f32]> {
        let soft = self.soft_labels.as_deref()?;
        let classes = soft.len() / self.len().max(1);
        soft.get(i * classes..(i + 1) * classes)
    }

    /// The masks, u8 (N, H, W) with (H, W) those of the images, when the batch
    /// carries them.
    pub fn masks(&self) -> Option<&[u8]> {
        let f = self.fields.as_ref()?;
        f.fields
            .contains(crate::Field::Mask)
            .then(|| self.images.masks())
    }

    /// The instance masks, u8 (N, M, H, W) of 0 and 1 with M the boxes' padded count
    /// (`fields.boxes.max`) and (H, W) those of the images, when the batch carries
    /// them: mask j of sample i is box j's, and those past the sample's box count are
    /// zeros.
    pub fn instance_masks(&self) -> Option<&[u8]> {
        let f = self.fields.as_ref()?;
        f.fields
            .contains(crate::Field::Masks)
            .then(|| self.images.instance_masks())
    }

    /// The instance masks of sample `i`: one per box, each H x W.
    pub fn instance_masks_of(&self, i: usize) -> Option<&[u8]> {
        let all = self.instance_masks()?;
        let f = self.fields.as_ref()?;
        let (h, w, _) = self.image_shape;
        let (m, n) = (f.boxes.max, *f.boxes.count.get(i)? as usize);
        all.get(i * m * h * w..(i * m + n) * h * w)
    }

    /// The pixels of sample `i`.
    pub fn image(&self, i: usize) -> &[u8] {
        let (h, w, c) = self.image_shape;
        let n = h * w * c;
        &self.images[i * n..(i + 1) * n]
    }
}
