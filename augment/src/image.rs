//! Owned and borrowed u8 HWC images: the one pixel layout everything here speaks.

/// An owned image, rows of `width * channels` bytes, top to bottom.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub data: Vec<u8>,
}

/// A borrowed image with the same layout as [`Image`].
#[derive(Clone, Copy, Debug)]
pub struct ImageView<'a> {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub data: &'a [u8],
}

impl Image {
    pub fn new(width: usize, height: usize, channels: usize) -> Self {
        Image {
            width,
            height,
            channels,
            data: vec![0; width * height * channels],
        }
    }

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

    pub fn to_image(&self) -> Image {
        Image {
            width: self.width,
            height: self.height,
            channels: self.channels,
            data: self.data.to_vec(),
        }
    }
}
