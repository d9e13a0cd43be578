//! A COCO annotation file as serde reads it: typed records holding only what stoker
//! uses (everything else, `info`, `licenses`, `area`, `skeleton`, is skipped), with
//! the spellings real files use: a segmentation is a list of polygons (or one flat
//! polygon) or an RLE object whose counts are a list or pycocotools' string, and a
//! number may be `NaN` or `Infinity`, which Python's `json.dump` writes by default.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// The top level. `images` is optional here so that its absence gets a message of
/// its own rather than serde's.
#[derive(Debug, Deserialize)]
pub struct CocoFile {
    #[serde(default)]
    pub images: Option<Vec<ImageInfo>>,
    #[serde(default)]
    pub annotations: Vec<AnnInfo>,
    #[serde(default)]
    pub categories: Vec<Category>,
}

#[derive(Debug, Deserialize)]
pub struct ImageInfo {
    pub id: u64,
    pub file_name: String,
    pub width: u64,
    pub height: u64,
}

#[derive(Debug, Deserialize)]
pub struct AnnInfo {
    pub id: u64,
    pub image_id: u64,
    pub category_id: u64,
    /// `[x, y, width, height]`.
    #[serde(default)]
    pub bbox: Option<Vec<Num>>,
    #[serde(default)]
    pub iscrowd: Flag,
    #[serde(default)]
    pub segmentation: Option<Segmentation>,
    /// `[x, y, v, x, y, v, ...]`, K points.
    #[serde(default)]
    pub keypoints: Option<Vec<Num>>,
}

#[derive(Debug, Deserialize)]
pub struct Category {
    pub id: u64,
    pub name: String,
    /// Point names (person_keypoints files).
    #[serde(default)]
    pub keypoints: Vec<String>,
}

/// A number, or `null` (what `NaN` and `Infinity` are read as): NaN.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Num(pub f32);

impl<'de> Deserialize<'de> for Num {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Num, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Num;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_f64<E>(self, v: f64) -> Result<Num, E> {
                Ok(Num(v as f32))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Num, E> {
                Ok(Num(v as f32))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Num, E> {
                Ok(Num(v as f32))
            }
            fn visit_unit<E>(self) -> Result<Num, E> {
                Ok(Num(f32::NAN))
            }
        }
        d.deserialize_any(V)
    }
}

/// `iscrowd`: 0 or 1 (or a boolean).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flag(pub bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Flag, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("0 or 1")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Flag, E> {
                Ok(Flag(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Flag, E> {
                match v {
                    0 | 1 => Ok(Flag(v == 1)),
                    _ => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Flag, E> {
                match v {
                    0 | 1 => Ok(Flag(v == 1)),
                    _ => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// An annotation's region.
#[derive(Debug, PartialEq)]
pub enum Segmentation {
    /// Polygons `[x0, y0, x1, y1, ...]`, united.
    Polygons(Vec<Vec<f32>>),
    /// A run-length encoded mask of `size` = `[height, width]`.
    Rle { size: Vec<u64>, counts: Counts },
}

#[derive(Debug, PartialEq)]
pub enum Counts {
    List(Vec<u64>),
    /// pycocotools' compressed string.
    String(String),
}

impl Segmentation {
    /// True when it holds no region (`[]`, which files without masks write).
    pub fn is_empty(&self) -> bool {
        matches!(self, Segmentation::Polygons(p) if p.is_empty())
    }
}

/// One element of a segmentation list: a polygon, or a coordinate of a flat one.
enum PolyItem {
    Polygon(Vec<f32>),
    Coord(f32),
}

impl<'de> Deserialize<'de> for PolyItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<PolyItem, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = PolyItem;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a polygon (a list of numbers) or a number")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PolyItem, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(Num(v)) = seq.next_element()? {
                    out.push(v);
                }
                Ok(PolyItem::Polygon(out))
            }
            fn visit_f64<E>(self, v: f64) -> Result<PolyItem, E> {
                Ok(PolyItem::Coord(v as f32))
            }
            fn visit_u64<E>(self, v: u64) -> Result<PolyItem, E> {
                Ok(PolyItem::Coord(v as f32))
            }
            fn visit_i64<E>(self, v: i64) -> Result<PolyItem, E> {
                Ok(PolyItem::Coord(v as f32))
            }
            fn visit_unit<E>(self) -> Result<PolyItem, E> {
                Ok(PolyItem::Coord(f32::NAN))
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Segmentation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Segmentation, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Segmentation;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of polygons or an RLE object {\"size\", \"counts\"}")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Segmentation, A::Error> {
                let mut polygons = Vec::new();
                let mut flat = Vec::new();
                while let Some(item) = seq.next_element::<PolyItem>()? {
                    match item {
                        PolyItem::Polygon(p) => polygons.push(p),
                        PolyItem::Coord(c) => flat.push(c),
                    }
                }
                match (polygons.is_empty(), flat.is_empty()) {
                    (_, true) => Ok(Segmentation::Polygons(polygons)),
                    (true, false) => Ok(Segmentation::Polygons(vec![flat])),
                    (false, false) => Err(de::Error::custom(
                        "a segmentation mixes polygons and bare numbers",
                    )),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Segmentation, A::Error> {
                let (mut size, mut counts) = (None, None);
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match key.as_ref() {
                        "size" => size = Some(map.next_value::<Vec<u64>>()?),
                        "counts" => counts = Some(map.next_value::<CountsIn>()?.0),
                        _ => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(Segmentation::Rle {
                    size: size.ok_or_else(|| de::Error::missing_field("size"))?,
                    counts: counts.ok_or_else(|| de::Error::missing_field("counts"))?,
                })
            }
        }
        d.deserialize_any(V)
    }
}

struct CountsIn(Counts);

impl<'de> Deserialize<'de> for CountsIn {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CountsIn, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CountsIn;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("RLE counts: a list of run lengths or a compressed string")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<CountsIn, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(c) = seq.next_element::<u64>()? {
                    out.push(c);
                }
                Ok(CountsIn(Counts::List(out)))
            }
            fn visit_str<E>(self, v: &str) -> Result<CountsIn, E> {
                Ok(CountsIn(Counts::String(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<CountsIn, E> {
                Ok(CountsIn(Counts::String(v)))
            }
        }
        d.deserialize_any(V)
    }
}

/// `bytes` with every `NaN`, `Infinity` and `-Infinity` outside strings replaced by
/// `null` (JSON has no such numbers; Python writes them), borrowed when there is none.
pub fn nulls_for_non_finite(bytes: &[u8]) -> Cow<'_, [u8]> {
    let mut out: Option<Vec<u8>> = None;
    let (mut in_string, mut escaped) = (false, false);
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        let token: &[u8] = match b {
            b'"' => {
                in_string = true;
                i += 1;
                continue;
            }
            b'N' => b"NaN",
            b'I' => b"Infinity",
            b'-' => b"-Infinity",
            _ => {
                i += 1;
                continue;
            }
        };
        if bytes[i..].starts_with(token) {
            let o = out.get_or_insert_with(|| Vec::with_capacity(bytes.len() + 64));
            o.extend_from_slice(&bytes[copied..i]);
            o.extend_from_slice(b"null");
            i += token.len();
            copied = i;
        } else {
            i += 1;
        }
    }
    match out {
        None => Cow::Borrowed(bytes),
        Some(mut o) => {
            o.extend_from_slice(&bytes[copied..]);
            Cow::Owned(o)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_numbers_become_null_outside_strings() {
        let text = br#"{"a": [NaN, -Infinity, Infinity, -1.5], "NaN": "x NaN \" Infinity"}"#;
        let fixed = nulls_for_non_finite(text);
        assert_eq!(
            std::str::from_utf8(&fixed).unwrap(),
            r#"{"a": [null, null, null, -1.5], "NaN": "x NaN \" Infinity"}"#
        );
        assert!(matches!(nulls_for_non_finite(b"[1, 2]"), Cow::Borrowed(_)));
    }

    #[test]
    fn segmentations_in_every_spelling() {
        let parse = |s: &str| serde_json::from_str::<Segmentation>(s);
        assert_eq!(
            parse("[[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, 12.5]]").unwrap(),
            Segmentation::Polygons(vec![
                vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                vec![7.0, 8.0, 9.0, 10.0, 11.0, 12.5]
            ])
        );
        assert_eq!(
            parse("[1, 2, 3, 4, 5, 6]").unwrap(),
            Segmentation::Polygons(vec![vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
        );
        assert!(parse("[]").unwrap().is_empty());
        assert_eq!(
            parse(r#"{"size": [4, 4], "counts": [5, 2, 2, 2, 5]}"#).unwrap(),
            Segmentation::Rle {
                size: vec![4, 4],
                counts: Counts::List(vec![5, 2, 2, 2, 5])
            }
        );
        assert_eq!(
            parse(r#"{"counts": "52203", "size": [4, 4]}"#).unwrap(),
            Segmentation::Rle {
                size: vec![4, 4],
                counts: Counts::String("52203".into())
            }
        );
        let e = parse(r#"{"counts": "52203"}"#).unwrap_err().to_string();
        assert!(e.contains("missing field `size`"), "{e}");
        let e = parse("[[1, 2], 3]").unwrap_err().to_string();
        assert!(e.contains("mixes polygons and bare numbers"), "{e}");
    }

    #[test]
    fn annotations_take_defaults_for_what_coco_omits() {
        let a: AnnInfo =
            serde_json::from_str(r#"{"id": 1, "image_id": 2, "category_id": 3, "area": 5}"#)
                .unwrap();
        assert_eq!(a.iscrowd, Flag(false));
        assert!(a.bbox.is_none() && a.segmentation.is_none() && a.keypoints.is_none());
        let a: AnnInfo = serde_json::from_str(
            r#"{"id": 1, "image_id": 2, "category_id": 3, "iscrowd": 1, "bbox": [1, null, 2, 3]}"#,
        )
        .unwrap();
        assert!(a.iscrowd.0);
        assert!(a.bbox.unwrap()[1].0.is_nan());
        let e = serde_json::from_str::<AnnInfo>(
            r#"{"id": 1, "image_id": 2, "category_id": 3, "iscrowd": 2}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("expected 0 or 1"), "{e}");
    }
}
