//! `stoker.LoaderError` and the conversions from the Rust errors into it.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;

create_exception!(
    stoker,
    LoaderError,
    PyException,
    "Raised for bad data (a missing or damaged file, a sample that cannot be decoded) \
     and settings the loader cannot work with; the message names the file, record or \
     setting."
);

/// A setting the loader refuses is a ValueError (Python's convention for a bad
/// argument value); everything else is a LoaderError.
pub fn loader_error(e: stoker_loader::LoaderError) -> PyErr {
    match e {
        stoker_loader::LoaderError::Setting(_) | stoker_loader::LoaderError::Trace { .. } => {
            pyo3::exceptions::PyValueError::new_err(e.to_string())
        }
        e => LoaderError::new_err(e.to_string()),
    }
}

pub fn source_error(e: stoker_loader::SourceError) -> PyErr {
    LoaderError::new_err(e.to_string())
}

/// `what` (a loader or one of its iterators) is in the middle of a call on another
/// thread. One loader serves one consumer: without this, pyo3's bare "Already
/// borrowed" is all the user would see.
pub fn busy(what: &str) -> PyErr {
    pyo3::exceptions::PyRuntimeError::new_err(format!(
        "{what} is in use by another thread: a stoker.Loader and its iterators serve one \
         consumer thread at a time (make one loader per thread, or guard it with a lock)"
    ))
}
