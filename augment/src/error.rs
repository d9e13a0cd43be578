//! The error type for decode and transforms.

/// What went wrong decoding or transforming one image. The caller adds which file.
#[derive(Debug, thiserror::Error)]
pub enum AugmentError {
    #[error("empty input (0 bytes)")]
    Empty,
    #[error("not a JPEG, PNG or WebP file (starts with {head})")]
    UnknownFormat { head: String },
    #[error("truncated JPEG data ({len} bytes, no end-of-image marker): {reason}")]
    TruncatedJpeg { len: usize, reason: String },
    #[error("corrupt JPEG data: {0}")]
    Jpeg(String),
    #[error("corrupt PNG data: {0}")]
    Png(String),
    #[error("corrupt WebP data: {0}")]
    WebP(String),
    #[error("bad mask: {0}")]
    Mask(String),
    #[error("image is {width}x{height}, larger than the limit of {limit} pixels")]
    TooLarge {
        width: usize,
        height: usize,
        limit: usize,
    },
    #[error("image has zero width or height ({width}x{height})")]
    ZeroSize { width: usize, height: usize },
    #[error("cannot produce {0} channels (only 1 or 3)")]
    Channels(usize),
    #[error("input view is {width}x{height}x{channels} but holds {got} bytes")]
    InputShape {
        width: usize,
        height: usize,
        channels: usize,
        got: usize,
    },
    #[error("cannot decode image: {0}")]
    Decode(String),
    #[error("cannot normalise: {0}")]
    Normalize(String),
    #[error("resize failed: {0}")]
    Resize(String),
    #[error("output buffer holds {got} bytes but the image is {width}x{height}x{channels}")]
    OutputSize {
        width: usize,
        height: usize,
        channels: usize,
        got: usize,
    },
}

/// A malformed spec: which part, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad transform spec: in '{part}': {reason}")]
pub struct SpecError {
    pub part: String,
    pub reason: String,
}
