//! What a CUDA call can fail with, keeping the library's own error (the driver's,
//! cuBLAS's, cuDNN's, NVRTC's or NCCL's code) as the source, and naming the call that failed.

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
    /// The driver is there but reports no CUDA device.
    #[error("the driver sees no CUDA device")]
    NoDevice,
    /// The device asked for is not among those the driver sees.
    #[error("no device {ordinal} ({count} present)")]
    NoSuchDevice {
        /// The ordinal asked for (`cuda:ordinal`).
        ordinal: usize,
        /// Devices the driver sees (valid ordinals are `0..count`).
        count: usize,
    },
    /// A driver call failed; `call` names it (e.g. `cuInit`, `cuMemcpyDtoH`).
    #[error("{call}: {source}")]
    Driver {
        /// The driver function, e.g. `cuInit`.
        call: &'static str,
        /// The driver's error code.
        source: DriverError,
    },
    /// A device allocation failed.
    #[error("cannot allocate {bytes} bytes: {source}")]
    Alloc {
        /// Size of the refused allocation.
        bytes: usize,
        /// The driver's error code.
        source: DriverError,
    },
    /// A kernel could not be found in the compiled program, or launched.
    #[error("kernel {kernel}: {source}")]
    Kernel {
        /// The kernel's name.
        kernel: &'static str,
        /// The driver's error code.
        source: DriverError,
    },
    /// A cuBLAS call failed (creating the handle, setting its math mode, a GEMM).
    #[error("{call}: {source}")]
    Blas {
        /// The cuBLAS function, e.g. `cublasSgemm`.
        call: &'static str,
        /// cuBLAS's status code.
        source: CublasError,
    },
    /// A cuDNN call failed (creating the handle, a descriptor, choosing an algorithm, a
    /// convolution); `call` names it, e.g. `cudnnConvolutionForward`.
    #[error("{call}: {source}")]
    Cudnn {
        /// The cuDNN function.
        call: &'static str,
        /// cuDNN's status code.
        source: cudarc::cudnn::result::CudnnError,
    },
    /// The libcudnn found is older than cuDNN 9 (its version).
    #[error("libcudnn {0} found, cuDNN 9 needed")]
    CudnnVersion(String),
    /// An environment variable that steers the backend (`STOKER_CONV`,
    /// `STOKER_CUDNN_LAYOUT`) holds a value it does not take.
    #[error("{name}={value:?}: expected {expected}")]
    Setting {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// The values it takes.
        expected: &'static str,
    },
    /// An NVRTC call (other than the compilation) failed.
    #[error("{call}: {source}")]
    Nvrtc {
        /// The NVRTC function.
        call: &'static str,
        /// NVRTC's result code.
        source: cudarc::nvrtc::result::NvrtcError,
    },
    /// NVRTC rejected the kernel program (`log` holds its messages) or failed.
    #[error("NVRTC: {log}")]
    Compile {
        /// The compiler's log, or the error's text when there is no log.
        log: String,
        /// cudarc's compile error.
        source: CompileError,
    },
    /// An NCCL call failed; the code is NCCL's `ncclResult_t`.
    #[cfg(feature = "nccl")]
    #[error("{call}: {:?}", .code.0)]
    Nccl {
        /// The NCCL function, e.g. `ncclAllReduce`.
        call: &'static str,
        /// NCCL's result code.
        code: cudarc::nccl::result::NcclError,
    },
    /// cudarc panicked (a symbol missing from an old driver, say); caught.
    #[error("{what}: CUDA library failed: {message}")]
    Panicked {
        /// What was being done when it panicked.
        what: &'static str,
        /// The panic's message.
        message: String,
    },
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
