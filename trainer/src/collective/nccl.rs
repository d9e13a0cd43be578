//! The NCCL engine: gradients averaged GPU to GPU on the CUDA backend's compute stream
//! (`ncclAllReduce` with `ncclAvg`, in place), so the exchange is ordered after the
//! backward and before the optimizer step without any host synchronisation. NCCL is
//! found at run time like the rest of CUDA; its unique id travels from rank 0 to the
//! others over MPI, and small host statistics go over MPI too.
//!
//! Deadlines: the gradient exchange is enqueued, not waited for, so a rank that stops
//! shows up at the next host synchronisation (the periodic loss read), which goes
//! through MPI and its deadline. A rank that dies is noticed by `mpirun`.

use std::ffi::c_char;
use std::rc::Rc;
use std::time::Duration;

use cudarc::nccl::safe::{Comm, Id, ReduceOp};

use super::mpi::Mpi;
use super::{Collective, CollectiveError};
use crate::backend::CudaBackend;
use crate::tensor::Tensor;

/// An NCCL communicator over the ranks of an MPI world, one GPU per rank.
pub struct Nccl {
    comm: Comm,
    mpi: Rc<Mpi>,
    rank: usize,
    world: usize,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .finish()
    }
}

impl Nccl {
    /// Joins every rank of `mpi` in one NCCL communicator on `backend`'s stream. Every
    /// rank must call this at the same point. `_timeout` is MPI's (see the module docs).
    pub fn new(
        mpi: &Rc<Mpi>,
        backend: &CudaBackend,
        _timeout: Duration,
    ) -> Result<Self, CollectiveError> {
        let rank = Collective::<CudaBackend>::rank(mpi.as_ref());
        let world = Collective::<CudaBackend>::world(mpi.as_ref());
        let fail = |op: &'static str, reason: String| CollectiveError::Engine {
            op,
            rank,
            world,
            reason,
        };
        // Every rank must learn whether every other rank has NCCL before any of them
        // blocks in the broadcast below.
        // SAFETY: only tries to open the library.
        let present = unsafe { cudarc::nccl::sys::is_culib_present() };
        let mut missing = [if present { 0.0 } else { 1.0 }];
        Collective::<CudaBackend>::all_reduce_sum(mpi.as_ref(), &mut missing)?;
        if missing[0] > 0.0 {
            return Err(fail(
                "loading NCCL",
                format!(
                    "libnccl was not found on {} of the {world} ranks (this one: {}); \
                     use --collective mpi, or install NCCL (e.g. pip's nvidia-nccl-cu13, \
                     with its lib folder on LD_LIBRARY_PATH)",
                    missing[0],
                    if present { "found" } else { "missing" }
                ),
            ));
        }
        let mut bytes = [0u8; 128];
        if rank == 0 {
            let id = Id::new().map_err(|e| fail("ncclGetUniqueId", format!("{e:?}")))?;
            for (b, c) in bytes.iter_mut().zip(id.internal()) {
                *b = *c as u8;
            }
        }
        mpi.broadcast_bytes(&mut bytes);
        let id = Id::uninit(bytes.map(|b| b as c_char));
        let comm = Comm::from_rank(backend.stream().clone(), rank, world, id)
            .map_err(|e| fail("ncclCommInitRank", format!("{e:?}")))?;
        Ok(Nccl {
            comm,
            mpi: mpi.clone(),
            rank,
            world,
        })
    }
}

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
        let n = t.len();
        let raw = t.buf_mut().bytes_mut();
        // SAFETY: the buffer holds at least `n` f32 values (a tensor's buffer is
        // allocated for its shape), and f32 has no invalid bit patterns.
        let mut view = unsafe { raw.transmute_mut::<f32>(n) }.ok_or(CollectiveError::Engine {
            op: "ncclAllReduce",
            rank: self.rank,
            world: self.world,
            reason: format!("a tensor of {n} values has a smaller buffer"),
        })?;
        self.comm
            .all_reduce_in_place(&mut view, &ReduceOp::Avg)
            .map_err(|e| CollectiveError::Engine {
                op: "ncclAllReduce",
                rank: self.rank,
                world: self.world,
                reason: format!("{e:?}"),
            })?;
        Ok(())
    }

    fn all_reduce_sum(&self, vals: &mut [f64]) -> Result<(), CollectiveError> {
        Collective::<CudaBackend>::all_reduce_sum(self.mpi.as_ref(), vals)
    }
}
