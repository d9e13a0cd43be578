//! Records a few training steps of the convnet on real batches, for a step-by-step
//! comparison with PyTorch (`benches/peers/step_parity.py`).
//!
//! `cargo run --release -p stoker-trainer --example step_trace -- DATA OUT [--steps N]
//! [--seed S] [--batch N] [--lr X] [--weight-decay X] [--epochs E] [--transform SPEC]`
//! (defaults: 20 steps, seed 0, batch 128, lr 0.1, weight decay 5e-4, 6 epochs for the
//! schedule, `crop:SIDE:pad=4,flip`). It trains as `stoker-train` does (the sync
//! loader over the image folder DATA, the convnet, SGD momentum 0.9 and the default
//! warm-up + cosine schedule) and writes into the folder OUT:
//!
//! - `trace.json`: the model's parameter and state layout (name, shape, offset), the
//!   settings, every step's learning rate, loss and accuracy, the schedule's rate for
//!   every step of the whole run, the files of every step's batch, and an eval-mode
//!   loss of the first batch at the end;
//! - raw little-endian arrays: `params0.f32` and `state0.f32` (the initial weights and
//!   batch-norm statistics), `grads0.f32` (the gradients of the first step),
//!   `params_end.f32` and `state_end.f32`, and each step's batch as `batch_K.u8` (NHWC)
//!   and `labels_K.u32`.

use std::fs;
use std::path::PathBuf;

use stoker_augment::Pipeline;
use stoker_loader::{source, Loader, LoaderConfig, Mode};
use stoker_trainer::{
    CpuBackend, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind, Schedule,
};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Args {
    data: PathBuf,
    out: PathBuf,
    steps: usize,
    seed: u64,
    batch: usize,
    lr: f32,
    weight_decay: f32,
    epochs: u64,
    transform: Option<String>,
}

fn parse() -> Res<Args> {
    let mut pos = Vec::new();
    let mut a = Args {
        data: PathBuf::new(),
        out: PathBuf::new(),
        steps: 20,
        seed: 0,
        batch: 128,
        lr: 0.1,
        weight_decay: 5e-4,
        epochs: 6,
        transform: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        if !arg.starts_with("--") {
            pos.push(arg);
            continue;
        }
        let v = it.next().ok_or_else(|| format!("{arg} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{arg} {v}: {e}");
        match arg.as_str() {
            "--steps" => a.steps = v.parse().map_err(|e| bad(&e))?,
            "--seed" => a.seed = v.parse().map_err(|e| bad(&e))?,
            "--batch" => a.batch = v.parse().map_err(|e| bad(&e))?,
            "--lr" => a.lr = v.parse().map_err(|e| bad(&e))?,
            "--weight-decay" => a.weight_decay = v.parse().map_err(|e| bad(&e))?,
            "--epochs" => a.epochs = v.parse().map_err(|e| bad(&e))?,
            "--transform" => a.transform = Some(v),
            _ => return Err(format!("unknown flag {arg}").into()),
        }
    }
    let [data, out] = <[String; 2]>::try_from(pos).map_err(|_| "usage: step_trace DATA OUT")?;
    (a.data, a.out) = (data.into(), out.into());
    if a.steps == 0 || a.batch == 0 || a.epochs == 0 {
        return Err("--steps, --batch and --epochs must be at least 1".into());
    }
    Ok(a)
}

fn write_f32(path: PathBuf, v: &[f32]) -> Res<()> {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    fs::write(&path, bytes).map_err(|e| format!("{}: {e}", path.display()).into())
}

fn main() -> Res<()> {
    let a = parse()?;
    fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let src = source::open(&a.data, source::Split::Train)?;
    let classes = src.classes().len();
    let mut cfg = LoaderConfig {
        batch_size: a.batch,
        mode: Mode::Sync,
        seed: a.seed,
        ..LoaderConfig::default()
    };
    let probe = Loader::new(source::open(&a.data, source::Split::Train)?, cfg.clone())?;
    let (h, w, c) = probe.image_shape();
    let spec = a
        .transform
        .clone()
        .unwrap_or(format!("crop:{h}:pad=4,flip"));
    cfg.transform = Pipeline::parse(&spec)?;
    let mut loader = Loader::new(src, cfg)?;
    // A second handle on the folder, to name each batch's files (the loader is busy).
    let names = source::open(&a.data, source::Split::Train)?;
    let input = loader.image_shape();
    let b = CpuBackend::new();
    let mcfg = ModelConfig::new(ModelKind::Convnet, input, classes, a.batch).seed(a.seed);
    let mut model = Model::new(&b, mcfg.clone())?;
    let kind = OptimizerKind::sgd(0.9, a.weight_decay);
    let mut opt = Optimizer::new(&model, kind)?;
    let per_epoch = loader.batches_per_epoch() as u64;
    let schedule = Schedule::warmup_cosine(a.lr, per_epoch, a.epochs);

    write_f32(a.out.join("params0.f32"), &model.params_to_host()?)?;
    write_f32(a.out.join("state0.f32"), &model.state_to_host()?)?;
    let mut steps = Vec::new();
    let mut first: Option<(Vec<u8>, Vec<u32>)> = None;
    let mut step = 0u64;
    'epochs: for epoch in 0.. {
        for batch in loader.epoch(epoch) {
            if steps.len() == a.steps {
                break 'epochs;
            }
            let batch = batch?;
            let n = batch.len();
            model.forward_backward(&batch.images, &batch.labels, n)?;
            let st = model.last_step_stats()?;
            if step == 0 {
                write_f32(a.out.join("grads0.f32"), &model.grads_to_host()?)?;
                first = Some((batch.images.to_vec(), batch.labels.clone()));
            }
            let lr = schedule.lr(step);
            opt.step(&mut model, lr)?;
            fs::write(a.out.join(format!("batch_{step}.u8")), &batch.images[..])?;
            let labels: Vec<u8> = batch.labels.iter().flat_map(|l| l.to_le_bytes()).collect();
            fs::write(a.out.join(format!("labels_{step}.u32")), labels)?;
            let files: Vec<String> = batch.indices.iter().map(|&i| names.describe(i)).collect();
            steps.push(serde_json::json!({
                "n": n, "lr": lr, "loss": st.loss, "accuracy": st.accuracy, "files": files,
            }));
            step += 1;
        }
    }
    write_f32(a.out.join("params_end.f32"), &model.params_to_host()?)?;
    write_f32(a.out.join("state_end.f32"), &model.state_to_host()?)?;
    let (img, labels) = first.ok_or("no batches in the data")?;
    model.evaluate(&img, &labels, labels.len())?;
    let ev = model.take_eval_stats()?;
    let layout = |info: &[stoker_trainer::param::ParamInfo]| {
        info.iter()
            .map(|p| {
                serde_json::json!({
                    "name": p.name, "shape": p.shape, "offset": p.offset, "decay": p.decay,
                })
            })
            .collect::<Vec<_>>()
    };
    let total = per_epoch * a.epochs;
    let trace = serde_json::json!({
        "model": "convnet",
        "input": [h, w, c],
        "classes": classes,
        "seed": a.seed,
        "batch_size": a.batch,
        "transform": spec,
        "mean": mcfg.mean,
        "std": mcfg.std,
        "optimizer": {"kind": "sgd", "momentum": 0.9, "weight_decay": a.weight_decay, "nesterov": false},
        "schedule": {"base": schedule.base, "warmup": schedule.warmup, "total": schedule.total,
                     "per_epoch": per_epoch, "epochs": a.epochs},
        "lr_all": (0..total).map(|s| schedule.lr(s)).collect::<Vec<_>>(),
        "params": layout(model.params_info()),
        "state": layout(model.state_info()),
        "steps": steps,
        "eval_first_batch": {"loss": ev.loss, "accuracy": ev.accuracy},
    });
    fs::write(
        a.out.join("trace.json"),
        serde_json::to_string_pretty(&trace)?,
    )?;
    println!(
        "{} steps traced into {} (first loss {}, last loss {})",
        steps.len(),
        a.out.display(),
        steps[0]["loss"],
        steps[steps.len() - 1]["loss"]
    );
    Ok(())
}
