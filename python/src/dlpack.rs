//! The DLPack structs (dlpack.h, v1.x), written out by hand with `#[repr(C)]`, and the
//! capsules `__dlpack__` returns: `"dltensor"` holding a `DLManagedTensor`, or
//! `"dltensor_versioned"` holding a `DLManagedTensorVersioned` when the consumer asks
//! for DLPack 1.0 or later (`max_version`).
//!
//! Who frees what: the tensor (and its shape and strides) is one Box, with the handle
//! that keeps the device batch's slot from reuse. The consumer calls the tensor's
//! `deleter` when it is done (then renames the capsule to `used_dltensor*`); a capsule
//! never consumed calls it from its own destructor. Either way the Box is freed once,
//! and the slot is free once every tensor and array of the batch is gone.

use std::ffi::{c_void, CStr};
use std::sync::Arc;

use pyo3::ffi;
use pyo3::prelude::*;

/// `DLDeviceType::kDLCUDA`.
pub const KDL_CUDA: i32 = 2;

/// `DLDataTypeCode`s.
pub const KDL_UINT: u8 = 1;
pub const KDL_FLOAT: u8 = 2;
pub const KDL_BFLOAT: u8 = 4;
pub const KDL_BOOL: u8 = 6;

/// `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    /// Null would mean compact row-major; given anyway (some consumers want them).
    pub strides: *mut i64,
    pub byte_offset: u64,
}

/// `DLManagedTensor` (the unversioned, legacy capsule).
#[repr(C)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLPackVersion {
    pub major: u32,
    pub minor: u32,
}

/// `DLManagedTensorVersioned` (DLPack 1.0).
#[repr(C)]
pub struct DLManagedTensorVersioned {
    pub version: DLPackVersion,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub flags: u64,
    pub dl_tensor: DLTensor,
}

// The layout dlpack.h gives on a 64-bit target: a mismatch would be a crash in the
// consumer, so it is checked at compile time.
const _: () = {
    use std::mem::{align_of, offset_of, size_of};
    assert!(size_of::<DLDevice>() == 8);
    assert!(size_of::<DLDataType>() == 4);
    assert!(size_of::<DLTensor>() == 48);
    assert!(offset_of!(DLTensor, device) == 8);
    assert!(offset_of!(DLTensor, ndim) == 16);
    assert!(offset_of!(DLTensor, dtype) == 20);
    assert!(offset_of!(DLTensor, shape) == 24);
    assert!(offset_of!(DLTensor, strides) == 32);
    assert!(offset_of!(DLTensor, byte_offset) == 40);
    assert!(size_of::<DLManagedTensor>() == 64);
    assert!(offset_of!(DLManagedTensor, manager_ctx) == 48);
    assert!(offset_of!(DLManagedTensor, deleter) == 56);
    assert!(size_of::<DLManagedTensorVersioned>() == 80);
    assert!(offset_of!(DLManagedTensorVersioned, manager_ctx) == 8);
    assert!(offset_of!(DLManagedTensorVersioned, deleter) == 16);
    assert!(offset_of!(DLManagedTensorVersioned, flags) == 24);
    assert!(offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
    assert!(align_of::<DLManagedTensorVersioned>() == 8);
};

/// The DLPack version this module writes.
pub const VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 0 };

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: not set; the consumer may write the batch (it is
/// its batch until it drops it).
const FLAGS: u64 = 0;

/// What a tensor describes: its memory and shape, and the owner that keeps the memory
/// valid while the tensor lives.
pub struct Export {
    pub data: u64,
    pub device_id: i32,
    pub dtype: DLDataType,
    pub shape: Vec<i64>,
    pub owner: Arc<dyn Send + Sync>,
}

/// One Box per capsule: the managed tensor first (its address is the capsule's
/// pointer and the one the deleter gets), then what its pointers point into.
#[repr(C)]
struct Managed<T> {
    tensor: T,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _owner: Arc<dyn Send + Sync>,
}

fn dl_tensor(e: &Export, shape: &mut [i64], strides: &mut [i64]) -> DLTensor {
    DLTensor {
        data: e.data as *mut c_void,
        device: DLDevice {
            device_type: KDL_CUDA,
            device_id: e.device_id,
        },
        ndim: shape.len() as i32,
        dtype: e.dtype,
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: 0,
    }
}

/// Row-major strides, in elements, of `shape`.
pub fn strides(shape: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1].max(1);
    }
    s
}

unsafe extern "C" fn delete_legacy(t: *mut DLManagedTensor) {
    if !t.is_null() {
        // SAFETY: `t` is the first field of a `Managed` boxed by `capsule`, given to
        // the consumer once; DLPack calls the deleter once.
        drop(unsafe { Box::from_raw(t.cast::<Managed<DLManagedTensor>>()) });
    }
}

unsafe extern "C" fn delete_versioned(t: *mut DLManagedTensorVersioned) {
    if !t.is_null() {
        // SAFETY: as in `delete_legacy`.
        drop(unsafe { Box::from_raw(t.cast::<Managed<DLManagedTensorVersioned>>()) });
    }
}

const LEGACY: &CStr = c"dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";

/// A capsule never consumed: its tensor is still ours to delete. (A consumed one was
/// renamed `used_dltensor*`, and its consumer calls the deleter.)
unsafe extern "C" fn capsule_destructor(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python with the capsule; the names are the two we make.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, LEGACY.as_ptr()).cast::<DLManagedTensor>();
            if let Some(d) = t.as_ref().and_then(|t| t.deleter) {
                d(t);
            }
        } else if ffi::PyCapsule_IsValid(capsule, VERSIONED.as_ptr()) == 1 {
            let t = ffi::PyCapsule_GetPointer(capsule, VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if let Some(d) = t.as_ref().and_then(|t| t.deleter) {
                d(t);
            }
        }
    }
}

/// A DLPack capsule for `e`: versioned when `versioned`.
pub fn capsule(py: Python<'_>, e: Export, versioned: bool) -> PyResult<Bound<'_, PyAny>> {
    let mut shape = e.shape.clone();
    let mut strides = strides(&shape);
    let (ptr, name): (*mut c_void, &CStr) = if versioned {
        let tensor = DLManagedTensorVersioned {
            version: VERSION,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_versioned),
            flags: FLAGS,
            dl_tensor: dl_tensor(&e, &mut shape, &mut strides),
        };
        let b = Box::into_raw(Box::new(Managed {
            tensor,
            shape,
            strides,
            _owner: e.owner,
        }));
        // SAFETY: just made; manager_ctx points at its own box, as DLPack allows.
        unsafe { (*b).tensor.manager_ctx = b.cast() };
        (b.cast(), VERSIONED)
    } else {
        let tensor = DLManagedTensor {
            dl_tensor: dl_tensor(&e, &mut shape, &mut strides),
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_legacy),
        };
        let b = Box::into_raw(Box::new(Managed {
            tensor,
            shape,
            strides,
            _owner: e.owner,
        }));
        // SAFETY: as above.
        unsafe { (*b).tensor.manager_ctx = b.cast() };
        (b.cast(), LEGACY)
    };
    // The shape and strides Vecs moved into the Box: their heap buffers did not move,
    // so the pointers taken above stay valid.
    // SAFETY: `ptr` is a live Box; the destructor frees it unless a consumer took it.
    let cap = unsafe { ffi::PyCapsule_New(ptr, name.as_ptr(), Some(capsule_destructor)) };
    if cap.is_null() {
        // SAFETY: the capsule was not made, so the Box is still only ours.
        unsafe {
            if versioned {
                delete_versioned(ptr.cast());
            } else {
                delete_legacy(ptr.cast());
            }
        }
        return Err(PyErr::fetch(py));
    }
    // SAFETY: a new reference, just checked non-null.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) })
}
