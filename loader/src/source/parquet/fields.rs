//! The columns of a Parquet set beyond image, label and text: boxes and their classes,
//! multi-label tags and masks (docs/samples.md's fields), named by a dotted path into
//! struct columns (`objects.bbox`, as the `datasets` library stores a `Sequence` of
//! dicts: a struct of lists), checked against the schema at open and read per row.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Float64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Schema};

use super::cells::{int_values, is_image_type};

/// How a box's four numbers are ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BoxFormat {
    /// `[x1, y1, x2, y2]` in pixels.
    #[default]
    Xyxy,
    /// `[x, y, width, height]` in pixels (COCO's, and many Hub detection sets').
    Xywh,
}

impl std::str::FromStr for BoxFormat {
    type Err = crate::ParseSettingError;

    fn from_str(s: &str) -> Result<Self, crate::ParseSettingError> {
        match s {
            "xyxy" => Ok(BoxFormat::Xyxy),
            "xywh" => Ok(BoxFormat::Xywh),
            other => Err(crate::ParseSettingError::BoxFormat(other.to_string())),
        }
    }
}

/// A column by dotted path: the root column's name and the struct members below it.
#[derive(Clone, Debug)]
pub(super) struct ColumnPath {
    pub(super) text: String,
    pub(super) root: usize,
    pub(super) root_name: String,
    members: Vec<String>,
}

/// What a field column must hold.
#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    /// list<list<number>> (or list<fixed_size_list<number, 4>>).
    Boxes,
    /// list<integer>.
    Ints,
    /// An image cell (binary, Image struct or path): a mask PNG.
    Mask,
}

fn is_number(t: &DataType) -> bool {
    t.is_numeric()
}

fn list_item(t: &DataType) -> Option<&DataType> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(f.data_type())
        }
        _ => None,
    }
}

impl ColumnPath {
    /// Resolves `text` (`name` or `name.member.member`) in `schema`, and checks that
    /// it holds `kind`.
    pub(super) fn resolve(schema: &Schema, text: &str, kind: Kind) -> Result<ColumnPath, String> {
        let mut parts = text.split('.');
        let root_name = parts.next().unwrap_or_default();
        let root = schema
            .index_of(root_name)
            .map_err(|_| format!("no column '{root_name}' (for '{text}')"))?;
        let mut t = schema.field(root).data_type();
        let members: Vec<String> = parts.map(String::from).collect();
        for m in &members {
            t = match t {
                DataType::Struct(fields) => fields
                    .iter()
                    .find(|f| f.name() == m)
                    .map(|f| f.data_type())
                    .ok_or_else(|| format!("column '{text}': the struct has no member '{m}'"))?,
                other => {
                    return Err(format!(
                        "column '{text}': '{m}' is inside {other}, not a struct"
                    ))
                }
            };
        }
        let ok = match kind {
            Kind::Boxes => list_item(t).and_then(list_item).is_some_and(is_number),
            Kind::Ints => list_item(t).is_some_and(|i| i.is_integer()),
            Kind::Mask => is_image_type(t),
        };
        if !ok {
            let want = match kind {
                Kind::Boxes => "a list of boxes (list<list<number>>)",
                Kind::Ints => "a list of class numbers (list<integer>)",
                Kind::Mask => "mask images (binary, a path, or the Image struct)",
            };
            return Err(format!("column '{text}' is {t}, not {want}"));
        }
        Ok(ColumnPath {
            text: text.to_string(),
            root,
            root_name: root_name.to_string(),
            members,
        })
    }

    /// The column in a decoded batch (which holds the root column by name).
    pub(super) fn pick(&self, batch: &RecordBatch) -> Result<ArrayRef, String> {
        let mut col = batch
            .column_by_name(&self.root_name)
            .ok_or_else(|| format!("the row group lacks column '{}'", self.root_name))?
            .clone();
        for m in &self.members {
            col = col
                .as_struct_opt()
                .and_then(|s| s.column_by_name(m))
                .ok_or_else(|| format!("column '{}': no member '{m}'", self.text))?
                .clone();
        }
        Ok(col)
    }
}

/// The items of list cell `row` (`None`: a null cell).
fn list_cell(col: &dyn Array, row: usize) -> Option<ArrayRef> {
    if col.is_null(row) {
        return None;
    }
    match col.data_type() {
        DataType::List(_) => Some(col.as_list::<i32>().value(row)),
        DataType::LargeList(_) => Some(col.as_list::<i64>().value(row)),
        DataType::FixedSizeList(..) => Some(col.as_fixed_size_list().value(row)),
        _ => None,
    }
}

fn floats(a: &dyn Array) -> Result<Vec<f32>, String> {
    Ok(match a.data_type() {
        DataType::Float32 => a
            .as_primitive::<Float32Type>()
            .iter()
            .map(|v| v.unwrap_or(f32::NAN))
            .collect(),
        DataType::Float64 => a
            .as_primitive::<Float64Type>()
            .iter()
            .map(|v| v.map_or(f32::NAN, |x| x as f32))
            .collect(),
        _ => int_values(a)?
            .into_iter()
            .map(|v| v.map_or(f32::NAN, |x| x as f32))
            .collect(),
    })
}

/// The boxes of row `row`, as `[x1, y1, x2, y2]` (a null cell: none).
pub(super) fn boxes(
    col: &ArrayRef,
    row: usize,
    format: BoxFormat,
) -> Result<Vec<[f32; 4]>, String> {
    let Some(items) = list_cell(col.as_ref(), row) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(items.len());
    for i in 0..items.len() {
        let v = list_cell(items.as_ref(), i)
            .map(|b| floats(b.as_ref()))
            .transpose()?
            .ok_or_else(|| format!("box {i} is null"))?;
        let [a, b, c, d] = <[f32; 4]>::try_from(v.as_slice())
            .map_err(|_| format!("box {i} has {} numbers, not 4", v.len()))?;
        out.push(match format {
            BoxFormat::Xyxy => [a, b, c, d],
            BoxFormat::Xywh => [a, b, a + c, b + d],
        });
    }
    Ok(out)
}

/// The class numbers of list cell `row` (a null cell: none); each must be a class
/// number (non-negative, below `u32::MAX`).
pub(super) fn classes(col: &ArrayRef, row: usize) -> Result<Vec<u32>, String> {
    let Some(items) = list_cell(col.as_ref(), row) else {
        return Ok(Vec::new());
    };
    int_values(items.as_ref())?
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Some(x) if (0..i64::from(u32::MAX)).contains(&x) => Ok(x as u32),
            Some(x) => Err(format!("class {x} (item {i}) is not a class number")),
            None => Err(format!("class {i} is null")),
        })
        .collect()
}

/// The ClassLabel names of the feature at dotted path `path` in the `huggingface`
/// metadata, looking through `Sequence`/list wrappers (`{"feature": ...}`, `[...]`).
pub(super) fn hf_names(hf: Option<&String>, path: &str) -> Option<Vec<String>> {
    let v: serde_json::Value = serde_json::from_str(hf?).ok()?;
    let mut at = v.get("info")?.get("features")?;
    fn unwrap(mut x: &serde_json::Value) -> &serde_json::Value {
        loop {
            if let Some(inner) = x.get("feature") {
                x = inner;
            } else if let Some(first) = x.as_array().and_then(|a| a.first()) {
                x = first;
            } else {
                return x;
            }
        }
    }
    for part in path.split('.') {
        at = unwrap(at).get(part)?;
    }
    let names = unwrap(at).get("names")?.as_array()?;
    names.iter().map(|n| n.as_str().map(String::from)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_metadata_names_are_found_through_sequences() {
        let hf = serde_json::json!({"info": {"features": {
            "objects": {"_type": "Sequence", "feature": {
                "bbox": {"_type": "Sequence", "feature": {"dtype": "float32"}},
                "category": {"_type": "ClassLabel", "names": ["car", "bus"]}}},
            "tags": [{"_type": "ClassLabel", "names": ["a", "b", "c"]}]}}})
        .to_string();
        assert_eq!(
            hf_names(Some(&hf), "objects.category").unwrap(),
            ["car", "bus"]
        );
        assert_eq!(hf_names(Some(&hf), "tags").unwrap(), ["a", "b", "c"]);
        assert!(hf_names(Some(&hf), "objects.bbox").is_none());
        assert_eq!("xywh".parse::<BoxFormat>().unwrap(), BoxFormat::Xywh);
        let e = "cxcywh".parse::<BoxFormat>().unwrap_err();
        assert_eq!(e, crate::ParseSettingError::BoxFormat("cxcywh".into()));
        assert_eq!(e.to_string(), "box format 'cxcywh': give xyxy or xywh");
    }
}
