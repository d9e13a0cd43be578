//! Running a list of transforms over one image, straight into the caller's buffer.
//!
//! Size-changing steps ping-pong between two scratch buffers and the last of them
//! writes into the output; in-place steps (flip, colour, erasing) work on whichever
//! buffer holds the image at that point. A Resize directly followed by a CenterCrop
//! that fits is computed as one resample of only the kept pixels. Once the scratch
//! buffers have grown to the largest image seen, a run allocates nothing for pixels.

use fast_image_resize::Resizer;

use crate::decode;
use crate::transform::crop::{center_offset, copy_window, random_offset, rrc_box};
use crate::transform::erase::{cutout_box, fill_zero};
use crate::transform::resize::{resample, target_size, Rect, SoftBox};
use crate::transform::{color, flip, Transform};
use crate::{AugmentError, Image, ImageView, SampleRng};

/// A decode step and a list of transforms; build one with
/// [`Pipeline::parse`](crate::Pipeline::parse) or [`Pipeline::new`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pipeline {
    pub(crate) transforms: Vec<Transform>,
}

/// Per-worker reusable buffers. Keep one per thread and pass it to every run.
#[derive(Default)]
pub struct Scratch {
    decoded: Image,
    a: Vec<u8>,
    b: Vec<u8>,
    resizer: Resizer,
    /// Set to keep the zune-jpeg path even with the `turbo` feature (for comparisons).
    #[cfg(feature = "turbo")]
    turbo_off: bool,
}

impl Scratch {
    /// With the `turbo` feature, choose whether `run_encoded` may decode only the
    /// RandomResizedCrop window with libjpeg-turbo (on by default) or always decodes
    /// the whole image with zune-jpeg.
    #[cfg(feature = "turbo")]
    pub fn set_turbo(&mut self, on: bool) {
        self.turbo_off = !on;
    }

    /// Bytes held by the reusable buffers (for memory reports).
    pub fn capacity_bytes(&self) -> usize {
        self.decoded.data.capacity()
            + self.a.capacity()
            + self.b.capacity()
            + self.resizer.size_of_internal_buffers()
    }
}

impl std::fmt::Debug for Scratch {
    // The buffers hold whole images; their size is what is worth printing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scratch")
            .field("capacity_bytes", &self.capacity_bytes())
            .finish()
    }
}

/// Where the image currently lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    Input,
    A,
    B,
    Out,
}

fn sized(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    buf.resize(len, 0);
    buf.as_mut_slice()
}

/// The (source, destination) pair for a size-changing step.
fn pair<'a>(
    input: &'a [u8],
    a: &'a mut Vec<u8>,
    b: &'a mut Vec<u8>,
    out: &'a mut [u8],
    from: Loc,
    to: Loc,
    len: usize,
) -> (&'a [u8], &'a mut [u8]) {
    match (from, to) {
        (Loc::A, Loc::Out) => (a.as_slice(), out),
        (Loc::B, Loc::Out) => (b.as_slice(), out),
        (Loc::A, _) => (a.as_slice(), sized(b, len)),
        (Loc::B, _) => (b.as_slice(), sized(a, len)),
        (_, Loc::Out) => (input, out),
        (_, _) => (input, sized(a, len)),
    }
}

impl Pipeline {
    /// The pipeline that only decodes.
    pub fn identity() -> Self {
        Pipeline::default()
    }

    /// A pipeline from transforms built in code; their parameters are checked as
    /// a spec's would be.
    pub fn new(transforms: Vec<Transform>) -> Result<Self, crate::SpecError> {
        for t in &transforms {
            crate::transform::check::validate(t)?;
        }
        Ok(Pipeline { transforms })
    }

    pub fn transforms(&self) -> &[Transform] {
        &self.transforms
    }

    pub fn is_identity(&self) -> bool {
        self.transforms.is_empty()
    }

    /// (width, height) of the output for an input of (width, height).
    pub fn output_size(&self, in_w: usize, in_h: usize) -> (usize, usize) {
        self.transforms
            .iter()
            .fold((in_w, in_h), |(w, h), t| t.output_size(w, h))
    }

    /// Decode `bytes` to `channels` (1 or 3) channels, transform, write into `out`,
    /// which must hold exactly `out_w * out_h * channels` bytes.
    pub fn run_encoded(
        &self,
        bytes: &[u8],
        channels: usize,
        rng: &mut SampleRng,
        scratch: &mut Scratch,
        out: &mut [u8],
    ) -> Result<(), AugmentError> {
        #[cfg(feature = "turbo")]
        if !scratch.turbo_off {
            if let Some(done) = self.run_turbo(bytes, channels, rng, scratch, out) {
                return done;
            }
        }
        // Checking the size from the header first means a wrong batch slot is reported
        // before any decoding work is spent.
        let (w, h) = decode::probe(bytes)?;
        self.check_out(w, h, channels, out.len())?;
        let mut decoded = std::mem::take(&mut scratch.decoded);
        #[cfg(feature = "turbo")]
        let decoded_ok =
            decode::decode_into_with(bytes, channels, &mut decoded, !scratch.turbo_off);
        #[cfg(not(feature = "turbo"))]
        let decoded_ok = decode::decode_into(bytes, channels, &mut decoded);
        let result = decoded_ok.and_then(|()| self.run_image(decoded.view(), rng, scratch, out));
        scratch.decoded = decoded;
        result
    }

    /// Transform already-decoded pixels (keeping their channel count) into `out`.
    pub fn run_image(
        &self,
        img: ImageView<'_>,
        rng: &mut SampleRng,
        scratch: &mut Scratch,
        out: &mut [u8],
    ) -> Result<(), AugmentError> {
        let (w, h, c) = (img.width, img.height, img.channels);
        if w.checked_mul(h).and_then(|n| n.checked_mul(c)) != Some(img.data.len()) {
            return Err(AugmentError::InputShape {
                width: w,
                height: h,
                channels: c,
                got: img.data.len(),
            });
        }
        if w == 0 || h == 0 {
            return Err(AugmentError::ZeroSize {
                width: w,
                height: h,
            });
        }
        if !(1..=4).contains(&c) {
            return Err(AugmentError::Channels(c));
        }
        self.check_out(w, h, c, out.len())?;
        self.execute(0, Loc::Input, img, rng, scratch, out)
    }

    /// The libjpeg-turbo path for a pipeline that starts with RandomResizedCrop:
    /// the box is drawn from the header's size (the same draws as the full-decode
    /// path), then only the pixels that cover it are decoded, at 1/2, 1/4 or 1/8
    /// scale when the box is at least that many times the target. `None` when the
    /// path does not apply or the file is anything but cleanly decodable (CMYK,
    /// truncated, corrupt, an error of any kind): the caller then runs the
    /// full-decode path from the same random state, which decides and reports.
    #[cfg(feature = "turbo")]
    fn run_turbo(
        &self,
        bytes: &[u8],
        channels: usize,
        rng: &mut SampleRng,
        scratch: &mut Scratch,
        out: &mut [u8],
    ) -> Option<Result<(), AugmentError>> {
        let Some(&Transform::RandomResizedCrop {
            width,
            height,
            scale,
            ratio,
        }) = self.transforms.first()
        else {
            return None;
        };
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
        let done = crate::turbo::with_decoder(|dec| {
            self.turbo_rrc(
                dec,
                bytes,
                channels,
                (width, height, scale, ratio),
                rng,
                &mut window.data,
                scratch,
                out,
            )
        });
        scratch.decoded = window;
        match done {
            Some(Ok(true)) => Some(Ok(())),
            _ => {
                *rng = saved;
                None
            }
        }
    }

    /// `Ok(false)`: not handled here (CMYK, or libjpeg warned of corrupt data).
    #[cfg(feature = "turbo")]
    #[allow(clippy::too_many_arguments)]
    fn turbo_rrc(
        &self,
        dec: &mut crate::turbo::TurboDecoder,
        bytes: &[u8],
        channels: usize,
        (tw, th, scale, ratio): (usize, usize, (f64, f64), (f64, f64)),
        rng: &mut SampleRng,
        buf: &mut Vec<u8>,
        scratch: &mut Scratch,
        out: &mut [u8],
    ) -> Result<bool, AugmentError> {
        use crate::turbo::{scale_denom, Header};
        let hdr = match dec.header(bytes)? {
            Header::Ready(h) => h,
            Header::Unsupported => return Ok(false),
        };
        let (w, h) = (hdr.width, hdr.height);
        crate::limits::check_size(w, h)?;
        self.check_out(w, h, channels, out.len())?;
        let r = rrc_box(rng, w, h, scale, ratio);
        let win = hdr.decode_window(r, scale_denom(r, tw, th), buf)?;
        if win.warnings {
            return Ok(false);
        }
        let n = win.width * win.height;
        crate::convert::rgb_to_channels(buf, n, channels);
        let view = ImageView {
            width: win.width,
            height: win.height,
            channels,
            data: &buf[..n * channels],
        };
        let last_geo = self.transforms.iter().rposition(Transform::is_geometric);
        let to = if last_geo == Some(0) {
            Loc::Out
        } else {
            Loc::A
        };
        let d = match to {
            Loc::Out => &mut *out,
            _ => sized(&mut scratch.a, tw * th * channels),
        };
        resample(&mut scratch.resizer, view, win.hard, win.soft, d, tw, th)?;
        let after = ImageView {
            width: tw,
            height: th,
            channels,
            data: &[],
        };
        self.execute(1, to, after, rng, scratch, out)?;
        Ok(true)
    }

    fn check_out(&self, w: usize, h: usize, c: usize, got: usize) -> Result<(), AugmentError> {
        self.check_steps(w, h)?;
        let (ow, oh) = self.output_size(w, h);
        if ow.saturating_mul(oh).saturating_mul(c) != got {
            return Err(AugmentError::OutputSize {
                width: ow,
                height: oh,
                channels: c,
                got,
            });
        }
        Ok(())
    }

    /// Refuses an input for which a step would make an image larger than the decoder
    /// accepts. `resize:N` keeps the aspect ratio, so a 1 KB file of a 35088x1 image
    /// under `resize:256,crop:224` asked for a 8982528x256 intermediate (2.3 GB). A
    /// Resize fused with its CenterCrop makes only the crop, and is not counted.
    fn check_steps(&self, mut w: usize, mut h: usize) -> Result<(), AugmentError> {
        for (k, t) in self.transforms.iter().enumerate() {
            let fused = self.fused_crop(k, w, h).is_some();
            (w, h) = t.output_size(w, h);
            if !fused && w.saturating_mul(h) > crate::limits::MAX_PIXELS {
                return Err(AugmentError::Resize(format!(
                    "`{t}` would make a {w}x{h} image, more than the limit of {} pixels",
                    crate::limits::MAX_PIXELS
                )));
            }
        }
        Ok(())
    }

    /// When step `k` is a Resize followed by a CenterCrop that lies inside the resized
    /// image, the crop size (so both run as one resample).
    fn fused_crop(&self, k: usize, w: usize, h: usize) -> Option<(usize, usize)> {
        let Transform::Resize(to) = self.transforms.get(k)? else {
            return None;
        };
        let Transform::CenterCrop { width, height } = *self.transforms.get(k + 1)? else {
            return None;
        };
        let (rw, rh) = target_size(*to, w, h);
        (width <= rw && height <= rh).then_some((width, height))
    }

    /// Run the transforms from step `k`, the image being in `cur` with the size and
    /// channels of `src` (whose pixels are read only when `cur` is `Input`).
    fn execute(
        &self,
        mut k: usize,
        mut cur: Loc,
        src: ImageView<'_>,
        rng: &mut SampleRng,
        scratch: &mut Scratch,
        out: &mut [u8],
    ) -> Result<(), AugmentError> {
        let ts = &self.transforms;
        let last_geo = ts.iter().rposition(Transform::is_geometric);
        let Scratch { a, b, resizer, .. } = scratch;
        let c = src.channels;
        let (mut w, mut h) = (src.width, src.height);
        while k < ts.len() {
            if ts[k].is_geometric() {
                let fused = self.fused_crop(k, w, h);
                let end = if fused.is_some() { k + 1 } else { k };
                let (nw, nh) = ts[k..=end]
                    .iter()
                    .fold((w, h), |(w, h), t| t.output_size(w, h));
                let to = match (Some(end) == last_geo, cur) {
                    (true, _) => Loc::Out,
                    (false, Loc::A) => Loc::B,
                    (false, _) => Loc::A,
                };
                let (s, d) = pair(src.data, a, b, out, cur, to, nw * nh * c);
                let view = ImageView {
                    width: w,
                    height: h,
                    channels: c,
                    data: s,
                };
                resize_step(&ts[k], fused, view, d, rng, resizer)?;
                (cur, w, h, k) = (to, nw, nh, end + 1);
            } else {
                if cur == Loc::Input {
                    // The first in-place step needs a copy it may write to: the output
                    // itself when nothing size-changing follows.
                    let to = if last_geo.is_none_or(|g| k > g) {
                        Loc::Out
                    } else {
                        Loc::A
                    };
                    let (s, d) = pair(src.data, a, b, out, cur, to, src.data.len());
                    d.copy_from_slice(s);
                    cur = to;
                }
                let data: &mut [u8] = match cur {
                    Loc::A => a,
                    Loc::B => b,
                    _ => out,
                };
                pointwise_step(&ts[k], data, w, h, c, rng);
                k += 1;
            }
        }
        if cur == Loc::Input {
            out.copy_from_slice(src.data);
        }
        Ok(())
    }
}

fn resize_step(
    t: &Transform,
    fused_crop: Option<(usize, usize)>,
    src: ImageView<'_>,
    dst: &mut [u8],
    rng: &mut SampleRng,
    resizer: &mut Resizer,
) -> Result<(), AugmentError> {
    let (w, h) = (src.width, src.height);
    let full = Rect::full(w, h);
    match *t {
        Transform::Resize(to) => {
            let (rw, rh) = target_size(to, w, h);
            match fused_crop {
                None => resample(resizer, src, full, None, dst, rw, rh),
                Some((cw, ch)) => {
                    // The crop in source coordinates; clamped because the float
                    // product can overshoot the border by an ulp.
                    let (sx, sy) = (w as f64 / rw as f64, h as f64 / rh as f64);
                    let left = center_offset(rw, cw) as f64 * sx;
                    let top = center_offset(rh, ch) as f64 * sy;
                    let soft = SoftBox {
                        left,
                        top,
                        width: (cw as f64 * sx).min(w as f64 - left),
                        height: (ch as f64 * sy).min(h as f64 - top),
                    };
                    resample(resizer, src, full, Some(soft), dst, cw, ch)
                }
            }
        }
        Transform::CenterCrop { width, height } => {
            copy_window(
                src,
                center_offset(w, width),
                center_offset(h, height),
                dst,
                width,
            );
            Ok(())
        }
        Transform::RandomResizedCrop {
            width,
            height,
            scale,
            ratio,
        } => {
            let r = rrc_box(rng, w, h, scale, ratio);
            resample(resizer, src, r, None, dst, width, height)
        }
        Transform::RandomCrop { width, height, pad } => {
            let (left, top) = random_offset(rng, w, h, width, height, pad);
            copy_window(src, left, top, dst, width);
            Ok(())
        }
        _ => Ok(()),
    }
}

fn pointwise_step(
    t: &Transform,
    data: &mut [u8],
    w: usize,
    h: usize,
    c: usize,
    rng: &mut SampleRng,
) {
    match t {
        Transform::HorizontalFlip { p } => flip::random_hflip(rng, *p, data, w, c),
        Transform::ColorJitter(j) => {
            let d = j.draw(rng);
            color::apply_jitter(data, c, &d);
        }
        Transform::Grayscale { p } => color::random_grayscale(rng, *p, data, c),
        Transform::RandomErasing(e) => {
            if let Some(r) = e.draw(rng, w, h) {
                fill_zero(data, w, c, r);
            }
        }
        Transform::Cutout { size } => {
            let r = cutout_box(rng, w, h, *size);
            fill_zero(data, w, c, r);
        }
        _ => {}
    }
}
