//! Limits on what we agree to decode, checked from an image's header before any pixel
//! buffer is allocated.

use crate::AugmentError;

/// The largest image decoded by default, in pixels: 64 megapixels (2^26, e.g. 8192 x
/// 8192), about 192 MB as RGB. A forged header (a 65,000 x 65,000 JPEG of a few bytes)
/// is refused from its header instead of making a worker allocate gigabytes. Photos
/// from any current camera fit; a data set of larger scans raises it with
/// [`Pipeline::with_max_pixels`](crate::Pipeline::with_max_pixels).
pub const DEFAULT_MAX_PIXELS: usize = 1 << 26;

pub(crate) fn check_size(width: usize, height: usize, limit: usize) -> Result<(), AugmentError> {
    if width == 0 || height == 0 {
        return Err(AugmentError::ZeroSize { width, height });
    }
    if width.saturating_mul(height) > limit {
        return Err(AugmentError::TooLarge {
            width,
            height,
            limit,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_more_than_the_limit_and_zero() {
        assert!(check_size(8192, 8192, DEFAULT_MAX_PIXELS).is_ok());
        assert!(matches!(
            check_size(8193, 8192, DEFAULT_MAX_PIXELS),
            Err(AugmentError::TooLarge { .. })
        ));
        assert!(matches!(
            check_size(usize::MAX, usize::MAX, DEFAULT_MAX_PIXELS),
            Err(AugmentError::TooLarge { .. })
        ));
        assert!(matches!(
            check_size(0, 5, 100),
            Err(AugmentError::ZeroSize { .. })
        ));
        assert!(check_size(10, 10, 100).is_ok());
        assert!(check_size(10, 11, 100).is_err());
    }
}
