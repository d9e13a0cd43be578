//! One backend op as it is enqueued: [`OpCx`] checks the op's views into device
//! addresses and launches its kernels on the backend's stream, naming the op in every
//! error, so that an op's code names it once.

use cudarc::driver::LaunchConfig;

use super::buffer::{device_addr, op_err, DevPtr};
use super::kernels::{Kernel, Param};
use super::{cuda_err, CudaBackend, RED_THREADS};
use crate::backend::{BResult, BackendError, Elem, In, Out};

/// Backend op `name` on `backend`.
pub(super) struct OpCx<'a> {
    pub(super) backend: &'a CudaBackend,
    pub(super) name: &'static str,
}

impl CudaBackend {
    /// The context of backend op `name`.
    pub(super) fn op(&self, name: &'static str) -> OpCx<'_> {
        OpCx {
            backend: self,
            name,
        }
    }
}

impl OpCx<'_> {
    /// The checked device address of `len` elements of `x` (`what` names it in errors).
    pub(super) fn read<T: Elem>(
        &self,
        x: In<'_, CudaBackend, T>,
        len: usize,
        what: &str,
    ) -> BResult<DevPtr> {
        device_addr(self.backend.stream(), x.buf, x.off, len, self.name, what)
    }

    /// The checked device address of `len` elements of `y`, which the op writes.
    pub(super) fn write<T: Elem>(
        &self,
        y: &Out<'_, CudaBackend, T>,
        len: usize,
        what: &str,
    ) -> BResult<DevPtr> {
        device_addr(self.backend.stream(), y.buf, y.off, len, self.name, what)
    }

    /// An error of this op.
    pub(super) fn err(&self, reason: impl Into<String>) -> BackendError {
        op_err(self.name, reason)
    }

    /// A grid-stride grid over `n` elements.
    pub(super) fn grid(&self, n: usize) -> LaunchConfig {
        self.backend.grid(n)
    }

    /// Enqueues `kernel` with `params`.
    pub(super) fn launch<P: Param>(
        &self,
        kernel: &Kernel<P>,
        cfg: LaunchConfig,
        params: P,
    ) -> BResult<()> {
        kernel
            .launch(self.backend.stream(), cfg, params)
            .map_err(cuda_err(self.name))
    }
}

/// A grid of `x * y` blocks of `RED_THREADS` threads, for the reduction kernels (one
/// block per row or chunk).
pub(super) fn blocks(x: u32, y: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (x, y, 1),
        block_dim: (RED_THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}
