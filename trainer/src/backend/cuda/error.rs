//! What a CUDA call can fail with, keeping the library's own error (the driver's,
//! cuBLAS's, NVRTC's or NCCL's code) as the source, and naming the call that failed.

use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;
use cudarc::nvrtc::CompileError;

/// A failure of the CUDA libraries, or their absence.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// Shared libraries the backend needs are not on this machine (named, with what
    /// they are, e.g. `libcuda (the NVIDIA driver)`).
    #[error("{} not found", .0.join(", "))]
    Missing(Vec<&'static str>),
    #[error("the driver sees no CUDA device")]
    NoDevice,
    #[error("no device {ordinal} ({count} present)")]
    NoSuchDevice { ordinal: usize, count: usize },
    /// A driver call failed; `call` names it (e.g. `cuInit`, `cuMemcpyDtoH`).
    #[error("{call}: {source}")]
    Driver {
        call: &'static str,
        source: DriverError,
    },
    /// A device allocation failed.
    #[error("cannot allocate {bytes} bytes: {source}")]
    Alloc { bytes: usize, source: DriverError },
    /// A kernel could not be found in the compiled program, or launched.
    #[error("kernel {kernel}: {source}")]
    Kernel {
        kernel: &'static str,
        source: DriverError,
    },
    #[error("{call}: {source}")]
    Blas {
        call: &'static str,
        source: CublasError,
    },
    /// An NVRTC call (other than the compilation) failed.
    #[error("{call}: {source}")]
    Nvrtc {
        call: &'static str,
        source: cudarc::nvrtc::result::NvrtcError,
    },
    /// NVRTC rejected the kernel program (`log` holds its messages) or failed.
    #[error("NVRTC: {log}")]
    Compile { log: String, source: CompileError },
    /// An NCCL call failed; the code is NCCL's `ncclResult_t`.
    #[cfg(feature = "nccl")]
    #[error("{call}: {:?}", .code.0)]
    Nccl {
        call: &'static str,
        code: cudarc::nccl::result::NcclError,
    },
    /// cudarc panicked (a symbol missing from an old driver, say); caught.
    #[error("{what}: CUDA library failed: {message}")]
    Panicked { what: &'static str, message: String },
}

impl CudaError {
    /// The driver's error code, when a driver call failed.
    pub fn driver_code(&self) -> Option<cudarc::driver::sys::CUresult> {
        match self {
            CudaError::Driver { source, .. }
            | CudaError::Alloc { source, .. }
            | CudaError::Kernel { source, .. } => Some(source.0),
            _ => None,
        }
    }

    /// `Err` mapper for a driver call named `call`.
    pub(crate) fn driver(call: &'static str) -> impl Fn(DriverError) -> CudaError {
        move |source| CudaError::Driver { call, source }
    }
}

impl From<CompileError> for CudaError {
    fn from(source: CompileError) -> Self {
        let log = match &source {
            CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
            other => format!("{other}"),
        };
        CudaError::Compile { log, source }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudarc::driver::sys::CUresult;

    #[test]
    fn messages_name_the_call_and_keep_the_code() {
        let missing = CudaError::Missing(vec!["libcuda (the NVIDIA driver)", "libcublas"]);
        assert_eq!(
            missing.to_string(),
            "libcuda (the NVIDIA driver), libcublas not found"
        );
        // (Not formatted here: the driver's error text comes from libcuda, which this
        // machine may not have.)
        let e = CudaError::Driver {
            call: "cuInit",
            source: DriverError(CUresult::CUDA_ERROR_NO_DEVICE),
        };
        assert_eq!(e.driver_code(), Some(CUresult::CUDA_ERROR_NO_DEVICE));
        let source = std::error::Error::source(&e).expect("the driver's error");
        let code = source.downcast_ref::<DriverError>().map(|d| d.0);
        assert_eq!(code, Some(CUresult::CUDA_ERROR_NO_DEVICE));
        assert_eq!(CudaError::NoDevice.driver_code(), None);
    }
}
