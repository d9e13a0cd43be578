//! Region-of-interest and DCT-scaled JPEG decode through libjpeg-turbo (feature `turbo`).
//!
//! RandomResizedCrop keeps part of the image; this module decodes only that part:
//! the rows above the crop box are skipped (`jpeg_skip_scanlines`: entropy-decoded,
//! never inverse-transformed nor colour-converted), reading stops after its last row,
//! and the columns are narrowed with `jpeg_crop_scanline` (which widens them to iMCU
//! boundaries; [`Window`] says where the box lies in what came back). When the box is
//! at least twice the target size, the decode also runs at 1/2, 1/4 or 1/8 scale
//! (libjpeg's scaled IDCT) and the resampler does the rest.
//!
//! The C side (`csrc/turbo.c`) wraps every libjpeg call in its own `setjmp`, and the
//! error manager `longjmp`s back there, so libjpeg never calls `exit()` and never
//! unwinds through Rust frames: a corrupt file is an [`AugmentError`], nothing else.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_long, CStr};
use std::marker::PhantomData;
use std::ptr::NonNull;

use crate::transform::resize::{Rect, SoftBox};
use crate::AugmentError;

/// The libjpeg-turbo version compiled against, as "2.1.5".
pub fn version() -> String {
    // SAFETY: a constant returned by the shim; no state involved.
    let v = unsafe { stoker_jpeg_turbo_version() };
    format!("{}.{}.{}", v / 1_000_000, v / 1_000 % 1_000, v % 1_000)
}

/// The C side's state: a `jpeg_decompress_struct`, its error manager and jump buffer.
#[repr(C)]
struct RawJpeg {
    _private: [u8; 0],
}

/// What `stoker_jpeg_start_window_px` produced (the C side's `stoker_window`): the
/// columns `got_x .. got_x + got_w` of the scaled output, which is `out_width` x
/// `out_height`.
#[repr(C)]
#[derive(Default)]
struct StartedWindow {
    got_x: u32,
    got_w: u32,
    out_width: u32,
    out_height: u32,
}

extern "C" {
    fn stoker_jpeg_turbo_version() -> c_long;
    fn stoker_jpeg_new() -> *mut RawJpeg;
    fn stoker_jpeg_free(s: *mut RawJpeg);
    fn stoker_jpeg_abort(s: *mut RawJpeg);
    fn stoker_jpeg_message(s: *const RawJpeg) -> *const c_char;
    fn stoker_jpeg_warnings(s: *const RawJpeg) -> c_long;
    fn stoker_jpeg_short_data(s: *const RawJpeg) -> c_long;
    fn stoker_jpeg_header(
        s: *mut RawJpeg,
        data: *const u8,
        len: usize,
        width: *mut u32,
        height: *mut u32,
    ) -> c_int;
    fn stoker_jpeg_start_window_px(
        s: *mut RawJpeg,
        denom: u32,
        pixel: u32,
        x: u32,
        w: u32,
        got: *mut StartedWindow,
    ) -> c_int;
    fn stoker_jpeg_rows(s: *mut RawJpeg, y: u32, h: u32, out: *mut u8, out_len: usize) -> c_int;
}

/// A reusable libjpeg decompressor. The decode paths keep one per thread
/// ([`with_decoder`]); make your own to call [`TurboDecoder::header`] directly.
pub struct TurboDecoder {
    raw: NonNull<RawJpeg>,
}

// SAFETY: the C state is owned by this value alone and libjpeg keeps no thread-local
// state, so moving it to another thread is sound; it is not `Sync` (every use takes
// `&mut self`).
unsafe impl Send for TurboDecoder {}

impl std::fmt::Debug for TurboDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TurboDecoder").finish_non_exhaustive()
    }
}

impl Drop for TurboDecoder {
    fn drop(&mut self) {
        // SAFETY: `raw` came from `stoker_jpeg_new` and is freed exactly once, here.
        unsafe { stoker_jpeg_free(self.raw.as_ptr()) }
    }
}

/// What [`TurboDecoder::header`] found.
pub enum Header<'d> {
    /// A header libjpeg can turn into RGB; decode a window of it.
    Ready(HeaderRead<'d>),
    /// CMYK / YCCK: use another decoder.
    Unsupported,
}

/// A JPEG whose header has been read; it borrows the decoder and the bytes until
/// [`HeaderRead::decode_window`] (or drop) ends the image.
pub struct HeaderRead<'d> {
    dec: &'d mut TurboDecoder,
    /// Width of the full-size image in pixels.
    pub width: usize,
    /// Height of the full-size image in pixels.
    pub height: usize,
    _bytes: PhantomData<&'d [u8]>,
}

/// The decoded window: `width` x `height` pixels (RGB, or RGBX from
/// [`HeaderRead::decode_window_rgbx`]) of the image at scale
/// 1/`denom`, and where the requested box lies in them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Window {
    /// Width of the decoded pixels, in pixels at the decode scale (the box's columns
    /// widened to iMCU boundaries).
    pub width: usize,
    /// Height of the decoded pixels, in rows at the decode scale.
    pub height: usize,
    /// The scale's denominator: 1, 2, 4 or 8.
    pub denom: usize,
    /// The whole pixels that touch the box (the resampler's hard border).
    pub hard: Rect,
    /// The exact box inside `hard` when the scale is not 1 (it then falls between
    /// pixels); `None` when `hard` is the box.
    pub soft: Option<SoftBox>,
    /// libjpeg reported corrupt data (and decoded past it).
    pub warnings: bool,
    /// Among those warnings, that the data ended before the image did (a cut file,
    /// whose missing rows libjpeg fills in grey): an error, not a fallback.
    pub short_data: bool,
}

impl TurboDecoder {
    /// A new decompressor; fails only when libjpeg cannot allocate one.
    pub fn new() -> Result<Self, AugmentError> {
        // SAFETY: no preconditions; a null return is handled below.
        let raw = unsafe { stoker_jpeg_new() };
        NonNull::new(raw)
            .map(|raw| TurboDecoder { raw })
            .ok_or_else(|| AugmentError::jpeg("libjpeg could not create a decompressor"))
    }

    fn message(&self) -> String {
        // SAFETY: the message buffer lives in the C state and is always
        // NUL-terminated (zeroed at creation, then written by snprintf or libjpeg's
        // format_message, both of which terminate).
        let msg = unsafe { CStr::from_ptr(stoker_jpeg_message(self.raw.as_ptr())) };
        format!("libjpeg: {}", msg.to_string_lossy())
    }

    /// Read the header of `bytes`.
    pub fn header<'d>(&'d mut self, bytes: &'d [u8]) -> Result<Header<'d>, AugmentError> {
        let (mut w, mut h) = (0u32, 0u32);
        // SAFETY: `bytes` outlives the returned borrow, during which the C side may
        // read it; the out-pointers are valid locals.
        let rc = unsafe {
            stoker_jpeg_header(
                self.raw.as_ptr(),
                bytes.as_ptr(),
                bytes.len(),
                &mut w,
                &mut h,
            )
        };
        match rc {
            0 => Ok(Header::Ready(HeaderRead {
                dec: self,
                width: w as usize,
                height: h as usize,
                _bytes: PhantomData,
            })),
            1 => Ok(Header::Unsupported),
            _ => Err(AugmentError::jpeg(self.message())),
        }
    }
}

impl Drop for HeaderRead<'_> {
    fn drop(&mut self) {
        // SAFETY: ends the image (a no-op when it already ended), so the C side stops
        // referring to the borrowed bytes.
        unsafe { stoker_jpeg_abort(self.dec.raw.as_ptr()) }
    }
}

/// The scale (1, 2, 4 or 8) for decoding `b` on its way to `tw` x `th`: the largest
/// reduction that leaves the scaled box at least the target size in both directions.
pub fn scale_denom(b: Rect, tw: usize, th: usize) -> usize {
    [8, 4, 2]
        .into_iter()
        .find(|&s| b.width >= s * tw && b.height >= s * th)
        .unwrap_or(1)
}

thread_local! {
    static DECODER: RefCell<Option<TurboDecoder>> = const { RefCell::new(None) };
}

/// Run `f` with this thread's decoder (made on first use). `None` when no decoder
/// can be had (libjpeg refused to make one, or the thread is shutting down).
pub fn with_decoder<R>(f: impl FnOnce(&mut TurboDecoder) -> R) -> Option<R> {
    DECODER
        .try_with(|cell| {
            let mut slot = cell.try_borrow_mut().ok()?;
            if slot.is_none() {
                *slot = Some(TurboDecoder::new().ok()?);
            }
            slot.as_mut().map(f)
        })
        .ok()
        .flatten()
}

/// Decode all of `bytes` as RGB into `buf` and return its size, or `None` when this
/// decoder should not be trusted with it (CMYK, an error, corrupt data): the caller
/// then decodes with zune-jpeg, which decides and reports. `Some(Err)` when libjpeg
/// found the data cut short ([`Window::short_data`]): damaged rows, never a fallback.
pub(crate) fn decode_full(
    bytes: &[u8],
    buf: &mut Vec<u8>,
    max_pixels: usize,
) -> Option<Result<(usize, usize), AugmentError>> {
    let run = |dec: &mut TurboDecoder| -> Result<Option<(usize, usize)>, AugmentError> {
        let Header::Ready(hdr) = dec.header(bytes)? else {
            return Ok(None);
        };
        let (w, h) = (hdr.width, hdr.height);
        crate::limits::check_size(w, h, max_pixels)?;
        let win = hdr.decode_window(Rect::full(w, h), 1, buf)?;
        if win.short_data {
            return Err(short_data_error(bytes));
        }
        Ok((!win.warnings).then_some((w, h)))
    };
    match with_decoder(run)? {
        Ok(size) => size.map(Ok),
        Err(e @ AugmentError::TruncatedJpeg { .. }) => Some(Err(e)),
        Err(_) => None,
    }
}

/// The error for a JPEG whose scan data ends before its image does.
pub(crate) fn short_data_error(bytes: &[u8]) -> AugmentError {
    AugmentError::truncated_jpeg(
        bytes.len(),
        "libjpeg: the data of a scan ends before the image does (premature end of data \
         segment): the rest would be filled in grey",
    )
}

fn to_u32(v: usize) -> Result<u32, AugmentError> {
    u32::try_from(v).map_err(|_| AugmentError::jpeg(format!("{v} does not fit libjpeg")))
}

impl HeaderRead<'_> {
    /// Decode the pixels that cover `b` (in full-size coordinates) at scale
    /// 1/`denom` into `buf` (resized to fit, RGB), and end the image.
    pub fn decode_window(
        self,
        b: Rect,
        denom: usize,
        buf: &mut Vec<u8>,
    ) -> Result<Window, AugmentError> {
        self.decode_window_as(b, denom, 3, buf)
    }

    /// [`decode_window`](Self::decode_window) with four bytes a pixel: the same RGB
    /// values (libjpeg's same colour conversion), each followed by a byte of no
    /// meaning, which the resampler's four-byte kernels read faster than three.
    pub fn decode_window_rgbx(
        self,
        b: Rect,
        denom: usize,
        buf: &mut Vec<u8>,
    ) -> Result<Window, AugmentError> {
        self.decode_window_as(b, denom, 4, buf)
    }

    fn decode_window_as(
        self,
        b: Rect,
        denom: usize,
        pixel: usize,
        buf: &mut Vec<u8>,
    ) -> Result<Window, AugmentError> {
        if !matches!(denom, 1 | 2 | 4 | 8) {
            return Err(AugmentError::jpeg(format!("no 1/{denom} scale")));
        }
        if b.width == 0
            || b.height == 0
            || b.left + b.width > self.width
            || b.top + b.height > self.height
        {
            return Err(AugmentError::jpeg(format!(
                "box {b:?} outside the {}x{} image",
                self.width, self.height
            )));
        }
        let s = denom as f64;
        let (fx0, fx1) = (b.left as f64 / s, (b.left + b.width) as f64 / s);
        let (fy0, fy1) = (b.top as f64 / s, (b.top + b.height) as f64 / s);
        // libjpeg's scaled size is the ceiling of size / denom.
        let (ow, oh) = (self.width.div_ceil(denom), self.height.div_ceil(denom));
        let (x0, x1) = (fx0.floor() as usize, (fx1.ceil() as usize).min(ow));
        let (y0, y1) = (fy0.floor() as usize, (fy1.ceil() as usize).min(oh));
        let raw = self.dec.raw.as_ptr();
        let mut got = StartedWindow::default();
        // SAFETY: the header was read (this value exists) and the bytes are still
        // borrowed; the out-pointer is a valid local.
        let rc = unsafe {
            stoker_jpeg_start_window_px(
                raw,
                denom as u32,
                pixel as u32,
                to_u32(x0)?,
                to_u32(x1 - x0)?,
                &mut got,
            )
        };
        if rc != 0 {
            return Err(AugmentError::jpeg(self.dec.message()));
        }
        let (got_x, got_w) = (got.got_x as usize, got.got_w as usize);
        let (out_w, out_h) = (got.out_width, got.out_height);
        if (out_w as usize, out_h as usize) != (ow, oh) || got_x > x0 || got_x + got_w < x1 {
            return Err(AugmentError::jpeg(format!(
                "libjpeg window {got_x}+{got_w} of {out_w}x{out_h} does not cover \
                 {x0}..{x1} of {ow}x{oh}"
            )));
        }
        let rows = y1 - y0;
        let len = got_w * rows * pixel;
        buf.resize(len, 0);
        // SAFETY: `buf` holds `len` bytes, which the C side checks against the rows
        // it writes; the decode was started above.
        let rc =
            unsafe { stoker_jpeg_rows(raw, to_u32(y0)?, to_u32(rows)?, buf.as_mut_ptr(), len) };
        if rc != 0 {
            return Err(AugmentError::jpeg(self.dec.message()));
        }
        // SAFETY: reads a counter of the C state.
        let warnings = unsafe { stoker_jpeg_warnings(raw) } > 0;
        // SAFETY: reads a counter of the C state.
        let short_data = unsafe { stoker_jpeg_short_data(raw) } > 0;
        let hard = Rect {
            left: x0 - got_x,
            top: 0,
            width: x1 - x0,
            height: rows,
        };
        let soft = (denom > 1).then(|| SoftBox {
            left: fx0 - x0 as f64,
            top: fy0 - y0 as f64,
            width: fx1.min(x1 as f64) - fx0,
            height: fy1.min(y1 as f64) - fy0,
        });
        Ok(Window {
            width: got_w,
            height: rows,
            denom,
            hard,
            soft,
            warnings,
            short_data,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_is_the_largest_that_keeps_the_target() {
        let r = |w, h| Rect {
            left: 0,
            top: 0,
            width: w,
            height: h,
        };
        assert_eq!(scale_denom(r(500, 375), 224, 224), 1);
        assert_eq!(scale_denom(r(448, 448), 224, 224), 2);
        assert_eq!(scale_denom(r(447, 448), 224, 224), 1);
        assert_eq!(scale_denom(r(2000, 1000), 224, 224), 4);
        assert_eq!(scale_denom(r(4000, 3000), 224, 224), 8);
        assert_eq!(scale_denom(r(4000, 3000), 32, 32), 8);
    }

    #[test]
    fn garbage_is_an_error_not_a_crash() {
        let mut d = TurboDecoder::new().unwrap();
        for bytes in [&b""[..], b"\xff\xd8\xff", b"hello world", &[0xff; 100]] {
            assert!(d.header(bytes).is_err(), "{bytes:?}");
        }
    }
}
