//! Values out of Arrow columns: integers of any width, an image cell (its bytes or the
//! path of its file), a string, and which column types can hold images.

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, ArrayRef};
use arrow_schema::DataType;

/// The values of an integer column (null: `None`).
pub(super) fn int_values(a: &dyn Array) -> Result<Vec<Option<i64>>, String> {
    macro_rules! ints {
        ($t:ty) => {
            a.as_primitive::<$t>()
                .iter()
                .map(|v| v.map(|x| x as i64))
                .collect()
        };
    }
    Ok(match a.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => a
            .as_primitive::<UInt64Type>()
            .iter()
            .map(|v| {
                v.map(|x| i64::try_from(x).map_err(|_| format!("holds {x}, too large a number")))
                    .transpose()
            })
            .collect::<Result<_, _>>()?,
        other => return Err(format!("is {other}, not an integer column")),
    })
}

/// What an image cell holds: the image's bytes, or the path of its file.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ImageCell<'a> {
    Bytes(&'a [u8]),
    /// Relative to the Parquet file's folder (or an absolute local path).
    Path(&'a str),
}

fn binary_value(data: &dyn Array, row: usize) -> Option<&[u8]> {
    match data.data_type() {
        DataType::Binary => Some(data.as_binary::<i32>().value(row)),
        DataType::LargeBinary => Some(data.as_binary::<i64>().value(row)),
        DataType::BinaryView => Some(data.as_binary_view().value(row)),
        _ => None,
    }
}

fn string_value(data: &dyn Array, row: usize) -> Option<&str> {
    match data.data_type() {
        DataType::Utf8 => Some(data.as_string::<i32>().value(row)),
        DataType::LargeUtf8 => Some(data.as_string::<i64>().value(row)),
        DataType::Utf8View => Some(data.as_string_view().value(row)),
        _ => None,
    }
}

/// Row `row` of an image column: the Image struct's `bytes` (its `path` when the bytes
/// are null, as the `datasets` library writes images it did not embed), binary, or a
/// string path.
pub(super) fn image_cell(col: &ArrayRef, row: usize) -> Result<ImageCell<'_>, String> {
    if col.is_null(row) {
        return Err("the image cell is null".into());
    }
    if let DataType::Struct(_) = col.data_type() {
        let st = col.as_struct();
        if let Some(bytes) = st.column_by_name("bytes").filter(|b| !b.is_null(row)) {
            return binary_value(bytes.as_ref(), row)
                .map(ImageCell::Bytes)
                .ok_or_else(|| format!("the image's bytes are {}", bytes.data_type()));
        }
        return match st.column_by_name("path").filter(|p| !p.is_null(row)) {
            Some(p) => string_value(p.as_ref(), row)
                .map(ImageCell::Path)
                .ok_or_else(|| format!("the image's path is {}", p.data_type())),
            None => Err("the image struct has neither bytes nor a path".into()),
        };
    }
    if let Some(b) = binary_value(col.as_ref(), row) {
        return Ok(ImageCell::Bytes(b));
    }
    string_value(col.as_ref(), row)
        .map(ImageCell::Path)
        .ok_or_else(|| format!("the image column holds {}, not images", col.data_type()))
}

/// Whether `t` can hold images: binary, a string path, or a struct with binary
/// `bytes` or a string `path` (the `datasets` Image feature has both).
pub(super) fn is_image_type(t: &DataType) -> bool {
    match t {
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => true,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Struct(fields) => fields.iter().any(|f| {
            matches!(f.name().as_str(), "bytes" | "path")
                && is_image_type(f.data_type())
                && !f.data_type().is_nested()
        }),
        _ => false,
    }
}

pub(super) fn text_value(col: &ArrayRef, row: usize) -> Option<String> {
    if col.is_null(row) {
        return None;
    }
    string_value(col.as_ref(), row).map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int8Array, UInt64Array};

    #[test]
    fn integers_of_any_width_read_as_i64_and_a_u64_beyond_it_is_named() {
        let small = Int8Array::from(vec![Some(-3), None, Some(7)]);
        assert_eq!(int_values(&small).unwrap(), vec![Some(-3), None, Some(7)]);
        let fits = UInt64Array::from(vec![Some(5), None]);
        assert_eq!(int_values(&fits).unwrap(), vec![Some(5), None]);
        // Not clamped to i64::MAX, which would report a label the file does not hold.
        let big = UInt64Array::from(vec![Some(1), Some((1 << 63) + 5)]);
        let e = int_values(&big).unwrap_err();
        assert!(e.contains("9223372036854775813"), "{e}");
    }
}
