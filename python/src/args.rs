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

/// A float argument (an alpha, a probability, a weight): any real number but a bool.
/// Python would take `mixup=True` as 1.0, but a bool there is a mistake (an alpha
/// of 1 is not "on"), and `mixup=False` means "off", which is leaving it out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Float(pub f64);

impl<'a, 'py> FromPyObject<'a, 'py> for Float {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        // numpy's bool is no subclass of Python's, but converts to a float as well.
        let numpy_bool = || -> PyResult<bool> {
            let ty = obj.get_type();
            Ok(ty.module()? == "numpy" && ty.name()?.to_string().starts_with("bool"))
        };
        if obj.is_instance_of::<PyBool>() || numpy_bool().unwrap_or(false) {
            return Err(PyTypeError::new_err(format!(
                "must be a real number, not bool ({}): give the number, or leave the \
                 argument out (None) for its default",
                obj.str()?
            )));
        }
        obj.extract::<f64>().map(Float)
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

/// A size in bytes: a string as the flags write it (`"256M"`, `"auto"`), or an int
/// number of bytes.
#[derive(Clone, Debug)]
pub enum SizeArg {
    Text(String),
    Int(Int),
}

impl<'a, 'py> FromPyObject<'a, 'py> for SizeArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(s) = obj.extract::<String>() {
            return Ok(SizeArg::Text(s));
        }
        Int::extract(obj).map(SizeArg::Int)
    }
}

/// `decoded_cache=`: `"auto"`, a size with an optional K, M, G or T, or an int of at
/// least one byte; a ValueError naming the argument otherwise (TypeError for a type
/// that is neither). Whether it fits in the memory bound is the loader's check.
pub fn decoded_cache(arg: SizeArg) -> PyResult<stoker_loader::DecodedCacheSize> {
    match arg {
        SizeArg::Text(s) => s
            .parse()
            .map_err(|e| PyValueError::new_err(format!("decoded_cache: {e}"))),
        SizeArg::Int(Int::Other(ty)) => Err(PyTypeError::new_err(format!(
            "decoded_cache must be a size (a str such as \"256M\" or \"auto\", or an int \
             of bytes), got {ty}"
        ))),
        SizeArg::Int(n) => Ok(stoker_loader::DecodedCacheSize::Bytes(in_range(
            "decoded_cache",
            n,
            1,
            u64::MAX as i128,
        )? as u64)),
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

/// `data`: one path (str or `pathlib.Path`) or a list of them (a mixture).
pub enum DataArg {
    One(std::path::PathBuf),
    Many(Vec<std::path::PathBuf>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for DataArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(p) = obj.extract::<std::path::PathBuf>() {
            return Ok(DataArg::One(p));
        }
        obj.extract::<Vec<std::path::PathBuf>>()
            .map(DataArg::Many)
            .map_err(|_| {
                PyTypeError::new_err("data must be a path (str or pathlib.Path) or a list of paths")
            })
    }
}

/// `rank` and `world_size`: as given, else from the launcher's environment (MPI's
/// OMPI_COMM_WORLD_RANK/SIZE, then torchrun's RANK/WORLD_SIZE, as stoker-train reads
/// them), else (0, 1).
pub fn launch_rank(rank: Option<Int>, world: Option<Int>) -> PyResult<(usize, usize)> {
    launch_rank_from(rank, world, &|k| std::env::var(k).ok())
}

fn launch_rank_from(
    rank: Option<Int>,
    world: Option<Int>,
    env: &dyn Fn(&str) -> Option<String>,
) -> PyResult<(usize, usize)> {
    let num = |var: &str| -> PyResult<Option<usize>> {
        match env(var) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                PyValueError::new_err(format!("{var}={v:?} is not a rank count or rank number"))
            }),
        }
    };
    let pair = |r: &str, w: &str| -> PyResult<Option<(usize, usize)>> {
        match (num(r)?, num(w)?) {
            (Some(a), Some(b)) => Ok(Some((a, b))),
            (None, None) => Ok(None),
            _ => Err(PyValueError::new_err(format!(
                "{r} and {w} come together: only one of them is set"
            ))),
        }
    };
    let launcher = match pair("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")? {
        Some(p) => Some(p),
        None => pair("RANK", "WORLD_SIZE")?,
    };
    let (lr, lw) = launcher.unwrap_or((0, 1));
    let rank = match rank {
        Some(r) => in_range("rank", r, 0, i64::MAX as i128)? as usize,
        None => lr,
    };
    let world = match world {
        Some(w) => in_range("world_size", w, 1, i64::MAX as i128)? as usize,
        None => lw,
    };
    Ok((rank, world))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn rank_comes_from_the_launcher_unless_given() {
        assert_eq!(launch_rank_from(None, None, &env(&[])).unwrap(), (0, 1));
        let torch = [("RANK", "2"), ("WORLD_SIZE", "4")];
        assert_eq!(launch_rank_from(None, None, &env(&torch)).unwrap(), (2, 4));
        let mpi = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "3"),
            ("RANK", "0"),
            ("WORLD_SIZE", "9"),
        ];
        assert_eq!(launch_rank_from(None, None, &env(&mpi)).unwrap(), (1, 3));
        assert_eq!(
            launch_rank_from(Some(Int::of(0)), Some(Int::of(1)), &env(&torch)).unwrap(),
            (0, 1)
        );
    }
}
