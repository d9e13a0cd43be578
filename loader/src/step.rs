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
    /// The epoch the sample is read in.
    pub epoch: u64,
    /// The sample's class; a step may change it (a label remap).
    pub label: u32,
    /// u8 pixels, `shape` (height, width, channels), row-major: the sample's slot in
    /// its batch, changed in place. The shape is the batch's and cannot change; an
    /// output of another type or size goes into an added array.
    pub image: &'a mut [u8],
    /// (height, width, channels) of `image`, the batch's image shape.
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
    /// Wraps a step (a [`Step`] value or a closure) for the configuration.
    pub fn new(step: impl Step + 'static) -> UserStep {
        UserStep(Arc::new(step))
    }

    /// The step's name ([`Step::name`]).
    pub fn name(&self) -> &str {
        self.0.name()
    }
}

impl fmt::Debug for UserStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserStep({:?})", self.0.name())
    }
}

pub use crate::array::{collate_extra, Array, ArrayData, BatchArray, CollateError};

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
