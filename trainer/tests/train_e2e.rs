//! The training loop end to end on tiny generated data: exact resume mid-epoch, and a
//! resume refused for another loader configuration. (The `stoker-train` binary's tests
//! are in `trainer/cli/tests`.)

use std::path::{Path, PathBuf};

use crate::util::shapes;
use stoker_augment::Pipeline;
use stoker_loader::{source, Loader, LoaderConfig, LoaderError, Mode};
use stoker_trainer::train::{History, Stop, TrainConfig, TrainError, Trainer};
use stoker_trainer::{
    CpuBackend, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind, Schedule,
};
/// A trainer over `train` (and `val`), built from scratch as a new process would.
fn trainer(
    train: &Path,
    val: &Path,
    mode: Mode,
    max_steps: Option<u64>,
    checkpoint: Option<PathBuf>,
    log_every: u64,
) -> Trainer<CpuBackend> {
    let cfg = LoaderConfig {
        batch_size: 8,
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
    let b = CpuBackend::new();
    let model = Model::new(
        &b,
        ModelConfig::new(ModelKind::Convnet, train_loader.image_shape(), 4, 8).seed(3),
    )
    .unwrap();
    let opt = Optimizer::new(&model, OptimizerKind::sgd(0.9, 5e-4)).unwrap();
    let per_epoch = train_loader.batches_per_epoch() as u64;
    let cfg = TrainConfig {
        epochs: 3,
        schedule: Schedule::new(0.05, 3, 3 * per_epoch),
        log_every,
        max_steps,
        checkpoint,
    };
    Trainer::new(model, opt, train_loader, Some(val_loader), cfg)
}

fn losses(h: &History) -> Vec<(u64, u32)> {
    h.log.iter().map(|p| (p.step, p.loss.to_bits())).collect()
}

#[test]
fn resume_mid_epoch_reproduces_the_uninterrupted_run() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 64, 1);
    let val = shapes(&tmp.path().join("val"), 16, 2);
    // Every step logged; and every 5th, so that the checkpoint (after step 12) falls
    // inside a logging window and must carry its partial sums.
    for log_every in [1, 5] {
        resume_case(
            &train,
            &val,
            &tmp.path().join(format!("half{log_every}")),
            log_every,
        );
    }
}

fn resume_case(train: &Path, val: &Path, ckpt: &Path, log_every: u64) {
    let (train, val, ckpt) = (train.to_path_buf(), val.to_path_buf(), ckpt.to_path_buf());

    // Straight: 3 epochs of 8 steps, async reading.
    let mut straight = trainer(&train, &val, Mode::Async, None, None, log_every);
    assert_eq!(straight.run(&mut ()).unwrap(), Stop::Finished);
    let n = straight.position.step;
    assert_eq!(n, 24);

    // Half (12 steps: the middle of epoch 2) with sync reading, checkpoint, then a new
    // trainer, loader, model and optimizer that resume and finish, async again.
    let mut first = trainer(
        &train,
        &val,
        Mode::Sync,
        Some(n / 2),
        Some(ckpt.clone()),
        log_every,
    );
    assert_eq!(first.run(&mut ()).unwrap(), Stop::MaxSteps);
    let state = first.position.loader.unwrap();
    assert_eq!((state.epoch, state.next_batch), (1, 4));
    let mut second = trainer(&train, &val, Mode::Async, None, None, log_every);
    assert!(!second.load(&ckpt).unwrap(), "same schedule");
    assert_eq!(second.position.step, n / 2);
    assert_eq!(second.run(&mut ()).unwrap(), Stop::Finished);

    let mut resumed = losses(&first.history);
    resumed.extend(losses(&second.history));
    assert_eq!(resumed.len(), straight.history.log.len());
    assert_eq!(resumed, losses(&straight.history), "per-step losses");
    // Epoch records: epoch 1 came from the first run through the checkpoint.
    assert_eq!(second.history.epochs, {
        let mut e = straight.history.epochs.clone();
        for (a, b) in e.iter_mut().zip(&second.history.epochs) {
            // Wall times differ between runs; everything else must not.
            a.train_seconds = b.train_seconds;
            a.wait_seconds = b.wait_seconds;
            a.eval_seconds = b.eval_seconds;
        }
        e
    });
    let w1 = straight.model.params_to_host().unwrap();
    let w2 = second.model.params_to_host().unwrap();
    assert!(
        w1.iter().zip(&w2).all(|(a, b)| a.to_bits() == b.to_bits()),
        "final weights differ"
    );
    assert_eq!(straight.optimizer.steps(), second.optimizer.steps());
    // Evaluation uses the batch-norm running statistics: they came back exactly too.
    assert_eq!(straight.evaluate().unwrap(), second.evaluate().unwrap());
}

#[test]
fn resume_rejects_another_loader_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 32, 1);
    let val = shapes(&tmp.path().join("val"), 8, 2);
    let ckpt = tmp.path().join("c.safetensors");
    let mut t = trainer(&train, &val, Mode::Sync, Some(2), Some(ckpt.clone()), 1);
    t.run(&mut ()).unwrap();
    // Same model, other data set size: the loader state does not fit.
    let other = shapes(&tmp.path().join("other"), 40, 5);
    let mut t2 = trainer(&other, &val, Mode::Sync, None, None, 1);
    // Refused when loading, before anything of the trainer is changed.
    let err = t2.load(&ckpt).unwrap_err().to_string();
    assert!(
        err.contains("trained on 32 samples, this data has 40"),
        "{err}"
    );
    assert_eq!(t2.position.step, 0);
}

#[test]
fn a_resume_the_loader_refuses_keeps_the_loaders_error() {
    let tmp = tempfile::tempdir().unwrap();
    let train = shapes(&tmp.path().join("train"), 32, 1);
    let val = shapes(&tmp.path().join("val"), 8, 2);
    let ckpt = tmp.path().join("c.safetensors");
    let mut t = trainer(&train, &val, Mode::Sync, Some(2), Some(ckpt.clone()), 1);
    t.run(&mut ()).unwrap();
    // As many samples and the same seed, but a file of another name: the loader refuses
    // the state (its fingerprint names samples).
    let other = shapes(&tmp.path().join("other"), 32, 1);
    let class = std::fs::read_dir(&other)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let image = std::fs::read_dir(&class)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::rename(&image, class.join("renamed.jpg")).unwrap();
    let mut t2 = trainer(&other, &val, Mode::Sync, None, None, 1);
    let err = t2.load(&ckpt).unwrap_err();
    let TrainError::Resume {
        source: Some(cause),
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    let loader = cause
        .downcast_ref::<LoaderError>()
        .expect("the loader's error");
    assert!(matches!(loader, LoaderError::Resume(_)), "{loader:?}");
    assert!(
        err.to_string().ends_with(&loader.to_string()),
        "the message still ends with the loader's: {err}"
    );
}
