//! `stoker.DeviceArray`: one array of a device batch (`device.rs`), handed to PyTorch,
//! JAX or CuPy through the DLPack protocol without a copy. It keeps its batch's slot
//! from reuse while it, or any tensor made from it, lives.

use std::sync::Arc;

use cudarc::driver::{result as drv, sys};
use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;

use super::SlotMem;
use crate::dlpack::{self, DLDataType, Export, KDL_BFLOAT, KDL_FLOAT, KDL_UINT};
use crate::errors::LoaderError;

/// `CU_STREAM_LEGACY`: what DLPack's `stream=None` means for CUDA.
const LEGACY_STREAM: isize = 1;

/// A batch array on a CUDA device: pass it to `torch.from_dlpack`,
/// `jax.dlpack.from_dlpack` or `cupy.from_dlpack` (no copy). `shape`, `dtype`,
/// `device` and `data_ptr` describe it.
#[pyclass(module = "stoker", name = "DeviceArray", frozen)]
pub struct DeviceArray {
    owner: Arc<SlotMem>,
    ptr: u64,
    shape: Vec<usize>,
    dtype: DLDataType,
    device: i32,
}

impl DeviceArray {
    pub fn new(
        owner: Arc<SlotMem>,
        ptr: u64,
        shape: Vec<usize>,
        dtype: DLDataType,
        device: i32,
    ) -> Self {
        DeviceArray {
            owner,
            ptr,
            shape,
            dtype,
            device,
        }
    }
}

/// numpy's name of a DLPack dtype (bfloat16 under its usual name).
fn dtype_name(d: DLDataType) -> String {
    match (d.code, d.bits) {
        (KDL_UINT, 8) => "uint8".into(),
        (dlpack::KDL_BOOL, _) => "bool".into(),
        (KDL_FLOAT, b) => format!("float{b}"),
        (KDL_BFLOAT, 16) => "bfloat16".into(),
        (0, b) => format!("int{b}"),
        (KDL_UINT, b) => format!("uint{b}"),
        (c, b) => format!("dlpack({c}, {b})"),
    }
}

#[pymethods]
impl DeviceArray {
    /// The DLPack capsule (the protocol's producer side). `stream`: the consumer's
    /// CUDA stream, which is made to wait (on the device) until the batch is uploaded
    /// and converted; None means the legacy default stream, -1 no ordering.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<isize>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if copy == Some(true) {
            return Err(PyBufferError::new_err(
                "stoker.DeviceArray is exported without a copy; copy=True is not supported",
            ));
        }
        if let Some(d) = dl_device {
            if d != (dlpack::KDL_CUDA, self.device) {
                return Err(PyBufferError::new_err(format!(
                    "stoker.DeviceArray lives on cuda:{}; dl_device {d:?} would need a copy",
                    self.device
                )));
            }
        }
        let stream = stream.unwrap_or(LEGACY_STREAM);
        if stream == 0 {
            return Err(PyBufferError::new_err(
                "stream=0 is ambiguous for CUDA (DLPack): give 1 (legacy default), 2 \
                 (per-thread default) or a stream's handle",
            ));
        }
        let mut consumers = self
            .owner
            .consumers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if stream == -1 {
            consumers.push(None);
        } else {
            self.owner
                .bind()
                .and_then(|()| {
                    // SAFETY: `stream` is the consumer's stream on this device, as the
                    // protocol has it; the event is the slot's, alive with `owner`.
                    unsafe {
                        drv::stream::wait_event(
                            stream as sys::CUstream,
                            self.owner.ready().cu_event(),
                            sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                        )
                    }
                })
                .map_err(|e| {
                    LoaderError::new_err(format!(
                        "CUDA: making stream {stream:#x} wait for the batch: {e}"
                    ))
                })?;
            consumers.push(Some(stream as usize));
        }
        drop(consumers);
        let export = Export {
            data: self.ptr,
            device_id: self.device,
            dtype: self.dtype,
            shape: self.shape.iter().map(|&s| s as i64).collect(),
            owner: self.owner.clone(),
        };
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        dlpack::capsule(py, export, versioned)
    }

    /// (kDLCUDA, the device's number).
    fn __dlpack_device__(&self) -> (i32, i32) {
        (dlpack::KDL_CUDA, self.device)
    }

    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.shape.clone()
    }

    /// numpy's name of the element type ("bfloat16" for bfloat16).
    #[getter]
    fn dtype(&self) -> String {
        dtype_name(self.dtype)
    }

    /// "cuda:N".
    #[getter]
    fn device(&self) -> String {
        format!("cuda:{}", self.device)
    }

    /// The device address of the first element (what `torch.from_dlpack(a).data_ptr()`
    /// gives, the copy being none).
    #[getter]
    fn data_ptr(&self) -> u64 {
        self.ptr
    }

    /// Bytes of the array.
    #[getter]
    fn nbytes(&self) -> usize {
        self.shape.iter().product::<usize>() * usize::from(self.dtype.bits).div_ceil(8)
    }

    fn __len__(&self) -> usize {
        self.shape.first().copied().unwrap_or(0)
    }

    fn __repr__(&self) -> String {
        format!(
            "<stoker.DeviceArray {} {:?} on cuda:{}>",
            dtype_name(self.dtype),
            self.shape,
            self.device
        )
    }
}
