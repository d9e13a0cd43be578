//! The index of one tar shard: each sample's key, the byte range of its image member
//! and its label, and (version 2) the byte ranges of its members with other fields: a
//! caption (`txt`), a `json` with more than a label, a mask (`mask.png`, `seg.png`).
//! Built by reading the 512-byte headers (seeking past the data where the reader can
//! seek; only `cls` and `json` members are read), or loaded from the `SHARD.tar.idx`
//! file that `stoker-load pack --format tar` writes beside each shard.
//!
//! WebDataset's grouping: a member's key is its path up to the first `.` of its file
//! name, the rest is its extension; consecutive members with one key are one sample.

use std::io::Read;

use serde::{Deserialize, Serialize};

use crate::source::Why;

/// What the sidecar index says it is.
pub const INDEX_FORMAT: &str = "stoker-tar-index";
/// The index version written for shards of image and label only (and read).
pub const INDEX_VERSION: u32 = 1;
/// The index version written for shards with more fields; it adds [`FieldIndex`].
pub const INDEX_VERSION_FIELDS: u32 = 2;
/// The sidecar index of `SHARD.tar` is `SHARD.tar` followed by this.
pub const INDEX_SUFFIX: &str = ".idx";
/// Image extensions (a sample with two image members is an error).
pub const IMAGE_EXTS: [&str; 6] = ["jpg", "jpeg", "png", "webp", "ppm", "pgm"];
/// A sample's mask member (a PNG of class indices; two are an error).
pub const MASK_EXTS: [&str; 2] = ["mask.png", "seg.png"];
/// A sample's caption member.
pub const TEXT_EXT: &str = "txt";
/// The label of a sample without one (in a shard whose samples carry other fields).
pub const NO_LABEL: u32 = u32::MAX;
/// Largest caption member read.
const MAX_TEXT_BYTES: u64 = 1 << 20;
/// Largest `cls` member read (a number), and `json` member.
const MAX_CLS_BYTES: u64 = 64;
const MAX_JSON_BYTES: u64 = 1 << 22;

/// One sample of a shard: key, image bytes `offset..offset + len` in the shard, label
/// ([`NO_LABEL`] when it has none).
pub type IndexedSample = (String, u64, u64, u32);

/// A member with a field: its extension (`txt`, `json`, `mask.png`, ...) and its bytes
/// `offset..offset + len` in the shard.
pub type Member = (String, u64, u64);

/// What version 2 of the index adds: the members beyond image and label. Empty for a
/// shard of images and labels, whose index stays version 1 byte for byte.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldIndex {
    /// The fields the samples carry beyond image and class (field names).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<String>,
    /// Each sample's members with fields, in sample order (empty when none has any).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<Vec<Member>>,
    /// The largest class number the `json` members use (labels, box labels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_class: Option<u32>,
    /// Points per keypoint instance, when samples have keypoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keypoints: Option<usize>,
    /// The points' names (left/right pairs swap under a flip), when the writer knew them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keypoint_names: Vec<String>,
}

impl FieldIndex {
    /// Whether the samples carry no fields beyond image and class.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

/// The index of one shard (also the sidecar file's JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardIndex {
    /// [`INDEX_FORMAT`], which marks the file as a stoker tar index.
    pub format: String,
    /// [`INDEX_VERSION`], or [`INDEX_VERSION_FIELDS`] when the samples carry fields.
    pub version: u32,
    /// Size of the shard the index describes: an index of another size is stale.
    pub tar_bytes: u64,
    /// Class names by label, when the writer knew them (empty: the labels' numbers).
    #[serde(default)]
    pub classes: Vec<String>,
    /// Every sample of the shard, in shard order.
    pub samples: Vec<IndexedSample>,
    /// The members with fields beyond image and label (empty for version 1).
    #[serde(flatten)]
    pub extra: FieldIndex,
}

impl ShardIndex {
    /// A version 1 index (image and label only) of a shard of `tar_bytes` bytes.
    pub fn new(tar_bytes: u64, classes: Vec<String>, samples: Vec<IndexedSample>) -> Self {
        ShardIndex {
            format: INDEX_FORMAT.into(),
            version: INDEX_VERSION,
            tar_bytes,
            classes,
            samples,
            extra: FieldIndex::default(),
        }
    }

    /// The index with fields beyond image and class (version 2 when there are any).
    pub fn with_fields(mut self, extra: FieldIndex) -> Self {
        if !extra.is_empty() {
            self.version = INDEX_VERSION_FIELDS;
        }
        self.extra = extra;
        self
    }

    /// Parses and checks a sidecar index for a shard of `tar_bytes` bytes.
    pub fn parse(bytes: &[u8], tar_bytes: u64) -> Result<ShardIndex, String> {
        Self::parse_why(bytes, tar_bytes).map_err(String::from)
    }

    /// [`parse`](Self::parse), keeping the JSON parser's error when there is one.
    pub(crate) fn parse_why(bytes: &[u8], tar_bytes: u64) -> Result<ShardIndex, Why> {
        let idx: ShardIndex = serde_json::from_slice(bytes)
            .map_err(|e| Why::because(format!("not a shard index: {e}"), e))?;
        if idx.format != INDEX_FORMAT {
            return Err(format!(
                "format '{}', expected '{INDEX_FORMAT}'",
                super::printable(&idx.format)
            )
            .into());
        }
        if idx.version != INDEX_VERSION && idx.version != INDEX_VERSION_FIELDS {
            return Err(format!(
                "index version {} (this reader knows {INDEX_VERSION} and \
                 {INDEX_VERSION_FIELDS})",
                idx.version
            )
            .into());
        }
        let members = &idx.extra.members;
        if !members.is_empty() && members.len() != idx.samples.len() {
            return Err(format!(
                "the index lists members for {} samples, and {} samples",
                members.len(),
                idx.samples.len()
            )
            .into());
        }
        for (ext, offset, len) in members.iter().flatten() {
            if offset.checked_add(*len).is_none_or(|end| end > tar_bytes) {
                return Err(format!(
                    "a .{} member: bytes {offset}..+{len} lie past the end of the shard \
                     ({tar_bytes} bytes)",
                    super::printable(ext)
                )
                .into());
            }
        }
        if idx.tar_bytes != tar_bytes {
            return Err(format!(
                "the index describes a shard of {} bytes, the shard has {tar_bytes} (truncated or replaced?)",
                idx.tar_bytes
            )
            .into());
        }
        for (key, offset, len, _) in &idx.samples {
            if offset.checked_add(*len).is_none_or(|end| end > tar_bytes) {
                return Err(format!(
                    "sample {}: bytes {offset}..+{len} lie past the end of the shard ({tar_bytes} bytes)",
                    super::printable(key)
                )
                .into());
            }
        }
        Ok(idx)
    }

    /// The index as the sidecar file's JSON bytes.
    pub fn to_json(&self) -> Vec<u8> {
        // Serialising plain strings and numbers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }
}

/// Splits a member path into (key, extension): the extension starts at the first `.`
/// of the file name and is lower-cased.
pub fn split_key(path: &str) -> (&str, String) {
    let name_start = path.rfind('/').map_or(0, |i| i + 1);
    match path[name_start..].find('.') {
        Some(dot) => {
            let at = name_start + dot;
            (&path[..at], path[at + 1..].to_ascii_lowercase())
        }
        None => (path, String::new()),
    }
}

/// A label from a `cls` member (a whole number, whitespace around it allowed).
pub fn parse_cls(bytes: &[u8]) -> Result<u32, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "cls is not text".to_string())?;
    text.trim()
        .parse::<u32>()
        .ok()
        .filter(|&l| l < u32::MAX)
        .ok_or_else(|| {
            format!(
                "cls '{}' is not a class number",
                super::printable(text.trim())
            )
        })
}

/// A label from a `json` member: its `cls`, `class` or `label` field, a whole number.
pub fn parse_json_label(bytes: &[u8]) -> Result<Option<u32>, String> {
    json_label(bytes).map_err(String::from)
}

/// [`parse_json_label`], keeping the JSON parser's error when there is one.
fn json_label(bytes: &[u8]) -> Result<Option<u32>, Why> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| Why::because(format!("json member: {e}"), e))?;
    for field in ["cls", "class", "label"] {
        if let Some(x) = v.get(field) {
            return x
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .filter(|&l| l < u32::MAX)
                .map(Some)
                .ok_or_else(|| format!("json field '{field}' is {x}, not a class number").into());
        }
    }
    Ok(None)
}

/// One sample being gathered while members of its key go by. The image, the mask and
/// the labels keep their member's name (escaped), for the error when a second one
/// comes: which of two images or masks is meant, or which of two labels that differ,
/// is no reader's guess to make.
#[derive(Default)]
struct Pending {
    key: String,
    image: Option<(String, u64, u64)>,
    mask: Option<String>,
    cls: Option<(u32, String)>,
    json: Option<(u32, String)>,
    /// Members with fields (a caption, a json with more than a label, a mask).
    members: Vec<Member>,
    /// Extensions seen under this key: one twice means two samples share the key.
    exts: Vec<String>,
}

/// The fields found while scanning, for [`FieldIndex`].
#[derive(Default)]
struct Found {
    fields: crate::sample::Fields,
    members: Vec<Vec<Member>>,
    max_class: Option<u32>,
    keypoints: Option<usize>,
}

impl Found {
    fn class(&mut self, c: u32) {
        self.max_class = Some(self.max_class.map_or(c, |m| m.max(c)));
    }

    fn into_index(self) -> FieldIndex {
        if self.members.iter().all(Vec::is_empty) {
            return FieldIndex::default();
        }
        FieldIndex {
            fields: self.fields.iter().map(|f| f.name().to_string()).collect(),
            members: self.members,
            max_class: self.max_class,
            keypoints: self.keypoints,
            keypoint_names: Vec::new(),
        }
    }
}

impl Pending {
    fn flush(&mut self, out: &mut Vec<IndexedSample>, found: &mut Found) -> Result<(), String> {
        let p = std::mem::take(self);
        let Some((_, offset, len)) = p.image else {
            // A key with no image (metadata only) is not a sample.
            return Ok(());
        };
        if let (Some((c, cls)), Some((j, json))) = (&p.cls, &p.json) {
            if c != j {
                return Err(format!(
                    "sample {}: two labels that differ, {c} in member {cls} and {j} in \
                     member {json} (give one label, or the same in both)",
                    super::printable(&p.key)
                ));
            }
        }
        // A sample with other fields may go without a label (a caption set); one of
        // image and label only may not (it would be an image without anything).
        let label = match p.cls.or(p.json).map(|(l, _)| l) {
            Some(l) => l,
            None if !p.members.is_empty() => NO_LABEL,
            None => {
                return Err(format!(
                    "sample {}: no label (a .cls member or a class field in .json) and no \
                     other field (.txt, .json, .mask.png)",
                    super::printable(&p.key)
                ))
            }
        };
        found.members.push(p.members);
        out.push((p.key, offset, len, label));
        Ok(())
    }
}

/// Reads the index of a shard from its headers. `tar_bytes` is the shard's size
/// where known (a file, a HEAD); without it (a stream) the bytes read are counted.
/// Errors say what is wrong (a truncated shard, a sample without a label, ...); the
/// caller adds the shard's name.
pub fn scan<R: Read>(
    entries: ::tar::Entries<'_, R>,
    tar_bytes: Option<u64>,
) -> Result<(Vec<IndexedSample>, FieldIndex, u64), Why> {
    let mut out = Vec::new();
    let mut found = Found::default();
    let mut cur = Pending::default();
    let mut end_of_members = 0u64;
    for entry in entries {
        // The tar crate's messages quote member names as they are: escape them.
        let mut entry = entry.map_err(|e| {
            Why::because(
                format!("truncated or damaged: {}", super::printable(&e.to_string())),
                e,
            )
        })?;
        let kind = entry.header().entry_type();
        let offset = entry.raw_file_position();
        let size = entry.size();
        let end = offset
            .checked_add(size.div_ceil(512) * 512)
            .ok_or_else(|| "a member's size overflows".to_string())?;
        if let Some(total) = tar_bytes {
            if offset.saturating_add(size) > total {
                let path = entry
                    .path()
                    .map(|p| super::printable(&p.display().to_string()))
                    .unwrap_or_default();
                return Err(format!(
                    "truncated: member {path} needs bytes {offset}..{}, the shard has {total}",
                    offset + size
                )
                .into());
            }
        }
        end_of_members = end_of_members.max(end);
        if !(kind.is_file() || kind.is_contiguous()) {
            continue;
        }
        let raw = entry
            .path()
            .map_err(|e| {
                Why::because(
                    format!("a member's name: {}", super::printable(&e.to_string())),
                    e,
                )
            })?
            .to_string_lossy()
            .into_owned();
        let (key, ext) = split_key(&raw);
        if key != cur.key {
            cur.flush(&mut out, &mut found)?;
            cur.key = key.to_string();
        }
        // WebDataset refuses this too: `0.jpg 0.cls 0.jpg 0.cls` is two samples under
        // one key, which grouping by key would merge into one (the first image with
        // the second label).
        if cur.exts.contains(&ext) {
            return Err(format!(
                "duplicate key {}: a second {} member (two samples share a key; keys must \
                 be unique and a sample's members consecutive)",
                super::printable(key),
                super::printable(&raw)
            )
            .into());
        }
        cur.exts.push(ext.clone());
        // Messages quote the name; the key above stays as stored.
        let path = super::printable(&raw);
        if IMAGE_EXTS.contains(&ext.as_str()) {
            if let Some((first, _, _)) = &cur.image {
                return Err(two_members(key, "images", first, &path));
            }
            cur.image = Some((path, offset, size));
        } else if MASK_EXTS.contains(&ext.as_str()) {
            if let Some(first) = &cur.mask {
                return Err(two_members(key, "masks", first, &path));
            }
            cur.mask = Some(path);
            cur.members.push((ext.clone(), offset, size));
            found.fields = found.fields.with(crate::sample::Field::Mask);
        } else if ext == TEXT_EXT {
            if size > MAX_TEXT_BYTES {
                return Err(format!(
                    "member {path}: {size} bytes, more than a caption may have ({MAX_TEXT_BYTES})"
                )
                .into());
            }
            cur.members.push((ext.clone(), offset, size));
            found.fields = found.fields.with(crate::sample::Field::Text);
        } else if ext == "cls" || ext == "json" {
            let limit = if ext == "cls" {
                MAX_CLS_BYTES
            } else {
                MAX_JSON_BYTES
            };
            if size > limit {
                return Err(format!(
                    "member {path}: {size} bytes, more than a {} member may have ({limit})",
                    if ext == "cls" { "label" } else { "json" }
                )
                .into());
            }
            let mut bytes = Vec::with_capacity(size as usize);
            (&mut entry)
                .take(limit)
                .read_to_end(&mut bytes)
                .map_err(|e| {
                    Why::because(format!("member {path}: truncated or unreadable: {e}"), e)
                })?;
            if (bytes.len() as u64) < size {
                return Err(format!("truncated: member {path} ends early").into());
            }
            let err = |w: Why| w.reword(|r| format!("member {path}: {r}"));
            if ext == "cls" {
                cur.cls = Some((parse_cls(&bytes).map_err(|r| err(r.into()))?, path.clone()));
            } else {
                cur.json = json_label(&bytes).map_err(err)?.map(|l| (l, path.clone()));
                let (_, ann, listed) =
                    crate::source::manifest::parse_fields_json(&bytes, &mut found.keypoints)
                        .map_err(err)?;
                if note_fields(&ann, listed, &mut found) {
                    cur.members.push((ext.clone(), offset, size));
                }
            }
        }
    }
    cur.flush(&mut out, &mut found)?;
    Ok((out, found.into_index(), end_of_members))
}

/// The error of a sample with two members of one kind (`what`: images, masks), named
/// as they are in the shard (escaped).
fn two_members(key: &str, what: &str, first: &str, second: &str) -> Why {
    format!(
        "sample {}: two {what}, members {first} and {second} (a sample has one; which is \
         meant is not for the reader to guess)",
        super::printable(key)
    )
    .into()
}

/// Notes the fields a `json` member carries beyond a label; false when it has none.
/// A list of tags or boxes declares its field even when empty (`listed`), as a
/// manifest line's does: a set whose images all hold no objects is still a detection
/// set, not a classification one.
fn note_fields(
    ann: &crate::sample::Annotation,
    listed: crate::sample::Fields,
    found: &mut Found,
) -> bool {
    use crate::sample::Field;
    let present = [
        (Field::Labels, listed.contains(Field::Labels)),
        (Field::Text, ann.text.is_some()),
        (Field::Boxes, listed.contains(Field::Boxes)),
        (Field::Keypoints, !ann.keypoints.is_empty()),
        (Field::Raw, ann.raw.is_some()),
        (Field::Masks, listed.contains(Field::Masks)),
    ];
    let mut any = false;
    for (f, has) in present {
        if has {
            found.fields = found.fields.with(f);
            any = true;
        }
    }
    for &c in ann.labels.iter().chain(&ann.box_labels) {
        found.class(c);
    }
    any
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_at_the_first_dot_of_the_name() {
        assert_eq!(
            split_key("a/b.c/000001.seg.JPG"),
            ("a/b.c/000001", "seg.jpg".into())
        );
        assert_eq!(split_key("x.cls"), ("x", "cls".into()));
        assert_eq!(split_key("noext"), ("noext", String::new()));
    }

    #[test]
    fn labels_from_cls_and_json() {
        assert_eq!(parse_cls(b" 7\n").unwrap(), 7);
        assert!(parse_cls(b"cat").is_err());
        assert_eq!(parse_json_label(br#"{"class": 3}"#).unwrap(), Some(3));
        assert_eq!(parse_json_label(br#"{"other": 3}"#).unwrap(), None);
        assert!(parse_json_label(br#"{"cls": "x"}"#).is_err());
    }

    #[test]
    fn stale_or_foreign_indexes_are_refused() {
        let idx = ShardIndex::new(4096, vec![], vec![("k".into(), 512, 100, 0)]);
        let bytes = idx.to_json();
        assert_eq!(ShardIndex::parse(&bytes, 4096).unwrap(), idx);
        assert!(ShardIndex::parse(&bytes, 4000)
            .unwrap_err()
            .contains("truncated or replaced"));
        let past = ShardIndex::new(600, vec![], vec![("k".into(), 512, 100, 0)]).to_json();
        assert!(ShardIndex::parse(&past, 600)
            .unwrap_err()
            .contains("past the end"));
        assert!(ShardIndex::parse(b"{}", 1).is_err());
    }
}
