//! The training loop on CUDA end to end: loader batches through the upload stage (async:
//! copy stream, two pinned slots, events; sync: copies on the compute stream) into the
//! model, compared with the same run on the CPU. (`stoker-train --device cuda` is
//! tested in `trainer/cli/tests/cuda_cli.rs`.)
//!
//! Without a usable GPU every test here prints `SKIPPED: no usable CUDA device
//! (<reason>)` to stderr and passes (run with `--nocapture` to see it).
//!
//! Tolerances, and why:
//! - CUDA async feed vs CUDA sync feed: bit for bit. Same batches (the loader is
//!   deterministic in either mode) and a deterministic backend, so any difference means
//!   a step read the wrong or a half-copied slot.
//! - CUDA vs CPU, loss logged after each of the first 4 steps: rtol 1e-3, atol 1e-4, as
//!   `cuda_parity`'s training steps (GEMM summation order differs, nothing else).
//! - CUDA vs CPU, every later step and the validation loss: rtol 2e-2, atol 1e-3: the
//!   rounding differences compound through the updates.

mod util;

use std::path::Path;

use stoker_augment::Pipeline;
use stoker_loader::{source, Loader, LoaderConfig, Mode};
use stoker_trainer::backend::cuda::CudaBackend;
use stoker_trainer::feed::{BatchFeed, DeviceFeed, HostFeed};
use stoker_trainer::model::Stats;
use stoker_trainer::train::{History, TrainConfig, Trainer};
use util::{gpu, shapes};

use stoker_trainer::{
    Backend, CpuBackend, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind, Schedule,
};
const BATCH: usize = 8;

/// Two epochs of the convnet over `train` (evaluated on `val`), logging every step,
/// with the loader in `mode` and batches through `feed`.
fn run<B: Backend + Clone + 'static>(
    backend: &B,
    feed: impl FnOnce((usize, usize, usize)) -> Box<dyn BatchFeed<B>>,
    mode: Mode,
    train: &Path,
    val: &Path,
) -> (History, Option<Stats>) {
    let cfg = LoaderConfig {
        batch_size: BATCH,
        mode,
        workers: stoker_loader::Workers::Fixed(2),
        prefetch: 2,
        seed: 7,
        transform: Pipeline::parse("crop:16:pad=2,flip").unwrap(),
        ..LoaderConfig::default()
    };
    let train_loader = Loader::new(
        source::open(train, source::Split::Train).unwrap(),
        cfg.clone(),
    )
    .unwrap();
    let val_loader = Loader::new(
        source::open(val, source::Split::Test).unwrap(),
        LoaderConfig {
            shuffle: false,
            transform: Pipeline::identity(),
            ..cfg
        },
    )
    .unwrap();
    let shape = train_loader.image_shape();
    let model = Model::new(
        backend,
        ModelConfig::new(ModelKind::Convnet, shape, 4, BATCH).seed(3),
    )
    .unwrap();
    let opt = Optimizer::new(&model, OptimizerKind::sgd(0.9, 5e-4)).unwrap();
    let per_epoch = train_loader.batches_per_epoch() as u64;
    let cfg = TrainConfig {
        epochs: 2,
        schedule: Schedule::new(0.05, 2, 2 * per_epoch),
        log_every: 1,
        max_steps: None,
        checkpoint: None,
    };
    let mut t =
        Trainer::new(model, opt, train_loader, Some(val_loader), cfg).with_feed(feed(shape));
    t.run(&mut ()).expect("training");
    let val = t.evaluate().expect("evaluation");
    (t.history, val)
}

fn losses(h: &History) -> Vec<f32> {
    h.log.iter().map(|p| p.loss).collect()
}

fn close(what: &str, cpu: f32, gpu: f32, rtol: f32, atol: f32) {
    assert!(
        (gpu - cpu).abs() <= atol + rtol * cpu.abs(),
        "{what}: cpu {cpu} vs cuda {gpu} (rtol {rtol}, atol {atol})"
    );
}

#[test]
fn cuda_training_through_the_upload_stage_matches_the_cpu() {
    let Some(g) = gpu("training through the upload stage") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    // 44 images: 5 full batches and a last one of 4 (a short batch through the slots).
    let train = shapes(&tmp.path().join("train"), 44, 1);
    let val = shapes(&tmp.path().join("val"), 12, 2);

    let c = CpuBackend::new();
    let (hc, vc) = run(&c, |_| Box::new(HostFeed::new()), Mode::Async, &train, &val);
    let gr = &g;
    let device_feed = |mode| {
        move |shape| -> Box<dyn BatchFeed<CudaBackend>> {
            let f = DeviceFeed::new(gr, mode, shape, BATCH).expect("device feed");
            assert_eq!(f.is_async(), mode == Mode::Async);
            Box::new(f)
        }
    };
    let (ha, va) = run(&g, device_feed(Mode::Async), Mode::Async, &train, &val);
    let (hs, vs) = run(&g, device_feed(Mode::Sync), Mode::Sync, &train, &val);

    let (lc, la, ls) = (losses(&hc), losses(&ha), losses(&hs));
    eprintln!("cpu losses:        {lc:?}\ncuda async losses: {la:?}\ncuda sync losses:  {ls:?}");
    assert_eq!(lc.len(), 12, "2 epochs of 6 steps, logged every step");
    assert_eq!(la, ls, "async and sync uploads must train bit-identically");
    assert_eq!(va, vs, "validation through the async and sync feeds");
    for (i, (&c, &g)) in lc.iter().zip(&la).enumerate() {
        let (rtol, atol) = if i < 4 { (1e-3, 1e-4) } else { (2e-2, 1e-3) };
        close(&format!("loss after step {}", i + 1), c, g, rtol, atol);
    }
    let (vc, va) = (vc.unwrap(), va.unwrap());
    assert_eq!(vc.samples, va.samples);
    close("validation loss", vc.loss, va.loss, 2e-2, 1e-3);
}
