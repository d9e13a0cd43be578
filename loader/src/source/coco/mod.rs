//! A COCO annotation file (instances or person_keypoints) and its image folder, local
//! or behind URLs: one sample per entry of `images` (sorted by id, with or without
//! annotations), carrying boxes with their classes, a per-pixel class mask painted
//! from the polygons and RLEs, and keypoints. The rules (crowd, overlaps, classes)
//! are in `docs/samples.md`.
//!
//! The file is parsed when the source is opened; an annotation that is wrong (an
//! unknown category, a bad box, polygon or RLE) is an error of its image's sample,
//! naming the file, the image and the annotation, so that `on_error = skip` skips
//! that image. Masks are painted when a sample is read.

mod polygon;
mod rle;
mod schema;

use std::collections::HashMap;

use super::place::{read_file, Base, Place};
use super::{OpenOptions, RecordKind, Source, SourceError};
use crate::sample::{Annotation, Field, Fields, KeypointSchema, MaskData, MAX_CLASSES};
use schema::{AnnInfo, CocoFile, Counts, Num, Segmentation};

/// The most classes a COCO mask can hold: its pixels are class + 1 in a byte, with
/// 0 for background and 255 for crowd.
pub const MAX_MASK_CLASSES: usize = 254;

/// The mask value of crowd regions (and of anything the loss should ignore).
pub const IGNORE: u8 = 255;

/// The largest mask painted, in pixels (a width and height in the JSON past it are
/// refused rather than allocated): 2^28, a 256 MB map.
pub const MAX_MASK_PIXELS: usize = 1 << 28;

/// What one annotation paints into its image's mask.
#[derive(Debug)]
enum Region {
    Polygons(Vec<Vec<f32>>),
    /// Counts checked against the image's size at open.
    Rle(Vec<u32>),
}

#[derive(Debug)]
struct Paint {
    /// What it paints into the class map (class + 1, or [`IGNORE`] for a crowd).
    value: u8,
    /// The box whose instance mask it is (`None` for a crowd, which is no instance).
    instance: Option<usize>,
    region: Region,
}

/// A usable image: its file and annotations.
#[derive(Debug)]
struct Sample {
    image: Place,
    /// Width and height from the JSON.
    size: (usize, usize),
    /// Boxes, their classes and keypoints, in annotation id order.
    ann: Annotation,
    /// Mask regions, in annotation id order (later ones paint over earlier ones).
    paints: Vec<Paint>,
    /// Ids of the annotations left out for a zero-area box.
    dropped: Vec<u64>,
}

/// One entry of `images`.
#[derive(Debug)]
struct Entry {
    id: u64,
    file_name: String,
    /// The sample, or why it is unusable.
    sample: Result<Sample, String>,
}

/// A COCO annotation file and the images it names.
#[derive(Debug)]
pub struct Coco {
    what: String,
    base: Base,
    entries: Vec<Entry>,
    classes: Vec<String>,
    fields: Fields,
    schema: KeypointSchema,
}

/// The class of each category id: categories sorted by id, numbered from 0.
fn class_map(cats: &[schema::Category]) -> Result<(HashMap<u64, u32>, Vec<String>), String> {
    let mut sorted: Vec<&schema::Category> = cats.iter().collect();
    sorted.sort_by_key(|c| c.id);
    if let Some(w) = sorted.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(format!(
            "category id {} appears twice ('{}' and '{}')",
            w[0].id, w[0].name, w[1].name
        ));
    }
    if sorted.len() > MAX_CLASSES {
        return Err(format!(
            "{} categories are past the limit of {MAX_CLASSES} classes",
            sorted.len()
        ));
    }
    let ids = sorted
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id, i as u32))
        .collect();
    let names = sorted.iter().map(|c| c.name.clone()).collect();
    Ok((ids, names))
}

/// The point names of the keypoint categories (one list for the whole file).
fn keypoint_names(cats: &[schema::Category]) -> Result<Vec<String>, String> {
    let mut with = cats.iter().filter(|c| !c.keypoints.is_empty());
    let Some(first) = with.next() else {
        return Ok(Vec::new());
    };
    for c in with {
        if c.keypoints != first.keypoints {
            return Err(format!(
                "categories {} ('{}') and {} ('{}') name different keypoints; a data set has \
                 one list of points",
                first.id, first.name, c.id, c.name
            ));
        }
    }
    Ok(first.keypoints.clone())
}

/// What the annotations of one image need from the whole file.
struct Context<'a> {
    classes: &'a HashMap<u64, u32>,
    /// K, points per instance (0: no keypoints).
    points: usize,
    /// Whether masks are carried (masks need class + 1 to fit in a byte).
    masks: bool,
    /// Whether any region is kept: for the class map or the instance masks.
    regions: bool,
}

/// `[x, y, w, h]` as `[x1, y1, x2, y2]`, checked.
fn bbox(b: Option<&[Num]>) -> Result<[f32; 4], String> {
    let b = b.ok_or("no bbox")?;
    let v: Vec<f32> = b.iter().map(|n| n.0).collect();
    let [x, y, w, h] = v[..] else {
        return Err(format!("bbox {v:?} is not [x, y, width, height]"));
    };
    if v.iter().any(|c| !c.is_finite()) {
        return Err(format!("bbox {v:?} has a coordinate that is not a number"));
    }
    if x < 0.0 || y < 0.0 {
        return Err(format!("bbox {v:?} has a negative coordinate"));
    }
    if w < 0.0 || h < 0.0 {
        return Err(format!("bbox {v:?} has a negative width or height"));
    }
    Ok([x, y, x + w, y + h])
}

/// The region of a segmentation on an image of `(width, height)`, checked.
fn region(seg: Segmentation, (w, h): (usize, usize)) -> Result<Option<Region>, String> {
    match seg {
        Segmentation::Polygons(polys) => {
            if polys.is_empty() {
                return Ok(None);
            }
            for p in &polys {
                polygon::check(p)?;
            }
            Ok(Some(Region::Polygons(polys)))
        }
        Segmentation::Rle { size, counts } => {
            if size.len() != 2 || size[0] != h as u64 || size[1] != w as u64 {
                return Err(format!(
                    "the RLE's size {size:?} (height, width) is not its image's [{h}, {w}]"
                ));
            }
            let counts = match counts {
                Counts::String(s) => rle::counts_from_string(&s)?,
                Counts::List(l) => l
                    .into_iter()
                    .map(|c| u32::try_from(c).map_err(|_| format!("RLE count {c} is too large")))
                    .collect::<Result<_, _>>()?,
            };
            rle::check_counts(&counts, h, w)?;
            Ok(Some(Region::Rle(counts)))
        }
    }
}

/// Builds one image's sample from its annotations (sorted by id). The error names the
/// annotation at fault.
fn build(
    image: Place,
    size: (usize, usize),
    anns: Vec<AnnInfo>,
    cx: &Context<'_>,
) -> Result<Sample, String> {
    let mut ann = Annotation::default();
    let mut paints = Vec::new();
    let mut dropped = Vec::new();
    for a in anns {
        let id = a.id;
        let at = |e: String| format!("annotation {id}: {e}");
        let class = *cx
            .classes
            .get(&a.category_id)
            .ok_or_else(|| at(format!("unknown category id {}", a.category_id)))?;
        let crowd = a.iscrowd.0;
        if !crowd {
            let b = bbox(a.bbox.as_deref()).map_err(at)?;
            // No area, no object: left out with its points and region, as torchvision's
            // SanitizeBoundingBoxes drops such boxes with their labels and masks.
            if b[2] <= b[0] || b[3] <= b[1] {
                dropped.push(id);
                continue;
            }
            ann.boxes.push(b);
            ann.box_labels.push(class);
            if cx.points > 0 {
                let k = cx.points;
                match &a.keypoints {
                    // A category without points still has an instance, so that
                    // instances pair with boxes.
                    None => ann.keypoints.extend(std::iter::repeat_n(0.0, 3 * k)),
                    Some(v) if v.len() == 3 * k => ann.keypoints.extend(v.iter().map(|n| n.0)),
                    Some(v) => {
                        return Err(at(format!(
                            "{} keypoint values, not {k} (x, y, visibility) points",
                            v.len()
                        )))
                    }
                }
            }
        }
        if let Some(seg) = a.segmentation {
            if let Some(r) = region(seg, size).map_err(at)? {
                if cx.regions {
                    let value = match (crowd, cx.masks) {
                        (true, _) => IGNORE,
                        (false, true) => class as u8 + 1,
                        (false, false) => 0,
                    };
                    // The box just pushed is this annotation's.
                    let instance = (!crowd).then(|| ann.boxes.len() - 1);
                    paints.push(Paint {
                        value,
                        instance,
                        region: r,
                    });
                }
            }
        }
    }
    Ok(Sample {
        image,
        size,
        ann,
        paints,
        dropped,
    })
}

impl Coco {
    /// Opens the annotation file `annotations` (a path or URL) whose `file_name`s are
    /// relative to the folder `images` (a path or URL).
    pub fn open(
        annotations: &str,
        images: &str,
        options: &OpenOptions,
    ) -> Result<Coco, SourceError> {
        let bad = |reason: String| SourceError::format(annotations, reason);
        let bytes = read_file(annotations, options)?;
        let file: CocoFile = serde_json::from_slice(&schema::nulls_for_non_finite(&bytes))
            .map_err(|e| bad(format!("not a COCO annotation file: {e}")).caused_by(e))?;
        drop(bytes);
        let images_info = file.images.ok_or_else(|| {
            bad(
                "no \"images\" list: not a COCO annotation file (instances_*.json, \
                 person_keypoints_*.json)"
                    .into(),
            )
        })?;
        let (class_of, classes) = class_map(&file.categories).map_err(bad)?;
        let names = keypoint_names(&file.categories).map_err(bad)?;
        let has_segments = file
            .annotations
            .iter()
            .any(|a| a.segmentation.as_ref().is_some_and(|s| !s.is_empty()));
        if images_info.is_empty() {
            return Err(bad("the \"images\" list is empty".into()));
        }
        let masks = has_segments && classes.len() <= MAX_MASK_CLASSES;
        // Instances are the non-crowd annotations; a file of crowd regions alone has none.
        let instance_masks = file
            .annotations
            .iter()
            .any(|a| !a.iscrowd.0 && a.segmentation.as_ref().is_some_and(|s| !s.is_empty()));
        let mut fields = Fields::of(&[Field::Image]);
        if !file.annotations.is_empty() {
            fields = fields.with(Field::Boxes);
        }
        if masks {
            fields = fields.with(Field::Mask);
        }
        if !names.is_empty() {
            fields = fields.with(Field::Keypoints);
        }
        if instance_masks {
            fields = fields.with(Field::Masks);
        }

        let mut infos = images_info;
        infos.sort_by_key(|i| i.id);
        if let Some(w) = infos.windows(2).find(|w| w[0].id == w[1].id) {
            return Err(bad(format!(
                "image id {} appears twice ('{}' and '{}')",
                w[0].id, w[0].file_name, w[1].file_name
            )));
        }
        let slot: HashMap<u64, usize> = infos.iter().enumerate().map(|(i, m)| (m.id, i)).collect();
        let mut per_image: Vec<Vec<AnnInfo>> = infos.iter().map(|_| Vec::new()).collect();
        let mut anns = file.annotations;
        anns.sort_by_key(|a| a.id);
        for a in anns {
            let Some(&i) = slot.get(&a.image_id) else {
                return Err(bad(format!(
                    "annotation {} is of image id {}, which is not in \"images\"",
                    a.id, a.image_id
                )));
            };
            per_image[i].push(a);
        }

        let base = Base::open(images, options)?;
        let cx = Context {
            classes: &class_of,
            points: names.len(),
            masks,
            regions: masks || instance_masks,
        };
        let entries = infos
            .into_iter()
            .zip(per_image)
            .map(|(info, anns)| {
                let sample = base.resolve(&info.file_name).and_then(|place| {
                    let size = (info.width as usize, info.height as usize);
                    build(place, size, anns, &cx)
                });
                Entry {
                    id: info.id,
                    file_name: info.file_name,
                    sample,
                }
            })
            .collect();
        Ok(Coco {
            what: annotations.to_string(),
            base,
            entries,
            classes,
            fields,
            schema: KeypointSchema::from_names(names),
        })
    }

    /// The ids of the annotations left out because their box has no area (width or
    /// height 0), with their keypoints and mask regions, in image then id order.
    pub fn dropped_boxes(&self) -> Vec<u64> {
        self.entries
            .iter()
            .filter_map(|e| e.sample.as_ref().ok())
            .flat_map(|s| s.dropped.iter().copied())
            .collect()
    }

    fn sample(&self, index: usize) -> Result<&Sample, SourceError> {
        match self.entries.get(index).map(|e| &e.sample) {
            Some(Ok(s)) => Ok(s),
            Some(Err(reason)) => Err(SourceError::record(self.describe(index), reason.clone())),
            None => Err(SourceError::record(
                format!("{} sample {index}", self.what),
                format!(
                    "index out of range (the file has {} images)",
                    self.entries.len()
                ),
            )),
        }
    }

    /// Paints sample `s`'s mask into `data` (resized to its image).
    fn paint(&self, s: &Sample, data: &mut Vec<u8>) -> Result<(), String> {
        let (w, h) = s.size;
        if w == 0 || h == 0 || w.saturating_mul(h) > MAX_MASK_PIXELS {
            return Err(format!(
                "the JSON gives the image a size of {w}x{h}, which cannot be a mask (at most \
                 {MAX_MASK_PIXELS} pixels)"
            ));
        }
        data.clear();
        data.resize(w * h, 0);
        let mut xs = Vec::new();
        for p in &s.paints {
            paint_region(&p.region, (w, h), p.value, data, &mut xs);
        }
        Ok(())
    }

    /// Paints the instance masks of sample `s` into `masks`, one per box (0 and 1; a
    /// box without a region has an empty mask), reusing the maps `masks` held.
    fn paint_instances(&self, s: &Sample, masks: &mut Vec<MaskData>) -> Result<(), String> {
        let (width, height) = s.size;
        let boxes = s.ann.boxes.len();
        if boxes > 0
            && (width == 0 || height == 0 || width.saturating_mul(height) > MAX_MASK_PIXELS)
        {
            return Err(format!(
                "the JSON gives the image a size of {width}x{height}, which cannot be a mask \
                 (at most {MAX_MASK_PIXELS} pixels)"
            ));
        }
        let mut spare: Vec<Vec<u8>> = masks
            .drain(..)
            .filter_map(|m| match m {
                MaskData::Raw { data, .. } => Some(data),
                MaskData::Png(_) => None,
            })
            .collect();
        let mut xs = Vec::new();
        for j in 0..boxes {
            let mut data = spare.pop().unwrap_or_default();
            data.clear();
            data.resize(width * height, 0);
            for p in s.paints.iter().filter(|p| p.instance == Some(j)) {
                paint_region(&p.region, (width, height), 1, &mut data, &mut xs);
            }
            masks.push(MaskData::Raw {
                width,
                height,
                data,
            });
        }
        Ok(())
    }
}

/// Paints `region` with `value` into the row-major `w` x `h` map `data`.
fn paint_region(
    region: &Region,
    (w, h): (usize, usize),
    value: u8,
    data: &mut [u8],
    xs: &mut Vec<f64>,
) {
    match region {
        Region::Polygons(polys) => {
            for poly in polys {
                polygon::paint(poly, w, h, value, data, xs);
            }
        }
        Region::Rle(counts) => rle::paint(counts, h, w, value, data),
    }
}

/// An instance mask given as COCO's RLE object, `{"size": [height, width], "counts":
/// [...] or "..."}` (a list of runs or pycocotools' string), decoded to a row-major
/// map of 0 and 1: the form manifests and tar shards give instance masks in.
pub(crate) fn decode_rle_object(v: &serde_json::Value) -> Result<MaskData, String> {
    let seg: Segmentation = serde_json::from_value(v.clone())
        .map_err(|e| format!("instance mask {v} is not an RLE object: {e}"))?;
    let Segmentation::Rle { size, .. } = &seg else {
        return Err(format!(
            "instance mask {v} is not an RLE object ({{\"size\": [height, width], \"counts\": ...}})"
        ));
    };
    let (h, w) = match size[..] {
        [h, w] if h > 0 && w > 0 && h.saturating_mul(w) <= MAX_MASK_PIXELS as u64 => {
            (h as usize, w as usize)
        }
        _ => {
            return Err(format!(
                "the RLE's size {size:?} is not [height, width] of at most {MAX_MASK_PIXELS} pixels"
            ))
        }
    };
    let Some(Region::Rle(counts)) = region(seg, (w, h))? else {
        unreachable!("an RLE object is an RLE region");
    };
    let mut data = vec![0u8; w * h];
    rle::paint(&counts, h, w, 1, &mut data);
    Ok(MaskData::Raw {
        width: w,
        height: h,
        data,
    })
}

/// A row-major `width` x `height` map as COCO's RLE object (runs of 0 and nonzero down
/// each column, counts as pycocotools' string): [`decode_rle_object`] reads it back as
/// 0 and 1. How packs write instance masks.
pub(crate) fn encode_rle_object(width: usize, height: usize, data: &[u8]) -> serde_json::Value {
    let mut counts = Vec::new();
    let (mut cur, mut run) = (false, 0u32);
    for x in 0..width {
        for y in 0..height {
            let on = data[y * width + x] != 0;
            if on != cur {
                counts.push(run);
                (cur, run) = (on, 0);
            }
            run += 1;
        }
    }
    counts.push(run);
    serde_json::json!({"size": [height, width], "counts": rle::counts_to_string(&counts)})
}

impl Source for Coco {
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn classes(&self) -> &[String] {
        &self.classes
    }

    /// COCO images have no single class.
    fn label(&self, _index: usize) -> u32 {
        0
    }

    fn describe(&self, index: usize) -> String {
        match self.entries.get(index) {
            Some(e) => {
                let file = match &e.sample {
                    Ok(s) => s.image.describe(),
                    Err(_) => e.file_name.clone(),
                };
                format!("{} image {} ({file})", self.what, e.id)
            }
            None => format!("{} sample {index} (out of range)", self.what),
        }
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        self.sample(index)?.image.read(&self.base, buf)?;
        Ok(RecordKind::Encoded)
    }

    fn format(&self) -> &'static str {
        "coco"
    }

    fn fields(&self) -> Fields {
        self.fields
    }

    fn keypoint_schema(&self) -> Option<&KeypointSchema> {
        Some(&self.schema).filter(|s| !s.is_empty())
    }

    /// What the file held that is not in the samples: the boxes without area.
    fn layout(&self) -> Vec<String> {
        let dropped = self.dropped_boxes();
        if dropped.is_empty() {
            return Vec::new();
        }
        const SHOWN: usize = 10;
        let mut ids: Vec<String> = dropped.iter().take(SHOWN).map(u64::to_string).collect();
        if dropped.len() > SHOWN {
            ids.push(format!("and {} more", dropped.len() - SHOWN));
        }
        vec![format!(
            "zero-area boxes dropped: {} (annotations {}), with their keypoints and mask regions",
            dropped.len(),
            ids.join(", ")
        )]
    }

    fn read_sample(
        &self,
        index: usize,
        wanted: Fields,
        buf: &mut Vec<u8>,
        ann: &mut Annotation,
    ) -> Result<RecordKind, SourceError> {
        // The previous sample's mask buffers, reused.
        let mut data = match ann.mask.take() {
            Some(MaskData::Raw { data, .. }) => data,
            _ => Vec::new(),
        };
        let mut masks = std::mem::take(&mut ann.masks);
        ann.clear();
        let s = self.sample(index)?;
        s.image.read(&self.base, buf)?;
        if wanted.contains(Field::Boxes) {
            ann.boxes.clone_from(&s.ann.boxes);
            ann.box_labels.clone_from(&s.ann.box_labels);
        }
        if wanted.contains(Field::Keypoints) {
            ann.keypoints.clone_from(&s.ann.keypoints);
        }
        if wanted.contains(Field::Mask) && self.fields.contains(Field::Mask) {
            self.paint(s, &mut data)
                .map_err(|reason| SourceError::record(self.describe(index), reason))?;
            let (width, height) = s.size;
            ann.mask = Some(MaskData::Raw {
                width,
                height,
                data,
            });
        }
        if wanted.contains(Field::Masks) && self.fields.contains(Field::Masks) {
            self.paint_instances(s, &mut masks)
                .map_err(|reason| SourceError::record(self.describe(index), reason))?;
            ann.masks = masks;
        }
        Ok(RecordKind::Encoded)
    }
}

/// True for a file name that may be a COCO annotation file.
pub fn is_coco_name(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with(".json")
}
