//! Data-parallel pieces with ranks as threads of one process, behind the public
//! `Collective` trait: `check_same`, and the training loop. No MPI needed, so this runs
//! with the plain test command.
//! (`distributed.rs` runs the real thing under `mpirun`.)

use std::path::Path;
use std::rc::Rc;
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::Duration;

use stoker_augment::Pipeline;
use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_loader::{source, Loader, LoaderConfig, Mode, ShardPolicy};
use stoker_trainer::train::{TrainConfig, Trainer};
use stoker_trainer::{
    Buffers, Collective, CollectiveError, CpuBackend, Model, ModelConfig, ModelKind, Optimizer,
    OptimizerKind, Schedule, Tensor, TrainError,
};

/// Sums through shared memory, in step with a barrier. `average: false` is a broken
/// engine that leaves every rank its own gradients.
struct Threads {
    rank: usize,
    world: usize,
    sum: Arc<Mutex<Vec<f64>>>,
    barrier: Arc<Barrier>,
    average: bool,
}

impl Collective<CpuBackend> for Threads {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world(&self) -> usize {
        self.world
    }
    fn engine(&self) -> &'static str {
        "threads"
    }
    fn all_reduce_mean(
        &self,
        b: &CpuBackend,
        t: &mut Tensor<CpuBackend>,
    ) -> Result<(), CollectiveError> {
        if !self.average {
            return Ok(());
        }
        let mut v: Vec<f64> = t.to_vec(b)?.iter().map(|&x| x as f64).collect();
        self.all_reduce_sum(&mut v)?;
        let mean: Vec<f32> = v.iter().map(|&x| (x / self.world as f64) as f32).collect();
        b.upload(&mean, t.view_mut())?;
        Ok(())
    }
    fn all_reduce_sum(&self, vals: &mut [f64]) -> Result<(), CollectiveError> {
        {
            let mut s = self.sum.lock().unwrap();
            s.resize(vals.len(), 0.0);
            s.iter_mut().zip(vals.iter()).for_each(|(s, v)| *s += v);
        }
        self.barrier.wait();
        vals.copy_from_slice(&self.sum.lock().unwrap());
        // Nobody may clear the sum before everyone has read it.
        if self.barrier.wait().is_leader() {
            self.sum.lock().unwrap().clear();
        }
        self.barrier.wait();
        Ok(())
    }
}

impl Threads {
    /// `world` ranks sharing one sum.
    fn group(world: usize, average: bool) -> Vec<Threads> {
        let (sum, barrier) = (Arc::default(), Arc::new(Barrier::new(world)));
        (0..world)
            .map(|rank| Threads {
                rank,
                world,
                sum: Arc::clone(&sum),
                barrier: Arc::clone(&barrier),
                average,
            })
            .collect()
    }
}

/// `check_same` on one thread per value; which ranks failed.
fn check(values: &[u64]) -> Vec<bool> {
    let handles: Vec<_> = Threads::group(values.len(), true)
        .into_iter()
        .zip(values.to_vec())
        .map(|(c, v)| std::thread::spawn(move || c.check_same("x", v).is_err()))
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn check_same_tells_any_difference_on_every_rank() {
    assert_eq!(check(&[7, 7, 7]), [false; 3]);
    assert_eq!(check(&[u64::MAX, u64::MAX]), [false; 2]);
    // Differences in each 22-bit piece, and values whose sums alone would agree.
    assert_eq!(check(&[1 << 50, 0]), [true; 2]);
    assert_eq!(check(&[3, 5, 4]), [true; 3]);
    assert_eq!(check(&[u64::MAX, u64::MAX - 1]), [true; 2]);
    assert_eq!(check(&[1 << 22, 1 << 21, 3 << 21]), [true; 3]);
}

/// Rank `rank` of `world`'s trainer over `dir`'s `train` and `val` sets.
fn trainer(dir: &Path, rank: usize, world: usize) -> Trainer<CpuBackend> {
    let cfg = LoaderConfig {
        batch_size: 8,
        mode: Mode::Sync,
        seed: 7,
        rank,
        world_size: world,
        shard_policy: ShardPolicy::Pad,
        transform: Pipeline::parse("flip").unwrap(),
        ..LoaderConfig::default()
    };
    let open = |name, split| source::open(dir.join(name), split).unwrap();
    let train = Loader::new(open("train", source::Split::Train), cfg.clone()).unwrap();
    let val_cfg = LoaderConfig {
        shuffle: false,
        shard_policy: ShardPolicy::Exact,
        transform: Pipeline::identity(),
        ..cfg
    };
    let val = Loader::new(open("val", source::Split::Test), val_cfg).unwrap();
    let b = CpuBackend::new();
    let model_cfg = ModelConfig::new(ModelKind::Mlp, train.image_shape(), 4, 8).seed(3);
    let model = Model::new(&b, model_cfg).unwrap();
    let opt = Optimizer::new(&model, OptimizerKind::sgd(0.9, 5e-4)).unwrap();
    let steps = 2 * train.batches_per_epoch() as u64;
    let cfg = TrainConfig {
        epochs: 2,
        schedule: Schedule::new(0.05, 1, steps),
        log_every: 2,
        max_steps: None,
        checkpoint: None,
    };
    Trainer::new(model, opt, train, Some(val), cfg)
}

/// Trains two ranks as threads; each rank's result and final weights.
fn train_two_ranks(average: bool) -> Vec<Result<Vec<f32>, String>> {
    let tmp = tempfile::tempdir().unwrap();
    for (name, count, seed) in [("train", 48, 1), ("val", 12, 2)] {
        let opts = ShapesOptions {
            count,
            size: 16,
            classes: 4,
            seed,
        };
        synthetic::shapes(&tmp.path().join(name), &opts, |_, _| {}).unwrap();
    }
    let (tx, rx) = mpsc::channel();
    for c in Threads::group(2, average) {
        let (tx, dir) = (tx.clone(), tmp.path().to_path_buf());
        std::thread::spawn(move || {
            let rank = c.rank;
            let run = || -> Result<Vec<f32>, TrainError> {
                let mut t = trainer(&dir, rank, 2).with_collective(Rc::new(c))?;
                t.run(&mut ())?;
                Ok(t.model().params_to_host()?)
            };
            let _ = tx.send((rank, run().map_err(|e| e.to_string())));
        });
    }
    // A rank left waiting at the barrier would hang the test: give up instead.
    let mut out = vec![Err("no result".to_string()), Err("no result".to_string())];
    for _ in 0..2 {
        let (rank, r) = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("a rank did not finish within 120 s");
        out[rank] = r;
    }
    out
}

#[test]
fn ranks_with_a_working_engine_end_with_the_same_weights() {
    let out = train_two_ranks(true);
    let (a, b) = (out[0].as_ref().unwrap(), out[1].as_ref().unwrap());
    assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()));
}

#[test]
fn ranks_whose_weights_drift_apart_stop_at_the_end_of_the_epoch() {
    for r in train_two_ranks(false) {
        let e = r.expect_err("a broken engine must not go unnoticed");
        assert!(
            e.contains("the ranks disagree on the weights after epoch 1"),
            "{e}"
        );
    }
}
