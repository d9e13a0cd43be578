//! Running a list of transforms over one image, straight into the caller's buffer.
//!
//! Size-changing steps ping-pong between two scratch buffers and the last of them
//! writes into the output; in-place steps (flip, colour, erasing, and the same-size
//! warps, blur, sharpness and policies, which read a copy kept in `Scratch::tmp`) work
//! on whichever buffer holds the image at that point. A Resize directly followed by a CenterCrop
//! that fits is computed as one resample of only the kept pixels. Once the scratch
//! buffers have grown to the largest image seen, a run allocates nothing for pixels.
//! With libjpeg-turbo, a JPEG whose first step shrinks it decodes only the part that
//! step keeps (`turbo_path.rs`), then runs the rest here.

#[cfg(stoker_turbo)]
mod turbo_path;

use fast_image_resize::Resizer;

use crate::decode;
use crate::geometry::{GeoOp, Geometry};
use crate::limits::DEFAULT_MAX_PIXELS;
use crate::retain::Retention;
use crate::transform::blur::gaussian_blur;
use crate::transform::crop::{center_offset, copy_window, random_offset, rrc_box};
use crate::transform::erase::{cutout_box, fill_zero};
use crate::transform::policy::warp_in_place;
use crate::transform::resize::{resample, target_size, Rect, SoftBox};
use crate::transform::{color, flip, Transform};
use crate::{AugmentError, Image, ImageView, SampleRng};

/// A decode step and a list of transforms; build one with
/// [`Pipeline::parse`](crate::Pipeline::parse) or [`Pipeline::new`].
#[derive(Clone, Debug, PartialEq)]
pub struct Pipeline {
    pub(crate) transforms: Vec<Transform>,
    /// Images with more pixels are refused from their header (see [`DEFAULT_MAX_PIXELS`]).
    max_pixels: usize,
}

impl Default for Pipeline {
    fn default() -> Self {
        Pipeline {
            transforms: Vec::new(),
            max_pixels: DEFAULT_MAX_PIXELS,
        }
    }
}

/// Per-worker reusable buffers. Keep one per thread and pass it to every run.
#[derive(Default)]
pub struct Scratch {
    pub(crate) decoded: Image,
    pub(crate) a: Vec<u8>,
    pub(crate) b: Vec<u8>,
    pub(crate) resizer: Resizer,
    /// The libjpeg-turbo path's resampled window, four bytes a pixel.
    pub(crate) rgbx: Vec<u8>,
    /// A copy of the image for the steps that read their input while writing it
    /// (warps, sharpness), and float rows for the blur.
    pub(crate) tmp: Vec<u8>,
    pub(crate) ftmp: Vec<f32>,
    /// What recent samples needed, so an outlier's buffers are released.
    retention: Retention,
    /// The geometric steps of the last sample, when asked for (fields that follow
    /// the image: boxes, masks, keypoints).
    pub(crate) geometry: Option<Geometry>,
    /// Set to keep the zune-jpeg path even with the `turbo` feature (for comparisons).
    #[cfg(stoker_turbo)]
    pub(crate) turbo_off: bool,
    /// The window (width, height, scale denominator) the last sample was decoded
    /// through on the libjpeg-turbo path; `None` after a full decode.
    #[cfg(stoker_turbo)]
    pub(crate) last_window: Option<(usize, usize, usize)>,
}

impl Scratch {
    /// In a build with libjpeg-turbo ([`crate::TURBO`]), choose whether `run_encoded`
    /// may decode only the RandomResizedCrop window with libjpeg-turbo (on by default)
    /// or always decodes the whole image with zune-jpeg. Without it, nothing to choose.
    pub fn set_turbo(&mut self, on: bool) {
        #[cfg(stoker_turbo)]
        {
            self.turbo_off = !on;
        }
        #[cfg(not(stoker_turbo))]
        let _ = on;
    }

    /// Record, from the next run on, the geometric steps each sample goes through
    /// (see [`crate::geometry`]); off by default, which costs nothing.
    pub fn record_geometry(&mut self, on: bool) {
        self.geometry = on.then(Geometry::default);
    }

    /// The geometric steps of the last run, when recording is on.
    pub fn geometry(&self) -> Option<&Geometry> {
        self.geometry.as_ref()
    }

    /// Note what this sample needed and release buffers far larger than recent
    /// samples needed (see [`crate::retain`]).
    fn settle(&mut self) {
        let need = self
            .decoded
            .data
            .len()
            .max(self.a.len())
            .max(self.b.len())
            .max(self.rgbx.len());
        self.retention.note(need);
        self.retention.trim(&mut self.decoded.data);
        self.retention.trim(&mut self.a);
        self.retention.trim(&mut self.b);
        self.retention.trim(&mut self.tmp);
        self.retention.trim(&mut self.rgbx);
        if self.retention.too_big(self.ftmp.capacity() * 4) {
            self.ftmp = Vec::new();
        }
        if self
            .retention
            .too_big(self.resizer.size_of_internal_buffers())
        {
            self.resizer.reset_internal_buffers();
        }
    }

    /// The window (width, height, 1/scale) the last `run_encoded` decoded on the
    /// libjpeg-turbo path, or `None` when it decoded the whole image.
    #[cfg(stoker_turbo)]
    pub fn last_window(&self) -> Option<(usize, usize, usize)> {
        self.last_window
    }

    /// Bytes held by the reusable buffers (for memory reports).
    pub fn capacity_bytes(&self) -> usize {
        self.decoded.data.capacity()
            + self.a.capacity()
            + self.b.capacity()
            + self.tmp.capacity()
            + self.rgbx.capacity()
            + self.ftmp.capacity() * 4
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

/// An image transformed in place: its pixels (HWC) and their size.
struct ImageMut<'a> {
    data: &'a mut [u8],
    width: usize,
    height: usize,
    channels: usize,
}

/// Where the image currently lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Loc {
    Input,
    A,
    B,
    Out,
}

pub(crate) fn sized(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
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
        Ok(Pipeline {
            transforms,
            ..Pipeline::default()
        })
    }

    /// The same pipeline, refusing images of more than `max_pixels` pixels (from their
    /// header, before anything is allocated) instead of [`DEFAULT_MAX_PIXELS`].
    pub fn with_max_pixels(mut self, max_pixels: usize) -> Self {
        self.max_pixels = max_pixels;
        self
    }

    /// The largest image, in pixels, this pipeline decodes.
    pub fn max_pixels(&self) -> usize {
        self.max_pixels
    }

    /// The transforms, in the order they run.
    pub fn transforms(&self) -> &[Transform] {
        &self.transforms
    }

    /// Whether the pipeline has no transforms (decode only: the output is the image).
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
        // Held until the buffers are settled, so that a large image's are released
        // before the next large image may start.
        let _turn = crate::large::large_image_turn(bytes);
        let result = self
            .decode_and_run(bytes, channels, rng, scratch, out, None)
            .map(|_| ());
        scratch.settle();
        result
    }

    /// [`run_encoded`](Self::run_encoded), keeping the decoded image in `keep` when
    /// the sample takes the full-decode path: `Ok(true)` then, and
    /// [`run_image`](Self::run_image) on `keep` with the same `rng` later writes the
    /// same bytes into `out`. `Ok(false)` when libjpeg-turbo decoded only the part the
    /// first step keeps (see `turbo_path.rs`): `keep` is left as it was, since a full
    /// decode would not give those bytes. The output is the same as `run_encoded`'s
    /// either way.
    pub fn run_encoded_keep(
        &self,
        bytes: &[u8],
        channels: usize,
        rng: &mut SampleRng,
        scratch: &mut Scratch,
        out: &mut [u8],
        keep: &mut Image,
    ) -> Result<bool, AugmentError> {
        let _turn = crate::large::large_image_turn(bytes);
        let result = self.decode_and_run(bytes, channels, rng, scratch, out, Some(keep));
        scratch.settle();
        result
    }

    /// Decodes into `keep` (or the scratch image without one) and transforms;
    /// `Ok(true)` when the whole image was decoded, `Ok(false)` after a window decode.
    fn decode_and_run(
        &self,
        bytes: &[u8],
        channels: usize,
        rng: &mut SampleRng,
        scratch: &mut Scratch,
        out: &mut [u8],
        keep: Option<&mut Image>,
    ) -> Result<bool, AugmentError> {
        #[cfg(stoker_turbo)]
        {
            scratch.last_window = None;
        }
        #[cfg(stoker_turbo)]
        if !scratch.turbo_off {
            if let Some(done) = self.run_turbo(bytes, channels, rng, scratch, out) {
                return done.map(|()| false);
            }
        }
        // Checking the size from the header first means a wrong batch slot is reported
        // before any decoding work is spent.
        let (w, h) = decode::probe_limited(bytes, self.max_pixels)?;
        self.check_out(w, h, channels, out.len())?;
        #[cfg(stoker_turbo)]
        let turbo = !scratch.turbo_off;
        #[cfg(not(stoker_turbo))]
        let turbo = false;
        if let Some(keep) = keep {
            decode::decode_into_with(bytes, channels, keep, turbo, self.max_pixels)?;
            self.transform_image(keep.view(), rng, scratch, out)?;
            return Ok(true);
        }
        let mut decoded = std::mem::take(&mut scratch.decoded);
        let decoded_ok =
            decode::decode_into_with(bytes, channels, &mut decoded, turbo, self.max_pixels);
        let result =
            decoded_ok.and_then(|()| self.transform_image(decoded.view(), rng, scratch, out));
        scratch.decoded = decoded;
        result.map(|()| true)
    }

    /// Transform already-decoded pixels (keeping their channel count) into `out`.
    pub fn run_image(
        &self,
        img: ImageView<'_>,
        rng: &mut SampleRng,
        scratch: &mut Scratch,
        out: &mut [u8],
    ) -> Result<(), AugmentError> {
        let result = self.transform_image(img, rng, scratch, out);
        scratch.settle();
        result
    }

    fn transform_image(
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
        if let Some(g) = &mut scratch.geometry {
            g.reset(w, h);
        }
        self.execute(0, Loc::Input, img, rng, scratch, out)
    }

    pub(crate) fn check_out(
        &self,
        w: usize,
        h: usize,
        c: usize,
        got: usize,
    ) -> Result<(), AugmentError> {
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
    /// accepts (`max_pixels`). `resize:N` keeps the aspect ratio, so a 1 KB file of a
    /// 35088x1 image under `resize:256,crop:224` asked for a 8982528x256 intermediate
    /// (2.3 GB). A Resize fused with its CenterCrop makes only the crop, and is not
    /// counted.
    fn check_steps(&self, mut w: usize, mut h: usize) -> Result<(), AugmentError> {
        for (k, t) in self.transforms.iter().enumerate() {
            let fused = self.fused_crop(k, w, h).is_some();
            (w, h) = t.output_size(w, h);
            if !fused && w.saturating_mul(h) > self.max_pixels {
                return Err(AugmentError::resize(format!(
                    "`{t}` would make a {w}x{h} image, more than the limit of {} pixels",
                    self.max_pixels
                )));
            }
        }
        Ok(())
    }

    /// When step `k` is a Resize followed by a CenterCrop that lies inside the resized
    /// image, the crop size (so both run as one resample).
    pub(crate) fn fused_crop(&self, k: usize, w: usize, h: usize) -> Option<(usize, usize)> {
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
    pub(crate) fn execute(
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
        let Scratch {
            a,
            b,
            resizer,
            tmp,
            ftmp,
            geometry,
            ..
        } = scratch;
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
                let op = resize_step(&ts[k], fused, view, d, rng, resizer)?;
                if let Some(g) = geometry {
                    g.push(op);
                }
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
                let mut img = ImageMut {
                    data,
                    width: w,
                    height: h,
                    channels: c,
                };
                pointwise_step(&ts[k], &mut img, rng, tmp, ftmp, geometry.as_mut());
                k += 1;
            }
        }
        if cur == Loc::Input {
            out.copy_from_slice(src.data);
        }
        Ok(())
    }
}

/// The part of a `w` x `h` image that a resize to `resized` followed by a centre crop
/// of `crop` keeps, in source coordinates (fractional: the crop's edges fall between
/// source pixels). Clamped because the float product can overshoot the border by an
/// ulp.
pub(crate) fn fused_crop_box(
    w: usize,
    h: usize,
    (rw, rh): (usize, usize),
    (cw, ch): (usize, usize),
) -> SoftBox {
    let (sx, sy) = (w as f64 / rw as f64, h as f64 / rh as f64);
    let left = center_offset(rw, cw) as f64 * sx;
    let top = center_offset(rh, ch) as f64 * sy;
    SoftBox {
        left,
        top,
        width: (cw as f64 * sx).min(w as f64 - left),
        height: (ch as f64 * sy).min(h as f64 - top),
    }
}

/// Runs one size-changing step and says what it did to the geometry.
fn resize_step(
    t: &Transform,
    fused_crop: Option<(usize, usize)>,
    src: ImageView<'_>,
    dst: &mut [u8],
    rng: &mut SampleRng,
    resizer: &mut Resizer,
) -> Result<GeoOp, AugmentError> {
    let (w, h) = (src.width, src.height);
    let full = Rect::full(w, h);
    let whole = SoftBox {
        left: 0.0,
        top: 0.0,
        width: w as f64,
        height: h as f64,
    };
    let window = |left: i64, top: i64, to: (usize, usize), dst: &mut [u8]| {
        copy_window(src, left, top, dst, to.0);
        GeoOp::Window { left, top, to }
    };
    Ok(match *t {
        Transform::Resize(to) => {
            let (rw, rh) = target_size(to, w, h);
            match fused_crop {
                None => {
                    resample(resizer, src, full, None, dst, rw, rh)?;
                    GeoOp::Resample {
                        keep: whole,
                        to: (rw, rh),
                    }
                }
                Some((cw, ch)) => {
                    let soft = fused_crop_box(w, h, (rw, rh), (cw, ch));
                    resample(resizer, src, full, Some(soft), dst, cw, ch)?;
                    GeoOp::Resample {
                        keep: soft,
                        to: (cw, ch),
                    }
                }
            }
        }
        Transform::CenterCrop { width, height } => window(
            center_offset(w, width),
            center_offset(h, height),
            (width, height),
            dst,
        ),
        Transform::RandomResizedCrop {
            width,
            height,
            scale,
            ratio,
        } => {
            let r = rrc_box(rng, w, h, scale, ratio);
            resample(resizer, src, r, None, dst, width, height)?;
            GeoOp::Resample {
                keep: SoftBox::from(r),
                to: (width, height),
            }
        }
        Transform::RandomCrop { width, height, pad } => {
            let (left, top) = random_offset(rng, w, h, width, height, pad);
            window(left, top, (width, height), dst)
        }
        Transform::Pad(p) => {
            let p = p as i64;
            window(-p, -p, t.output_size(w, h), dst)
        }
        Transform::HorizontalFlip { .. }
        | Transform::ColorJitter(_)
        | Transform::Grayscale { .. }
        | Transform::RandomErasing(_)
        | Transform::Cutout { .. }
        | Transform::Adjust(_)
        | Transform::Rotate { .. }
        | Transform::Affine { .. }
        | Transform::Blur(_)
        | Transform::Policy(_) => {
            unreachable!("`{t}` is not a size-changing step")
        }
    })
}

/// A step that keeps the image size, in place. Warps, sharpness and blur read a copy
/// of their input from `tmp` (`ftmp` holds the blur's float rows). What it does to the
/// geometry (a flip, a warp, an erased rectangle) goes to `geometry` when it is kept.
fn pointwise_step(
    t: &Transform,
    img: &mut ImageMut<'_>,
    rng: &mut SampleRng,
    tmp: &mut Vec<u8>,
    ftmp: &mut Vec<f32>,
    geometry: Option<&mut Geometry>,
) {
    let (data, w, h, c) = (&mut *img.data, img.width, img.height, img.channels);
    if let Transform::Policy(p) = t {
        let drawn = p.apply(rng, data, w, h, c, tmp);
        if let Some(g) = geometry {
            // Each warp the policy drew moves the fields, in order, as it moved the
            // image (a mask goes through the same nearest-neighbour steps).
            for op in drawn.ops() {
                if let crate::transform::policy::Op::Warp(a) = op {
                    g.push(warp_op(a, w, h));
                }
            }
        }
        return;
    }
    let op = pointwise_op(t, img, rng, tmp, ftmp, geometry.is_some());
    if let (Some(g), Some(op)) = (geometry, op) {
        g.push(op);
    }
}

/// [`pointwise_step`]'s work for one step that is not a policy; what it did to the
/// geometry when `record`.
fn pointwise_op(
    t: &Transform,
    img: &mut ImageMut<'_>,
    rng: &mut SampleRng,
    tmp: &mut Vec<u8>,
    ftmp: &mut Vec<f32>,
    record: bool,
) -> Option<GeoOp> {
    let (data, w, h, c) = (&mut *img.data, img.width, img.height, img.channels);
    match t {
        Transform::HorizontalFlip { p } => {
            return flip::random_hflip(rng, *p, data, w, c).then_some(GeoOp::FlipH);
        }
        Transform::ColorJitter(j) => {
            let d = j.draw(rng);
            color::apply_jitter(data, c, &d);
        }
        Transform::Grayscale { p } => color::random_grayscale(rng, *p, data, c),
        Transform::RandomErasing(e) => {
            let r = e.draw(rng, w, h)?;
            fill_zero(data, w, c, r);
            return Some(GeoOp::Erase(r));
        }
        Transform::Cutout { size } => {
            let r = cutout_box(rng, w, h, *size);
            fill_zero(data, w, c, r);
            return Some(GeoOp::Erase(r));
        }
        Transform::Adjust(a) => a.apply(data, w, h, c, tmp),
        Transform::Rotate { .. } | Transform::Affine { .. } => {
            let warp = t.warp()?;
            warp_in_place(&warp, data, w, h, c, tmp);
            return record.then(|| warp_op(&warp, w, h));
        }
        Transform::Blur(bl) => {
            let sigma = bl.draw(rng);
            gaussian_blur(data, w, h, c, bl.kernel, sigma, ftmp);
        }
        Transform::Policy(_) => unreachable!("policies are run by pointwise_step"),
        Transform::Resize(_)
        | Transform::CenterCrop { .. }
        | Transform::RandomResizedCrop { .. }
        | Transform::RandomCrop { .. }
        | Transform::Pad(_) => unreachable!("`{t}` changes the size"),
    }
    None
}

/// A same-size warp as a geometric step (its matrices in pixel-corner coordinates).
fn warp_op(a: &crate::transform::affine::Affine, w: usize, h: usize) -> GeoOp {
    let (inverse, forward) = a.matrices(w, h);
    GeoOp::Affine {
        forward: forward.0,
        inverse: inverse.0,
        to: (w, h),
    }
}
