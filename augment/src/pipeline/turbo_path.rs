//! The pipeline's libjpeg-turbo path: when the first step shrinks the image
//! (`rrc`, `resize`, or `resize` then a fitting `center` crop), decode only the pixels
//! that step keeps, at 1/2, 1/4 or 1/8 scale when what it keeps is at least that many
//! times its output, and resample from there. Everything after the first step runs as
//! on a full decode. Three-channel samples travel as RGBX (four bytes a pixel) from
//! libjpeg through the resampler and are packed into RGB at the end, where a `flip`
//! that comes next is done: the same bytes, fewer passes.
//!
//! The box a step keeps is drawn or computed from the header's size, with the same
//! random draws as the full-decode path, so the two paths choose the same geometry and
//! differ only by the decoder's and the scaled IDCT's rounding (tolerances in
//! augment/tests/turbo.rs).

use super::{fused_crop_box, sized, Loc, Pipeline, Scratch};
use crate::convert::{rgb_to_channels, rgbx_to_rgb};
use crate::decode;
use crate::transform::crop::rrc_box;
use crate::transform::resize::{resample, target_size, Rect, SoftBox};
use crate::turbo::{scale_denom, with_decoder, Header, TurboDecoder};
use crate::{AugmentError, ImageView, SampleRng, Transform};

/// One sample as the path receives it: the encoded bytes, and the channels (1 or 3)
/// to decode them to.
struct Encoded<'a> {
    bytes: &'a [u8],
    channels: usize,
}

/// What the leading step(s) keep of the image and make of it.
struct LeadingSteps {
    /// The kept part, in full-size pixel coordinates (fractional for a fused crop).
    keep: SoftBox,
    /// Whether `keep` lies on whole pixels (then the window's own hard/soft boxes are
    /// used unchanged, as the rrc path always did).
    whole: bool,
    /// Output size of the leading step(s).
    target: (usize, usize),
    /// Number of transforms these steps are (1, or 2 for resize + centre crop).
    steps: usize,
}

impl Pipeline {
    /// `None` when the path does not apply or the file is anything but cleanly
    /// decodable (CMYK, truncated, corrupt, an error of any kind): the caller then
    /// runs the full-decode path from the same random state, which decides and
    /// reports.
    pub(crate) fn run_turbo(
        &self,
        bytes: &[u8],
        channels: usize,
        rng: &mut SampleRng,
        scratch: &mut Scratch,
        out: &mut [u8],
    ) -> Option<Result<(), AugmentError>> {
        // A cheap look before sniffing the bytes; `leading_steps` decides, over every
        // transform, which first steps this path takes.
        if !matches!(
            self.transforms.first(),
            Some(Transform::RandomResizedCrop { .. } | Transform::Resize(_))
        ) {
            return None;
        }
        // A file without its end marker is truncated: the full-decode path reports
        // it, while a window above the cut would decode.
        if !matches!(decode::sniff(bytes), Ok(decode::Format::Jpeg))
            || !decode::ends_with_eoi(bytes)
            || !matches!(channels, 1 | 3)
        {
            return None;
        }
        let saved = rng.clone();
        let mut window = std::mem::take(&mut scratch.decoded);
        let input = Encoded { bytes, channels };
        let done = with_decoder(|dec| {
            self.decode_leading_steps(dec, &input, rng, &mut window.data, scratch, out)
        });
        scratch.decoded = window;
        match done {
            Some(Ok(true)) => Some(Ok(())),
            // A cut file is an error whichever decoder sees it.
            Some(Err(e @ AugmentError::TruncatedJpeg { .. })) => {
                scratch.last_window = None;
                Some(Err(e))
            }
            _ => {
                scratch.last_window = None;
                *rng = saved;
                None
            }
        }
    }

    /// The leading step(s) for an image of `w` x `h`, drawing from `rng` as the
    /// full-decode path does; `None` when the first step is not one this path takes.
    fn leading_steps(&self, w: usize, h: usize, rng: &mut SampleRng) -> Option<LeadingSteps> {
        match *self.transforms.first()? {
            Transform::RandomResizedCrop {
                width,
                height,
                scale,
                ratio,
            } => {
                let r = rrc_box(rng, w, h, scale, ratio);
                Some(LeadingSteps {
                    keep: SoftBox {
                        left: r.left as f64,
                        top: r.top as f64,
                        width: r.width as f64,
                        height: r.height as f64,
                    },
                    whole: true,
                    target: (width, height),
                    steps: 1,
                })
            }
            Transform::Resize(to) => {
                let resized = target_size(to, w, h);
                Some(match self.fused_crop(0, w, h) {
                    None => LeadingSteps {
                        keep: SoftBox {
                            left: 0.0,
                            top: 0.0,
                            width: w as f64,
                            height: h as f64,
                        },
                        whole: true,
                        target: resized,
                        steps: 1,
                    },
                    Some(crop) => LeadingSteps {
                        keep: fused_crop_box(w, h, resized, crop),
                        whole: false,
                        target: crop,
                        steps: 2,
                    },
                })
            }
            Transform::CenterCrop { .. }
            | Transform::RandomCrop { .. }
            | Transform::Pad(_)
            | Transform::HorizontalFlip { .. }
            | Transform::ColorJitter(_)
            | Transform::Grayscale { .. }
            | Transform::RandomErasing(_)
            | Transform::Cutout { .. }
            | Transform::Adjust(_)
            | Transform::Rotate { .. }
            | Transform::Affine { .. }
            | Transform::Blur(_)
            | Transform::Policy(_) => None,
        }
    }

    /// Decodes the window the leading step(s) keep into `buf`, resamples it to their
    /// output and runs the rest of the pipeline. `Ok(false)`: not handled here (CMYK,
    /// libjpeg warned of corrupt data, or leading steps this path does not take).
    fn decode_leading_steps(
        &self,
        dec: &mut TurboDecoder,
        input: &Encoded<'_>,
        rng: &mut SampleRng,
        buf: &mut Vec<u8>,
        scratch: &mut Scratch,
        out: &mut [u8],
    ) -> Result<bool, AugmentError> {
        let Encoded { bytes, channels } = *input;
        let hdr = match dec.header(bytes)? {
            Header::Ready(h) => h,
            Header::Unsupported => return Ok(false),
        };
        let (w, h) = (hdr.width, hdr.height);
        crate::limits::check_size(w, h, self.max_pixels())?;
        self.check_out(w, h, channels, out.len())?;
        let Some(lead) = self.leading_steps(w, h, rng) else {
            return Ok(false);
        };
        if let Some(g) = &mut scratch.geometry {
            g.reset(w, h);
            g.push(crate::GeoOp::Resample {
                keep: lead.keep,
                to: lead.target,
            });
        }
        let (tw, th) = lead.target;
        // The whole pixels that hold the kept part.
        let k = &lead.keep;
        let left = (k.left.floor() as usize).min(w - 1);
        let top = (k.top.floor() as usize).min(h - 1);
        let b = Rect {
            left,
            top,
            width: ((k.left + k.width).ceil() as usize).min(w).max(left + 1) - left,
            height: ((k.top + k.height).ceil() as usize).min(h).max(top + 1) - top,
        };
        let denom = scale_denom(b, tw, th);
        // Three channels are decoded and resampled as RGBX (four bytes a pixel, the
        // same values): the resampler's four-byte kernel is the faster, and packing
        // the result into the sample is where a following flip is done.
        let px = if channels == 3 { 4 } else { 3 };
        let win = if px == 4 {
            hdr.decode_window_rgbx(b, denom, buf)?
        } else {
            hdr.decode_window(b, denom, buf)?
        };
        if win.short_data {
            return Err(crate::turbo::short_data_error(bytes));
        }
        if win.warnings {
            return Ok(false);
        }
        scratch.last_window = Some((win.width, win.height, denom));
        let soft = if lead.whole {
            win.soft
        } else {
            // The kept part relative to the window's hard box: the hard box starts at
            // b / denom - soft.left in scaled coordinates (soft.left is 0 at scale 1).
            let d = denom as f64;
            let (ox, oy) = win.soft.map_or((0.0, 0.0), |s| (s.left, s.top));
            let x0 = b.left as f64 / d - ox;
            let y0 = b.top as f64 / d - oy;
            let left = (k.left / d - x0).max(0.0);
            let top = (k.top / d - y0).max(0.0);
            Some(SoftBox {
                left,
                top,
                width: (k.width / d).min(win.hard.width as f64 - left),
                height: (k.height / d).min(win.hard.height as f64 - top),
            })
        };
        let n = win.width * win.height;
        if px == 3 {
            rgb_to_channels(buf, n, channels);
        }
        let c = if px == 4 { 4 } else { channels };
        let view = ImageView {
            width: win.width,
            height: win.height,
            channels: c,
            data: &buf[..n * c],
        };
        let last_geo = self.transforms.iter().rposition(Transform::is_geometric);
        let to = if last_geo == Some(lead.steps - 1) {
            Loc::Out
        } else {
            Loc::A
        };
        let d = match to {
            Loc::Out => &mut *out,
            _ => sized(&mut scratch.a, tw * th * channels),
        };
        let mut next = lead.steps;
        if px == 3 {
            resample(&mut scratch.resizer, view, win.hard, soft, d, tw, th)?;
        } else {
            let rgbx = sized(&mut scratch.rgbx, tw * th * 4);
            resample(&mut scratch.resizer, view, win.hard, soft, rgbx, tw, th)?;
            // The flip's own draw, as its step would make it.
            let mirror = match self.transforms.get(next) {
                Some(&Transform::HorizontalFlip { p }) => {
                    next += 1;
                    let hit = rng.chance(p);
                    if let (true, Some(g)) = (hit, &mut scratch.geometry) {
                        g.push(crate::GeoOp::FlipH);
                    }
                    hit
                }
                _ => false,
            };
            rgbx_to_rgb(rgbx, d, tw, mirror);
        }
        let after = ImageView {
            width: tw,
            height: th,
            channels,
            data: &[],
        };
        self.execute(next, to, after, rng, scratch, out)?;
        Ok(true)
    }
}
