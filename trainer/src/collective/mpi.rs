//! The MPI engine (OpenMPI through the `mpi` crate): gradients are averaged with an
//! all-reduce over host memory, so it serves every backend (on CUDA it stages through
//! the host; [`super::nccl`] is the GPU-to-GPU path).
//!
//! Each operation is a non-blocking `MPI_Iallreduce` polled with `MPI_Test` until done
//! or past the deadline (`collective::poll_until`), because a blocking `MPI_Allreduce`
//! would wait forever for a rank that stopped. A rank that exits is noticed by
//! `mpirun`, which ends the job; a rank that hangs is noticed here, and the caller then
//! [`Mpi::abort`]s the job.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::time::Duration;

use mpi::environment::Universe;
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::Threading;

use super::{Collective, CollectiveError};
use crate::backend::Backend;
use crate::tensor::Tensor;

/// An initialised MPI world. Dropping it finalises MPI.
pub struct Mpi {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    timeout: Duration,
    /// Host copies of the tensor being reduced (send and receive side), kept between
    /// steps so that a step allocates nothing.
    send: RefCell<Vec<f32>>,
    recv: RefCell<Vec<f32>>,
    // Last, so that the communicator above is dropped before MPI is finalised.
    _universe: Universe,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// An MPI data type and the Rust type behind it.
trait MpiType: Copy {
    fn datatype() -> ffi::MPI_Datatype;
}

impl MpiType for f32 {
    fn datatype() -> ffi::MPI_Datatype {
        // SAFETY: a constant the rsmpi shim exports after MPI is linked.
        unsafe { ffi::RSMPI_FLOAT }
    }
}

impl MpiType for f64 {
    fn datatype() -> ffi::MPI_Datatype {
        // SAFETY: as above.
        unsafe { ffi::RSMPI_DOUBLE }
    }
}

impl Mpi {
    /// Initialises MPI (once per process); every collective call gives up after
    /// `timeout`. Fails when MPI was already initialised.
    pub fn init(timeout: Duration) -> Result<Self, CollectiveError> {
        // Only the training thread calls MPI; loader and GEMM threads never do.
        let (universe, _) =
            mpi::initialize_with_threading(Threading::Funneled).ok_or(CollectiveError::Engine {
                op: "MPI_Init",
                rank: 0,
                world: 0,
                reason: "MPI is already initialised in this process".into(),
            })?;
        let world = universe.world();
        let rank = world.rank() as usize;
        let size = world.size() as usize;
        Ok(Mpi {
            world,
            rank,
            size,
            timeout,
            send: RefCell::new(Vec::new()),
            recv: RefCell::new(Vec::new()),
            _universe: universe,
        })
    }

    /// Ends every process of the job (after this one has reported its error): the way
    /// out when a rank failed and the others may be blocked waiting for it.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    fn engine_error(&self, op: &'static str, code: c_int) -> CollectiveError {
        CollectiveError::Engine {
            op,
            rank: self.rank,
            world: self.size,
            reason: format!("MPI error code {code}"),
        }
    }

    /// How long each collective call waits for the other ranks.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sums `send` over all ranks into `recv`, giving up at the deadline.
    fn sum_into<T: MpiType>(
        &self,
        op: &'static str,
        send: &[T],
        recv: &mut [T],
    ) -> Result<(), CollectiveError> {
        assert_eq!(send.len(), recv.len());
        let count = c_int::try_from(send.len()).map_err(|_| CollectiveError::Engine {
            op,
            rank: self.rank,
            world: self.size,
            reason: format!("{} values exceed MPI's count limit", send.len()),
        })?;
        // SAFETY: `send` and `recv` stay borrowed until the request completes. On a
        // timeout the request stays pending (MPI cannot cancel a collective): the
        // callers below leak their own buffers, and the caller of the trait aborts the
        // job before it reuses anything it passed.
        unsafe {
            let mut req: ffi::MPI_Request = std::mem::zeroed();
            let rc = ffi::MPI_Iallreduce(
                send.as_ptr() as *const c_void,
                recv.as_mut_ptr() as *mut c_void,
                count,
                T::datatype(),
                ffi::RSMPI_SUM,
                self.world.as_raw(),
                &mut req,
            );
            if rc != 0 {
                return Err(self.engine_error(op, rc));
            }
            let completed = super::poll_until(self.timeout, || {
                let mut done: c_int = 0;
                match ffi::MPI_Test(&mut req, &mut done, ffi::RSMPI_STATUS_IGNORE) {
                    0 => Ok(done != 0),
                    rc => Err(self.engine_error(op, rc)),
                }
            })?;
            if !completed {
                return Err(CollectiveError::Timeout {
                    op,
                    rank: self.rank,
                    world: self.size,
                    timeout: self.timeout,
                });
            }
            Ok(())
        }
    }
}

impl<B: Backend> Collective<B> for Mpi {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.size
    }

    fn engine(&self) -> &'static str {
        "mpi"
    }

    fn all_reduce_mean(&self, backend: &B, t: &mut Tensor<B>) -> Result<(), CollectiveError> {
        let n = t.len();
        let mut send = self.send.borrow_mut();
        let mut recv = self.recv.borrow_mut();
        send.resize(n, 0.0);
        recv.resize(n, 0.0);
        backend.download(t.view(), &mut send)?;
        if let Err(e) = self.sum_into("gradient all-reduce", &send, &mut recv) {
            // MPI may still touch them: never free or reuse them.
            std::mem::forget(std::mem::take(&mut *send));
            std::mem::forget(std::mem::take(&mut *recv));
            return Err(e);
        }
        let scale = 1.0 / self.size as f32;
        recv.iter_mut().for_each(|v| *v *= scale);
        backend.upload(&recv, t.view_mut())?;
        Ok(())
    }

    fn all_reduce_sum(&self, vals: &mut [f64]) -> Result<(), CollectiveError> {
        // Both sides on buffers of our own: the caller's may be reused (they are often
        // on its stack) while an abandoned request could still write.
        let send = vals.to_vec();
        let mut recv = vec![0.0; vals.len()];
        match self.sum_into("statistics all-reduce", &send, &mut recv) {
            Ok(()) => {
                vals.copy_from_slice(&recv);
                Ok(())
            }
            Err(e) => {
                std::mem::forget(send);
                std::mem::forget(recv);
                Err(e)
            }
        }
    }
}
