//! Device buffers: a typed view over device bytes, the checked device address every
//! kernel argument is made from, and host slices seen as bytes for copies.

use std::any::type_name;
use std::marker::PhantomData;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DeviceRepr};

use crate::backend::{BResult, BackendError, Elem};

/// A device buffer of `T`: bytes plus a type. `repr(transparent)` over the byte slice,
/// so a `&CudaSlice<u8>` that another crate owns (the loader's uploaded batch) can be
/// viewed as a `&CudaBuf<u8>` or `&CudaBuf<u32>` without a copy: see
/// [`CudaBuf::view`].
#[repr(transparent)]
pub struct CudaBuf<T> {
    pub(super) raw: CudaSlice<u8>,
    pub(super) _t: PhantomData<T>,
}

impl<T: Elem> CudaBuf<T> {
    /// Views device bytes as a buffer of `T`; `None` unless the byte length is a
    /// multiple of `T`'s size (device allocations are 256-byte aligned).
    pub fn view(raw: &CudaSlice<u8>) -> Option<&CudaBuf<T>> {
        if raw.len().checked_rem(std::mem::size_of::<T>()) != Some(0) {
            return None;
        }
        // SAFETY: CudaBuf<T> is repr(transparent) over CudaSlice<u8> (PhantomData is a
        // zero-sized field), so the two references have the same layout; the length
        // check above keeps `len()` exact.
        Some(unsafe { &*(raw as *const CudaSlice<u8> as *const CudaBuf<T>) })
    }

    /// Elements in the buffer.
    pub fn len(&self) -> usize {
        self.raw.len() / std::mem::size_of::<T>()
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The underlying device bytes.
    pub fn bytes(&self) -> &CudaSlice<u8> {
        &self.raw
    }

    /// The underlying device bytes, for writing (e.g. by a collective engine).
    pub fn bytes_mut(&mut self) -> &mut CudaSlice<u8> {
        &mut self.raw
    }
}

impl<T> std::fmt::Debug for CudaBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuf<{}>({} bytes)", type_name::<T>(), self.raw.len())
    }
}

/// A device address passed to a kernel. Made by [`device_addr`] (checked against its
/// buffer) or from an allocation this backend owns, never from a bare number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(transparent)]
pub(super) struct DevPtr(u64);

// SAFETY: a plain 64-bit value, passed as a kernel's pointer argument (`T*` on the
// device is 64 bits).
unsafe impl DeviceRepr for DevPtr {}

impl DevPtr {
    /// The address of a whole allocation this backend owns (scratch, flags).
    pub(super) fn of(slice: &CudaSlice<u8>, stream: &CudaStream) -> Self {
        let (p, _record) = slice.device_ptr(stream);
        DevPtr(p)
    }

    /// The address `bytes` further on (a region of an allocation this backend owns).
    pub(super) fn add(self, bytes: usize) -> Self {
        DevPtr(self.0 + bytes as u64)
    }

    /// The raw address, for the cuBLAS call.
    pub(super) fn raw(self) -> u64 {
        self.0
    }
}

pub(super) fn op_err(op: &'static str, reason: impl Into<String>) -> BackendError {
    BackendError::Op {
        op,
        reason: reason.into(),
    }
}

/// The device address of `len` elements of `buf` from element `off`, checked against
/// the buffer (a kernel must never run past an allocation).
pub(super) fn device_addr<T: Elem>(
    stream: &CudaStream,
    buf: &CudaBuf<T>,
    off: usize,
    len: usize,
    op: &'static str,
    what: &str,
) -> BResult<DevPtr> {
    let have = buf.len();
    let end = off.saturating_add(len);
    if end > have {
        return Err(op_err(
            op,
            format!("{what} needs elements up to {end}, buffer holds {have}"),
        ));
    }
    let (p, _rec) = buf.raw.device_ptr(stream);
    Ok(DevPtr(p + (off * std::mem::size_of::<T>()) as u64))
}

/// Reinterprets a slice of a buffer element type as bytes.
pub(super) fn as_bytes<T: Elem>(s: &[T]) -> &[u8] {
    // SAFETY: every Elem (f32, u8, u32) is plain data with no padding, so its bytes are
    // initialised; the length covers exactly the slice.
    unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
}

pub(super) fn as_bytes_mut<T: Elem>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: as in `as_bytes`; moreover every bit pattern is a valid f32, u8 or u32, so
    // any bytes written through the view leave valid values.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr() as *mut u8, std::mem::size_of_val(s)) }
}
