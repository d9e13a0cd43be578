//! `stoker.LoaderError` and the conversions from the Rust errors into it.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::PyErr;
use stoker_loader::spec::SpecError;
use stoker_loader::{Setting, SettingError, SourceError};

create_exception!(
    stoker,
    LoaderError,
    PyException,
    "Raised for bad data (a missing or damaged file, a sample that cannot be decoded) \
     and settings the loader cannot work with; the message names the file, record or \
     setting."
);

/// A setting the loader refuses is a ValueError (Python's convention for a bad
/// argument value) that names the argument to change, as `stoker.Loader` spells it
/// ([`py_name`]); everything else is a LoaderError.
pub fn loader_error(e: stoker_loader::LoaderError) -> PyErr {
    match e {
        stoker_loader::LoaderError::Setting(s) => setting_error(&s, ""),
        stoker_loader::LoaderError::Source(e) => source_error(e),
        stoker_loader::LoaderError::Trace { .. } => {
            pyo3::exceptions::PyValueError::new_err(e.to_string())
        }
        e => LoaderError::new_err(e.to_string()),
    }
}

/// The one table from the loader's settings to `stoker.Loader`'s arguments: where
/// the loader refuses a setting, the ValueError names this argument. `None`: a
/// setting Python leaves at its default. python/tests/test_errors.py checks that each
/// name is a parameter of `Loader`.
pub fn py_name(s: Setting) -> Option<&'static str> {
    Some(match s {
        Setting::BatchSize => "batch_size",
        Setting::Mode => "mode",
        // A budget is written `workers="auto:N"`.
        Setting::Workers | Setting::CpuBudget => "workers",
        Setting::Prefetch => "prefetch",
        Setting::IoDepth => "io_depth",
        Setting::DropLast => "drop_last",
        Setting::Rank => "rank",
        Setting::WorldSize => "world_size",
        // `stoker.Mixture(..., weights=)`, given as `data`.
        Setting::Weights => "data",
        Setting::Transform => "transform",
        Setting::Channels => "channels",
        Setting::Mixup => "mixup",
        Setting::Fields => "fields",
        Setting::MinBoxVisibility => "min_box_visibility",
        Setting::MaxInstances => "max_instances",
        Setting::DecodedCache => "decoded_cache",
        // `stoker.Mixture(..., epoch_batches=)` and `stoker.Data(..., split=)`, given
        // as `data`.
        Setting::EpochBatches | Setting::Split => "data",
        Setting::ShardPolicy
        | Setting::ShuffleBuffer
        | Setting::Trace
        | Setting::MaxPixels
        | Setting::MaxBufferBytes
        | Setting::Steps => return None,
    })
}

/// Every setting with its argument (`_stoker._setting_names()`), for the test that
/// the table names real parameters.
#[pyfunction]
pub fn _setting_names() -> Vec<(&'static str, Option<&'static str>)> {
    Setting::ALL
        .iter()
        .map(|&s| (s.name(), py_name(s)))
        .collect()
}

/// The ValueError of a setting the loader refuses, naming the argument; `data`
/// (`"path: "`, or empty) says which data set it does not fit.
fn setting_error(s: &SettingError, data: &str) -> PyErr {
    let what = match py_name(s.setting) {
        Some(name) => format!("argument '{name}'"),
        // Not one of Loader's arguments (a default the loader refuses).
        None => format!("setting '{}'", s.setting.name()),
    };
    // A setting given inside `data` (a source's split) says its own name too.
    let inner = match s.setting {
        Setting::Split => format!("{}: ", s.setting.name()),
        _ => String::new(),
    };
    pyo3::exceptions::PyValueError::new_err(format!("{what}: {data}{inner}{}", s.problem))
}

pub fn source_error(e: stoker_loader::SourceError) -> PyErr {
    match e {
        stoker_loader::SourceError::Setting(s) => setting_error(&s, ""),
        e => LoaderError::new_err(e.to_string()),
    }
}

/// A loader that cannot be built from its spec: a setting names its argument (and,
/// for an option of one data set, that data set), bad data is a LoaderError.
pub fn spec_error(e: SpecError) -> PyErr {
    match e {
        SpecError::Loader(e) => loader_error(e),
        SpecError::Open {
            path,
            source: SourceError::Setting(s),
        } => setting_error(&s, &format!("{}: ", path.display())),
        SpecError::Open { source, .. } => source_error(source),
        e @ (SpecError::Mixture(_) | SpecError::NoData) => {
            pyo3::exceptions::PyValueError::new_err(format!("argument 'data': {e}"))
        }
    }
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
