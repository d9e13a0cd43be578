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

    /// Zeros of the same type.
    fn zeros(&self, n: usize) -> ArrayData {
        match self {
            ArrayData::U8(_) => ArrayData::U8(vec![0; n]),
            ArrayData::I32(_) => ArrayData::I32(vec![0; n]),
            ArrayData::I64(_) => ArrayData::I64(vec![0; n]),
            ArrayData::F32(_) => ArrayData::F32(vec![0.0; n]),
        }
    }

    /// Copies `src` (of the same type) into `self` at `at`.
    fn copy_at(&mut self, at: usize, src: &ArrayData) {
        match (self, src) {
            (ArrayData::U8(d), ArrayData::U8(s)) => d[at..at + s.len()].copy_from_slice(s),
            (ArrayData::I32(d), ArrayData::I32(s)) => d[at..at + s.len()].copy_from_slice(s),
            (ArrayData::I64(d), ArrayData::I64(s)) => d[at..at + s.len()].copy_from_slice(s),
            (ArrayData::F32(d), ArrayData::F32(s)) => d[at..at + s.len()].copy_from_slice(s),
            // Checked by the caller (collate_extra compares dtypes first).
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

/// Collates the samples' added arrays (in batch order): every sample must add the
/// same names with the same element type and number of axes. Equal shapes are
/// stacked; shapes that differ only in the first axis are padded with zeros to the
/// largest, with each sample's count; anything else is an error.
pub fn collate_extra(
    samples: &[&[(String, Array)]],
) -> Result<Vec<(String, BatchArray)>, CollateError> {
    let Some(first) = samples.first() else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(first.len());
    for (pos, s) in samples.iter().enumerate() {
        if s.len() != first.len() {
            let names = |x: &[(String, Array)]| {
                x.iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(CollateError {
                pos,
                name: names(s),
                reason: format!("the first sample added [{}]", names(first)),
            });
        }
    }
    for (name, a0) in first.iter() {
        let err = |pos: usize, reason: String| CollateError {
            pos,
            name: name.clone(),
            reason,
        };
        let mut arrays = Vec::with_capacity(samples.len());
        for (pos, s) in samples.iter().enumerate() {
            let a = s
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, a)| a)
                .ok_or_else(|| err(pos, "missing (the first sample has it)".into()))?;
            if a.data.dtype() != a0.data.dtype() {
                return Err(err(
                    pos,
                    format!(
                        "is {} but the first sample's is {}",
                        a.data.dtype(),
                        a0.data.dtype()
                    ),
                ));
            }
            if a.shape.len() != a0.shape.len() || a.shape.get(1..) != a0.shape.get(1..) {
                return Err(err(
                    pos,
                    format!(
                        "has shape {:?} and the first sample's {:?}: only the first axis \
                         may differ (it is padded)",
                        a.shape, a0.shape
                    ),
                ));
            }
            arrays.push(a);
        }
        let ragged = arrays.iter().any(|a| a.shape != a0.shape);
        let m = arrays
            .iter()
            .map(|a| a.shape.first().copied().unwrap_or(1))
            .max()
            .unwrap_or(0);
        let mut shape = vec![samples.len()];
        if let Some((_, rest)) = a0.shape.split_first() {
            shape.push(m);
            shape.extend_from_slice(rest);
        }
        let per: usize = shape[1..].iter().product();
        let mut data = a0.data.zeros(samples.len() * per);
        for (i, a) in arrays.iter().enumerate() {
            data.copy_at(i * per, &a.data);
        }
        let count = ragged.then(|| {
            arrays
                .iter()
                .map(|a| a.shape.first().copied().unwrap_or(1) as i32)
                .collect()
        });
        out.push((
            name.clone(),
            BatchArray {
                array: Array { shape, data },
                count,
            },
        ));
    }
    Ok(out)
}
