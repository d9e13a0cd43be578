//! Bilinear resampling with antialiasing (PIL's algorithm, via `fast_image_resize`).
//!
//! Two kinds of crop meet here. A *hard* crop (RandomResizedCrop) makes the crop box
//! the whole world: the filter never reads outside it, exactly like torchvision's
//! crop-then-resize, yet no pixels are copied. A *soft* crop (Resize fused with
//! CenterCrop) only says which part of the resized image to compute: the filter still
//! reads neighbours outside the box, so the result equals resize-then-crop.

use fast_image_resize::images::{CroppedImage, Image as FirImage, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};

use super::ResizeTo;
use crate::{AugmentError, Image, ImageView};

/// torchvision's `_compute_resized_output_size` for an int size: the long side is
/// truncated, not rounded.
pub fn target_size(to: ResizeTo, w: usize, h: usize) -> (usize, usize) {
    match to {
        ResizeTo::Exact { width, height } => (width, height),
        ResizeTo::Shorter(n) => {
            let (short, long) = if w <= h { (w, h) } else { (h, w) };
            // Integer division equals Python's int(n * long / short) here: the exact
            // quotient is never within float rounding of an integer for real sizes.
            let new_long = n.saturating_mul(long) / short.max(1);
            if w <= h {
                (n, new_long)
            } else {
                (new_long, n)
            }
        }
    }
}

/// A pixel rectangle inside an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    /// Column of the rectangle's left edge, in pixels from the image's left.
    pub left: usize,
    /// Row of the rectangle's top edge, in pixels from the image's top.
    pub top: usize,
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
}

impl Rect {
    /// The whole of a `w` x `h` image.
    pub fn full(w: usize, h: usize) -> Self {
        Rect {
            left: 0,
            top: 0,
            width: w,
            height: h,
        }
    }
}

/// A fractional box in the coordinates of the (hard-cropped) source.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftBox {
    /// x of the box's left edge, in source pixels.
    pub left: f64,
    /// y of the box's top edge, in source pixels.
    pub top: f64,
    /// Width in source pixels.
    pub width: f64,
    /// Height in source pixels.
    pub height: f64,
}

impl From<Rect> for SoftBox {
    fn from(r: Rect) -> Self {
        SoftBox {
            left: r.left as f64,
            top: r.top as f64,
            width: r.width as f64,
            height: r.height as f64,
        }
    }
}

fn pixel_type(channels: usize) -> Result<PixelType, AugmentError> {
    match channels {
        1 => Ok(PixelType::U8),
        2 => Ok(PixelType::U8x2),
        3 => Ok(PixelType::U8x3),
        4 => Ok(PixelType::U8x4),
        c => Err(AugmentError::Channels(c)),
    }
}

fn err(e: impl std::error::Error + Send + Sync + 'static) -> AugmentError {
    AugmentError::resize_from(e)
}

/// Resample `hard` of `src` (optionally only its `soft` part) into `dst`, a
/// `dst_w` x `dst_h` image with the source's channel count.
pub fn resample(
    resizer: &mut Resizer,
    src: ImageView<'_>,
    hard: Rect,
    soft: Option<SoftBox>,
    dst: &mut [u8],
    dst_w: usize,
    dst_h: usize,
) -> Result<(), AugmentError> {
    let pt = pixel_type(src.channels)?;
    let u = |v: usize| u32::try_from(v).map_err(err);
    let src_img = ImageRef::new(u(src.width)?, u(src.height)?, src.data, pt).map_err(err)?;
    let mut dst_img = FirImage::from_slice_u8(u(dst_w)?, u(dst_h)?, dst, pt).map_err(err)?;
    // Alpha premultiplication would treat a 4th channel as transparency; ours is data.
    let mut options = ResizeOptions::new()
        .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear))
        .use_alpha(false);
    if let Some(b) = soft {
        options = options.crop(b.left, b.top, b.width, b.height);
    }
    if hard == Rect::full(src.width, src.height) {
        resizer.resize(&src_img, &mut dst_img, &options)
    } else {
        let cropped = CroppedImage::new(
            &src_img,
            u(hard.left)?,
            u(hard.top)?,
            u(hard.width)?,
            u(hard.height)?,
        )
        .map_err(err)?;
        resizer.resize(&cropped, &mut dst_img, &options)
    }
    .map_err(err)
}

/// The whole of `src` resampled to `width` x `height` with the same antialiased
/// filter as the pipeline's Resize (PIL's bilinear), into a new image.
pub fn resize_whole(
    src: ImageView<'_>,
    width: usize,
    height: usize,
) -> Result<Image, AugmentError> {
    let mut out = Image::new(width, height, src.channels);
    let hard = Rect::full(src.width, src.height);
    resample(
        &mut Resizer::new(),
        src,
        hard,
        None,
        &mut out.data,
        width,
        height,
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorter_side_truncates_like_torchvision() {
        assert_eq!(target_size(ResizeTo::Shorter(256), 500, 375), (341, 256));
        assert_eq!(target_size(ResizeTo::Shorter(256), 375, 500), (256, 341));
        assert_eq!(target_size(ResizeTo::Shorter(32), 10, 10), (32, 32));
        let exact = ResizeTo::Exact {
            width: 64,
            height: 48,
        };
        assert_eq!(target_size(exact, 7, 9), (64, 48));
    }

    #[test]
    fn constant_stays_constant() {
        let data = vec![77u8; 50 * 30 * 3];
        let src = ImageView::new(50, 30, 3, &data).unwrap();
        let mut out = vec![0u8; 17 * 11 * 3];
        let mut r = Resizer::new();
        let hard = Rect {
            left: 3,
            top: 4,
            width: 20,
            height: 21,
        };
        resample(&mut r, src, hard, None, &mut out, 17, 11).unwrap();
        assert!(out.iter().all(|&v| v == 77));
    }
}
