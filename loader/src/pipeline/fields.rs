//! The per-sample work for fields beyond image and class: after the image has been
//! decoded and transformed, carry the sample's boxes, keypoints and mask through the
//! geometry its transforms recorded, and pass the other fields along.
//!
//! A sample's masks lie in its part of the batch buffer: its class map (when the
//! batch carries `mask`), then room for `max_instances` instance masks (when it
//! carries `masks`). [`gather_instance_masks`] packs a finished batch's instance masks
//! to the batch's own instance count.

use stoker_augment::geometry::MaskScratch;
use stoker_augment::mask::decode_mask;
use stoker_augment::Geometry;

use crate::error::SampleError;
use crate::sample::{Annotation, Field, Fields, KeypointSchema, MaskData, SampleFields};

/// What a loader does with fields: fixed when it is made.
pub(crate) struct FieldPlan {
    /// The fields batches carry.
    pub fields: Fields,
    /// Classes of the source (bounds every class index).
    pub classes: usize,
    pub schema: KeypointSchema,
    pub min_box_visibility: f32,
    pub max_instances: Option<usize>,
    /// (height, width) of each mask: the images' output size, when masks are carried.
    pub mask: Option<(usize, usize)>,
    /// The instance masks: room for K per sample (the cap on boxes) and their
    /// (height, width), when they are carried.
    pub masks: Option<(usize, (usize, usize))>,
    /// The decoder's pixel limit, for mask files too.
    pub max_pixels: usize,
}

/// A worker's reusable buffers for fields.
#[derive(Default)]
pub(crate) struct FieldScratch {
    mask: MaskScratch,
    decoded: Vec<u8>,
    /// An instance mask made 0 and 1.
    binary: Vec<u8>,
}

impl FieldPlan {
    /// Bytes of one sample's masks in the batch buffer: its class map and room for its
    /// instance masks (0 without either).
    pub fn mask_bytes(&self) -> usize {
        let map = self.mask.map_or(0, |(h, w)| h * w);
        map + self.masks.map_or(0, |(k, (h, w))| k * h * w)
    }

    /// Carries `ann` through `geo` (the geometry of the image just transformed; `None`
    /// when no field needs it) into the sample's fields, writing the masks into `mask`
    /// (the sample's part of the batch: see the module docs). The error says what is
    /// wrong with the annotation (`Invalid`), or holds the mask decoder's (`Decode`).
    pub fn carry(
        &self,
        ann: &Annotation,
        geo: Option<&Geometry>,
        scratch: &mut FieldScratch,
        mask: &mut [u8],
    ) -> Result<SampleFields, SampleError> {
        let f = self.fields;
        let size = geo.map(Geometry::input_size);
        ann.check(size, self.classes, self.schema.len())
            .map_err(SampleError::Invalid)?;
        let mut out = SampleFields::default();
        if f.contains(Field::Labels) {
            out.labels.clone_from(&ann.labels);
        }
        if f.contains(Field::Text) {
            out.text = ann.text.clone().unwrap_or_default();
        }
        if f.contains(Field::Raw) {
            out.raw = ann.raw.clone().unwrap_or_default();
        }
        // Which boxes survived, to drop their instances' keypoints and masks with them.
        let mut kept = Vec::new();
        if let Some(g) = geo.filter(|_| f.contains(Field::Boxes)) {
            for (b, &l) in ann.boxes.iter().zip(&ann.box_labels) {
                let m = g.map_box(*b, self.min_box_visibility);
                kept.push(m.is_some());
                if let Some(m) = m {
                    out.boxes.push(m);
                    out.box_labels.push(l);
                }
            }
        }
        if let Some(g) = geo.filter(|_| f.contains(Field::Keypoints)) {
            self.carry_keypoints(ann, g, &kept, &mut out.keypoints);
        }
        let (map, instances) = mask.split_at_mut(self.mask.map_or(0, |(h, w)| h * w));
        if let Some(g) = geo.filter(|_| f.contains(Field::Mask)) {
            self.carry_mask(ann, g, scratch, map)?;
        }
        if let Some(g) = geo.filter(|_| f.contains(Field::Masks)) {
            self.carry_instance_masks(ann, g, &kept, scratch, instances)?;
        }
        Ok(out)
    }

    /// Each kept box's instance mask, through the same resampling as the class map,
    /// into the next of the sample's K places (the boxes past K are not collated).
    fn carry_instance_masks(
        &self,
        ann: &Annotation,
        g: &Geometry,
        kept: &[bool],
        scratch: &mut FieldScratch,
        out: &mut [u8],
    ) -> Result<(), SampleError> {
        if ann.masks.len() != kept.len() {
            return Err(SampleError::Invalid(format!(
                "{} boxes but {} instance masks (one per box)",
                kept.len(),
                ann.masks.len()
            )));
        }
        let per = self.masks.map_or(0, |(_, (h, w))| h * w);
        let mut places = out.chunks_exact_mut(per.max(1));
        for (i, m) in ann.masks.iter().enumerate().filter(|(i, _)| kept[*i]) {
            let Some(place) = places.next() else {
                break;
            };
            let FieldScratch {
                mask: resample,
                decoded,
                binary,
            } = &mut *scratch;
            let (w, h, data) = mask_pixels(m, decoded, self.max_pixels)?;
            let (iw, ih) = g.input_size();
            if (w, h) != (iw, ih) || data.len() != w * h {
                return Err(SampleError::Invalid(format!(
                    "instance mask {i} is {w}x{h} but its image is {iw}x{ih}"
                )));
            }
            // A PNG may mark the instance 255 or its id: nonzero is the instance.
            binary.clear();
            binary.extend(data.iter().map(|&v| u8::from(v != 0)));
            g.map_mask(binary, place, resample);
            // Padding and erasing write the class map's 255 (ignore); a binary mask
            // has no ignore: no object is there.
            for v in place.iter_mut().filter(|v| **v > 1) {
                *v = 0;
            }
        }
        Ok(())
    }

    /// Keypoint instances are paired with boxes when there are as many of each (COCO
    /// keypoints come with their person's box): an instance whose box was dropped is
    /// dropped too. A point that leaves the image becomes `(0, 0, 0)`, and a mirrored
    /// image swaps left and right points.
    fn carry_keypoints(&self, ann: &Annotation, g: &Geometry, kept: &[bool], out: &mut Vec<f32>) {
        let k = self.schema.len();
        if k == 0 {
            return;
        }
        let instances = ann.keypoints.len() / (k * 3);
        let paired = instances == kept.len() && self.fields.contains(Field::Boxes);
        let mirrored = g.mirrored();
        let mut points = vec![[0f32; 3]; k];
        for (i, inst) in ann.keypoints.chunks_exact(k * 3).enumerate() {
            if paired && !kept[i] {
                continue;
            }
            for (p, v) in points.iter_mut().zip(inst.chunks_exact(3)) {
                *p = match g.map_point(v[0], v[1]) {
                    Some((x, y)) if v[2] > 0.0 => [x, y, v[2]],
                    _ => [0.0; 3],
                };
            }
            for j in 0..k {
                let src = if mirrored { self.schema.flip[j] } else { j };
                out.extend_from_slice(&points[src]);
            }
        }
    }

    fn carry_mask(
        &self,
        ann: &Annotation,
        g: &Geometry,
        scratch: &mut FieldScratch,
        out: &mut [u8],
    ) -> Result<(), SampleError> {
        let Some(m) = &ann.mask else {
            return Err(SampleError::Invalid("no mask".into()));
        };
        let (w, h, data) = mask_pixels(m, &mut scratch.decoded, self.max_pixels)?;
        let (iw, ih) = g.input_size();
        if (w, h) != (iw, ih) || data.len() != w * h {
            return Err(SampleError::Invalid(format!(
                "the mask is {w}x{h} but its image is {iw}x{ih}"
            )));
        }
        g.map_mask(data, out, &mut scratch.mask);
        Ok(())
    }
}

/// The pixels of a mask as a source gave it: its own, or its PNG decoded into
/// `decoded`; with its (width, height).
fn mask_pixels<'a>(
    m: &'a MaskData,
    decoded: &'a mut Vec<u8>,
    max_pixels: usize,
) -> Result<(usize, usize, &'a [u8]), SampleError> {
    match m {
        MaskData::Raw {
            width,
            height,
            data,
        } => Ok((*width, *height, data)),
        MaskData::Png(bytes) => {
            let (w, h) = decode_mask(bytes, decoded, max_pixels).map_err(SampleError::Decode)?;
            Ok((w, h, decoded))
        }
    }
}

/// Packs a finished batch's instance masks to its own instance count `m` (at most the
/// K places each sample has) and zeroes the padding. `data` holds, for each of the
/// `counts.len()` samples, its `map` bytes of class map (0 without one), then its K
/// instance masks of `per` bytes. Afterwards it holds the instance masks, N x `m` x
/// `per`, then the class maps, N x `map`; returns the lengths of the two.
pub(crate) fn gather_instance_masks(
    data: &mut [u8],
    counts: &[i32],
    map: usize,
    (k, per): (usize, usize),
    m: usize,
) -> (usize, usize) {
    let n = counts.len();
    let stride = map + k * per;
    // The class maps would be overwritten by the packed instance masks before their
    // turn came: they wait aside (they are a small part of the buffer).
    let maps: Vec<u8> = (0..n)
        .flat_map(|i| data[i * stride..i * stride + map].iter().copied())
        .collect();
    // Sample i moves to i * m * per, never after where it lies (m <= k): earlier
    // samples are packed before a later one is overwritten.
    for (i, &c) in counts.iter().enumerate() {
        let (from, to) = (i * stride + map, i * m * per);
        let real = (c.max(0) as usize).min(m) * per;
        data.copy_within(from..from + real, to);
        data[to + real..to + m * per].fill(0);
    }
    let instances = n * m * per;
    data[instances..instances + maps.len()].copy_from_slice(&maps);
    (instances, maps.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_masks_pack_to_the_batch_count_with_their_class_maps_after() {
        // Two samples, class maps of 2 bytes, K = 3 places of 2 bytes; counts 1 and 2.
        let mut data = vec![
            7, 7, 1, 1, 9, 9, 9, 9, // sample 0: map, one mask, two stale places
            8, 8, 2, 2, 3, 3, 9, 9, // sample 1: map, two masks, one stale place
        ];
        let (inst, maps) = gather_instance_masks(&mut data, &[1, 2], 2, (3, 2), 2);
        assert_eq!((inst, maps), (8, 4));
        assert_eq!(&data[..8], [1, 1, 0, 0, 2, 2, 3, 3]);
        assert_eq!(&data[8..12], [7, 7, 8, 8]);
        // Without class maps, in place.
        let mut data = vec![1, 9, 9, 2, 3, 9];
        assert_eq!(
            gather_instance_masks(&mut data, &[1, 2], 0, (3, 1), 2),
            (4, 0)
        );
        assert_eq!(&data[..4], [1, 0, 2, 3]);
    }
}
