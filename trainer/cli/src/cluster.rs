//! Joining the other processes of a data-parallel run, or running alone: the launch
//! (rank and world size from `mpirun`, torchrun-style variables or flags), the MPI
//! world when there is more than one process, and the engine that averages gradients.

use std::rc::Rc;
use std::time::Duration;

use anyhow::bail;
use clap::ValueEnum;
use stoker_trainer::{Backend, Collective, CudaBackend, Launch};

/// Which engine averages gradients in a data-parallel run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// NCCL on CUDA when this build has it, else MPI.
    Auto,
    /// MPI over host memory (on CUDA: gradients staged through the host).
    Mpi,
    /// NCCL, GPU to GPU (CUDA only; needs a build with `--features nccl`).
    Nccl,
}

/// This process's place in the run.
pub struct Cluster {
    pub launch: Launch,
    #[cfg(feature = "mpi")]
    mpi: Option<Rc<stoker_trainer::collective::mpi::Mpi>>,
}

impl Cluster {
    /// Joins the run `launch` describes: initialises MPI when there are several ranks
    /// (each of its calls then gives up after `timeout`) and checks that MPI sees the
    /// same rank and world size.
    pub fn join(launch: Launch, timeout: Duration) -> anyhow::Result<Self> {
        if !launch.is_distributed() {
            return Ok(Cluster {
                launch,
                #[cfg(feature = "mpi")]
                mpi: None,
            });
        }
        #[cfg(feature = "mpi")]
        {
            use stoker_trainer::collective::mpi::Mpi;
            let mpi = Mpi::init(timeout)?;
            let (rank, world) = (
                Collective::<stoker_trainer::CpuBackend>::rank(&mpi),
                Collective::<stoker_trainer::CpuBackend>::world(&mpi),
            );
            if (rank, world) != (launch.rank, launch.world) {
                bail!(
                    "{} say rank {} of {}, but MPI sees rank {rank} of {world}: start the \
                     ranks with mpirun (stoker-train talks between processes through MPI), \
                     e.g. `mpirun -np {} stoker-train ...`",
                    launch.from,
                    launch.rank,
                    launch.world,
                    launch.world
                );
            }
            Ok(Cluster {
                launch,
                mpi: Some(Rc::new(mpi)),
            })
        }
        #[cfg(not(feature = "mpi"))]
        {
            let _ = timeout;
            bail!(
                "{} say this is rank {} of {}, but this stoker-train was built without MPI: \
             build it with `cargo build --release -p stoker-train --features mpi` \
             (needs Debian's libopenmpi-dev, openmpi-bin and libclang-dev)",
                launch.from,
                launch.rank,
                launch.world
            )
        }
    }

    pub fn rank(&self) -> usize {
        self.launch.rank
    }

    pub fn world(&self) -> usize {
        self.launch.world
    }

    /// Rank 0 speaks for the run; the others print only errors.
    pub fn is_leader(&self) -> bool {
        self.launch.rank == 0
    }

    /// The engine for a backend that works on host memory (or stages through it).
    pub fn host_collective<B: Backend + Clone + 'static>(
        &self,
        engine: Engine,
    ) -> anyhow::Result<Option<Rc<dyn Collective<B>>>> {
        if !self.launch.is_distributed() {
            return Ok(None);
        }
        if engine == Engine::Nccl {
            bail!("--collective nccl needs the CUDA backend (this run is on the CPU)");
        }
        self.mpi_collective()
    }

    #[cfg(feature = "mpi")]
    fn mpi_collective<B: Backend + Clone + 'static>(
        &self,
    ) -> anyhow::Result<Option<Rc<dyn Collective<B>>>> {
        Ok(self.mpi.clone().map(|m| m as Rc<dyn Collective<B>>))
    }

    #[cfg(not(feature = "mpi"))]
    fn mpi_collective<B: Backend + Clone + 'static>(
        &self,
    ) -> anyhow::Result<Option<Rc<dyn Collective<B>>>> {
        // `join` refuses a distributed launch in a build without MPI.
        Ok(None)
    }

    /// The engine for the CUDA backend: NCCL when asked for (or `auto` and built in),
    /// else MPI through the host.
    pub fn cuda_collective(
        &self,
        engine: Engine,
        backend: &CudaBackend,
    ) -> anyhow::Result<Option<Rc<dyn Collective<CudaBackend>>>> {
        if !self.launch.is_distributed() {
            return Ok(None);
        }
        let _ = backend;
        #[cfg(all(feature = "nccl", feature = "mpi"))]
        if engine != Engine::Mpi {
            if let Some(mpi) = &self.mpi {
                use stoker_trainer::collective::nccl::{Nccl, LOADING};
                use stoker_trainer::CollectiveError;
                let host = mpi.clone() as Rc<dyn Collective<CudaBackend>>;
                match Nccl::new(host, backend, mpi.timeout()) {
                    Ok(nccl) => return Ok(Some(Rc::new(nccl) as Rc<dyn Collective<CudaBackend>>)),
                    // Every rank sees the same answer here (they agree on it first), so
                    // all of them fall back together.
                    Err(CollectiveError::Engine { op, reason, .. })
                        if op == LOADING && engine == Engine::Auto =>
                    {
                        if self.is_leader() {
                            eprintln!("collective: mpi through host memory ({reason})");
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        #[cfg(not(all(feature = "nccl", feature = "mpi")))]
        if engine == Engine::Nccl {
            bail!(
                "--collective nccl: this stoker-train was built without NCCL (build with \
                 `--features mpi,nccl`)"
            );
        }
        self.mpi_collective()
    }

    /// Fails unless every rank has the same `value` for `what` (nothing in a single
    /// process).
    pub fn check_same(&self, what: &str, value: u64) -> anyhow::Result<()> {
        if let Some(c) = self.mpi_collective::<stoker_trainer::CpuBackend>()? {
            c.check_same(what, value)?;
        }
        Ok(())
    }

    /// Waits until every rank gets here (nothing in a single process).
    pub fn barrier(&self) -> anyhow::Result<()> {
        if let Some(c) = self.mpi_collective::<stoker_trainer::CpuBackend>()? {
            c.all_reduce_sum(&mut [0.0])?;
        }
        Ok(())
    }

    /// Ends the whole job after this rank failed, so that no other rank waits for it;
    /// returns only in a single process.
    pub fn abort(&self, code: i32) {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            m.abort(code);
        }
        let _ = code;
    }
}
