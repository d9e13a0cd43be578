//! Keyword arguments checked the Python way: a bad value is a ValueError that names
//! the argument, never an OverflowError or a crash for a negative or huge number.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};
use pyo3::Borrowed;

/// A Python int as given, judged later by [`in_range`], which knows the argument's
/// name for the message.
#[derive(Clone, Debug)]
pub enum Int {
    Value(i128),
    /// An int too large even for an i128.
    Huge,
    /// Not an int at all: the type's name.
    Other(String),
}

impl Int {
    pub const fn of(v: i128) -> Int {
        Int::Value(v)
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Int {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        // bool is an int subclass, but `workers=True` is a mistake, not a count.
        if obj.is_instance_of::<PyBool>() || !obj.is_instance_of::<PyInt>() {
            let ty = obj
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into());
            return Ok(Int::Other(ty));
        }
        Ok(obj.extract::<i128>().map_or(Int::Huge, Int::Value))
    }
}

/// A worker count: an int, or the string `"auto"`.
#[derive(Clone, Debug)]
pub enum IntOrAuto {
    Auto,
    Int(Int),
}

impl<'a, 'py> FromPyObject<'a, 'py> for IntOrAuto {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(s) = obj.extract::<String>() {
            return if s.trim().eq_ignore_ascii_case("auto") {
                Ok(IntOrAuto::Auto)
            } else {
                Ok(IntOrAuto::Int(Int::Other(format!("the string {s:?}"))))
            };
        }
        Int::extract(obj).map(IntOrAuto::Int)
    }
}

/// `value` as an integer in `min..=max`, or a ValueError (TypeError for a non-int)
/// naming `name`.
pub fn in_range(name: &str, value: Int, min: i128, max: i128) -> PyResult<i128> {
    match value {
        Int::Value(v) if (min..=max).contains(&v) => Ok(v),
        Int::Value(v) => Err(PyValueError::new_err(format!(
            "{name} must be between {min} and {max}, got {v}"
        ))),
        Int::Huge => Err(PyValueError::new_err(format!(
            "{name} is far too large (at most {max})"
        ))),
        Int::Other(ty) => Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {ty}"
        ))),
    }
}

/// One of `choices`, or a ValueError naming `name` and the choices.
pub fn choice<'c>(name: &str, value: &str, choices: &[&'c str]) -> PyResult<&'c str> {
    choices
        .iter()
        .find(|c| **c == value)
        .copied()
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "{name} must be one of {}, got '{value}'",
                choices
                    .iter()
                    .map(|c| format!("'{c}'"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}
