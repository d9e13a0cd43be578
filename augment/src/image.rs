//! Owned and borrowed u8 HWC images: the one pixel layout everything here speaks.

/// An owned image, rows of `width * channels` bytes, top to bottom.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Bytes per pixel: 1 (gray) or 3 (RGB) from the decoder, up to 4 in transforms.
    pub channels: usize,
    /// The pixels, `width * height * channels` bytes, interleaved (HWC).
    pub data: Vec<u8>,
}

/// A borrowed image with the same layout as [`Image`].
#[derive(Clone, Copy, Debug)]
pub struct ImageView<'a> {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// Bytes per pixel (1 to 4 for a pipeline's input).
    pub channels: usize,
    /// The pixels, `width * height * channels` bytes, interleaved (HWC).
    pub data: &'a [u8],
}

impl Image {
    /// A black (all-zero) image of the given shape.
    pub fn new(width: usize, height: usize, channels: usize) -> Self {
        Image {
            width,
            height,
            channels,
            data: vec![0; width * height * channels],
        }
    }

    /// Borrows the image as an [`ImageView`].
    pub fn view(&self) -> ImageView<'_> {
        ImageView {
            width: self.width,
            height: self.height,
            channels: self.channels,
            data: &self.data,
        }
    }
}

impl<'a> ImageView<'a> {
    /// A view over `data`, or `None` when the length does not match the shape.
    pub fn new(width: usize, height: usize, channels: usize, data: &'a [u8]) -> Option<Self> {
        (width * height * channels == data.len()).then_some(ImageView {
            width,
            height,
            channels,
            data,
        })
    }

    /// Copies the pixels into an owned [`Image`].
    pub fn to_image(&self) -> Image {
        Image {
            width: self.width,
            height: self.height,
            channels: self.channels,
            data: self.data.to_vec(),
        }
    }
}
