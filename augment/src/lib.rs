//! stoker-augment: decode JPEG/PNG and augment images as u8 HWC buffers.
//!
//! A [`Pipeline`] is a decode step followed by a list of transforms, usually written
//! as a spec string such as `rrc:224,flip` (grammar in [`spec`]). It writes its output
//! straight into a caller's buffer (a batch slot) and draws every random choice from a
//! [`SampleRng`] that the caller seeds per sample, so results are reproducible.

mod convert;
pub mod decode;
mod error;
pub mod image;
mod limits;
mod pipeline;
pub mod retain;
pub mod rng;
pub mod spec;
pub mod transform;
#[cfg(feature = "turbo")]
pub mod turbo;

pub use error::{AugmentError, SpecError};
pub use image::{Image, ImageView};
pub use limits::DEFAULT_MAX_PIXELS;
pub use pipeline::{Pipeline, Scratch};
pub use rng::SampleRng;
pub use transform::{ResizeTo, Transform};
