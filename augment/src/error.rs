//! The error type for decode and transforms.

/// A decoder's or resampler's own error, kept as the [`source`](std::error::Error::source)
/// of the [`AugmentError`] that reports it.
type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong decoding or transforming one image. The caller adds which file.
#[derive(Debug, thiserror::Error)]
pub enum AugmentError {
    /// The encoded bytes (an image or a mask) are empty.
    #[error("empty input (0 bytes)")]
    Empty,
    /// The bytes start with no JPEG, PNG or WebP signature.
    #[error("not a JPEG, PNG or WebP file (starts with {head})")]
    UnknownFormat {
        /// The first (at most 8) bytes, in hex and as text.
        head: String,
    },
    #[error("truncated JPEG data ({len} bytes, no end-of-image marker): {reason}")]
    /// A JPEG file ends before its end-of-image marker (a cut download or copy).
    TruncatedJpeg {
        /// Length of the data, in bytes.
        len: usize,
        /// What the decoder reported, or that the data ends before the marker.
        reason: String,
        /// The decoder's error, where it gave one (zune-jpeg's; libjpeg-turbo reports
        /// text only).
        #[source]
        source: Option<Cause>,
    },
    /// A complete JPEG file that the decoder rejects (bad headers or scan data).
    #[error("corrupt JPEG data: {reason}")]
    Jpeg {
        /// What is wrong, as the decoder reported it.
        reason: String,
        /// The decoder's error, where it gave one (zune-jpeg's; libjpeg-turbo reports
        /// text only).
        #[source]
        source: Option<Cause>,
    },
    /// The PNG decoder rejects the file, or its header or colour type.
    #[error("corrupt PNG data: {reason}")]
    Png {
        /// What is wrong, as the decoder reported it.
        reason: String,
        /// The decoder's error (the `image` or `png` crate's), where it gave one.
        #[source]
        source: Option<Cause>,
    },
    /// The WebP decoder rejects the file, or its colour type.
    #[error("corrupt WebP data: {reason}")]
    WebP {
        /// What is wrong, as the decoder reported it.
        reason: String,
        /// The decoder's error (the `image` crate's), where it gave one.
        #[source]
        source: Option<Cause>,
    },
    /// A segmentation mask is not a grey or palette PNG of at most 8 bits per pixel.
    #[error("bad mask: {0}")]
    Mask(String),
    #[error("image is {width}x{height}, larger than the limit of {limit} pixels")]
    /// The size in the image's header is more pixels than the decoder accepts
    /// ([`DEFAULT_MAX_PIXELS`](crate::DEFAULT_MAX_PIXELS) unless raised).
    TooLarge {
        /// Width of the image, in pixels.
        width: usize,
        /// Height of the image, in pixels.
        height: usize,
        /// The largest number of pixels accepted.
        limit: usize,
    },
    #[error("image has zero width or height ({width}x{height})")]
    /// The image has no pixels: its width or height is zero.
    ZeroSize {
        /// Width of the image, in pixels.
        width: usize,
        /// Height of the image, in pixels.
        height: usize,
    },
    /// A channel count that the call does not support (decoding makes 1 or 3;
    /// transforms take 1 to 4).
    #[error("cannot produce {0} channels (only 1 or 3)")]
    Channels(usize),
    #[error("input view is {width}x{height}x{channels} but holds {got} bytes")]
    /// An input [`ImageView`](crate::ImageView)'s buffer length is not
    /// `width * height * channels`.
    InputShape {
        /// Width of the view, in pixels.
        width: usize,
        /// Height of the view, in pixels.
        height: usize,
        /// Channels per pixel of the view.
        channels: usize,
        /// Length of the view's buffer, in bytes.
        got: usize,
    },
    /// The means, standard deviations or buffers given to
    /// [`normalize_into`](crate::transform::normalize::normalize_into) do not match
    /// the channel count or each other.
    #[error("cannot normalise: {0}")]
    Normalize(String),
    /// The resampler failed, or a step would make an image larger than the pipeline's
    /// pixel limit.
    #[error("resize failed: {reason}")]
    Resize {
        /// What failed.
        reason: String,
        /// The resampler's error (fast_image_resize's), where it gave one.
        #[source]
        source: Option<Cause>,
    },
    // In a loader, the buffer is a batch's slot, sized by the first image read: this
    // image is another size, which only a transform ending in a fixed size prevents.
    #[error(
        "the image is {width}x{height}x{channels} after the transforms, but its place in \
         the output holds {got} bytes: images of different sizes need a transform that \
         ends in a fixed size (resize:, center:, rrc:)"
    )]
    /// The output buffer's length is not that of the pipeline's output image.
    OutputSize {
        /// Width of the output image, in pixels.
        width: usize,
        /// Height of the output image, in pixels.
        height: usize,
        /// Channels per pixel of the output image.
        channels: usize,
        /// Length of the buffer given, in bytes.
        got: usize,
    },
}

impl AugmentError {
    /// A [`Jpeg`](AugmentError::Jpeg) error of our own (no decoder error under it).
    pub(crate) fn jpeg(reason: impl Into<String>) -> Self {
        AugmentError::Jpeg {
            reason: reason.into(),
            source: None,
        }
    }

    /// A [`TruncatedJpeg`](AugmentError::TruncatedJpeg) error of our own.
    pub(crate) fn truncated_jpeg(len: usize, reason: impl Into<String>) -> Self {
        AugmentError::TruncatedJpeg {
            len,
            reason: reason.into(),
            source: None,
        }
    }

    /// A [`Png`](AugmentError::Png) error of our own.
    pub(crate) fn png(reason: impl Into<String>) -> Self {
        AugmentError::Png {
            reason: reason.into(),
            source: None,
        }
    }

    /// The PNG decoder's error `e`, kept as the source.
    pub(crate) fn png_from(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        AugmentError::Png {
            reason: e.to_string(),
            source: Some(Box::new(e)),
        }
    }

    /// A [`WebP`](AugmentError::WebP) error of our own.
    pub(crate) fn webp(reason: impl Into<String>) -> Self {
        AugmentError::WebP {
            reason: reason.into(),
            source: None,
        }
    }

    /// The WebP decoder's error `e`, kept as the source.
    pub(crate) fn webp_from(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        AugmentError::WebP {
            reason: e.to_string(),
            source: Some(Box::new(e)),
        }
    }

    /// A [`Resize`](AugmentError::Resize) error of our own.
    pub(crate) fn resize(reason: impl Into<String>) -> Self {
        AugmentError::Resize {
            reason: reason.into(),
            source: None,
        }
    }

    /// The resampler's error `e`, kept as the source.
    pub(crate) fn resize_from(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        AugmentError::Resize {
            reason: e.to_string(),
            source: Some(Box::new(e)),
        }
    }
}

/// A malformed spec: which part, and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bad transform spec: in '{part}': {reason}")]
pub struct SpecError {
    /// The offending transform as written (empty for an empty transform).
    pub part: String,
    /// What is wrong with it.
    pub reason: String,
}
