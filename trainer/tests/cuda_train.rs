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
//! - bf16 autocast vs f32, both on CUDA: the epochs' mean losses within 0.1 (about 7%
//!   of ln 4, where the run starts): bf16 operands carry 8 significant bits, so single steps
//!   differ by a few tenths of a percent, and the runs drift apart over the updates;
//!   0.1 still fails a bf16 run that stops learning or diverges.

mod util;

use std::path::Path;

use safetensors::{Dtype, SafeTensors};

use stoker_augment::Pipeline;
use stoker_loader::{source, Loader, LoaderConfig, Mode};
use stoker_trainer::backend::cuda::CudaBackend;
use stoker_trainer::feed::{BatchFeed, DeviceFeed, HostFeed};
use stoker_trainer::model::Stats;
use stoker_trainer::train::{History, TrainConfig, Trainer};
use util::{gpu, shapes};

use stoker_trainer::{
    Backend, CpuBackend, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind, Precision,
    Schedule,
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
    run_for(backend, feed, mode, (train, val), (2, 0.05), None)
}

/// [`run`] for `epochs` epochs at peak learning rate `lr`, saving a checkpoint to
/// `checkpoint` if given.
fn run_for<B: Backend + Clone + 'static>(
    backend: &B,
    feed: impl FnOnce((usize, usize, usize)) -> Box<dyn BatchFeed<B>>,
    mode: Mode,
    (train, val): (&Path, &Path),
    (epochs, lr): (u64, f32),
    checkpoint: Option<&Path>,
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
        epochs,
        schedule: Schedule::new(lr, 2, epochs * per_epoch),
        log_every: 1,
        max_steps: None,
        checkpoint: checkpoint.map(Path::to_path_buf),
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

/// Mean loss of each epoch of `h` (every step logged).
fn epoch_means(h: &History, per_epoch: usize) -> Vec<f32> {
    losses(h)
        .chunks(per_epoch)
        .map(|c| c.iter().sum::<f32>() / c.len() as f32)
        .collect()
}

/// bf16 autocast end to end, through the upload stage: the loss falls as in f32 and
/// stays near it, and the checkpoint it writes holds f32 tensors only (master weights,
/// batch-norm statistics and optimizer state stay f32).
#[test]
fn bf16_training_learns_like_f32_and_checkpoints_in_f32() {
    let Some(g) = gpu("bf16 training") else {
        return;
    };
    let bf = CudaBackend::with_precision(0, Precision::Bf16).expect("bf16 backend");
    assert_eq!(
        (g.precision(), bf.precision()),
        (Precision::F32, Precision::Bf16)
    );
    let tmp = tempfile::tempdir().unwrap();
    // 96 images: 12 steps an epoch, 6 epochs at a gentle rate. On the CPU in f32 the
    // epoch means go from about 1.8 to 1.3 (the first epoch starts above ln 4).
    let train = shapes(&tmp.path().join("train"), 96, 1);
    let val = shapes(&tmp.path().join("val"), 24, 2);
    let feed = |b: &CudaBackend| {
        let b = b.clone();
        move |shape| -> Box<dyn BatchFeed<CudaBackend>> {
            Box::new(DeviceFeed::new(&b, Mode::Async, shape, BATCH).expect("device feed"))
        }
    };
    let ckpt = tmp.path().join("bf16.safetensors");
    let data = (train.as_path(), val.as_path());
    let (hf, vf) = run_for(&g, feed(&g), Mode::Async, data, (6, 0.01), None);
    let (hb, vb) = run_for(&bf, feed(&bf), Mode::Async, data, (6, 0.01), Some(&ckpt));
    let (mf, mb) = (epoch_means(&hf, 12), epoch_means(&hb, 12));
    eprintln!("epoch mean losses, f32:  {mf:?}\nepoch mean losses, bf16: {mb:?}");
    assert_eq!(
        (mf.len(), mb.len()),
        (6, 6),
        "6 epochs of 12 steps, logged every step"
    );
    assert!(
        mb[5] < 0.8 * mb[0],
        "bf16: the loss does not fall: epoch means {mb:?} (f32: {mf:?})"
    );
    for (i, (&f, &b)) in mf.iter().zip(&mb).enumerate() {
        close(
            &format!("epoch {} mean loss, bf16 vs f32", i + 1),
            f,
            b,
            0.0,
            0.1,
        );
    }
    let (vf, vb) = (vf.unwrap(), vb.unwrap());
    close("validation loss, bf16 vs f32", vf.loss, vb.loss, 0.0, 0.1);

    let bytes = std::fs::read(&ckpt).expect("the bf16 run wrote its checkpoint");
    let st = SafeTensors::deserialize(&bytes).expect("a safetensors file");
    let names = st.names();
    assert!(names.iter().any(|n| n.starts_with("param.")), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("optim.")), "{names:?}");
    for (name, t) in st.tensors() {
        assert_eq!(t.dtype(), Dtype::F32, "{name} in the bf16 run's checkpoint");
    }
}
