//! A call's arguments bound to a signature by hand, as pyo3 binds a
//! `#[pyo3(signature = ...)]` (same order, the same TypeErrors word for word for a
//! call that does not fit the signature), for a function with more parameters than
//! one Rust function should take: they land in a struct instead (`loader_args.rs`). A
//! value of the wrong type names its argument in the message (pyo3 adds a note).

use pyo3::conversion::FromPyObjectOwned;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// The arguments of a call to `func` (as pyo3 names it, e.g. `Loader.__new__()`), one
/// slot per name of `names`, the first `positional` of them positional-or-keyword and
/// the rest keyword-only, the first `required` of them without a default. Too many positional arguments, a keyword that names no parameter
/// or one already given, and a missing required argument are TypeErrors.
pub fn bind<'py>(
    func: &str,
    names: &[&str],
    required: usize,
    positional: usize,
    args: &Bound<'py, PyTuple>,
    kwargs: Option<&Bound<'py, PyDict>>,
) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
    let n = names.len();
    if args.len() > positional {
        let n = positional;
        let was = if args.len() == 1 { "was" } else { "were" };
        let takes = if required == n {
            format!("{n}")
        } else {
            format!("from {required} to {n}")
        };
        return Err(PyTypeError::new_err(format!(
            "{func} takes {takes} positional arguments but {} {was} given",
            args.len()
        )));
    }
    let mut out: Vec<Option<Bound<'py, PyAny>>> = vec![None; n];
    for (slot, value) in out.iter_mut().zip(args.iter()) {
        *slot = Some(value);
    }
    for (key, value) in kwargs.into_iter().flat_map(|k| k.iter()) {
        let at = key
            .extract::<String>()
            .ok()
            .and_then(|k| names.iter().position(|n| *n == k));
        let Some(i) = at else {
            return Err(PyTypeError::new_err(format!(
                "{func} got an unexpected keyword argument '{key}'"
            )));
        };
        if out[i].replace(value).is_some() {
            return Err(PyTypeError::new_err(format!(
                "{func} got multiple values for argument '{}'",
                names[i]
            )));
        }
    }
    let missing: Vec<&str> = (0..required)
        .filter(|&i| out[i].is_none())
        .map(|i| names[i])
        .collect();
    if !missing.is_empty() {
        let s = if missing.len() == 1 { "" } else { "s" };
        return Err(PyTypeError::new_err(format!(
            "{func} missing {} required positional argument{s}: {}",
            missing.len(),
            quoted_list(&missing)
        )));
    }
    Ok(out)
}

/// `'a'`, `'a' and 'b'`, `'a', 'b' and 'c'`: pyo3's list of parameters.
fn quoted_list(names: &[&str]) -> String {
    let mut out = String::new();
    for (i, name) in names.iter().enumerate() {
        if i != 0 {
            if names.len() > 2 {
                out.push(',');
            }
            out.push_str(if i == names.len() - 1 { " and " } else { " " });
        }
        out.push('\'');
        out.push_str(name);
        out.push('\'');
    }
    out
}

/// The argument in `slot` as a `T`, or `default` when the call left it out. An
/// argument of the wrong type is the conversion's error, of the same class, with the
/// argument's name in front of its message (`argument 'mixup': must be real number,
/// not str`) and the conversion's own error as its cause.
pub fn arg<'py, T: FromPyObjectOwned<'py>>(
    slot: Option<Bound<'py, PyAny>>,
    name: &str,
    default: T,
) -> PyResult<T> {
    match slot {
        Some(obj) => convert(&obj, name),
        None => Ok(default),
    }
}

/// A required argument (which [`bind`] made sure of) as a `T`, as [`arg`] converts.
pub fn required<'py, T: FromPyObjectOwned<'py>>(
    slot: Option<Bound<'py, PyAny>>,
    name: &str,
) -> PyResult<T> {
    let obj = slot.ok_or_else(|| PyTypeError::new_err(format!("missing argument '{name}'")))?;
    convert(&obj, name)
}

fn convert<'py, T: FromPyObjectOwned<'py>>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<T> {
    obj.extract::<T>().map_err(|e| {
        let e: PyErr = e.into();
        // pyo3 only adds a note (`while processing 'mixup'`), which `str(e)` and most
        // loggers leave out: the message alone would not say which of 37 it was.
        let py = obj.py();
        // Only these classes exactly, made from one message; another (even a subclass:
        // UnicodeEncodeError is a ValueError of five arguments) keeps its own error,
        // with pyo3's note.
        let ty = e.get_type(py);
        let remade = [
            py.get_type::<PyTypeError>(),
            py.get_type::<PyValueError>(),
            py.get_type::<PyOverflowError>(),
        ];
        if !remade.iter().any(|t| t.is(&ty)) {
            let _ = e
                .value(py)
                .call_method1("add_note", (format!("while processing '{name}'"),));
            return e;
        }
        let named = PyErr::from_type(ty, format!("argument '{name}': {}", e.value(py)));
        named.set_cause(py, Some(e));
        named
    })
}
