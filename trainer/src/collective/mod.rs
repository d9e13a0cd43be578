//! Data-parallel training's one seam: averaging gradients (and a few statistics) across
//! the processes of a run. A single process uses [`Local`] and needs no MPI or NCCL;
//! `--features mpi` adds [`mpi::Mpi`] (OpenMPI, any backend, through host memory) and
//! `--features nccl` adds [`nccl::Nccl`] (GPU to GPU on the CUDA backend).
//!
//! ```text
//! every rank:  forward_backward(own shard's batch)   -> local gradients (mean over B)
//!              collective.all_reduce_mean(grads)     -> mean over all W*B samples
//!              optimizer step                        -> the same weights everywhere
//! ```
//!
//! Every rank must make the same collective calls in the same order; the training loop
//! guarantees it by taking the same number of steps on every rank (the sampler pads
//! shards to equal length) and by logging at the same steps. Each call has a deadline:
//! a rank that died or stopped makes the others fail with [`CollectiveError::Timeout`]
//! instead of waiting forever.

pub mod launch;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod reshard;

use std::time::Duration;

use crate::backend::{Backend, BackendError};
use crate::tensor::Tensor;

pub use launch::{Launch, LaunchError};

/// What a collective operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CollectiveError {
    /// The other ranks did not join within the deadline: one of them died, hangs, or is
    /// far slower (e.g. stuck on I/O).
    #[error(
        "rank {rank} of {world}: {op} did not complete within {} s: another rank has died \
         or stopped responding (raise --collective-timeout if a rank is just slow)",
        timeout.as_secs_f64()
    )]
    Timeout {
        op: &'static str,
        rank: usize,
        world: usize,
        timeout: Duration,
    },
    /// The engine reported an error.
    #[error("rank {rank} of {world}: {op}: {reason}")]
    Engine {
        op: &'static str,
        rank: usize,
        world: usize,
        reason: String,
    },
    /// The ranks were started with settings that cannot train together.
    #[error("rank {rank} of {world}: the ranks disagree on {what}: {detail}")]
    Mismatch {
        rank: usize,
        world: usize,
        what: String,
        detail: String,
    },
    #[error("moving gradients to or from the device: {0}")]
    Backend(#[from] BackendError),
}

/// Averages gradients and sums statistics over the ranks of one run.
///
/// Methods take `&self`, so that one engine can serve several trainers of a run (e.g.
/// `--compare-readers`) through an `Rc`.
pub trait Collective<B: Backend> {
    /// This process's rank, `0..world()`.
    fn rank(&self) -> usize;
    /// Number of processes in the run.
    fn world(&self) -> usize;
    /// `local`, `mpi` or `nccl`, for reports.
    fn engine(&self) -> &'static str;
    /// Replaces `t` on every rank by the mean of all ranks' `t`.
    fn all_reduce_mean(&self, backend: &B, t: &mut Tensor<B>) -> Result<(), CollectiveError>;
    /// Replaces `vals` on every rank by the element-wise sum over all ranks.
    fn all_reduce_sum(&self, vals: &mut [f64]) -> Result<(), CollectiveError>;

    /// Fails unless every rank passes the same `value` for `what` (run set-up checks:
    /// parameter count, batches per epoch...). Values must be below 2^26 to compare
    /// exactly.
    fn check_same(&self, what: &str, value: u64) -> Result<(), CollectiveError> {
        if self.world() <= 1 {
            return Ok(());
        }
        // Sums of v and v^2 match W*v and W*v^2 only when all values are equal.
        let v = value as f64;
        let mut s = [v, v * v];
        self.all_reduce_sum(&mut s)?;
        let w = self.world() as f64;
        if s[0] != w * v || s[1] != w * v * v {
            return Err(CollectiveError::Mismatch {
                rank: self.rank(),
                world: self.world(),
                what: what.to_string(),
                detail: format!(
                    "this rank has {value}, the mean over all ranks is {}",
                    s[0] / w
                ),
            });
        }
        Ok(())
    }
}

/// One process: nothing to exchange.
#[derive(Clone, Copy, Debug, Default)]
pub struct Local;

impl<B: Backend> Collective<B> for Local {
    fn rank(&self) -> usize {
        0
    }

    fn world(&self) -> usize {
        1
    }

    fn engine(&self) -> &'static str {
        "local"
    }

    fn all_reduce_mean(&self, _: &B, _: &mut Tensor<B>) -> Result<(), CollectiveError> {
        Ok(())
    }

    fn all_reduce_sum(&self, _: &mut [f64]) -> Result<(), CollectiveError> {
        Ok(())
    }
}

/// The deadline of every collective call unless the run sets another.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
