//! Data-parallel training's one seam: averaging gradients (and a few statistics) across
//! the processes of a run. A single process uses [`Local`] and needs no MPI or NCCL;
//! `--features mpi` adds `mpi::Mpi` (OpenMPI, any backend, through host memory) and
//! `--features nccl` adds `nccl::Nccl` (GPU to GPU on the CUDA backend).
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

use std::time::Duration;

use crate::backend::cuda::CudaError;
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
        /// The call that timed out, e.g. `gradient all-reduce`.
        op: &'static str,
        /// This process's rank.
        rank: usize,
        /// Processes in the run.
        world: usize,
        /// The deadline that passed.
        timeout: Duration,
    },
    /// The engine reported an error.
    #[error("rank {rank} of {world}: {op}: {reason}")]
    Engine {
        /// The call that failed, e.g. `MPI_Init` or `ncclAllReduce`.
        op: &'static str,
        /// This process's rank (0 when MPI could not start).
        rank: usize,
        /// Processes in the run (0 when MPI could not start).
        world: usize,
        /// The engine's error, in words.
        reason: String,
    },
    /// The ranks were started with settings that cannot train together.
    #[error("rank {rank} of {world}: the ranks disagree on {what}: {detail}")]
    Mismatch {
        /// This process's rank.
        rank: usize,
        /// Processes in the run.
        world: usize,
        /// The setting the ranks disagree on, e.g. the parameter count.
        what: String,
        /// This rank's value, in words.
        detail: String,
    },
    /// A CUDA or NCCL call of the engine failed (the call and its code in `source`).
    #[error("rank {rank} of {world}: {source}")]
    Cuda {
        /// This process's rank.
        rank: usize,
        /// Processes in the run.
        world: usize,
        /// The failed call and its code.
        source: CudaError,
    },
    /// Copying a tensor between the device and the host for the exchange failed.
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
    /// parameter count, batches per epoch, resume position...).
    fn check_same(&self, what: &str, value: u64) -> Result<(), CollectiveError> {
        if self.world() <= 1 {
            return Ok(());
        }
        // In 22-bit pieces, so that every sum below is exact in an f64: the sums of p
        // and p^2 over the ranks equal W*p and W*p^2 only when every rank has p.
        let pieces = [value & PIECE, (value >> 22) & PIECE, value >> 44];
        let mut s = [0.0f64; 6];
        for (i, p) in pieces.iter().enumerate() {
            let p = *p as f64;
            s[2 * i] = p;
            s[2 * i + 1] = p * p;
        }
        self.all_reduce_sum(&mut s)?;
        let w = self.world() as f64;
        let same = pieces.iter().enumerate().all(|(i, p)| {
            let p = *p as f64;
            s[2 * i] == w * p && s[2 * i + 1] == w * p * p
        });
        if !same {
            return Err(CollectiveError::Mismatch {
                rank: self.rank(),
                world: self.world(),
                what: what.to_string(),
                detail: format!("this rank has {value}, another rank something else"),
            });
        }
        Ok(())
    }
}

/// The low 22 bits (see `check_same`).
const PIECE: u64 = (1 << 22) - 1;

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

/// Polls `done` until it returns `Ok(true)` (then `Ok(true)`), fails, or `timeout`
/// passes (then `Ok(false)`). It spins briefly, for the common case of peers a few
/// microseconds behind, then lets other threads (the loader's workers) have the core
/// between polls. Not a sleep: an MPI exchange only moves on while it is polled, and a
/// 20 us sleep between polls made a 3 MB all-reduce 7x slower.
#[cfg_attr(not(any(feature = "mpi", feature = "nccl")), allow(dead_code))]
pub(crate) fn poll_until<E>(
    timeout: Duration,
    mut done: impl FnMut() -> Result<bool, E>,
) -> Result<bool, E> {
    const SPINS: u32 = 1000;
    let deadline = std::time::Instant::now() + timeout;
    let mut polls = 0u32;
    loop {
        if done()? {
            return Ok(true);
        }
        if polls < SPINS {
            polls += 1;
            std::hint::spin_loop();
        } else if std::time::Instant::now() > deadline {
            return Ok(false);
        } else {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polling_ends_when_done_at_the_deadline_or_on_an_error() {
        let mut n = 0;
        let r: Result<bool, ()> = poll_until(Duration::from_secs(60), || {
            n += 1;
            Ok(n == 5000)
        });
        assert_eq!((r, n), (Ok(true), 5000), "past the spins, into the yields");
        let t = std::time::Instant::now();
        let r: Result<bool, ()> = poll_until(Duration::from_millis(30), || Ok(false));
        assert_eq!(r, Ok(false));
        let waited = t.elapsed();
        assert!(waited >= Duration::from_millis(30), "{waited:?}");
        let r = poll_until(Duration::from_secs(60), || Err::<bool, _>("broken"));
        assert_eq!(r, Err("broken"));
    }
}
