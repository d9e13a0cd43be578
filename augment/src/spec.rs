//! Pipelines written as spec strings (PLACEHOLDER: the augment helper replaces this).
use crate::{AugmentError, ImageView, SampleRng};

#[derive(Debug, thiserror::Error)]
#[error("bad transform spec: {0}")]
pub struct SpecError(pub String);

#[derive(Clone, Debug, Default)]
pub struct Pipeline {}

#[derive(Default)]
pub struct Scratch {}

impl Pipeline {
    pub fn parse(_spec: &str) -> Result<Self, SpecError> {
        todo!()
    }
    pub fn identity() -> Self {
        Pipeline {}
    }
    /// (width, height) of the output for an input of (width, height).
    pub fn output_size(&self, w: usize, h: usize) -> (usize, usize) {
        (w, h)
    }
    /// Decode `bytes` to `channels` channels, transform, write into `out`.
    pub fn run_encoded(
        &self,
        _bytes: &[u8],
        _channels: usize,
        _rng: &mut SampleRng,
        _scratch: &mut Scratch,
        _out: &mut [u8],
    ) -> Result<(), AugmentError> {
        todo!()
    }
    /// Transform already-decoded pixels, write into `out` (same channel count).
    pub fn run_image(
        &self,
        _img: ImageView<'_>,
        _rng: &mut SampleRng,
        _scratch: &mut Scratch,
        _out: &mut [u8],
    ) -> Result<(), AugmentError> {
        todo!()
    }
}
