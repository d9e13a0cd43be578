//! Trainer checkpoints: the input is a whole safetensors file, read with
//! `checkpoint::read_metadata` and restored with `checkpoint::load` into a small MLP
//! (built once per process) with the optimizer the metadata names (SGD or AdamW).
//!
//! Checked for every input: a load that fails leaves the model's parameters and the
//! optimizer's step count as they were (the loader promises to check everything
//! first); a load that succeeds hands back no reserved `stoker.` key.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;

use stoker_trainer::checkpoint::{self, RESERVED_PREFIX};
use stoker_trainer::{CpuBackend, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind};

use crate::scratch::Scratch;
use crate::Outcome;

/// The model every input is loaded into: the smallest the trainer builds (an MLP on
/// 1x1x1 images, two classes; its hidden layers are fixed at 256 and 128).
pub fn model_config() -> ModelConfig {
    ModelConfig::new(ModelKind::Mlp, (1, 1, 1), 2, 1)
}

/// The optimizers a checkpoint may name.
pub fn optimizer_kinds() -> [OptimizerKind; 2] {
    [OptimizerKind::sgd(0.9, 5e-4), OptimizerKind::adamw(1e-2)]
}

struct Target {
    model: Model<CpuBackend>,
    optimizers: Vec<Optimizer<CpuBackend>>,
}

impl Target {
    fn new() -> Result<Self, String> {
        let b = CpuBackend::new();
        let model = Model::new(&b, model_config()).map_err(|e| e.to_string())?;
        let optimizers = optimizer_kinds()
            .into_iter()
            .map(|k| Optimizer::new(&model, k))
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        Ok(Target { model, optimizers })
    }
}

thread_local! {
    static TARGET: RefCell<Option<Target>> = const { RefCell::new(None) };
}

pub fn run(data: &[u8]) {
    let _ = exercise(data);
}

pub fn exercise(data: &[u8]) -> Outcome {
    let scratch = match Scratch::new() {
        Ok(s) => s,
        Err(o) => return o,
    };
    let path = match scratch.write("checkpoint.safetensors", data) {
        Ok(p) => p,
        Err(o) => return o,
    };
    TARGET.with(|cell| {
        let mut slot = cell.borrow_mut();
        let target = match slot.take() {
            Some(t) => slot.insert(t),
            None => slot
                .insert(Target::new().unwrap_or_else(|e| {
                    panic!("cannot build the checkpoint harness's model: {e}")
                })),
        };
        load_into(target, &path)
    })
}

fn load_into(target: &mut Target, path: &Path) -> Outcome {
    let meta = match checkpoint::read_metadata(path) {
        Ok(m) => m,
        Err(e) => return Outcome::rejected(e),
    };
    let named = meta.get("stoker.optimizer").map(String::as_str);
    let opt = match target
        .optimizers
        .iter_mut()
        .find(|o| Some(o.kind().name()) == named)
    {
        Some(o) => o,
        None => &mut target.optimizers[0],
    };
    let params = params(&target.model);
    let steps = opt.steps();
    match checkpoint::load(path, &mut target.model, opt) {
        Ok(extra) => {
            check_extra(&extra);
            Outcome::Accepted
        }
        Err(e) => {
            assert!(
                params == self::params(&target.model) && steps == opt.steps(),
                "a failed load changed the model or optimizer: {e}"
            );
            Outcome::rejected(e)
        }
    }
}

fn params(model: &Model<CpuBackend>) -> Vec<u32> {
    match model.params_to_host() {
        Ok(p) => p.iter().map(|v| v.to_bits()).collect(),
        Err(e) => panic!("cannot read the CPU model's parameters: {e}"),
    }
}

fn check_extra(extra: &BTreeMap<String, String>) {
    if let Some(k) = extra.keys().find(|k| k.starts_with(RESERVED_PREFIX)) {
        panic!("load handed back the reserved key {k}");
    }
}
