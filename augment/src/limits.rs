//! Limits on what we agree to decode, checked from an image's header before any pixel
//! buffer is allocated.

use crate::AugmentError;

/// The largest image we agree to decode, in pixels: Pillow's decompression-bomb
/// threshold (2 * `MAX_IMAGE_PIXELS`), so that a forged header cannot make a worker
/// allocate gigabytes.
pub const MAX_PIXELS: usize = 178_956_970;

pub(crate) fn check_size(width: usize, height: usize) -> Result<(), AugmentError> {
    if width == 0 || height == 0 {
        return Err(AugmentError::ZeroSize { width, height });
    }
    if width.saturating_mul(height) > MAX_PIXELS {
        return Err(AugmentError::TooLarge {
            width,
            height,
            limit: MAX_PIXELS,
        });
    }
    Ok(())
}

pub(crate) fn check_channels(channels: usize) -> Result<(), AugmentError> {
    if channels == 1 || channels == 3 {
        Ok(())
    } else {
        Err(AugmentError::Channels(channels))
    }
}
