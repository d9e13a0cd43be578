//! The packed format's byte layout: the fixed header, index entries, the class table
//! and (version 2) the field table and sample records, with their encoders and checked
//! decoders (specified in docs/packed-format.md).

use crate::source::RecordKind;

/// The first eight bytes of every packed file.
pub const MAGIC: [u8; 8] = *b"STKPACK1";
/// The format version of files of images and labels (written for them, and read).
pub const VERSION: u32 = 1;
/// The format version of files whose records carry fields beyond image and label: a
/// field table after the class table, and each record a [`SampleRecord`].
pub const VERSION_FIELDS: u32 = 2;
/// The format version of files of raw pixels with a shape per record (a
/// [`ShapedRecord`] each, images resized to a longest side), with or without a field
/// table.
pub const VERSION_SHAPED: u32 = 3;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 128;
/// Size of one index entry in bytes: offset u64, length u64, label u32, crc32 u32.
pub const ENTRY_LEN: usize = 24;

const LAYOUT_ENCODED: u32 = 0;
const LAYOUT_RAW: u32 = 1;
/// Version 3: each record starts with its own shape.
const LAYOUT_SHAPED: u32 = 2;
/// Bytes of a [`ShapedRecord`]'s shape: width, height, channels, each a u32.
pub const SHAPE_LEN: usize = 12;
/// Bytes 0..HEADER_CRC_AT are covered by the header checksum stored at HEADER_CRC_AT.
const HEADER_CRC_AT: usize = HEADER_LEN - 4;
/// A class name longer than this is taken as damage, not a name.
pub(crate) const MAX_CLASS_NAME: usize = 4096;

/// Bytes in one raw record of `layout`; `None` for encoded records or a size that
/// does not fit in a u64.
pub(crate) fn raw_len(layout: RecordKind) -> Option<u64> {
    match layout {
        RecordKind::Encoded => None,
        RecordKind::Raw {
            width,
            height,
            channels,
        } => u64::from(width)
            .checked_mul(u64::from(height))?
            .checked_mul(u64::from(channels)),
    }
}

/// `encoded` or `WxHxC`, for messages.
pub fn layout_name(layout: RecordKind) -> String {
    match layout {
        RecordKind::Encoded => "encoded".into(),
        RecordKind::Raw {
            width,
            height,
            channels,
        } => format!("{width}x{height}x{channels}"),
    }
}

/// The decoded fixed header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// [`VERSION`], or [`VERSION_FIELDS`] with the field table below.
    pub(crate) version: u32,
    pub(crate) count: u64,
    /// The layout every record shares; [`RecordKind::Encoded`] as a placeholder when
    /// `shaped` (each record then says its own).
    pub(crate) layout: RecordKind,
    /// Version 3: every record is a [`ShapedRecord`] (inside a [`SampleRecord`] when
    /// the file has a field table).
    pub(crate) shaped: bool,
    pub(crate) num_classes: u32,
    pub(crate) data_offset: u64,
    pub(crate) data_len: u64,
    pub(crate) classes_offset: u64,
    pub(crate) classes_len: u64,
    pub(crate) classes_crc: u32,
    pub(crate) index_offset: u64,
    pub(crate) index_crc: u32,
    /// Version 2: the field table (JSON), where it is and its CRC-32.
    pub(crate) fields_offset: u64,
    pub(crate) fields_len: u64,
    pub(crate) fields_crc: u32,
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Little-endian u32 at `at`; `None` past the end of `b`.
fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes(s.try_into().ok()?))
}

fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

impl Header {
    /// Whether a field table follows the index: always in version 2, in version 3 when
    /// it has one (a non-zero length).
    pub(crate) fn has_fields(&self) -> bool {
        self.version == VERSION_FIELDS || (self.shaped && self.fields_len > 0)
    }

    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        put_u32(&mut b, 8, self.version);
        put_u32(&mut b, 12, HEADER_LEN as u32);
        put_u64(&mut b, 16, self.count);
        let (layout, w, h, c) = match self.layout {
            _ if self.shaped => (LAYOUT_SHAPED, 0, 0, 0),
            RecordKind::Encoded => (LAYOUT_ENCODED, 0, 0, 0),
            RecordKind::Raw {
                width,
                height,
                channels,
            } => (LAYOUT_RAW, width, height, u32::from(channels)),
        };
        put_u32(&mut b, 24, layout);
        put_u32(&mut b, 28, w);
        put_u32(&mut b, 32, h);
        put_u32(&mut b, 36, c);
        put_u32(&mut b, 40, self.num_classes);
        put_u32(&mut b, 44, self.classes_crc);
        put_u64(&mut b, 48, self.data_offset);
        put_u64(&mut b, 56, self.data_len);
        put_u64(&mut b, 64, self.classes_offset);
        put_u64(&mut b, 72, self.classes_len);
        put_u64(&mut b, 80, self.index_offset);
        put_u32(&mut b, 88, self.index_crc);
        if self.version == VERSION_FIELDS || self.version == VERSION_SHAPED {
            put_u64(&mut b, 92, self.fields_offset);
            put_u64(&mut b, 100, self.fields_len);
            put_u32(&mut b, 108, self.fields_crc);
        }
        // Then reserved, zero, up to the checksum.
        let crc = crc32fast::hash(&b[..HEADER_CRC_AT]);
        put_u32(&mut b, HEADER_CRC_AT, crc);
        b
    }

    /// Parse and check the header of a file of `file_len` bytes whose first bytes are
    /// `b`. Errors are reasons, to be prefixed with the file name.
    pub(crate) fn decode(b: &[u8], file_len: u64) -> Result<Header, String> {
        if b.is_empty() {
            return Err("empty file".into());
        }
        let head = &b[..b.len().min(MAGIC.len())];
        if head != &MAGIC[..head.len()] {
            return Err(format!(
                "bad magic {:?} (a packed file starts with {:?})",
                String::from_utf8_lossy(head),
                String::from_utf8_lossy(&MAGIC)
            ));
        }
        if b.len() < HEADER_LEN {
            return Err(format!(
                "truncated: header needs {HEADER_LEN} bytes, file has {file_len}"
            ));
        }
        let u32_at = |at| get_u32(b, at).unwrap_or(0);
        let u64_at = |at| get_u64(b, at).unwrap_or(0);
        let version = u32_at(8);
        if ![VERSION, VERSION_FIELDS, VERSION_SHAPED].contains(&version) {
            return Err(format!(
                "unsupported version {version} (this build reads versions {VERSION}, \
                 {VERSION_FIELDS} and {VERSION_SHAPED})"
            ));
        }
        let stored = u32_at(HEADER_CRC_AT);
        let computed = crc32fast::hash(&b[..HEADER_CRC_AT]);
        if stored != computed {
            return Err(format!(
                "header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ));
        }
        let header_len = u32_at(12);
        if header_len as usize != HEADER_LEN {
            return Err(format!(
                "header length field is {header_len}, version {version} uses {HEADER_LEN}"
            ));
        }
        let shaped = u32_at(24) == LAYOUT_SHAPED;
        if shaped != (version == VERSION_SHAPED) {
            return Err(format!(
                "record layout {} in a version {version} file (layout {LAYOUT_SHAPED}, a shape \
                 per record, is version {VERSION_SHAPED}'s and only its)",
                u32_at(24)
            ));
        }
        let layout = match u32_at(24) {
            LAYOUT_ENCODED | LAYOUT_SHAPED => RecordKind::Encoded,
            LAYOUT_RAW => {
                let (width, height, channels) = (u32_at(28), u32_at(32), u32_at(36));
                let channels = u8::try_from(channels)
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or_else(|| format!("raw layout has {channels} channels"))?;
                if width == 0 || height == 0 {
                    return Err(format!("raw layout has zero size {width}x{height}"));
                }
                let layout = RecordKind::Raw {
                    width,
                    height,
                    channels,
                };
                if raw_len(layout).is_none() {
                    return Err(format!(
                        "raw layout {width}x{height}x{channels} is too large"
                    ));
                }
                layout
            }
            other => return Err(format!("unknown record layout {other}")),
        };
        // Version 3 keeps version 2's field table slots (all zero without a table).
        let v2 = version == VERSION_FIELDS || shaped;
        let h = Header {
            version,
            count: u64_at(16),
            layout,
            shaped,
            num_classes: u32_at(40),
            classes_crc: u32_at(44),
            data_offset: u64_at(48),
            data_len: u64_at(56),
            classes_offset: u64_at(64),
            classes_len: u64_at(72),
            index_offset: u64_at(80),
            index_crc: u32_at(88),
            fields_offset: if v2 { u64_at(92) } else { 0 },
            fields_len: if v2 { u64_at(100) } else { 0 },
            fields_crc: if v2 { u32_at(108) } else { 0 },
        };
        let reserved = if v2 { 112 } else { 92 };
        if b[reserved..HEADER_CRC_AT].iter().any(|&x| x != 0) {
            return Err("reserved header bytes are not zero".into());
        }
        // A version 2 file of captions or masks may have no classes (no labels).
        if h.num_classes == 0 && !h.has_fields() {
            return Err("header lists no classes".into());
        }
        let region = |name: &str, offset: u64, len: u64| -> Result<(), String> {
            let end = offset
                .checked_add(len)
                .ok_or_else(|| format!("{name} offset {offset} + length {len} overflows"))?;
            if offset < HEADER_LEN as u64 {
                return Err(format!("{name} at byte {offset} overlaps the header"));
            }
            if end > file_len {
                return Err(format!(
                    "truncated: {name} needs {end} bytes, file has {file_len}"
                ));
            }
            Ok(())
        };
        let index_len = h
            .count
            .checked_mul(ENTRY_LEN as u64)
            .ok_or_else(|| format!("record count {} is impossibly large", h.count))?;
        region("index", h.index_offset, index_len)?;
        region("class table", h.classes_offset, h.classes_len)?;
        region("record data", h.data_offset, h.data_len)?;
        if h.has_fields() {
            region("field table", h.fields_offset, h.fields_len)?;
        }
        if usize::try_from(h.count).is_err() {
            return Err(format!("record count {} does not fit in memory", h.count));
        }
        Ok(h)
    }
}

/// Parse the class table: `num_classes` times (u32 length, UTF-8 bytes), filling `table`.
pub(crate) fn decode_classes(table: &[u8], num_classes: u32) -> Result<Vec<String>, String> {
    let mut classes = Vec::new();
    let mut at = 0usize;
    for k in 0..num_classes {
        let len = get_u32(table, at).ok_or_else(|| format!("class table ends before class {k}"))?
            as usize;
        at += 4;
        if len > MAX_CLASS_NAME {
            return Err(format!("class {k} has a name of {len} bytes"));
        }
        let bytes = at
            .checked_add(len)
            .and_then(|end| table.get(at..end))
            .ok_or_else(|| format!("class table ends inside the name of class {k}"))?;
        let name =
            std::str::from_utf8(bytes).map_err(|_| format!("class {k}'s name is not UTF-8"))?;
        classes.push(name.to_owned());
        at += len;
    }
    if at != table.len() {
        return Err(format!(
            "class table has {} bytes after its {num_classes} names",
            table.len() - at
        ));
    }
    Ok(classes)
}

pub(crate) fn encode_classes(classes: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in classes {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
        out.extend_from_slice(c.as_bytes());
    }
    out
}

/// One index entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) label: u32,
    pub(crate) crc: u32,
}

impl Entry {
    pub(crate) fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        put_u64(&mut b, 0, self.offset);
        put_u64(&mut b, 8, self.len);
        put_u32(&mut b, 16, self.label);
        put_u32(&mut b, 20, self.crc);
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Option<Entry> {
        Some(Entry {
            offset: get_u64(b, 0)?,
            len: get_u64(b, 8)?,
            label: get_u32(b, 16)?,
            crc: get_u32(b, 20)?,
        })
    }
}

/// The field table of a version 2 file: the fields its records carry beyond image and
/// class, and the keypoints' names.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FieldTable {
    pub fields: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keypoint_names: Vec<String>,
}

/// A version 2 record: `u32 image length | image | u32 json length | json | mask`,
/// lengths little-endian; the json is the fields' object (`docs/samples.md`) and the
/// mask a PNG, or nothing.
#[derive(Debug)]
pub struct SampleRecord<'a> {
    pub image: &'a [u8],
    pub json: &'a [u8],
    pub mask: &'a [u8],
}

impl<'a> SampleRecord<'a> {
    pub fn encode(&self, out: &mut Vec<u8>) -> Result<(), String> {
        let len = |b: &[u8], what: &str| {
            u32::try_from(b.len()).map_err(|_| format!("{what} of {} bytes is too large", b.len()))
        };
        out.extend_from_slice(&len(self.image, "an image")?.to_le_bytes());
        out.extend_from_slice(self.image);
        out.extend_from_slice(&len(self.json, "a fields object")?.to_le_bytes());
        out.extend_from_slice(self.json);
        out.extend_from_slice(self.mask);
        Ok(())
    }

    /// Splits a record's bytes (whose checksum has been checked).
    pub fn decode(b: &'a [u8]) -> Result<SampleRecord<'a>, String> {
        let part = |at: usize, what: &str| -> Result<(&'a [u8], usize), String> {
            let n = get_u32(b, at)
                .ok_or_else(|| format!("the record ends before its {what} length"))?
                as usize;
            let start = at + 4;
            b.get(start..start + n)
                .map(|p| (p, start + n))
                .ok_or_else(|| format!("its {what} ({n} bytes) runs past the record"))
        };
        let (image, at) = part(0, "image")?;
        let (json, at) = part(at, "fields")?;
        Ok(SampleRecord {
            image,
            json,
            mask: &b[at..],
        })
    }
}

/// A version 3 record's image: `u32 width | u32 height | u32 channels | pixels`,
/// little-endian, the pixels u8 HWC, exactly `width * height * channels` bytes.
pub struct ShapedRecord;

impl ShapedRecord {
    /// The shape that goes before `width` x `height` x `channels` pixels.
    pub fn shape(width: u32, height: u32, channels: u8) -> [u8; SHAPE_LEN] {
        let mut b = [0u8; SHAPE_LEN];
        put_u32(&mut b, 0, width);
        put_u32(&mut b, 4, height);
        put_u32(&mut b, 8, u32::from(channels));
        b
    }

    /// The kind a record's bytes hold, checked against their length (the pixels follow
    /// the first [`SHAPE_LEN`] bytes).
    pub fn decode(b: &[u8]) -> Result<RecordKind, String> {
        let (Some(width), Some(height), Some(c)) = (get_u32(b, 0), get_u32(b, 4), get_u32(b, 8))
        else {
            return Err(format!(
                "{} bytes, shorter than the {SHAPE_LEN}-byte shape a raw record starts with",
                b.len()
            ));
        };
        let channels = u8::try_from(c)
            .ok()
            .filter(|&c| (1..=4).contains(&c))
            .ok_or_else(|| format!("its shape {width}x{height}x{c} has {c} channels (1 to 4)"))?;
        if width == 0 || height == 0 {
            return Err(format!("its shape {width}x{height}x{c} is empty"));
        }
        let kind = RecordKind::Raw {
            width,
            height,
            channels,
        };
        let have = (b.len() - SHAPE_LEN) as u64;
        match raw_len(kind) {
            Some(want) if want == have => Ok(kind),
            want => Err(format!(
                "it holds {have} bytes of pixels, its shape {width}x{height}x{c} needs {}",
                want.map_or_else(|| "more than fit in memory".to_string(), |w| w.to_string())
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            version: VERSION,
            count: 3,
            layout: RecordKind::Raw {
                width: 28,
                height: 28,
                channels: 1,
            },
            num_classes: 10,
            data_offset: HEADER_LEN as u64,
            data_len: 3 * 784,
            classes_offset: 128 + 3 * 784,
            classes_len: 50,
            classes_crc: 7,
            index_offset: 128 + 3 * 784 + 50,
            index_crc: 9,
            fields_offset: 0,
            fields_len: 0,
            fields_crc: 0,
            shaped: false,
        };
        let b = h.encode();
        let len = h.index_offset + 3 * ENTRY_LEN as u64;
        assert_eq!(Header::decode(&b, len), Ok(h));
        // One byte short of the index.
        let err = Header::decode(&b, len - 1).unwrap_err();
        assert_eq!(
            err,
            format!("truncated: index needs {len} bytes, file has {}", len - 1)
        );
    }

    #[test]
    fn header_damage_is_named() {
        assert!(Header::decode(b"JUNKJUNK", 8)
            .unwrap_err()
            .starts_with("bad magic"));
        assert!(Header::decode(b"STK", 3)
            .unwrap_err()
            .starts_with("truncated: header"));
        let mut b = Header {
            version: VERSION,
            count: 0,
            layout: RecordKind::Encoded,
            num_classes: 1,
            data_offset: 128,
            data_len: 0,
            classes_offset: 128,
            classes_len: 0,
            classes_crc: 0,
            index_offset: 128,
            index_crc: 0,
            fields_offset: 0,
            fields_len: 0,
            fields_crc: 0,
            shaped: false,
        }
        .encode();
        b[40] ^= 1;
        assert!(Header::decode(&b, 200)
            .unwrap_err()
            .starts_with("header checksum mismatch"));
        b[8] = 4;
        assert!(Header::decode(&b, 200)
            .unwrap_err()
            .starts_with("unsupported version 4"));
    }

    #[test]
    fn shaped_records_check_their_size() {
        let mut b = ShapedRecord::shape(3, 2, 3).to_vec();
        b.extend_from_slice(&[7; 18]);
        assert_eq!(
            ShapedRecord::decode(&b),
            Ok(RecordKind::Raw {
                width: 3,
                height: 2,
                channels: 3
            })
        );
        let e = ShapedRecord::decode(&b[..b.len() - 1]).unwrap_err();
        assert_eq!(e, "it holds 17 bytes of pixels, its shape 3x2x3 needs 18");
        assert!(ShapedRecord::decode(&b[..5])
            .unwrap_err()
            .contains("shorter"));
        let mut zero = b.clone();
        zero[0..4].copy_from_slice(&0u32.to_le_bytes());
        assert!(ShapedRecord::decode(&zero).unwrap_err().contains("empty"));
        let mut five = b.clone();
        five[8] = 5;
        assert!(ShapedRecord::decode(&five)
            .unwrap_err()
            .contains("5 channels"));
    }

    #[test]
    fn version_3_is_the_shaped_layout_and_only_it() {
        let h = Header {
            version: VERSION_SHAPED,
            count: 0,
            layout: RecordKind::Encoded,
            shaped: true,
            num_classes: 1,
            data_offset: 128,
            data_len: 0,
            classes_offset: 128,
            classes_len: 0,
            classes_crc: 0,
            index_offset: 128,
            index_crc: 0,
            fields_offset: 0,
            fields_len: 0,
            fields_crc: 0,
        };
        assert_eq!(Header::decode(&h.encode(), 200), Ok(h));
        assert!(!h.has_fields());
        let wrong = Header { shaped: false, ..h }.encode();
        assert!(Header::decode(&wrong, 200)
            .unwrap_err()
            .starts_with("record layout 0 in a version 3 file"));
    }

    #[test]
    fn sample_records_round_trip_and_damage_is_named() {
        let mut b = Vec::new();
        let r = SampleRecord {
            image: b"jpeg",
            json: b"{}",
            mask: b"png!",
        };
        r.encode(&mut b).unwrap();
        let d = SampleRecord::decode(&b).unwrap();
        assert_eq!(
            (d.image, d.json, d.mask),
            (&b"jpeg"[..], &b"{}"[..], &b"png!"[..])
        );
        assert!(SampleRecord::decode(&b[..6]).unwrap_err().contains("image"));
        assert!(SampleRecord::decode(&b[..9])
            .unwrap_err()
            .contains("fields length"));
    }

    #[test]
    fn class_table_round_trip_and_damage() {
        let names = vec!["cat".to_string(), "dög".to_string(), String::new()];
        let t = encode_classes(&names);
        assert_eq!(decode_classes(&t, 3).unwrap(), names);
        assert!(decode_classes(&t, 4).is_err());
        assert!(decode_classes(&t, 2).is_err());
        assert!(decode_classes(&t[..t.len() - 1], 3).is_err());
    }
}
