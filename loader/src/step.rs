//! User steps: a caller's own per-sample code, run by the loader's workers after the
//! built-in transforms, with a random stream of its own seeded by (seed, epoch, index).
//!
//! A [`Step`] sees one sample at a time ([`StepSample`]): its u8 HWC image (in place,
//! in its batch slot), its class, its fields, and the arrays earlier steps added. It
//! may change the pixels and the class, and add named arrays ([`Array`]), which are
//! collated into the batch like the built-in fields: stacked when every sample's
//! array has the same shape, padded along the first axis with a per-sample count
//! when only that axis differs (see [`collate_extra`]). An error it returns is a
//! sample error and follows `on_error`; a panic ends the epoch as any worker panic.
//!
//! Because the step's random numbers come from (seed, epoch, index) and not from the
//! thread that runs it, its output is the same in sync and async mode and for any
//! worker count.

use std::fmt;
use std::sync::Arc;

use stoker_augment::SampleRng;

use crate::sample::SampleFields;

/// What a step returns when a sample cannot be processed: any error, whose message
/// becomes the reason of the sample error (which names the sample and the step).
pub type StepError = Box<dyn std::error::Error + Send + Sync>;

/// Mixed into the seed so that a step's stream is independent of the built-in
/// transforms' stream for the same sample (b"USERSTEP").
const STEP_SALT: u64 = 0x5553_4552_5354_4550;

/// The random stream a step gets for sample `index` of `epoch` under `seed`: the
/// same in every mode and for any worker count, and independent of the stream the
/// built-in transforms draw from.
pub fn step_rng(seed: u64, epoch: u64, index: u64) -> SampleRng {
    SampleRng::new(seed ^ STEP_SALT, epoch, index)
}

/// One sample as a step sees it, after the built-in transforms.
pub struct StepSample<'a> {
    /// The sample's index in the source, and the epoch.
    pub index: usize,
    pub epoch: u64,
    /// The sample's class; a step may change it (a label remap).
    pub label: u32,
    /// u8 pixels, `shape` (height, width, channels), row-major: the sample's slot in
    /// its batch, changed in place. The shape is the batch's and cannot change; an
    /// output of another type or size goes into an added array.
    pub image: &'a mut [u8],
    pub shape: (usize, usize, usize),
    /// The sample's built-in fields (empty for a classification source) and the
    /// arrays added so far ([`SampleFields::extra`]).
    pub fields: &'a mut SampleFields,
}

impl StepSample<'_> {
    /// Adds (or replaces) the array `name`, which becomes a batch field of that name.
    pub fn insert(&mut self, name: impl Into<String>, array: Array) {
        let name = name.into();
        match self.fields.extra.iter_mut().find(|(n, _)| *n == name) {
            Some((_, a)) => *a = array,
            None => self.fields.extra.push((name, array)),
        }
    }

    /// The array `name` added by an earlier step.
    pub fn get(&self, name: &str) -> Option<&Array> {
        self.fields
            .extra
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
    }
}

/// A per-sample step of the caller's own. Implement it for a type, or pass a closure
/// `Fn(&mut StepSample, &mut SampleRng) -> Result<(), StepError>` to
/// [`UserStep::new`].
pub trait Step: Send + Sync {
    /// A short name, for error messages.
    fn name(&self) -> &str {
        "user step"
    }

    /// Processes one sample. `rng` is this sample's own stream ([`step_rng`]).
    fn apply(&self, sample: &mut StepSample<'_>, rng: &mut SampleRng) -> Result<(), StepError>;
}

impl<F> Step for F
where
    F: Fn(&mut StepSample<'_>, &mut SampleRng) -> Result<(), StepError> + Send + Sync,
{
    fn apply(&self, sample: &mut StepSample<'_>, rng: &mut SampleRng) -> Result<(), StepError> {
        self(sample, rng)
    }
}

/// A step as [`LoaderConfig::steps`](crate::LoaderConfig::steps) holds it (cheap to
/// clone: the configuration is cloned with it).
#[derive(Clone)]
pub struct UserStep(pub Arc<dyn Step>);

impl UserStep {
    pub fn new(step: impl Step + 'static) -> UserStep {
        UserStep(Arc::new(step))
    }

    pub fn name(&self) -> &str {
        self.0.name()
    }
}

impl fmt::Debug for UserStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserStep({:?})", self.0.name())
    }
}

/// The elements of an [`Array`].
#[derive(Clone, Debug, PartialEq)]
pub enum ArrayData {
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F32(Vec<f32>),
}

impl ArrayData {
    pub fn len(&self) -> usize {
        match self {
            ArrayData::U8(v) => v.len(),
            ArrayData::I32(v) => v.len(),
            ArrayData::I64(v) => v.len(),
            ArrayData::F32(v) => v.len(),
        }
    }

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
    pub shape: Vec<usize>,
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
    pub array: Array,
    pub count: Option<Vec<i32>>,
}

/// Why a batch's added arrays cannot be collated, naming the position in the batch
/// of the sample that disagrees with the first.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("added array '{name}' of the sample at position {pos}: {reason}")]
pub struct CollateError {
    pub pos: usize,
    pub name: String,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(shape: &[usize], v: &[f32]) -> Array {
        Array::new(shape.to_vec(), ArrayData::F32(v.to_vec())).unwrap()
    }

    #[test]
    fn equal_shapes_stack_and_ragged_ones_pad_with_counts() {
        let a = vec![
            ("x".to_string(), f32s(&[2], &[1.0, 2.0])),
            ("r".to_string(), f32s(&[1, 2], &[5.0, 6.0])),
        ];
        let b = vec![
            ("x".to_string(), f32s(&[2], &[3.0, 4.0])),
            ("r".to_string(), f32s(&[2, 2], &[7.0, 8.0, 9.0, 10.0])),
        ];
        let out = collate_extra(&[&a, &b]).unwrap();
        assert_eq!(out[0].1.array, f32s(&[2, 2], &[1.0, 2.0, 3.0, 4.0]));
        assert_eq!(out[0].1.count, None);
        assert_eq!(
            out[1].1.array,
            f32s(&[2, 2, 2], &[5.0, 6.0, 0.0, 0.0, 7.0, 8.0, 9.0, 10.0])
        );
        assert_eq!(out[1].1.count, Some(vec![1, 2]));
    }

    #[test]
    fn scalars_stack_into_a_vector() {
        let s = |v| {
            vec![(
                "s".to_string(),
                Array::scalar(ArrayData::I64(vec![v])).unwrap(),
            )]
        };
        let (a, b) = (s(3), s(4));
        let out = collate_extra(&[&a, &b]).unwrap();
        assert_eq!(out[0].1.array.shape, vec![2]);
        assert_eq!(out[0].1.array.data, ArrayData::I64(vec![3, 4]));
    }

    #[test]
    fn disagreements_name_the_sample_and_the_array() {
        let a = vec![("x".to_string(), f32s(&[2], &[1.0, 2.0]))];
        let other_type = vec![(
            "x".to_string(),
            Array::new(vec![2], ArrayData::U8(vec![1, 2])).unwrap(),
        )];
        let e = collate_extra(&[&a, &other_type]).unwrap_err();
        assert_eq!((e.pos, e.name.as_str()), (1, "x"));
        assert!(e.reason.contains("uint8"), "{e}");
        let other_axes = vec![("x".to_string(), f32s(&[1, 2], &[1.0, 2.0]))];
        let e = collate_extra(&[&a, &other_axes]).unwrap_err();
        assert!(e.reason.contains("only the first axis"), "{e}");
        let missing: Vec<(String, Array)> = Vec::new();
        assert_eq!(collate_extra(&[&a, &missing]).unwrap_err().pos, 1);
        assert!(Array::new(vec![3], ArrayData::U8(vec![1])).is_none());
    }

    #[test]
    fn the_step_stream_is_its_own() {
        let mut builtin = SampleRng::new(1, 2, 3);
        let mut step = step_rng(1, 2, 3);
        assert_ne!(builtin.next_u64(), step.next_u64());
        assert_eq!(step_rng(1, 2, 3).next_u64(), step_rng(1, 2, 3).next_u64());
    }
}
