//! What a sample holds beyond one image and one class: the field kinds, a sample's
//! annotations as a source reads them (in the coordinates of its image, before any
//! transform), and the fields of a collated batch.
//!
//! A classification source (image + class) never touches this module's types on its
//! path through the loader: its batches are exactly what they were before fields
//! existed. See `docs/samples.md` for each format's schema and the drop and fill rules.

use crate::array::{fill_value, pad_rows};
use std::fmt;

/// The most classes a data set may have: a class index past it in an annotation is
/// an error rather than a class list of that length.
pub const MAX_CLASSES: usize = 1 << 20;

/// The most instance masks (and so boxes) kept per sample when `masks` is carried and
/// `max_instances` is not set: each takes height x width bytes of the batch buffer.
/// COCO's images have fewer non-crowd objects than this.
pub const DEFAULT_MASK_INSTANCES: usize = 100;

/// One kind of field a sample may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Field {
    /// u8 pixels (the batch's `images`).
    Image,
    /// One class index (the batch's `labels`).
    Class,
    /// A set of class indices (multi-label tags).
    Labels,
    /// A UTF-8 caption.
    Text,
    /// Boxes `[x1, y1, x2, y2]` in pixels, each with a class.
    Boxes,
    /// A u8 per-pixel class map the size of the image.
    Mask,
    /// Instances of K points, each `(x, y, visibility)`.
    Keypoints,
    /// Bytes passed through untouched (a JSON document, say).
    Raw,
    /// One binary u8 mask per box instance, the size of the image, in the boxes' order.
    /// Last, so that the bits and names of the older fields stay as they were.
    Masks,
}

impl Field {
    /// Every field kind, in declaration order (the order of [`Fields::iter`]).
    pub const ALL: [Field; 9] = [
        Field::Image,
        Field::Class,
        Field::Labels,
        Field::Text,
        Field::Boxes,
        Field::Mask,
        Field::Keypoints,
        Field::Raw,
        Field::Masks,
    ];

    /// The field's name, as in `fields=[...]` and the Python batch dict (boxes also
    /// bring `box_labels` and `box_count`, keypoints `keypoint_count`).
    pub fn name(self) -> &'static str {
        match self {
            Field::Image => "image",
            Field::Class => "label",
            Field::Labels => "labels",
            Field::Text => "text",
            Field::Boxes => "boxes",
            Field::Mask => "mask",
            Field::Masks => "masks",
            Field::Keypoints => "keypoints",
            Field::Raw => "raw",
        }
    }

    fn bit(self) -> u16 {
        1 << self as u16
    }

    /// Whether the field moves with the image's geometric transforms.
    pub fn is_spatial(self) -> bool {
        matches!(
            self,
            Field::Boxes | Field::Mask | Field::Masks | Field::Keypoints
        )
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Field {
    type Err = crate::ParseSettingError;
    fn from_str(s: &str) -> Result<Field, crate::ParseSettingError> {
        let s = s.trim().to_ascii_lowercase();
        let alias = match s.as_str() {
            "images" => "image",
            "class" | "cls" => "label",
            "box_labels" | "box_count" | "bbox" => "boxes",
            "keypoint_count" => "keypoints",
            "seg" => "mask",
            "caption" | "txt" => "text",
            other => other,
        };
        Field::ALL
            .into_iter()
            .find(|f| f.name() == alias)
            .ok_or_else(|| crate::ParseSettingError::Field {
                name: s,
                known: Field::ALL.iter().map(|f| f.name()).collect(),
            })
    }
}

/// A set of fields.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Fields(u16);

impl Fields {
    /// The empty set.
    pub const NONE: Fields = Fields(0);
    /// What every classification source has.
    pub const CLASSIFICATION: Fields = Fields(1 << Field::Image as u16 | 1 << Field::Class as u16);

    /// The set of the fields listed (repeats are harmless).
    pub fn of(fields: &[Field]) -> Fields {
        fields.iter().fold(Fields::NONE, |s, &f| s.with(f))
    }

    /// This set with `f` added.
    #[must_use]
    pub fn with(self, f: Field) -> Fields {
        Fields(self.0 | f.bit())
    }

    /// This set with `f` removed.
    #[must_use]
    pub fn without(self, f: Field) -> Fields {
        Fields(self.0 & !f.bit())
    }

    /// Whether `f` is in the set.
    pub fn contains(self, f: Field) -> bool {
        self.0 & f.bit() != 0
    }

    /// The fields in both sets.
    #[must_use]
    pub fn intersect(self, other: Fields) -> Fields {
        Fields(self.0 & other.0)
    }

    /// True when the set holds nothing beyond image and class: such batches take the
    /// classification path, unchanged.
    pub fn is_classification(self) -> bool {
        self.0 & !Fields::CLASSIFICATION.0 == 0
    }

    /// Whether any field needs the image's geometry (boxes, mask, keypoints).
    pub fn any_spatial(self) -> bool {
        self.iter().any(Field::is_spatial)
    }

    /// The fields of the set, in the order of [`Field::ALL`].
    pub fn iter(self) -> impl Iterator<Item = Field> {
        Field::ALL.into_iter().filter(move |f| self.contains(*f))
    }
}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(Field::name)).finish()
    }
}

impl fmt::Display for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Field::name).collect();
        f.write_str(&names.join(","))
    }
}

impl std::str::FromStr for Fields {
    type Err = crate::ParseSettingError;
    /// A comma-separated list of field names.
    fn from_str(s: &str) -> Result<Fields, crate::ParseSettingError> {
        s.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(str::parse::<Field>)
            .try_fold(Fields::NONE, |set, f| Ok(set.with(f?)))
    }
}

/// The points of a keypoint instance: their names, and which point takes each one's
/// place when the image is mirrored (COCO's `left_eye` <-> `right_eye`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeypointSchema {
    /// The name of each of the K points of an instance, in order.
    pub names: Vec<String>,
    /// `flip[k]`: the point that point `k` becomes under a horizontal flip
    /// (`flip[k] == k` for a point on the midline).
    pub flip: Vec<usize>,
}

impl KeypointSchema {
    /// A schema from point names, pairing `left*` with `right*` names (COCO's
    /// spelling: `left_eye`, `right_eye`).
    pub fn from_names(names: Vec<String>) -> KeypointSchema {
        let flip = names
            .iter()
            .enumerate()
            .map(|(k, n)| {
                let other = if let Some(rest) = n.strip_prefix("left") {
                    format!("right{rest}")
                } else if let Some(rest) = n.strip_prefix("right") {
                    format!("left{rest}")
                } else {
                    return k;
                };
                names.iter().position(|m| *m == other).unwrap_or(k)
            })
            .collect();
        KeypointSchema { names, flip }
    }

    /// K, the points per instance.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether instances have no points (the source has no keypoints).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// A sample's mask as a source hands it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MaskData {
    /// A PNG file's bytes: one byte per pixel (grey or palette indices, which are the
    /// classes; 16-bit and colour PNGs are refused).
    Png(Vec<u8>),
    /// The class map itself, `width` x `height`.
    Raw {
        /// Width of the map in pixels.
        width: usize,
        /// Height of the map in pixels.
        height: usize,
        /// One class per pixel, `width * height` bytes, row by row.
        data: Vec<u8>,
    },
}

/// A sample's fields beyond its image and class, in the coordinates of its image
/// before any transform. A source fills the fields it has and was asked for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Annotation {
    /// Multi-label tags: class indices.
    pub labels: Vec<u32>,
    /// The caption, when the sample has one.
    pub text: Option<String>,
    /// `[x1, y1, x2, y2]` per box, in pixels.
    pub boxes: Vec<[f32; 4]>,
    /// One class per box.
    pub box_labels: Vec<u32>,
    /// The segmentation mask, when the sample has one.
    pub mask: Option<MaskData>,
    /// One binary mask per box, in the boxes' order (nonzero is the instance), when
    /// the sample has instance masks.
    pub masks: Vec<MaskData>,
    /// `instances x K x 3` values: `(x, y, visibility)` per point, visibility as COCO
    /// has it (0 not labelled, 1 labelled but hidden, 2 visible).
    pub keypoints: Vec<f32>,
    /// The sample's raw bytes, passed through untouched, when it has them.
    pub raw: Option<Vec<u8>>,
}

impl Annotation {
    /// Empties every field, keeping allocations.
    pub fn clear(&mut self) {
        self.labels.clear();
        self.text = None;
        self.boxes.clear();
        self.box_labels.clear();
        self.mask = None;
        self.masks.clear();
        self.keypoints.clear();
        self.raw = None;
    }

    /// Moves the `wanted` fields of `from` (all but the mask) into `self`; a caption
    /// `self` has already is kept (a tar shard's `.txt` wins over its json's `text`).
    pub fn take_wanted(&mut self, from: Annotation, wanted: Fields) {
        let Annotation {
            labels,
            text,
            boxes,
            box_labels,
            mask: _,
            masks,
            keypoints,
            raw,
        } = from;
        if wanted.contains(Field::Labels) {
            self.labels = labels;
        }
        if wanted.contains(Field::Text) && self.text.is_none() {
            self.text = text;
        }
        if wanted.contains(Field::Boxes) {
            self.boxes = boxes;
            self.box_labels = box_labels;
        }
        if wanted.contains(Field::Keypoints) {
            self.keypoints = keypoints;
        }
        if wanted.contains(Field::Masks) {
            self.masks = masks;
        }
        if wanted.contains(Field::Raw) {
            self.raw = raw;
        }
    }

    /// Checks the annotation's own consistency and its boxes against an image of
    /// `width` x `height` (`None`: not known yet), and the class indices against
    /// `classes`. The message says what is wrong, for a sample error.
    pub fn check(
        &self,
        size: Option<(usize, usize)>,
        classes: usize,
        keypoints_per_instance: usize,
    ) -> Result<(), String> {
        if self.boxes.len() != self.box_labels.len() {
            return Err(format!(
                "{} boxes but {} box labels",
                self.boxes.len(),
                self.box_labels.len()
            ));
        }
        if !self.masks.is_empty() && self.masks.len() != self.boxes.len() {
            return Err(format!(
                "{} boxes but {} instance masks (one per box)",
                self.boxes.len(),
                self.masks.len()
            ));
        }
        for (i, b) in self.boxes.iter().enumerate() {
            check_box(i, b, size)?;
        }
        for &l in self.box_labels.iter().chain(&self.labels) {
            if l as usize >= classes {
                return Err(format!(
                    "class {l} is out of range (the data set has {classes} classes)"
                ));
            }
        }
        if !self.keypoints.is_empty() {
            let per = keypoints_per_instance * 3;
            if per == 0 || !self.keypoints.len().is_multiple_of(per) {
                return Err(format!(
                    "{} keypoint values are not whole instances of {keypoints_per_instance} \
                     (x, y, visibility) points",
                    self.keypoints.len()
                ));
            }
            if let Some(v) = self.keypoints.iter().find(|v| !v.is_finite()) {
                return Err(format!("a keypoint value is {v}"));
            }
        }
        Ok(())
    }
}

fn check_box(i: usize, b: &[f32; 4], size: Option<(usize, usize)>) -> Result<(), String> {
    let [x1, y1, x2, y2] = *b;
    if b.iter().any(|v| !v.is_finite()) {
        return Err(format!(
            "box {i} {b:?} has a coordinate that is not a number"
        ));
    }
    if x1 < 0.0 || y1 < 0.0 {
        return Err(format!("box {i} {b:?} has a negative coordinate"));
    }
    if x2 < x1 || y2 < y1 {
        return Err(format!("box {i} {b:?} has x2 < x1 or y2 < y1"));
    }
    if let Some((w, h)) = size {
        // Annotation tools round outwards: half a pixel past the edge is the edge.
        if x2 > w as f32 + 0.5 || y2 > h as f32 + 0.5 {
            return Err(format!("box {i} {b:?} lies outside the {w}x{h} image"));
        }
    }
    Ok(())
}

/// Boxes of a batch: padded to the batch's largest count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchBoxes {
    /// N x M boxes `[x1, y1, x2, y2]` in output pixels; padding is zeros.
    pub boxes: Vec<[f32; 4]>,
    /// N x M classes; padding is -1.
    pub labels: Vec<i64>,
    /// Boxes of each sample.
    pub count: Vec<i32>,
    /// M, the padded count.
    pub max: usize,
}

/// Keypoints of a batch: padded to the batch's largest instance count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchKeypoints {
    /// N x M x K x 3 values; padding is zeros.
    pub points: Vec<f32>,
    /// Instances of each sample.
    pub count: Vec<i32>,
    /// M, the padded instance count.
    pub max: usize,
    /// K, points per instance.
    pub per_instance: usize,
}

/// The fields of a batch beyond its images and labels (masks live in the batch's
/// buffer beside the images: see [`Batch::masks`](crate::Batch::masks)).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BatchFields {
    /// Which fields the batch carries.
    pub fields: Fields,
    /// Each sample's multi-label tags.
    pub labels: Vec<Vec<u32>>,
    /// Each sample's caption (empty for a sample without one).
    pub text: Vec<String>,
    /// The samples' boxes, padded to the largest count.
    pub boxes: BatchBoxes,
    /// The samples' keypoint instances, padded to the largest count.
    pub keypoints: BatchKeypoints,
    /// Each sample's raw bytes (empty for a sample without them).
    pub raw: Vec<Vec<u8>>,
    /// The arrays user steps added, by name (see [`crate::step`] and [`crate::array`]).
    pub extra: Vec<(String, crate::array::BatchArray)>,
}

impl BatchFields {
    /// The tags as a k-hot matrix, N x `classes` (u8).
    pub fn labels_k_hot(&self, classes: usize) -> Vec<u8> {
        let mut out = vec![0u8; self.labels.len() * classes];
        for (row, tags) in out.chunks_exact_mut(classes.max(1)).zip(&self.labels) {
            for &t in tags {
                if let Some(v) = row.get_mut(t as usize) {
                    *v = 1;
                }
            }
        }
        out
    }

    /// The boxes of sample `i`, without padding.
    pub fn boxes_of(&self, i: usize) -> (&[[f32; 4]], &[i64]) {
        let b = &self.boxes;
        let n = b.count.get(i).map_or(0, |&c| c as usize);
        let start = i * b.max;
        (&b.boxes[start..start + n], &b.labels[start..start + n])
    }
}

/// One sample's fields after its transforms, before collation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleFields {
    /// Multi-label tags: class indices.
    pub labels: Vec<u32>,
    /// The caption (empty without one).
    pub text: String,
    /// `[x1, y1, x2, y2]` per box kept, in output pixels.
    pub boxes: Vec<[f32; 4]>,
    /// One class per box kept.
    pub box_labels: Vec<u32>,
    /// Instances x K x 3.
    pub keypoints: Vec<f32>,
    /// The raw bytes (empty without them).
    pub raw: Vec<u8>,
    /// Arrays added by user steps, by name (see [`crate::step`] and [`crate::array`]).
    pub extra: Vec<(String, crate::array::Array)>,
    /// The class a user step gave the sample, when it changed it.
    pub label: Option<u32>,
}

/// Collates the samples' fields (in batch order) into padded batch fields; `cap`
/// limits the boxes and keypoint instances kept per sample.
pub fn collate(
    fields: Fields,
    samples: &[SampleFields],
    keypoints_per_instance: usize,
    cap: Option<usize>,
) -> BatchFields {
    let cap = cap.unwrap_or(usize::MAX);
    let mut out = BatchFields {
        fields,
        ..BatchFields::default()
    };
    if fields.contains(Field::Labels) {
        out.labels = samples.iter().map(|s| s.labels.clone()).collect();
    }
    if fields.contains(Field::Text) {
        out.text = samples.iter().map(|s| s.text.clone()).collect();
    }
    if fields.contains(Field::Raw) {
        out.raw = samples.iter().map(|s| s.raw.clone()).collect();
    }
    // Padded by the rules every field follows (`array::pad_rows`): zeros, class -1.
    if fields.contains(Field::Boxes) {
        let kept: Vec<&[[f32; 4]]> = samples
            .iter()
            .map(|s| &s.boxes[..s.boxes.len().min(cap)])
            .collect();
        let classes: Vec<Vec<i64>> = samples
            .iter()
            .zip(&kept)
            .map(|(s, k)| {
                let mut c: Vec<i64> = s
                    .box_labels
                    .iter()
                    .take(k.len())
                    .map(|&l| i64::from(l))
                    .collect();
                c.resize(k.len(), -1);
                c
            })
            .collect();
        let classes: Vec<&[i64]> = classes.iter().map(Vec::as_slice).collect();
        let (boxes, max, count) = pad_rows(&kept, 1, [0.0; 4]);
        let (labels, _, _) = pad_rows(&classes, 1, fill_value("box_labels"));
        out.boxes = BatchBoxes {
            boxes,
            labels,
            count,
            max,
        };
    }
    if fields.contains(Field::Keypoints) {
        let per = keypoints_per_instance * 3;
        let kept: Vec<&[f32]> = samples
            .iter()
            .map(|s| {
                let instances = s.keypoints.len().checked_div(per).unwrap_or(0).min(cap);
                &s.keypoints[..instances * per]
            })
            .collect();
        let (points, max, count) = pad_rows(&kept, per, 0.0);
        out.keypoints = BatchKeypoints {
            points,
            count,
            max,
            per_instance: keypoints_per_instance,
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_sets_parse_and_print() {
        let f: Fields = "image, boxes,mask".parse().unwrap();
        assert!(f.contains(Field::Boxes) && f.contains(Field::Mask));
        assert!(!f.contains(Field::Class));
        assert_eq!(f.to_string(), "image,boxes,mask");
        assert!(f.any_spatial());
        assert!(Fields::CLASSIFICATION.is_classification());
        assert!(!f.is_classification());
        let e = "image,shapes".parse::<Fields>().unwrap_err();
        assert!(
            matches!(&e, crate::ParseSettingError::Field { name, .. } if name == "shapes"),
            "{e:?}"
        );
        assert!(e.to_string().contains("unknown field 'shapes'"), "{e}");
        assert_eq!("box_labels".parse::<Field>(), Ok(Field::Boxes));
    }

    #[test]
    fn keypoint_pairs_come_from_names() {
        let s = KeypointSchema::from_names(
            ["nose", "left_eye", "right_eye", "left_ear"]
                .map(String::from)
                .to_vec(),
        );
        // The left ear has no right ear: it stays where it is.
        assert_eq!(s.flip, vec![0, 2, 1, 3]);
    }

    #[test]
    fn bad_annotations_say_what_is_wrong() {
        let ok = Annotation {
            boxes: vec![[1.0, 2.0, 3.0, 4.0]],
            box_labels: vec![0],
            ..Annotation::default()
        };
        assert_eq!(ok.check(Some((10, 10)), 1, 0), Ok(()));
        let cases = [
            ([f32::NAN, 0.0, 1.0, 1.0], "not a number"),
            ([-1.0, 0.0, 1.0, 1.0], "negative"),
            ([5.0, 0.0, 1.0, 1.0], "x2 < x1"),
            ([0.0, 0.0, 20.0, 1.0], "outside the 10x10 image"),
        ];
        for (b, want) in cases {
            let a = Annotation {
                boxes: vec![b],
                ..ok.clone()
            };
            let e = a.check(Some((10, 10)), 1, 0).unwrap_err();
            assert!(e.contains(want), "{b:?}: {e}");
        }
        let e = ok.check(None, 0, 0).unwrap_err();
        assert!(e.contains("class 0 is out of range"), "{e}");
        let kp = Annotation {
            keypoints: vec![0.0; 7],
            ..Annotation::default()
        };
        assert!(kp
            .check(None, 0, 2)
            .unwrap_err()
            .contains("whole instances"));
    }

    #[test]
    fn ragged_fields_pad_to_the_largest_sample() {
        let a = SampleFields {
            boxes: vec![[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 2.0, 2.0]],
            box_labels: vec![3, 4],
            keypoints: vec![1.0; 6],
            ..SampleFields::default()
        };
        let b = SampleFields::default();
        let f = Fields::of(&[Field::Image, Field::Boxes, Field::Keypoints]);
        let out = collate(f, &[a.clone(), b.clone()], 2, None);
        assert_eq!(out.boxes.max, 2);
        assert_eq!(out.boxes.count, vec![2, 0]);
        assert_eq!(out.boxes.labels, vec![3, 4, -1, -1]);
        assert_eq!(out.boxes_of(0).1, &[3, 4]);
        assert_eq!(out.keypoints.count, vec![1, 0]);
        assert_eq!(out.keypoints.points.len(), 2 * 6);
        let capped = collate(f, &[a, b], 2, Some(1));
        assert_eq!(capped.boxes.count, vec![1, 0]);
        assert_eq!(capped.boxes.labels, vec![3, -1]);
    }

    #[test]
    fn k_hot_rows() {
        let f = BatchFields {
            labels: vec![vec![0, 2], vec![]],
            ..BatchFields::default()
        };
        assert_eq!(f.labels_k_hot(3), vec![1, 0, 1, 0, 0, 0]);
    }
}
