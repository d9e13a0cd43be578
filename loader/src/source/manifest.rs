//! A JSON-lines manifest: one sample per line, naming its image (a path relative to
//! the manifest, or a URL beside a remote one) and any of its fields. Any tool can
//! write one; the schema is in `docs/samples.md`:
//!
//! ```text
//! {"classes": ["cat", "dog"], "keypoint_names": ["left_eye", "right_eye"]}   optional header
//! {"image": "img/0.jpg", "label": "cat", "text": "a cat", "boxes": [[1, 2, 30, 40]],
//!  "box_labels": ["cat"], "mask": "masks/0.png", "labels": ["cat", "dog"],
//!  "keypoints": [[[10, 12, 2], [20, 12, 1]]], "meta": {"any": "json"},
//!  "masks": ["masks/0_0.png"]}
//! ```
//!
//! `masks` holds one instance mask per box: a PNG's path (nonzero is the instance) or
//! COCO's RLE object (`{"size": [h, w], "counts": ...}`), decoded when read.
//!
//! Lines are parsed when the manifest is opened; a line that does not parse, or names
//! a file that is not there, is an error of that sample (so `on_error = skip` skips
//! it) naming the manifest and the line.

use std::collections::BTreeSet;

use serde_json::Value;

use super::place::{read_file, Base, Place};
use super::{OpenOptions, RecordKind, Source, SourceError, Why};
use crate::sample::{Annotation, Field, Fields, KeypointSchema, MaskData};

/// One parsed line.
#[derive(Debug)]
struct Entry {
    image: Place,
    label: u32,
    /// Everything but the masks, in image coordinates.
    ann: Annotation,
    mask: Option<Place>,
    /// One per box, when the line has instance masks.
    masks: Vec<InstanceMask>,
}

/// A manifest line's instance mask, read with its sample.
#[derive(Debug)]
enum InstanceMask {
    /// A PNG file.
    File(Place),
    /// An RLE object, decoded when read (decoded at open, every mask of the set
    /// would be in memory at once).
    Rle(Value),
}

/// A JSON-lines manifest and the files it names.
#[derive(Debug)]
pub struct Manifest {
    what: String,
    base: Base,
    /// Each line's sample, or why it is unusable.
    entries: Vec<Result<Entry, Unusable>>,
    /// Line number (from 1) of each sample.
    lines: Vec<usize>,
    classes: Vec<String>,
    fields: Fields,
    schema: KeypointSchema,
}

/// Why a line's sample is unusable, told each time the sample is read.
#[derive(Debug)]
enum Unusable {
    /// What is wrong with the line.
    Reason(String),
    /// The line is not JSON: the parser's words and the line. The parser's error, the
    /// source of each error about the sample, cannot be cloned: parsing the line again
    /// makes it anew.
    NotJson { reason: String, line: String },
}

impl Unusable {
    /// The error about the sample, which the describer names `what`.
    fn error(&self, what: String) -> SourceError {
        match self {
            Unusable::Reason(reason) => SourceError::record(what, reason.clone()),
            Unusable::NotJson { reason, line } => {
                let e = SourceError::record(what, reason.clone());
                match serde_json::from_str::<Value>(line) {
                    Err(cause) => e.caused_by(cause),
                    Ok(_) => e,
                }
            }
        }
    }
}

/// A class given as a number or a name, before the class list is known.
enum ClassRef {
    Index(u64),
    Name(String),
}

fn class_ref(v: &Value, what: &str) -> Result<ClassRef, String> {
    match v {
        Value::String(s) => Ok(ClassRef::Name(s.clone())),
        Value::Number(n) => n
            .as_u64()
            .map(ClassRef::Index)
            .ok_or_else(|| format!("{what} {n} is not a class number or name")),
        other => Err(format!("{what} {other} is not a class number or name")),
    }
}

/// A line before class names are resolved.
struct Raw {
    image: String,
    label: Option<ClassRef>,
    labels: Vec<ClassRef>,
    box_labels: Vec<ClassRef>,
    ann: Annotation,
    mask: Option<String>,
    /// The `masks` entries: paths or RLE objects.
    masks: Vec<Value>,
    /// The list fields the line has a key for, empty or not: a set whose every image
    /// has `"boxes": []` still has the boxes field (batches with zero boxes).
    listed: Fields,
}

fn numbers<const N: usize>(v: &Value, what: &str) -> Result<[f32; N], String> {
    let arr = v
        .as_array()
        .filter(|a| a.len() == N)
        .ok_or_else(|| format!("{what} {v} is not a list of {N} numbers"))?;
    let mut out = [0f32; N];
    for (o, x) in out.iter_mut().zip(arr) {
        *o = x
            .as_f64()
            .ok_or_else(|| format!("{what} {v} is not a list of {N} numbers"))? as f32;
    }
    Ok(out)
}

/// One instance's keypoints: `[[x, y, v], ...]` or the flat `[x, y, v, ...]` COCO
/// writes.
fn instance(v: &Value, k: &mut Option<usize>, out: &mut Vec<f32>) -> Result<(), String> {
    let arr = v
        .as_array()
        .ok_or_else(|| format!("keypoint instance {v} is not a list"))?;
    let before = out.len();
    if arr.first().is_some_and(Value::is_array) {
        for p in arr {
            out.extend(numbers::<3>(p, "keypoint")?);
        }
    } else {
        for x in arr {
            out.push(
                x.as_f64()
                    .ok_or_else(|| format!("keypoint value {x} is not a number"))?
                    as f32,
            );
        }
        if arr.len() % 3 != 0 {
            return Err(format!(
                "a flat keypoint instance holds {} values, not (x, y, visibility) triples",
                arr.len()
            ));
        }
    }
    let n = (out.len() - before) / 3;
    match *k {
        None => *k = Some(n),
        Some(want) if want != n => {
            return Err(format!(
                "a keypoint instance has {n} points, others have {want}"
            ))
        }
        Some(_) => {}
    }
    Ok(())
}

fn parse_line(v: &Value, k: &mut Option<usize>) -> Result<Raw, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| "not a JSON object".to_string())?;
    let image = obj
        .get("image")
        .and_then(Value::as_str)
        .ok_or_else(|| "no \"image\" (a path or URL)".to_string())?
        .to_string();
    parse_fields(obj, k, image)
}

/// A sample's fields in a JSON object (every key of a line but `image`).
fn parse_fields(
    obj: &serde_json::Map<String, Value>,
    k: &mut Option<usize>,
    image: String,
) -> Result<Raw, String> {
    let mut raw = Raw {
        image,
        label: obj
            .get("label")
            .map(|l| class_ref(l, "label"))
            .transpose()?,
        labels: Vec::new(),
        box_labels: Vec::new(),
        ann: Annotation::default(),
        mask: None,
        masks: Vec::new(),
        listed: Fields::default(),
    };
    for (key, field) in [
        ("labels", Field::Labels),
        ("boxes", Field::Boxes),
        ("keypoints", Field::Keypoints),
        ("masks", Field::Masks),
    ] {
        if obj.contains_key(key) {
            raw.listed = raw.listed.with(field);
        }
    }
    if let Some(l) = obj.get("labels") {
        let arr = l
            .as_array()
            .ok_or_else(|| format!("labels {l} is not a list"))?;
        raw.labels = arr
            .iter()
            .map(|x| class_ref(x, "labels entry"))
            .collect::<Result<_, _>>()?;
    }
    if let Some(t) = obj.get("text").or_else(|| obj.get("caption")) {
        raw.ann.text = Some(
            t.as_str()
                .ok_or_else(|| format!("text {t} is not a string"))?
                .to_string(),
        );
    }
    if let Some(b) = obj.get("boxes") {
        let arr = b
            .as_array()
            .ok_or_else(|| format!("boxes {b} is not a list"))?;
        raw.ann.boxes = arr
            .iter()
            .map(|x| numbers::<4>(x, "box"))
            .collect::<Result<_, _>>()?;
        // An empty box list (an image with no objects) needs no classes.
        let labels = match obj.get("box_labels") {
            Some(l) => l
                .as_array()
                .ok_or_else(|| format!("box_labels {l} is not a list"))?
                .as_slice(),
            None if raw.ann.boxes.is_empty() => &[],
            None => return Err("boxes without \"box_labels\" (one class per box)".into()),
        };
        raw.box_labels = labels
            .iter()
            .map(|x| class_ref(x, "box label"))
            .collect::<Result<_, _>>()?;
        if raw.box_labels.len() != raw.ann.boxes.len() {
            return Err(format!(
                "{} boxes but {} box_labels",
                raw.ann.boxes.len(),
                raw.box_labels.len()
            ));
        }
    }
    if let Some(m) = obj.get("mask") {
        raw.mask = Some(
            m.as_str()
                .ok_or_else(|| format!("mask {m} is not a path"))?
                .to_string(),
        );
    }
    if let Some(m) = obj.get("masks") {
        let arr = m
            .as_array()
            .ok_or_else(|| format!("masks {m} is not a list (one instance mask per box)"))?;
        if let Some(bad) = arr.iter().find(|v| !v.is_string() && !v.is_object()) {
            return Err(format!(
                "instance mask {bad} is neither a PNG's path nor an RLE object \
                 ({{\"size\": [height, width], \"counts\": ...}})"
            ));
        }
        if arr.len() != raw.ann.boxes.len() {
            return Err(format!(
                "{} boxes but {} masks (one instance mask per box)",
                raw.ann.boxes.len(),
                arr.len()
            ));
        }
        raw.masks.clone_from(arr);
    }
    if let Some(kp) = obj.get("keypoints") {
        let arr = kp
            .as_array()
            .ok_or_else(|| format!("keypoints {kp} is not a list of instances"))?;
        for inst in arr {
            instance(inst, k, &mut raw.ann.keypoints)?;
        }
    }
    if let Some(meta) = obj.get("meta") {
        raw.ann.raw = Some(meta.to_string().into_bytes());
    }
    Ok(raw)
}

/// A sample's fields as one JSON object, the schema of a manifest line without `image`
/// and `mask`: a tar shard's `.json` member, a packed record's fields. Classes are
/// numbers here (the shard's class names, when it has them, are in its index); the
/// label is also read from `cls` or `class`, as WebDataset writes it. The fields whose
/// keys the object lists (`labels`, `boxes`, `keypoints`) come last, empty lists
/// included: `"boxes": []` declares boxes, as it does in a manifest.
pub(crate) fn parse_fields_json(
    bytes: &[u8],
    k: &mut Option<usize>,
) -> Result<(Option<u32>, Annotation, Fields), Why> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| Why::because(format!("json: {e}"), e))?;
    let mut obj = v
        .as_object()
        .ok_or_else(|| "json: not a JSON object".to_string())?
        .clone();
    let mut label = None;
    for key in ["cls", "class", "label"] {
        if let Some(x) = obj.remove(key) {
            label = Some(x);
            break;
        }
    }
    let raw = parse_fields(&obj, k, String::new())?;
    let number = |c: &ClassRef| match c {
        ClassRef::Index(i) if *i < crate::sample::MAX_CLASSES as u64 => Ok(*i as u32),
        ClassRef::Index(i) => Err(format!(
            "class {i} is past the limit of {} classes",
            crate::sample::MAX_CLASSES
        )),
        ClassRef::Name(n) => Err(format!(
            "class '{n}' is a name: a shard's json gives class numbers (the names go in \
             the shard's index)"
        )),
    };
    let label = label
        .map(|x| class_ref(&x, "label").and_then(|c| number(&c)))
        .transpose()?;
    if let Some(path) = raw.masks.iter().find_map(Value::as_str) {
        return Err(format!(
            "instance mask \"{path}\" is a path: a shard's json gives instance masks as RLE \
             objects ({{\"size\": [height, width], \"counts\": ...}})"
        )
        .into());
    }
    let mut ann = raw.ann;
    ann.labels = raw.labels.iter().map(number).collect::<Result<_, _>>()?;
    ann.box_labels = raw
        .box_labels
        .iter()
        .map(number)
        .collect::<Result<_, _>>()?;
    Ok((label, ann, raw.listed))
}

/// The instance masks of a tar shard's `.json` member (its `masks`, RLE objects that
/// [`parse_fields_json`] has checked the form of), decoded: kept apart so that
/// indexing a shard does not decode every mask in it.
pub(crate) fn instance_masks_json(bytes: &[u8]) -> Result<Vec<MaskData>, Why> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| Why::because(format!("json: {e}"), e))?;
    let Some(list) = v.get("masks").and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    list.iter()
        .map(|m| crate::source::coco::decode_rle_object(m).map_err(Why::from))
        .collect()
}

/// The JSON object [`parse_fields_json`] reads back: `label` (when given), `labels`,
/// `text`, `boxes` with `box_labels`, `keypoints`, `masks` (RLE objects, which
/// [`instance_masks_json`] decodes) and `meta` (the raw bytes, which must be JSON),
/// each only when the annotation has it.
pub(crate) fn fields_json(label: Option<u32>, ann: &Annotation, k: usize) -> Result<Vec<u8>, Why> {
    use serde_json::json;
    let mut obj = serde_json::Map::new();
    if let Some(l) = label {
        obj.insert("label".into(), json!(l));
    }
    if !ann.labels.is_empty() {
        obj.insert("labels".into(), json!(ann.labels));
    }
    if let Some(t) = &ann.text {
        obj.insert("text".into(), json!(t));
    }
    if !ann.boxes.is_empty() {
        obj.insert("boxes".into(), json!(ann.boxes));
        obj.insert("box_labels".into(), json!(ann.box_labels));
    }
    if !ann.keypoints.is_empty() && k > 0 {
        let instances: Vec<Vec<&[f32]>> = ann
            .keypoints
            .chunks(3 * k)
            .map(|inst| inst.chunks(3).collect())
            .collect();
        obj.insert("keypoints".into(), json!(instances));
    }
    if !ann.masks.is_empty() {
        let masks = ann
            .masks
            .iter()
            .enumerate()
            .map(|(i, m)| rle_of(m).map_err(|r| Why::from(format!("instance mask {i}: {r}"))))
            .collect::<Result<Vec<_>, _>>()?;
        obj.insert("masks".into(), Value::Array(masks));
    }
    if let Some(raw) = &ann.raw {
        let meta: Value = serde_json::from_slice(raw).map_err(|e| {
            Why::because(
                format!("its raw bytes are not JSON ({e}), which a json member needs"),
                e,
            )
        })?;
        obj.insert("meta".into(), meta);
    }
    serde_json::to_vec(&Value::Object(obj)).map_err(|e| Why::because(format!("json: {e}"), e))
}

/// An instance mask as the RLE object a json member holds.
fn rle_of(m: &MaskData) -> Result<Value, String> {
    let mut decoded = Vec::new();
    let (w, h, data): (usize, usize, &[u8]) = match m {
        MaskData::Raw {
            width,
            height,
            data,
        } => (*width, *height, data),
        MaskData::Png(bytes) => {
            let max = stoker_augment::DEFAULT_MAX_PIXELS;
            let (w, h) = stoker_augment::mask::decode_mask(bytes, &mut decoded, max)
                .map_err(|e| e.to_string())?;
            (w, h, &decoded)
        }
    };
    if data.len() != w * h {
        return Err(format!("{} bytes are not {w}x{h}", data.len()));
    }
    Ok(crate::source::coco::encode_rle_object(w, h, data))
}

/// The class list: the header's, else the names used (sorted), else the numbers used.
fn class_list(
    header: Option<&[String]>,
    raws: &[Result<Raw, Unusable>],
) -> Result<Vec<String>, String> {
    if let Some(h) = header {
        return Ok(h.to_vec());
    }
    let mut names = BTreeSet::new();
    let mut max = None::<u64>;
    for r in raws.iter().flatten() {
        for c in r.label.iter().chain(&r.labels).chain(&r.box_labels) {
            match c {
                ClassRef::Name(n) => {
                    names.insert(n.clone());
                }
                ClassRef::Index(i) => max = Some(max.map_or(*i, |m| m.max(*i))),
            }
        }
    }
    match (names.is_empty(), max) {
        (false, Some(_)) => Err(
            "labels are given both as numbers and as names; give names only, or a header line \
             {\"classes\": [...]}"
                .into(),
        ),
        (false, None) => Ok(names.into_iter().collect()),
        (true, Some(m)) => {
            if m >= crate::sample::MAX_CLASSES as u64 {
                return Err(format!(
                    "class number {m} is past the limit of {} classes",
                    crate::sample::MAX_CLASSES
                ));
            }
            Ok((0..=m).map(|i| i.to_string()).collect())
        }
        (true, None) => Ok(Vec::new()),
    }
}

fn resolve_class(c: &ClassRef, classes: &[String]) -> Result<u32, String> {
    match c {
        ClassRef::Index(i) if (*i as usize) < classes.len() => Ok(*i as u32),
        ClassRef::Index(i) => Err(format!(
            "class {i} is out of range (the manifest has {} classes)",
            classes.len()
        )),
        ClassRef::Name(n) => classes
            .iter()
            .position(|c| c == n)
            .map(|i| i as u32)
            .ok_or_else(|| format!("unknown class '{n}'")),
    }
}

impl Manifest {
    /// Opens the manifest at `location` (a path or URL); image and mask names are
    /// relative to its folder.
    pub fn open(location: &str, options: &OpenOptions) -> Result<Manifest, SourceError> {
        let bytes = read_file(location, options)?;
        let bad = |reason: String| SourceError::format(location, reason);
        let text = std::str::from_utf8(&bytes)
            .map_err(|e| bad(format!("not UTF-8 text: {e}")).caused_by(e))?;
        // Windows tools start UTF-8 text with a byte-order mark, which JSON does not allow.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let base = Base::open(&Base::parent_of(location), options)?;
        let mut header_classes = None;
        let mut keypoint_names = None;
        let mut k = None;
        let mut raws = Vec::new();
        let mut lines = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let parsed = serde_json::from_str::<Value>(line);
            if raws.is_empty() {
                if let Ok(Value::Object(o)) = &parsed {
                    if !o.contains_key("image") {
                        let strings = |key: &str| -> Result<Option<Vec<String>>, SourceError> {
                            o.get(key)
                                .map(|v| {
                                    serde_json::from_value::<Vec<String>>(v.clone()).map_err(|_| {
                                        bad(format!("line {}: the header's \"{key}\" is not a list of names", n + 1))
                                    })
                                })
                                .transpose()
                        };
                        header_classes = strings("classes")?;
                        keypoint_names = strings("keypoint_names")?;
                        if let Some(names) = &keypoint_names {
                            k = Some(names.len());
                        }
                        continue;
                    }
                }
            }
            raws.push(match parsed {
                Ok(v) => parse_line(&v, &mut k).map_err(Unusable::Reason),
                Err(e) => Err(Unusable::NotJson {
                    reason: format!("{e}"),
                    line: line.to_string(),
                }),
            });
            lines.push(n + 1);
        }
        if raws.is_empty() {
            return Err(bad(
                "no samples (one JSON object per line, each with an \"image\")".into(),
            ));
        }
        let classes = class_list(header_classes.as_deref(), &raws).map_err(bad)?;
        let mut fields = Fields::of(&[Field::Image]);
        for r in raws.iter().flatten() {
            let a = &r.ann;
            let present = [
                (Field::Class, r.label.is_some()),
                (Field::Labels, r.listed.contains(Field::Labels)),
                (Field::Text, a.text.is_some()),
                (Field::Boxes, r.listed.contains(Field::Boxes)),
                (Field::Mask, r.mask.is_some()),
                (Field::Masks, r.listed.contains(Field::Masks)),
                (Field::Keypoints, r.listed.contains(Field::Keypoints)),
                (Field::Raw, a.raw.is_some()),
            ];
            for (f, has) in present {
                if has {
                    fields = fields.with(f);
                }
            }
        }
        if k.is_none() {
            // Only empty keypoint lists and no header: how many points an instance has
            // is unknown, so there is no keypoint field to batch.
            fields = fields.without(Field::Keypoints);
        }
        let entry_of = |r: Raw| -> Result<Entry, String> {
            let label = match &r.label {
                Some(c) => resolve_class(c, &classes)?,
                None if fields.contains(Field::Class) => {
                    return Err("no \"label\" (other lines have one)".into())
                }
                None => 0,
            };
            let mut ann = r.ann;
            ann.labels = r
                .labels
                .iter()
                .map(|c| resolve_class(c, &classes))
                .collect::<Result<_, _>>()?;
            ann.box_labels = r
                .box_labels
                .iter()
                .map(|c| resolve_class(c, &classes))
                .collect::<Result<_, _>>()?;
            ann.check(None, classes.len(), k.unwrap_or(0))?;
            let masks = r
                .masks
                .into_iter()
                .map(|m| match m {
                    Value::String(path) => base.resolve(&path).map(InstanceMask::File),
                    rle => Ok(InstanceMask::Rle(rle)),
                })
                .collect::<Result<_, _>>()?;
            Ok(Entry {
                image: base.resolve(&r.image)?,
                label,
                ann,
                mask: r.mask.as_deref().map(|m| base.resolve(m)).transpose()?,
                masks,
            })
        };
        let entries = raws
            .into_iter()
            .map(|raw| raw.and_then(|r| entry_of(r).map_err(Unusable::Reason)))
            .collect();
        let names =
            keypoint_names.unwrap_or_else(|| (0..k.unwrap_or(0)).map(|i| i.to_string()).collect());
        Ok(Manifest {
            what: location.to_string(),
            base,
            entries,
            lines,
            classes,
            fields,
            schema: KeypointSchema::from_names(names),
        })
    }

    fn entry(&self, index: usize) -> Result<&Entry, SourceError> {
        match self.entries.get(index) {
            Some(Ok(e)) => Ok(e),
            Some(Err(why)) => Err(why.error(self.describe(index))),
            None => Err(SourceError::record(
                format!("{} sample {index}", self.what),
                format!(
                    "index out of range (the manifest has {})",
                    self.entries.len()
                ),
            )),
        }
    }
}

impl Source for Manifest {
    fn len(&self) -> usize {
        self.entries.len()
    }

    fn classes(&self) -> &[String] {
        &self.classes
    }

    fn label(&self, index: usize) -> u32 {
        match self.entries.get(index) {
            Some(Ok(e)) => e.label,
            _ => 0,
        }
    }

    fn describe(&self, index: usize) -> String {
        match (self.lines.get(index), self.entries.get(index)) {
            (Some(line), Some(Ok(e))) => {
                format!("{} line {line} ({})", self.what, e.image.describe())
            }
            (Some(line), _) => format!("{} line {line}", self.what),
            _ => format!("{} sample {index} (out of range)", self.what),
        }
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        let e = self.entry(index)?;
        e.image.read(&self.base, buf)?;
        Ok(RecordKind::Encoded)
    }

    fn format(&self) -> &'static str {
        "manifest"
    }

    fn fields(&self) -> Fields {
        self.fields
    }

    fn keypoint_schema(&self) -> Option<&KeypointSchema> {
        Some(&self.schema).filter(|s| !s.is_empty())
    }

    fn read_sample(
        &self,
        index: usize,
        wanted: Fields,
        buf: &mut Vec<u8>,
        ann: &mut Annotation,
    ) -> Result<RecordKind, SourceError> {
        ann.clear();
        let e = self.entry(index)?;
        e.image.read(&self.base, buf)?;
        let a = &e.ann;
        if wanted.contains(Field::Labels) {
            ann.labels.clone_from(&a.labels);
        }
        if wanted.contains(Field::Text) {
            ann.text.clone_from(&a.text);
        }
        if wanted.contains(Field::Boxes) {
            ann.boxes.clone_from(&a.boxes);
            ann.box_labels.clone_from(&a.box_labels);
        }
        if wanted.contains(Field::Keypoints) {
            ann.keypoints.clone_from(&a.keypoints);
        }
        if wanted.contains(Field::Raw) {
            ann.raw.clone_from(&a.raw);
        }
        if wanted.contains(Field::Mask) {
            let place = e.mask.as_ref().ok_or_else(|| {
                SourceError::record(self.describe(index), "no \"mask\" (other lines have one)")
            })?;
            let mut bytes = Vec::new();
            place.read(&self.base, &mut bytes).map_err(|e| {
                SourceError::record(self.describe(index), format!("mask: {e}")).caused_by(e)
            })?;
            ann.mask = Some(MaskData::Png(bytes));
        }
        if wanted.contains(Field::Masks) {
            if e.masks.len() != a.boxes.len() {
                return Err(SourceError::record(
                    self.describe(index),
                    format!(
                        "{} boxes and no \"masks\" (other lines have one instance mask per box)",
                        a.boxes.len()
                    ),
                ));
            }
            for (i, m) in e.masks.iter().enumerate() {
                let at = |r: String| format!("instance mask {i}: {r}");
                ann.masks.push(match m {
                    InstanceMask::File(place) => {
                        let mut bytes = Vec::new();
                        place.read(&self.base, &mut bytes).map_err(|e| {
                            SourceError::record(self.describe(index), at(e.to_string()))
                                .caused_by(e)
                        })?;
                        MaskData::Png(bytes)
                    }
                    InstanceMask::Rle(v) => crate::source::coco::decode_rle_object(v)
                        .map_err(|r| SourceError::record(self.describe(index), at(r)))?,
                });
            }
        }
        Ok(RecordKind::Encoded)
    }
}

/// True for a file name that is a JSON-lines manifest.
pub fn is_manifest_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.ends_with(".jsonl") || n.ends_with(".ndjson")
}
