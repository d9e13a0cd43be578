//! Decode JPEG and PNG bytes into u8 HWC (PLACEHOLDER: the augment helper replaces this).
use crate::{AugmentError, Image};

/// Width and height from the header alone.
pub fn probe(_bytes: &[u8]) -> Result<(usize, usize), AugmentError> {
    todo!("augment helper")
}

/// Decode into an owned image with `channels` (1 or 3) channels.
pub fn decode(_bytes: &[u8], _channels: usize) -> Result<Image, AugmentError> {
    todo!("augment helper")
}
