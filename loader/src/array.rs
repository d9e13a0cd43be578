//! The arrays a user step adds to a sample (named, typed, any shape) and how they are
//! collated into a batch: stacked when every sample's shape agrees, padded along the
//! first axis with per-sample counts when only that axis differs. Kept apart from
//! `step` so that `sample` (which carries them) and `step` (which makes them) both
//! depend on it, not on each other.

/// The elements of an [`Array`].
#[derive(Clone, Debug, PartialEq)]
pub enum ArrayData {
    /// Unsigned bytes (numpy `uint8`).
    U8(Vec<u8>),
    /// 32-bit signed integers (numpy `int32`).
    I32(Vec<i32>),
    /// 64-bit signed integers (numpy `int64`).
    I64(Vec<i64>),
    /// 32-bit floats (numpy `float32`).
    F32(Vec<f32>),
}

impl ArrayData {
    /// Number of elements (not bytes).
    pub fn len(&self) -> usize {
        match self {
            ArrayData::U8(v) => v.len(),
            ArrayData::I32(v) => v.len(),
            ArrayData::I64(v) => v.len(),
            ArrayData::F32(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The numpy name of the element type.
    pub fn dtype(&self) -> &'static str {
        match self {
            ArrayData::U8(_) => "uint8",
            ArrayData::I32(_) => "int32",
            ArrayData::I64(_) => "int64",
            ArrayData::F32(_) => "float32",
        }
    }

    /// `n` elements of the same type, each `fill` (cast: the padding values are 0
    /// and -1).
    fn filled(&self, n: usize, fill: i64) -> ArrayData {
        match self {
            ArrayData::U8(_) => ArrayData::U8(vec![fill as u8; n]),
            ArrayData::I32(_) => ArrayData::I32(vec![fill as i32; n]),
            ArrayData::I64(_) => ArrayData::I64(vec![fill; n]),
            ArrayData::F32(_) => ArrayData::F32(vec![fill as f32; n]),
        }
    }

    /// Appends `src`'s elements (of the same type: `layout` compared the types).
    fn extend(&mut self, src: &ArrayData) {
        match (self, src) {
            (ArrayData::U8(d), ArrayData::U8(s)) => d.extend_from_slice(s),
            (ArrayData::I32(d), ArrayData::I32(s)) => d.extend_from_slice(s),
            (ArrayData::I64(d), ArrayData::I64(s)) => d.extend_from_slice(s),
            (ArrayData::F32(d), ArrayData::F32(s)) => d.extend_from_slice(s),
            _ => {}
        }
    }
}

/// A row-major n-dimensional array a step adds to a sample.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    /// Length of each axis; empty for a scalar. Its product is `data.len()`.
    pub shape: Vec<usize>,
    /// The elements, row-major (the last axis varies fastest).
    pub data: ArrayData,
}

impl Array {
    /// An array of `shape` over `data`; `None` when their sizes disagree.
    pub fn new(shape: Vec<usize>, data: ArrayData) -> Option<Array> {
        let n = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))?;
        (n == data.len()).then_some(Array { shape, data })
    }

    /// A scalar (shape `[]`).
    pub fn scalar(data: ArrayData) -> Option<Array> {
        Array::new(Vec::new(), data)
    }
}

/// An added array collated over a batch: `array` has the batch's size as its first
/// axis; `count` is set when the samples' first axes differed and were padded with
/// zeros to the largest (each sample's own length, as `box_count` is for boxes).
#[derive(Clone, Debug, PartialEq)]
pub struct BatchArray {
    /// The samples' arrays stacked (and padded) along a new first axis.
    pub array: Array,
    /// Each sample's length along its first axis, when those lengths differed.
    pub count: Option<Vec<i32>>,
}

/// Why a batch's added arrays cannot be collated, naming the position in the batch
/// of the sample that disagrees with the first.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("added array '{name}' of the sample at position {pos}: {reason}")]
pub struct CollateError {
    /// Position in the batch of the sample that disagrees (0-based).
    pub pos: usize,
    /// Name of the added array.
    pub name: String,
    /// How it disagrees with the first sample's.
    pub reason: String,
}

/// The count of a padded field: the built-in fields keep their names (`boxes`,
/// `box_labels` and the instance `masks` share `box_count`; `keypoints` has
/// `keypoint_count`); any other field `x` has `x_count`.
pub fn count_name(field: &str) -> String {
    match field {
        "boxes" | "box_labels" | "masks" => "box_count".into(),
        "keypoints" => "keypoint_count".into(),
        _ => format!("{field}_count"),
    }
}

/// What a padded field's padding holds: -1 for `box_labels` (a padded box has no
/// class), 0 for everything else.
pub fn fill_value(field: &str) -> i64 {
    if field == "box_labels" {
        -1
    } else {
        0
    }
}

/// Whether a field is variable-length whatever one batch holds: the built-in padded
/// fields. Their count is in every batch, even when every sample has as many rows,
/// so that a training loop can always read it.
pub fn always_counted(field: &str) -> bool {
    matches!(field, "boxes" | "box_labels" | "masks" | "keypoints")
}

/// One sample's value of one field, as [`layout`] judges it: its element type and
/// shape (the elements stay with the caller, so any element type works), and, for an
/// integer scalar, its value (a count the sample gives itself).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldShape<'a> {
    /// The field's name.
    pub name: &'a str,
    /// The element type's name (numpy's: `float32`, `int64`, ...); only compared.
    pub dtype: &'a str,
    /// Length of each axis; empty for a scalar.
    pub shape: &'a [usize],
    /// The value of an integer scalar, else `None`.
    pub int: Option<i64>,
}

/// How one field of a batch is made from its samples' values.
#[derive(Clone, Debug, PartialEq)]
pub enum Layout {
    /// Stacked along a new first axis: every sample's shape is the same and the
    /// field is not variable-length.
    Stack,
    /// Padded with `fill` along the first axis to `longest` rows, then stacked; each
    /// sample's row count is in the field named `count`.
    Pad {
        /// The most rows a sample has.
        longest: usize,
        /// The padding's value.
        fill: i64,
        /// The name of the field that holds the counts.
        count: String,
    },
    /// The row counts of the padded fields that name it: int32, one per sample.
    Count(Vec<i32>),
}

/// The collation rules, in one place: the Rust steps' arrays ([`collate_extra`]),
/// the built-in fields ([`pad_rows`], through `sample::collate`) and Python's `map=`
/// (through the module's `collate_layout`) follow them.
///
/// Every sample must have the same fields (in any order) and, per field, the same
/// element type, number of axes and axes after the first. A field is variable-length
/// (padded to the longest sample along its first axis, its counts beside it) when it
/// is a built-in padded field ([`always_counted`]), when the samples give its count
/// themselves (an integer scalar named [`count_name`], which must agree with the
/// rows), or when its first axes differ in this batch; otherwise it is stacked.
/// Fields that share a count must agree on it. The result lists the first sample's
/// fields in order, each count the samples did not give right after the first field
/// that has it.
pub fn layout(samples: &[&[FieldShape<'_>]]) -> Result<Vec<(String, Layout)>, CollateError> {
    let Some(first) = samples.first() else {
        return Ok(Vec::new());
    };
    let names = |x: &[FieldShape<'_>]| x.iter().map(|f| f.name).collect::<Vec<_>>().join(", ");
    for (pos, s) in samples.iter().enumerate() {
        let same =
            s.len() == first.len() && first.iter().all(|f| s.iter().any(|g| g.name == f.name));
        if !same {
            return Err(CollateError {
                pos,
                name: names(s),
                reason: format!(
                    "the first sample has [{}]: every sample must have the same fields",
                    names(first)
                ),
            });
        }
    }
    // Each field's values, in batch order (every sample has every name: checked above).
    let column = |name: &str| {
        samples
            .iter()
            .filter_map(|s| s.iter().find(|f| f.name == name).copied())
            .collect::<Vec<_>>()
    };
    let given = |name: &str| first.iter().any(|f| f.name == name);
    // The fields whose count a sample gives: they are counts, not padded themselves.
    let is_given_count = |f: &FieldShape<'_>| {
        f.shape.is_empty()
            && first
                .iter()
                .any(|g| g.name != f.name && !g.shape.is_empty() && count_name(g.name) == f.name)
    };
    let mut out: Vec<(String, Layout)> = Vec::with_capacity(first.len());
    // Each count: the values, the field that set them first, and where it goes.
    let mut counts: Vec<(String, Vec<i32>, String)> = Vec::new();
    for f0 in first.iter() {
        let name = f0.name;
        let values = column(name);
        let err = |pos: usize, reason: String| CollateError {
            pos,
            name: name.to_string(),
            reason,
        };
        for (pos, v) in values.iter().enumerate() {
            if v.dtype != f0.dtype {
                return Err(err(
                    pos,
                    format!("is {} but the first sample's is {}", v.dtype, f0.dtype),
                ));
            }
            if v.shape.len() != f0.shape.len() || v.shape.get(1..) != f0.shape.get(1..) {
                return Err(err(
                    pos,
                    format!(
                        "has shape {:?} and the first sample's {:?}: only the first axis \
                         may differ (it is padded)",
                        v.shape, f0.shape
                    ),
                ));
            }
        }
        if is_given_count(f0) {
            if let Some(pos) = values.iter().position(|v| v.int.is_none()) {
                return Err(err(
                    pos,
                    format!("is a count (of {}) but not an integer", f0.name),
                ));
            }
            // Its values are checked against the rows where the field it counts is.
            out.push((name.to_string(), Layout::Stack));
            continue;
        }
        if f0.shape.is_empty() {
            out.push((name.to_string(), Layout::Stack));
            continue;
        }
        let rows: Vec<usize> = values.iter().map(|v| v.shape[0]).collect();
        let count = count_name(name);
        let declared = given(&count);
        let ragged = rows.iter().any(|&r| r != rows[0]);
        if !(ragged || declared || always_counted(name)) {
            out.push((name.to_string(), Layout::Stack));
            continue;
        }
        let lengths: Vec<i32> = rows
            .iter()
            .map(|&r| i32::try_from(r).unwrap_or(i32::MAX))
            .collect();
        if declared {
            let theirs = column(&count);
            if let Some(pos) = (0..rows.len()).find(|&i| theirs[i].int != Some(rows[i] as i64)) {
                return Err(err(
                    pos,
                    format!(
                        "has {} rows but its count '{count}' says {}",
                        rows[pos],
                        theirs[pos]
                            .int
                            .map_or_else(|| "something else".to_string(), |n| n.to_string())
                    ),
                ));
            }
        }
        match counts.iter().find(|(c, _, _)| *c == count) {
            Some((_, had, by)) => {
                if let Some(pos) = (0..rows.len()).find(|&i| had[i] != lengths[i]) {
                    return Err(err(
                        pos,
                        format!(
                            "has {} rows and '{by}' {}: they share the count '{count}'",
                            lengths[pos], had[pos]
                        ),
                    ));
                }
            }
            None => counts.push((count.clone(), lengths.clone(), name.to_string())),
        }
        out.push((
            name.to_string(),
            Layout::Pad {
                longest: rows.iter().copied().max().unwrap_or(0),
                fill: fill_value(name),
                count: count.clone(),
            },
        ));
        if !declared && !out.iter().any(|(n, _)| *n == count) {
            out.push((count, Layout::Count(lengths)));
        }
    }
    // A count the samples gave is laid out as the count of its field.
    for (name, l) in out.iter_mut() {
        if let Some((_, values, _)) = counts.iter().find(|(c, _, _)| c.as_str() == name.as_str()) {
            *l = Layout::Count(values.clone());
        }
    }
    Ok(out)
}

/// Rows of samples (each `width` elements a row) padded with `fill` to the longest
/// and laid one after another: the elements, the longest row count, and each
/// sample's row count. The padding of [`Layout::Pad`], for any element type.
pub fn pad_rows<T: Copy>(rows: &[&[T]], width: usize, fill: T) -> (Vec<T>, usize, Vec<i32>) {
    let counts: Vec<usize> = rows
        .iter()
        .map(|r| r.len().checked_div(width).unwrap_or(0))
        .collect();
    let longest = counts.iter().copied().max().unwrap_or(0);
    let per = longest * width;
    let mut out = vec![fill; rows.len() * per];
    for (i, (r, &c)) in rows.iter().zip(&counts).enumerate() {
        out[i * per..i * per + c * width].copy_from_slice(&r[..c * width]);
    }
    let counts = counts
        .into_iter()
        .map(|c| i32::try_from(c).unwrap_or(i32::MAX))
        .collect();
    (out, longest, counts)
}

/// Collates the samples' added arrays (in batch order) by the rules of [`layout`]:
/// stacked, or padded along the first axis with the counts in `BatchArray::count`
/// (a count a step adds itself stays an array of its own, as int32).
pub fn collate_extra(
    samples: &[&[(String, Array)]],
) -> Result<Vec<(String, BatchArray)>, CollateError> {
    let shapes: Vec<Vec<FieldShape<'_>>> = samples
        .iter()
        .map(|s| {
            s.iter()
                .map(|(name, a)| FieldShape {
                    name,
                    dtype: a.data.dtype(),
                    shape: &a.shape,
                    int: scalar_int(a),
                })
                .collect()
        })
        .collect();
    let refs: Vec<&[FieldShape<'_>]> = shapes.iter().map(Vec::as_slice).collect();
    let plan = layout(&refs)?;
    let n = samples.len();
    // Every sample has every field: `layout` checked it.
    let value = |i: usize, name: &str| samples[i].iter().find(|(n, _)| n == name).map(|(_, a)| a);
    let mut out = Vec::with_capacity(plan.len());
    for (name, l) in &plan {
        let col: Vec<&Array> = (0..n).filter_map(|i| value(i, name)).collect();
        let batch = match (l, col.first()) {
            // A count the samples did not give is the padded array's `count`.
            (Layout::Count(_), None) => continue,
            (Layout::Count(values), Some(_)) => BatchArray {
                array: Array {
                    shape: vec![n],
                    data: ArrayData::I32(values.clone()),
                },
                count: None,
            },
            (_, None) => continue,
            (Layout::Stack, Some(a0)) => {
                let mut shape = vec![n];
                shape.extend_from_slice(&a0.shape);
                let mut data = a0.data.filled(0, 0);
                col.iter().for_each(|a| data.extend(&a.data));
                BatchArray {
                    array: Array { shape, data },
                    count: None,
                }
            }
            (Layout::Pad { longest, fill, .. }, Some(a0)) => {
                let width: usize = a0.shape[1..].iter().product();
                let mut shape = vec![n, *longest];
                shape.extend_from_slice(&a0.shape[1..]);
                let mut data = a0.data.filled(0, *fill);
                let mut count = Vec::with_capacity(n);
                for a in &col {
                    let rows = a.shape[0];
                    data.extend(&a.data);
                    data.extend(&a0.data.filled((longest - rows) * width, *fill));
                    count.push(i32::try_from(rows).unwrap_or(i32::MAX));
                }
                BatchArray {
                    array: Array { shape, data },
                    count: Some(count),
                }
            }
        };
        out.push((name.clone(), batch));
    }
    Ok(out)
}

/// The value of an integer scalar (a count a step may give).
fn scalar_int(a: &Array) -> Option<i64> {
    if !a.shape.is_empty() {
        return None;
    }
    match &a.data {
        ArrayData::I32(v) => v.first().map(|&x| i64::from(x)),
        ArrayData::I64(v) => v.first().copied(),
        ArrayData::U8(v) => v.first().map(|&x| i64::from(x)),
        ArrayData::F32(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f<'a>(name: &'a str, dtype: &'a str, shape: &'a [usize]) -> FieldShape<'a> {
        FieldShape {
            name,
            dtype,
            shape,
            int: None,
        }
    }

    fn count<'a>(name: &'a str, n: i64) -> FieldShape<'a> {
        FieldShape {
            name,
            dtype: "int32",
            shape: &[],
            int: Some(n),
        }
    }

    #[test]
    fn built_in_padded_fields_keep_their_count_when_every_sample_has_as_many_rows() {
        let a = [
            f("boxes", "float32", &[2, 4]),
            f("box_labels", "int64", &[2]),
        ];
        let plan = layout(&[&a, &a]).unwrap();
        let pad = |fill| Layout::Pad {
            longest: 2,
            fill,
            count: "box_count".into(),
        };
        assert_eq!(
            plan,
            vec![
                ("boxes".into(), pad(0)),
                ("box_count".into(), Layout::Count(vec![2, 2])),
                ("box_labels".into(), pad(-1)),
            ]
        );
    }

    #[test]
    fn a_field_of_ones_own_is_stacked_unless_ragged_or_its_count_is_given() {
        let a = [f("points", "float32", &[3, 2])];
        assert_eq!(
            layout(&[&a, &a]).unwrap(),
            vec![("points".into(), Layout::Stack)]
        );
        let b = [f("points", "float32", &[1, 2])];
        assert_eq!(
            layout(&[&a, &b]).unwrap()[1],
            ("points_count".into(), Layout::Count(vec![3, 1]))
        );
        // Given by the samples: a count in every batch, ragged or not.
        let a = [f("points", "float32", &[3, 2]), count("points_count", 3)];
        let plan = layout(&[&a, &a]).unwrap();
        assert!(matches!(plan[0].1, Layout::Pad { longest: 3, .. }));
        assert_eq!(plan[1], ("points_count".into(), Layout::Count(vec![3, 3])));
        assert_eq!(plan.len(), 2);
        let wrong = [f("points", "float32", &[3, 2]), count("points_count", 2)];
        let e = layout(&[&a, &wrong]).unwrap_err();
        assert_eq!((e.pos, e.name.as_str()), (1, "points"));
        assert!(e.reason.contains("its count 'points_count' says 2"), "{e}");
    }

    #[test]
    fn samples_that_disagree_name_the_sample_and_the_field() {
        let a = [f("x", "float32", &[3])];
        let b = [f("x", "int64", &[3])];
        let e = layout(&[&a, &a, &b]).unwrap_err();
        assert_eq!((e.pos, e.name.as_str()), (2, "x"));
        assert_eq!(e.reason, "is int64 but the first sample's is float32");
        let c = [f("x", "float32", &[3, 1])];
        assert!(layout(&[&a, &c])
            .unwrap_err()
            .reason
            .contains("only the first axis"));
        let d = [f("y", "float32", &[3])];
        assert!(layout(&[&a, &d])
            .unwrap_err()
            .reason
            .contains("same fields"));
        // Fields that share a count must agree on it.
        let a = [
            f("boxes", "float32", &[2, 4]),
            f("masks", "uint8", &[2, 5, 5]),
        ];
        let b = [
            f("boxes", "float32", &[2, 4]),
            f("masks", "uint8", &[1, 5, 5]),
        ];
        let e = layout(&[&a, &b]).unwrap_err();
        assert_eq!((e.pos, e.name.as_str()), (1, "masks"));
        assert!(e.reason.contains("share the count 'box_count'"), "{e}");
    }

    #[test]
    fn pad_rows_pads_with_the_fill_and_counts_rows() {
        let (a, b): (&[i64], &[i64]) = (&[1, 2, 3, 4], &[5, 6]);
        let (out, longest, counts) = pad_rows(&[a, b], 2, -1);
        assert_eq!(out, vec![1, 2, 3, 4, 5, 6, -1, -1]);
        assert_eq!((longest, counts), (2, vec![2, 1]));
    }

    #[test]
    fn a_step_that_gives_its_count_gets_padding_and_the_count() {
        let arr = |rows: usize| Array::new(vec![rows], ArrayData::F32(vec![1.0; rows])).unwrap();
        let n = |v: i64| Array::scalar(ArrayData::I64(vec![v])).unwrap();
        let a = vec![("p".to_string(), arr(2)), ("p_count".to_string(), n(2))];
        let b = vec![("p".to_string(), arr(2)), ("p_count".to_string(), n(2))];
        let out = collate_extra(&[&a, &b]).unwrap();
        assert_eq!(out[0].1.count, Some(vec![2, 2]));
        assert_eq!(out[1].1.array.data, ArrayData::I32(vec![2, 2]));
    }
}
