//! stoker-augment: decode JPEG/PNG and augment images as u8 HWC buffers.
//!
//! A [`Pipeline`] is a decode step followed by a list of transforms, usually written
//! as a spec string such as `rrc:224,flip` (grammar in [`spec`]). It writes its output
//! straight into a caller's buffer (a batch slot) and draws every random choice from a
//! [`SampleRng`] that the caller seeds per sample, so results are reproducible.

#![warn(missing_docs)]

mod contain;
mod convert;
pub mod decode;
mod error;
pub mod geometry;
pub mod image;
mod large;
mod limits;
pub mod mask;
mod pipeline;
pub mod retain;
pub mod rng;
pub mod spec;
pub mod transform;
#[cfg(stoker_turbo)]
pub mod turbo;

pub use error::{AugmentError, SpecError};

/// Whether this build decodes JPEG with libjpeg-turbo (found by the build script),
/// with the crop-window and DCT-scaled fast path; otherwise zune-jpeg.
pub const TURBO: bool = cfg!(stoker_turbo);

/// The JPEG decoder of this build, for reports: `libjpeg-turbo 2.1.5` or `zune-jpeg`.
pub fn decoder() -> String {
    #[cfg(stoker_turbo)]
    return format!("libjpeg-turbo {}", turbo::version());
    #[cfg(not(stoker_turbo))]
    return "zune-jpeg".to_string();
}
pub use geometry::{GeoOp, Geometry};
pub use image::{Image, ImageView};
pub use large::LARGE_PIXELS;
pub use limits::DEFAULT_MAX_PIXELS;
pub use pipeline::{Pipeline, Scratch};
pub use rng::SampleRng;
pub use transform::{ResizeTo, Transform};
