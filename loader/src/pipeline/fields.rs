//! The per-sample work for fields beyond image and class: after the image has been
//! decoded and transformed, carry the sample's boxes, keypoints and mask through the
//! geometry its transforms recorded, and pass the other fields along.

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
    /// The decoder's pixel limit, for mask files too.
    pub max_pixels: usize,
}

/// A worker's reusable buffers for fields.
#[derive(Default)]
pub(crate) struct FieldScratch {
    mask: MaskScratch,
    decoded: Vec<u8>,
}

impl FieldPlan {
    /// Carries `ann` through `geo` (the geometry of the image just transformed; `None`
    /// when no field needs it) into the sample's fields, writing the mask into `mask`
    /// (its slot in the batch). The error says what is wrong with the annotation
    /// (`Invalid`), or holds the mask decoder's (`Decode`).
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
        // Which boxes survived, to drop their instances' keypoints with them.
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
        if let Some(g) = geo.filter(|_| f.contains(Field::Mask)) {
            self.carry_mask(ann, g, scratch, mask)?;
        }
        Ok(out)
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
        let (w, h, data): (usize, usize, &[u8]) = match &ann.mask {
            None => return Err(SampleError::Invalid("no mask".into())),
            Some(MaskData::Raw {
                width,
                height,
                data,
            }) => (*width, *height, data),
            Some(MaskData::Png(bytes)) => {
                let (w, h) = decode_mask(bytes, &mut scratch.decoded, self.max_pixels)
                    .map_err(SampleError::Decode)?;
                (w, h, &scratch.decoded)
            }
        };
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
