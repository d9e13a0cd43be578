//! Whether CUDA is usable here, and what the device is, without ever panicking: the
//! libraries are looked for before any cudarc call that would load them (and panic when
//! they are missing), and a panic inside cudarc is caught.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::cublas::sys as blas_sys;
use cudarc::driver::{sys as drv_sys, CudaContext};

use super::CudaError;

/// What [`probe`] found: enough to say which device a run uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's ordinal (`cuda:ordinal`).
    pub ordinal: usize,
    /// Devices the driver sees.
    pub count: usize,
    /// The device's name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// (major, minor), e.g. (9, 0) for Hopper.
    pub compute_capability: (i32, i32),
    /// Total device memory, in bytes.
    pub total_mem: usize,
}

impl std::fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (ma, mi) = self.compute_capability;
        write!(
            f,
            "cuda:{} ({}, sm_{}{}, {:.0} GiB)",
            self.ordinal,
            self.name,
            ma,
            mi,
            self.total_mem as f64 / (1u64 << 30) as f64
        )
    }
}

/// Checks the three shared libraries the backend needs, before any cudarc call that
/// would load them lazily (and panic if they are missing).
pub(super) fn libraries_present() -> Result<(), CudaError> {
    // SAFETY: each probe only tries `dlopen` on candidate names and closes what it opens;
    // no symbol is resolved or called.
    let (drv, rtc, blas) = unsafe {
        (
            drv_sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            blas_sys::is_culib_present(),
        )
    };
    let missing: Vec<&'static str> = [
        (drv, "libcuda (the NVIDIA driver)"),
        (rtc, "libnvrtc (CUDA runtime compiler)"),
        (blas, "libcublas"),
    ]
    .iter()
    .filter(|(ok, _)| !ok)
    .map(|(_, name)| *name)
    .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(CudaError::Missing(missing))
    }
}

/// Runs `f`, turning a panic inside cudarc (a symbol missing from an old driver, say)
/// into an error.
pub(super) fn guarded<T>(
    what: &'static str,
    f: impl FnOnce() -> Result<T, CudaError>,
) -> Result<T, CudaError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let message = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic".into());
            Err(CudaError::Panicked { what, message })
        }
    }
}

/// Whether CUDA device 0 is usable, and what it is. Never panics: a missing driver or
/// library, no device, or a failing driver all come back as `Err` with the reason.
pub fn probe() -> Result<DeviceInfo, CudaError> {
    probe_ordinal(0)
}

/// As [`probe`], for device `ordinal`.
pub fn probe_ordinal(ordinal: usize) -> Result<DeviceInfo, CudaError> {
    libraries_present()?;
    guarded("probe", || {
        let count = CudaContext::device_count().map_err(CudaError::driver("cuInit"))?;
        let count = usize::try_from(count).unwrap_or(0);
        if count == 0 {
            return Err(CudaError::NoDevice);
        }
        if ordinal >= count {
            return Err(CudaError::NoSuchDevice { ordinal, count });
        }
        let ctx = CudaContext::new(ordinal).map_err(CudaError::driver("cuCtxCreate"))?;
        info_of(&ctx, count)
    })
}

pub(super) fn info_of(ctx: &Arc<CudaContext>, count: usize) -> Result<DeviceInfo, CudaError> {
    Ok(DeviceInfo {
        ordinal: ctx.ordinal(),
        count,
        name: ctx.name().map_err(CudaError::driver("cuDeviceGetName"))?,
        compute_capability: ctx
            .compute_capability()
            .map_err(CudaError::driver("cuDeviceGetAttribute"))?,
        total_mem: ctx
            .total_mem()
            .map_err(CudaError::driver("cuDeviceTotalMem"))?,
    })
}
