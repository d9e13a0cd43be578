//! `stoker.TokenLoader`: the token loader (docs/tokens.md), its batches as dicts of
//! int32 numpy arrays, and its state as a dict.

use std::path::PathBuf;

use numpy::{PyArray1, PyArrayMethods};
use pyo3::exceptions::{PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PyString};
use stoker_loader::tokens::{
    Eos, TokenBatch, TokenConfig, TokenEpoch, TokenError, TokenLoader, TokenMode, TokenSetting,
    TokenState,
};

use crate::args::{in_range, launch_rank, Int};

/// `data`: one path, or a list of them (a mixture of Parquet data sets).
pub enum TokenData {
    One(std::path::PathBuf),
    Many(Vec<std::path::PathBuf>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for TokenData {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(p) = obj.extract::<std::path::PathBuf>() {
            return Ok(TokenData::One(p));
        }
        obj.extract::<Vec<std::path::PathBuf>>()
            .map(TokenData::Many)
            .map_err(|_| {
                pyo3::exceptions::PyTypeError::new_err("data must be a path or a list of paths")
            })
    }
}

/// A count as a usize: the conversion of a Python int, nothing more (a negative
/// number cannot be one); its range is the token loader's to judge.
fn whole(name: &str, v: Int) -> PyResult<usize> {
    in_range(name, v, 0, usize::MAX as i128).map(|n| n as usize)
}

/// An optional count (`rank`, `world_size`) as a usize.
fn count(name: &str, v: Option<Int>) -> PyResult<Option<usize>> {
    v.map(|v| whole(name, v)).transpose()
}
use crate::errors::{busy, LoaderError};

/// A bad setting (named as `TokenLoader`'s argument, as `Loader` names its own) or a
/// state that does not fit is a ValueError; bad data a LoaderError.
fn token_error(e: TokenError) -> PyErr {
    match e {
        TokenError::Setting { setting, problem } => {
            let what = match setting {
                // Not an argument of TokenLoader: the loader's own default.
                TokenSetting::Ahead => format!("setting '{setting}'"),
                // Every other setting is the argument of the same name.
                _ => format!("argument '{setting}'"),
            };
            PyValueError::new_err(format!("{what}: {problem}"))
        }
        TokenError::State(_) => PyValueError::new_err(e.to_string()),
        e => LoaderError::new_err(e.to_string()),
    }
}

/// Batches of packed token windows for language models: documents from Parquet
/// files, folders or URLs (`text_column`), JSON lines, text files, or a nanoGPT
/// `.bin` token file, tokenized with a Hugging Face `tokenizer.json` on `workers`
/// threads. Each document is followed by EOS; the stream is cut into windows of
/// `seq_len + 1` tokens with a stride of `seq_len`. Iterating yields one epoch of
/// dicts: `tokens` and `positions`, int32 (batch_size, seq_len + 1). The batches are
/// the same in either mode and for any number of workers; `state_dict()` /
/// `load_state_dict()` resume exactly, mid-document.
#[pyclass(module = "stoker", name = "TokenLoader")]
pub struct PyTokenLoader {
    inner: TokenLoader,
    data: String,
    /// The epoch being iterated, if any.
    current: Option<TokenEpoch>,
    /// Where the next iteration starts: an epoch's start, or a loaded state.
    next: TokenState,
}

fn eos_arg(eos: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Eos>> {
    let Some(e) = eos else { return Ok(None) };
    if e.is_none() {
        return Ok(None);
    }
    if e.is_instance_of::<PyString>() {
        return Ok(Some(Eos::Token(e.extract::<String>()?)));
    }
    if e.is_instance_of::<PyInt>() {
        let id = in_range("eos", e.extract::<Int>()?, 0, i128::from(u32::MAX))?;
        return Ok(Some(Eos::Id(id as u32)));
    }
    Err(PyTypeError::new_err(
        "eos must be a token (str) or a token id (int)",
    ))
}

#[pymethods]
impl PyTokenLoader {
    #[new]
    #[pyo3(signature = (data, tokenizer=None, seq_len=Int::of(1024), batch_size=Int::of(8),
        text_column="text", eos=None, mode="async", workers=Int::of(2), seed=Int::of(0),
        shuffle=true, rank=None, world_size=None, token_dtype="uint16",
        chunk_bytes=Int::of(65536), weights=None, stop="all_exhausted"))]
    #[pyo3(
        text_signature = "(data, tokenizer=None, seq_len=1024, batch_size=8, text_column='text', \
        eos=None, mode='async', workers=2, seed=0, shuffle=True, rank=None, world_size=None, \
        token_dtype='uint16', chunk_bytes=65536, weights=None, stop='all_exhausted')"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        data: TokenData,
        tokenizer: Option<PathBuf>,
        seq_len: Int,
        batch_size: Int,
        text_column: &str,
        eos: Option<&Bound<'_, PyAny>>,
        mode: &str,
        workers: Int,
        seed: Int,
        shuffle: bool,
        rank: Option<Int>,
        world_size: Option<Int>,
        token_dtype: &str,
        chunk_bytes: Int,
        weights: Option<Vec<f64>>,
        stop: &str,
    ) -> PyResult<Self> {
        let (rank, world) = launch_rank(count("rank", rank)?, count("world_size", world_size)?)?;
        let cfg = TokenConfig {
            seq_len: whole("seq_len", seq_len)?,
            batch_size: whole("batch_size", batch_size)?,
            text_column: text_column.to_string(),
            eos: eos_arg(eos)?,
            mode: mode
                .parse::<TokenMode>()
                .map_err(|e| PyValueError::new_err(format!("argument 'mode': {e}")))?,
            workers: whole("workers", workers)?,
            seed: in_range("seed", seed, 0, i128::from(u64::MAX))? as u64,
            shuffle,
            rank,
            world_size: world,
            token_dtype: token_dtype
                .parse()
                .map_err(|e| PyValueError::new_err(format!("argument 'token_dtype': {e}")))?,
            chunk_bytes: whole("chunk_bytes", chunk_bytes)?,
            weights,
            // `never` parses, and the token loader refuses it (an epoch of documents ends).
            stop: stop
                .parse()
                .map_err(|e: stoker_loader::ParseSettingError| {
                    PyValueError::new_err(format!("argument 'stop': {e}"))
                })?,
            ..TokenConfig::default()
        };
        let paths = match data {
            TokenData::One(p) => vec![p],
            TokenData::Many(v) => v,
        };
        let names: Vec<String> = paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let text = names.join(", ");
        let inner = py
            .detach(|| TokenLoader::open_many(&names, tokenizer.as_deref(), cfg))
            .map_err(token_error)?;
        let next = inner
            .epoch(0)
            .map(|e| e.state().clone())
            .map_err(token_error)?;
        Ok(PyTokenLoader {
            inner,
            data: text,
            current: None,
            next,
        })
    }

    /// Documents in the data set (windows, for a `.bin` file).
    #[getter]
    fn documents(&self) -> usize {
        self.inner.documents()
    }

    /// The EOS id appended to every document.
    #[getter]
    fn eos_id(&self) -> Option<u32> {
        self.inner.eos_id()
    }

    /// The epoch the next (or current) iteration is in.
    #[getter]
    fn epoch(&self) -> u64 {
        self.current
            .as_ref()
            .map_or(self.next.epoch, |e| e.state().epoch)
    }

    /// Starts epoch `epoch` at the next iteration.
    fn set_epoch(&mut self, epoch: Int) -> PyResult<()> {
        let e = in_range("epoch", epoch, 0, i128::from(u64::MAX))? as u64;
        self.current = None;
        self.next = self
            .inner
            .epoch(e)
            .map(|x| x.state().clone())
            .map_err(token_error)?;
        Ok(())
    }

    fn __iter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        {
            let mut me = slf.try_borrow_mut().map_err(|_| busy("the token loader"))?;
            let state = me.next.clone();
            let py = slf.py();
            let inner = &me.inner;
            let epoch = py.detach(|| inner.resume(&state)).map_err(token_error)?;
            me.current = Some(epoch);
        }
        Ok(slf)
    }

    fn __next__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let mut me = slf.try_borrow_mut().map_err(|_| busy("the token loader"))?;
        let Some(epoch) = me.current.as_mut() else {
            return Err(PyStopIteration::new_err(()));
        };
        let got = py.detach(|| epoch.next_batch());
        let state = epoch.state().clone();
        match got {
            Ok(Some(b)) => {
                me.next = state;
                batch_dict(py, b)
            }
            Ok(None) => {
                me.current = None;
                // The next iteration is the next epoch.
                let e = state.epoch.saturating_add(1);
                me.next = me
                    .inner
                    .epoch(e)
                    .map(|x| x.state().clone())
                    .map_err(token_error)?;
                Err(PyStopIteration::new_err(()))
            }
            Err(e) => {
                me.current = None;
                me.next = state;
                Err(token_error(e))
            }
        }
    }

    /// Where the loader stands: after the last batch delivered, or at the start of the
    /// next epoch. A dict of ints and bools (JSON-able; after an elastic resume also
    /// `elastic`, a dict of `world_size` and `at`, a list of [doc, offset] pairs).
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v =
            serde_json::to_value(&self.next).map_err(|e| PyValueError::new_err(e.to_string()))?;
        to_py(py, &v)
    }

    /// Continues from `state` at the next iteration: a dict from `state_dict()` (the
    /// same batches the run that saved it would have delivered next), or a list of
    /// every rank's dicts, saved at another world size (an elastic resume).
    fn load_state_dict(&mut self, state: &Bound<'_, PyAny>) -> PyResult<()> {
        let parse = |v: &Bound<'_, PyAny>| -> PyResult<TokenState> {
            if !v.is_instance_of::<PyDict>() {
                return Err(PyTypeError::new_err(
                    "a TokenLoader state is a dict from state_dict(), or a list of them",
                ));
            }
            serde_json::from_value(from_py(v, "state")?)
                .map_err(|e| PyValueError::new_err(format!("not a TokenLoader state: {e}")))
        };
        let epoch = if let Ok(list) = state.cast::<PyList>() {
            let states = list
                .iter()
                .map(|v| parse(&v))
                .collect::<PyResult<Vec<_>>>()?;
            self.inner.resume_elastic(&states)
        } else {
            // Checked now, so that a wrong state fails here rather than at the next loop.
            self.inner.resume(&parse(state)?)
        }
        .map_err(token_error)?;
        self.current = None;
        self.next = epoch.state().clone();
        Ok(())
    }

    fn __repr__(&self) -> String {
        let c = self.inner.config();
        format!(
            "TokenLoader('{}', seq_len={}, batch_size={}, documents={})",
            self.data,
            c.seq_len,
            c.batch_size,
            self.inner.documents()
        )
    }
}

fn batch_dict(py: Python<'_>, b: TokenBatch) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    let (n, l) = (b.rows, b.cols);
    d.set_item("tokens", PyArray1::from_vec(py, b.tokens).reshape([n, l])?)?;
    d.set_item(
        "positions",
        PyArray1::from_vec(py, b.positions).reshape([n, l])?,
    )?;
    Ok(d)
}

/// A state's JSON as Python values (ints, bools, lists, dicts).
fn to_py<'py>(py: Python<'py>, v: &serde_json::Value) -> PyResult<Bound<'py, PyAny>> {
    use serde_json::Value;
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => pyo3::types::PyBool::new(py, *b).to_owned().into_any(),
        Value::Number(n) => match n.as_u64() {
            Some(u) => u.into_pyobject(py)?.into_any(),
            None => n.as_f64().unwrap_or(0.0).into_pyobject(py)?.into_any(),
        },
        Value::String(s) => PyString::new(py, s).into_any(),
        Value::Array(a) => {
            let items = a
                .iter()
                .map(|x| to_py(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
        Value::Object(m) => {
            let d = PyDict::new(py);
            for (k, x) in m {
                d.set_item(k, to_py(py, x)?)?;
            }
            d.into_any()
        }
    })
}

/// Python values back into a state's JSON; `at` names the entry in errors.
fn from_py(v: &Bound<'_, PyAny>, at: &str) -> PyResult<serde_json::Value> {
    use serde_json::Value;
    if v.is_none() {
        return Ok(Value::Null);
    }
    if v.is_instance_of::<pyo3::types::PyBool>() {
        return Ok(Value::Bool(v.extract()?));
    }
    if v.is_instance_of::<PyInt>() {
        let n = in_range(at, v.extract::<Int>()?, 0, i128::from(u64::MAX))? as u64;
        return Ok(Value::from(n));
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut m = serde_json::Map::new();
        for (k, x) in d.iter() {
            let k: String = k.extract()?;
            let inner = from_py(&x, &k)?;
            m.insert(k, inner);
        }
        return Ok(Value::Object(m));
    }
    if let Ok(l) = v.cast::<PyList>() {
        return l
            .iter()
            .map(|x| from_py(&x, at))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if let Ok(t) = v.cast::<pyo3::types::PyTuple>() {
        return t
            .iter()
            .map(|x| from_py(&x, at))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    Err(PyTypeError::new_err(format!(
        "state entry '{at}' must be an int, a bool, a list or a dict"
    )))
}
