//! Checkpoints in safetensors: every parameter and batch-norm statistic under its own
//! name, the optimizer's state as flat tensors, and string metadata (model config,
//! optimizer, step, and any caller state such as the loader's resume JSON).
//!
//! Files are written to a temporary name and renamed, so an interrupted save never
//! leaves a file that looks whole. Each tensor's xxh3 is kept in the metadata
//! (`stoker.xxh3.<tensor>`), because a file can be damaged after it was written (a
//! disk, a copy) and safetensors checks only that the sizes add up. Loading checks
//! everything (model kind and shapes, optimizer kind, dtypes, sizes, the sums, and
//! that every value is finite) before it changes anything, and reports the first
//! problem as a typed error. A file saved before the sums were written has none, and
//! loads as it did then (its values are still checked for NaN and infinity).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensorError, SafeTensors, View};

use crate::backend::{Backend, BackendError};
use crate::model::{Model, Target};
use crate::optim::Optimizer;
use crate::param::ParamInfo;

/// Metadata keys this module owns; caller keys must not start with this prefix.
pub const RESERVED_PREFIX: &str = "stoker.";
const KEY_FORMAT: &str = "stoker.format";
const KEY_KIND: &str = "stoker.model.kind";
const KEY_INPUT: &str = "stoker.model.input";
const KEY_CLASSES: &str = "stoker.model.classes";
/// Written only for a multi-label model, so that classification checkpoints stay as
/// they were; absent means `class`.
const KEY_TARGET: &str = "stoker.model.target";
const KEY_OPTIM: &str = "stoker.optimizer";
const KEY_OPTIM_STEPS: &str = "stoker.optimizer.steps";
const FORMAT: &str = "stoker-checkpoint-1";
/// Prefix of the per-tensor checksum keys: `stoker.xxh3.param.fc1.weight` holds the
/// xxh3-64 of that tensor's bytes as 16 hex digits.
const KEY_SUM: &str = "stoker.xxh3.";

fn checksum(bytes: &[u8]) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(bytes))
}

/// What saving or loading a checkpoint can fail with.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The checkpoint file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid safetensors (or, saving, the tensors could not be
    /// serialised).
    #[error("{path}: not a valid safetensors file: {source}")]
    Format {
        /// The checkpoint file.
        path: PathBuf,
        /// safetensors' error.
        source: SafeTensorError,
    },
    /// A `stoker.` metadata entry is missing or unreadable: not a stoker checkpoint, an
    /// unknown format version, a step count that is not a number.
    #[error("{path}: {reason}")]
    Metadata {
        /// The checkpoint file.
        path: PathBuf,
        /// What is wrong, in words.
        reason: String,
        /// The number parser's error, for an entry that should hold a number.
        #[source]
        source: Option<std::num::ParseIntError>,
    },
    /// The checkpoint was saved for another model (kind, input, classes, target) or
    /// another optimizer than the one given.
    #[error("{path}: checkpoint is for {found}, this run has {expected}")]
    Mismatch {
        /// The checkpoint file.
        path: PathBuf,
        /// What the given model or optimizer has, e.g. `stoker.model.kind=resnet` or
        /// `optimizer sgd`.
        expected: String,
        /// What the checkpoint holds, in the same form.
        found: String,
    },
    /// A tensor the model or optimizer needs is not in the file.
    #[error("{path}: tensor `{name}` is missing")]
    Missing {
        /// The checkpoint file.
        path: PathBuf,
        /// The tensor's name in the file, e.g. `param.conv1.weight` or `optim.momentum`.
        name: String,
    },
    /// A tensor's shape or dtype is not what the model or optimizer needs (an f32
    /// tensor of its shape).
    #[error(
        "{path}: tensor `{name}` has shape {found:?} and dtype {dtype}, expected {expected:?} f32"
    )]
    Shape {
        /// The checkpoint file.
        path: PathBuf,
        /// The tensor's name in the file.
        name: String,
        /// The shape needed.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
        /// The dtype in the file, as safetensors spells it (e.g. `F16`).
        dtype: String,
    },
    /// A tensor's bytes do not hash to the checksum saved with them, or the file has
    /// checksums but none for this tensor: the file was damaged after it was written.
    #[error("{path}: tensor `{name}` {reason}: the file is damaged")]
    Checksum {
        /// The checkpoint file.
        path: PathBuf,
        /// The tensor's name in the file.
        name: String,
        /// What does not match, in words (both sums, or the missing entry).
        reason: String,
    },
    /// A tensor holds NaN or an infinity, which no healthy run saves (a run whose loss
    /// diverged does): resuming it could only carry the NaN on.
    #[error(
        "{path}: tensor `{name}` holds {value} at element {index}; a checkpoint must be finite"
    )]
    NotFinite {
        /// The checkpoint file.
        path: PathBuf,
        /// The tensor's name in the file.
        name: String,
        /// The first element that is not finite (flat index).
        index: usize,
        /// That element.
        value: f32,
    },
    /// [`save`] was given a caller metadata key that starts with [`RESERVED_PREFIX`].
    #[error("caller metadata key `{0}` uses the reserved prefix `stoker.`")]
    ReservedKey(String),
    /// Copying the model's or optimizer's buffers to or from the device failed.
    #[error("backend: {0}")]
    Backend(#[from] BackendError),
}

/// An f32 tensor as little-endian bytes, for serialisation.
struct F32Tensor {
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl F32Tensor {
    fn new(shape: Vec<usize>, data: &[f32]) -> Self {
        let bytes = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        Self { shape, bytes }
    }
}

impl View for &F32Tensor {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn model_id<B: Backend + Clone + 'static>(model: &Model<B>) -> [(&'static str, String); 3] {
    let c = model.config();
    [
        (KEY_KIND, c.kind.to_string()),
        (
            KEY_INPUT,
            format!("{}x{}x{}", c.input.0, c.input.1, c.input.2),
        ),
        (KEY_CLASSES, c.classes.to_string()),
    ]
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Saves `model`'s parameters and statistics, `optimizer`'s state and `extra` to `path`.
pub fn save<B: Backend + Clone + 'static>(
    path: &Path,
    model: &Model<B>,
    optimizer: &Optimizer<B>,
    extra: &BTreeMap<String, String>,
) -> Result<(), CheckpointError> {
    if let Some(k) = extra.keys().find(|k| k.starts_with(RESERVED_PREFIX)) {
        return Err(CheckpointError::ReservedKey(k.clone()));
    }
    let b = model.backend();
    let params = model.params.to_vec(b)?;
    let state = model.state.to_vec(b)?;
    let mut tensors: Vec<(String, F32Tensor)> = Vec::new();
    let mut add = |prefix: &str, infos: &[ParamInfo], flat: &[f32]| {
        for e in infos {
            let data = &flat[e.offset..e.offset + e.len()];
            tensors.push((
                format!("{prefix}{}", e.name),
                F32Tensor::new(e.shape.clone(), data),
            ));
        }
    };
    add("param.", model.params_info(), &params);
    add("state.", model.state_info(), &state);
    for (name, t) in optimizer.kind().slots().iter().zip(&optimizer.slots) {
        tensors.push((
            format!("optim.{name}"),
            F32Tensor::new(vec![t.len()], &t.to_vec(b)?),
        ));
    }
    let mut meta: HashMap<String, String> =
        extra.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    meta.insert(KEY_FORMAT.into(), FORMAT.into());
    for (k, v) in model_id(model) {
        meta.insert(k.into(), v);
    }
    let target = model.config().target;
    if target != Target::Class {
        meta.insert(KEY_TARGET.into(), target.to_string());
    }
    meta.insert(KEY_OPTIM.into(), optimizer.kind().name().into());
    meta.insert(KEY_OPTIM_STEPS.into(), optimizer.steps().to_string());
    for (name, t) in &tensors {
        meta.insert(format!("{KEY_SUM}{name}"), checksum(&t.bytes));
    }
    let bytes = safetensors::serialize(tensors.iter().map(|(n, t)| (n.as_str(), t)), Some(meta))
        .map_err(|source| CheckpointError::Format {
            path: path.to_path_buf(),
            source,
        })?;
    // Whole or not at all: a kill mid-write leaves the previous checkpoint.
    stoker_loader::durable::write_bytes(path, &bytes).map_err(io(path))?;
    Ok(())
}

/// The metadata of a checkpoint (model kind, input, classes, optimizer, caller keys),
/// without loading its tensors: lets a caller build the right model first.
pub fn read_metadata(path: &Path) -> Result<BTreeMap<String, String>, CheckpointError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    let (_, meta) =
        SafeTensors::read_metadata(&bytes).map_err(|source| CheckpointError::Format {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(meta
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect())
}

/// Restores `model` and `optimizer` from `path` and returns the caller's metadata. On error
/// nothing has been changed.
pub fn load<B: Backend + Clone + 'static>(
    path: &Path,
    model: &mut Model<B>,
    optimizer: &mut Optimizer<B>,
) -> Result<BTreeMap<String, String>, CheckpointError> {
    let p = || path.to_path_buf();
    let bytes = std::fs::read(path).map_err(io(path))?;
    let st = SafeTensors::deserialize(&bytes)
        .map_err(|source| CheckpointError::Format { path: p(), source })?;
    let (_, header) = SafeTensors::read_metadata(&bytes)
        .map_err(|source| CheckpointError::Format { path: p(), source })?;
    let meta: BTreeMap<String, String> = header
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let get = |k: &str| {
        meta.get(k)
            .cloned()
            .ok_or_else(|| CheckpointError::Metadata {
                path: p(),
                reason: format!("no `{k}` entry: not a stoker checkpoint"),
                source: None,
            })
    };
    if get(KEY_FORMAT)? != FORMAT {
        return Err(CheckpointError::Metadata {
            path: p(),
            reason: format!("unknown format `{}`", get(KEY_FORMAT)?),
            source: None,
        });
    }
    for (k, want) in model_id(model) {
        let found = get(k)?;
        if found != want {
            return Err(CheckpointError::Mismatch {
                path: p(),
                expected: format!("{k}={want}"),
                found: format!("{k}={found}"),
            });
        }
    }
    // The weights fit either way; the head was trained for one target, though.
    let found = meta.get(KEY_TARGET).map_or("class", String::as_str);
    let want = model.config().target.as_str();
    if found != want {
        return Err(CheckpointError::Mismatch {
            path: p(),
            expected: format!("{KEY_TARGET}={want}"),
            found: format!("{KEY_TARGET}={found}"),
        });
    }
    let oname = get(KEY_OPTIM)?;
    if oname != optimizer.kind().name() {
        return Err(CheckpointError::Mismatch {
            path: p(),
            expected: format!("optimizer {}", optimizer.kind().name()),
            found: format!("optimizer {oname}"),
        });
    }
    let steps: u64 = get(KEY_OPTIM_STEPS)?
        .parse()
        .map_err(|e| CheckpointError::Metadata {
            path: p(),
            reason: format!("`{KEY_OPTIM_STEPS}` is not a number"),
            source: Some(e),
        })?;

    // Files saved before the sums were written have none, and load as they did.
    let summed = meta.keys().any(|k| k.starts_with(KEY_SUM));
    let read = |name: &str, shape: &[usize], dst: &mut [f32]| -> Result<(), CheckpointError> {
        let t = st.tensor(name).map_err(|_| CheckpointError::Missing {
            path: p(),
            name: name.to_string(),
        })?;
        if t.dtype() != Dtype::F32 || t.shape() != shape || t.data().len() != dst.len() * 4 {
            return Err(CheckpointError::Shape {
                path: p(),
                name: name.to_string(),
                expected: shape.to_vec(),
                found: t.shape().to_vec(),
                dtype: format!("{:?}", t.dtype()),
            });
        }
        if summed {
            let damaged = |reason: String| CheckpointError::Checksum {
                path: p(),
                name: name.to_string(),
                reason,
            };
            let want = meta.get(&format!("{KEY_SUM}{name}")).ok_or_else(|| {
                damaged(format!(
                    "has no `{KEY_SUM}{name}` entry though the other tensors have one"
                ))
            })?;
            let found = checksum(t.data());
            if *want != found {
                return Err(damaged(format!(
                    "hashes to xxh3 {found}, not the {want} saved with it"
                )));
            }
        }
        for (d, c) in dst.iter_mut().zip(t.data().chunks_exact(4)) {
            *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        }
        if let Some(index) = dst.iter().position(|v| !v.is_finite()) {
            return Err(CheckpointError::NotFinite {
                path: p(),
                name: name.to_string(),
                index,
                value: dst[index],
            });
        }
        Ok(())
    };
    let flat =
        |prefix: &str, infos: &[ParamInfo], total: usize| -> Result<Vec<f32>, CheckpointError> {
            let mut v = vec![0.0f32; total];
            for e in infos {
                read(
                    &format!("{prefix}{}", e.name),
                    &e.shape,
                    &mut v[e.offset..e.offset + e.len()],
                )?;
            }
            Ok(v)
        };
    let params = flat("param.", model.params_info(), model.param_count())?;
    let state = flat("state.", model.state_info(), model.state.len())?;
    let mut slots = Vec::new();
    for (name, t) in optimizer.kind().slots().iter().zip(&optimizer.slots) {
        let mut v = vec![0.0f32; t.len()];
        read(&format!("optim.{name}"), &[t.len()], &mut v)?;
        slots.push(v);
    }

    // Everything checked: now change the model and optimizer.
    let b = model.backend().clone();
    b.upload(&params, model.params.view_mut())?;
    b.upload(&state, model.state.view_mut())?;
    for (t, v) in optimizer.slots.iter_mut().zip(&slots) {
        b.upload(v, t.view_mut())?;
    }
    optimizer.steps = steps;
    Ok(meta
        .into_iter()
        .filter(|(k, _)| !k.starts_with(RESERVED_PREFIX))
        .collect())
}
