//! The error type for decode and transforms.

/// What went wrong decoding or transforming one image. The caller adds which file.
#[derive(Debug, thiserror::Error)]
pub enum AugmentError {
    #[error("cannot decode image: {0}")]
    Decode(String),
    #[error("output buffer holds {got} bytes but the image is {width}x{height}x{channels}")]
    OutputSize {
        width: usize,
        height: usize,
        channels: usize,
        got: usize,
    },
}
