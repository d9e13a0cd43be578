//! The NCCL engine: gradients averaged GPU to GPU on the CUDA backend's compute stream
//! (`ncclAllReduce` with `ncclAvg`, in place), so the exchange is ordered after the
//! backward and before the optimizer step by the stream itself, with no copies through
//! the host. NCCL is found at run time like the rest of CUDA.
//!
//! NCCL cannot find its peers by itself: it needs one id, made by rank 0, on every
//! rank. A host engine (MPI in `stoker-train`) hands it out, and also carries the small
//! host-side sums (logged statistics, evaluation). So this module needs no MPI itself,
//! and a single rank (host engine [`super::Local`]) can test it on one GPU.
//!
//! Deadlines: the host waits for each all-reduce to finish (an event recorded behind it,
//! polled) until the deadline, so that a rank that hangs makes the others fail with
//! [`CollectiveError::Timeout`] instead of blocking at their next device synchronisation.
//! On a timeout the communicator is aborted (`ncclCommAbort`, which stops this rank's
//! NCCL kernel) and every later call fails. The wait costs one kernel-launch gap per
//! exchange: the optimizer step is enqueued after the exchange ends instead of behind
//! it. A rank that dies is also noticed by `mpirun`, which ends the job.

use std::cell::RefCell;
use std::ffi::c_char;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{sys::CUevent_flags, CudaEvent, CudaStream};
use cudarc::nccl::safe::{Comm, Id, ReduceOp};

use super::{Collective, CollectiveError};
use crate::backend::cuda::CudaError;
use crate::backend::CudaBackend;
use crate::tensor::Tensor;

/// An NCCL communicator over the ranks of an MPI world, one GPU per rank.
pub struct Nccl {
    /// `None` once aborted after a timeout (dropping a cudarc `Comm` calls
    /// `ncclCommAbort`).
    comm: RefCell<Option<Comm>>,
    stream: Arc<CudaStream>,
    /// Recorded behind each all-reduce and polled against the deadline.
    done: CudaEvent,
    timeout: Duration,
    host: Rc<dyn Collective<CudaBackend>>,
    rank: usize,
    world: usize,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Nccl {
    /// Whether this process can load NCCL (`libnccl.so.2`).
    pub fn is_available() -> bool {
        // SAFETY: only tries to open the library.
        unsafe { cudarc::nccl::sys::is_culib_present() }
    }

    /// Joins every rank of `host` in one NCCL communicator on `backend`'s stream, one
    /// GPU per rank; each all-reduce then gives up after `timeout`. Every rank must
    /// call this at the same point.
    pub fn new(
        host: Rc<dyn Collective<CudaBackend>>,
        backend: &CudaBackend,
        timeout: Duration,
    ) -> Result<Self, CollectiveError> {
        let (rank, world) = (host.rank(), host.world());
        let fail = |op: &'static str, reason: String| CollectiveError::Engine {
            op,
            rank,
            world,
            reason,
        };
        let cuda = |source| CollectiveError::Cuda {
            rank,
            world,
            source,
        };
        // Every rank learns whether every other rank has NCCL before any of them waits
        // for the id, so that all of them fail (or fall back) together.
        let present = Self::is_available();
        let mut missing = [if present { 0.0 } else { 1.0 }];
        host.all_reduce_sum(&mut missing)?;
        if missing[0] > 0.0 {
            return Err(fail(
                LOADING,
                format!(
                    "libnccl was not found on {} of the {world} ranks (this one: {}); \
                     use --collective mpi, or install NCCL (e.g. pip's nvidia-nccl-cu13, \
                     with its lib folder on LD_LIBRARY_PATH)",
                    missing[0],
                    if present { "found" } else { "missing" }
                ),
            ));
        }
        // Rank 0's id to everyone, as a sum in which the other ranks add zeros (every
        // byte is exact in an f64).
        let mut id = [0.0f64; 128];
        if rank == 0 {
            let made = Id::new().map_err(|code| {
                cuda(CudaError::Nccl {
                    call: "ncclGetUniqueId",
                    code,
                })
            })?;
            for (v, c) in id.iter_mut().zip(made.internal()) {
                *v = f64::from(*c as u8);
            }
        }
        host.all_reduce_sum(&mut id)?;
        let id = Id::uninit(id.map(|v| v as u8 as c_char));
        let stream = backend.stream().clone();
        let done = stream
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(|e| cuda(CudaError::driver("cuEventCreate")(e)))?;
        let comm = Comm::from_rank(stream.clone(), rank, world, id).map_err(|code| {
            cuda(CudaError::Nccl {
                call: "ncclCommInitRank",
                code,
            })
        })?;
        Ok(Nccl {
            comm: RefCell::new(Some(comm)),
            stream,
            done,
            timeout,
            host,
            rank,
            world,
        })
    }

    fn cuda_error(&self, source: CudaError) -> CollectiveError {
        CollectiveError::Cuda {
            rank: self.rank,
            world: self.world,
            source,
        }
    }

    fn engine_error(&self, op: &'static str, reason: String) -> CollectiveError {
        CollectiveError::Engine {
            op,
            rank: self.rank,
            world: self.world,
            reason,
        }
    }

    /// Waits until the work enqueued so far on the stream (the exchange just enqueued)
    /// has finished, or aborts the communicator at the deadline.
    fn wait(&self, op: &'static str) -> Result<(), CollectiveError> {
        self.done
            .record(&self.stream)
            .map_err(|e| self.cuda_error(CudaError::driver("cuEventRecord")(e)))?;
        let completed = super::poll_until(self.timeout, || {
            self.done
                .try_is_complete()
                .map_err(|e| self.cuda_error(CudaError::driver("cuEventQuery")(e)))
        })?;
        if !completed {
            // Stops this rank's NCCL kernel, so that the stream and the process can go
            // on to report the error.
            drop(self.comm.borrow_mut().take());
            return Err(CollectiveError::Timeout {
                op,
                rank: self.rank,
                world: self.world,
                timeout: self.timeout,
            });
        }
        Ok(())
    }
}

/// The `op` of the error [`Nccl::new`] returns when a rank lacks the library.
pub const LOADING: &str = "loading NCCL";

impl Collective<CudaBackend> for Nccl {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world(&self) -> usize {
        self.world
    }

    fn engine(&self) -> &'static str {
        "nccl"
    }

    fn all_reduce_mean(
        &self,
        _backend: &CudaBackend,
        t: &mut Tensor<CudaBackend>,
    ) -> Result<(), CollectiveError> {
        const OP: &str = "ncclAllReduce";
        let n = t.len();
        let raw = t.buf_mut().bytes_mut();
        // SAFETY: the buffer holds at least `n` f32 values (a tensor's buffer is
        // allocated for its shape), and f32 has no invalid bit patterns.
        let mut view = unsafe { raw.transmute_mut::<f32>(n) }.ok_or_else(|| {
            self.engine_error(OP, format!("a tensor of {n} values has a smaller buffer"))
        })?;
        {
            let comm = self.comm.borrow();
            let comm = comm.as_ref().ok_or_else(|| {
                self.engine_error(OP, "the communicator was aborted after a timeout".into())
            })?;
            comm.all_reduce_in_place(&mut view, &ReduceOp::Avg)
                .map_err(|code| self.cuda_error(CudaError::Nccl { call: OP, code }))?;
        }
        self.wait(OP)
    }

    fn all_reduce_sum(&self, vals: &mut [f64]) -> Result<(), CollectiveError> {
        self.host.all_reduce_sum(vals)
    }
}
