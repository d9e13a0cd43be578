//! Keyword arguments checked the Python way: a bad value is a ValueError that names
//! the argument, never an OverflowError or a crash for a negative or huge number.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;

use pyo3::types::{PyBool, PyInt, PyString};
use pyo3::Borrowed;
use stoker_loader::config::parse_size;
use stoker_loader::source::{BoxFormat, OpenOptions, ParquetColumns, Split};

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

/// A whole number for a count (a `usize`) or a seed (a `u64`): the conversion of a
/// Python int, nothing more. Its range is the loader's to judge
/// (`LoaderConfig::validate`); a negative number cannot be one at all (ValueError),
/// nor can a non-int (TypeError); `bind` names the argument.
fn whole(obj: Borrowed<'_, '_, PyAny>, max: u128) -> PyResult<u128> {
    match Int::extract(obj)? {
        Int::Value(v) if v >= 0 && v as u128 <= max => Ok(v as u128),
        Int::Value(v) => Err(PyValueError::new_err(format!(
            "must be a whole number from 0 to {max}, got {v}"
        ))),
        Int::Huge => Err(PyValueError::new_err(format!(
            "must be a whole number from 0 to {max}, got a far larger one"
        ))),
        Int::Other(ty) => Err(PyTypeError::new_err(format!("must be an int, got {ty}"))),
    }
}

/// A count argument (`batch_size`, `prefetch`, ...) as a `usize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Count(pub usize);

impl<'a, 'py> FromPyObject<'a, 'py> for Count {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        whole(obj, usize::MAX as u128).map(|v| Count(v as usize))
    }
}

/// `seed=`: a `u64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seed(pub u64);

impl<'a, 'py> FromPyObject<'a, 'py> for Seed {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        whole(obj, u64::MAX as u128).map(|v| Seed(v as u64))
    }
}

/// `workers=`: a count, `"auto"` (every core but one), or `"auto:N"` (auto within a
/// budget of N threads).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkersArg {
    Count(Count),
    Auto(Option<usize>),
}

impl<'a, 'py> FromPyObject<'a, 'py> for WorkersArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if let Ok(s) = obj.extract::<String>() {
            let t = s.trim().to_ascii_lowercase();
            if t == "auto" {
                return Ok(WorkersArg::Auto(None));
            }
            if let Some(budget) = t.strip_prefix("auto:").and_then(|b| b.trim().parse().ok()) {
                return Ok(WorkersArg::Auto(Some(budget)));
            }
            // "auto:x" is a value of the right type; "2" is not a count.
            let message = format!(
                "must be an int, \"auto\" or \"auto:N\" (auto within N threads), got the \
                 string {s:?}"
            );
            return Err(if t.starts_with("auto") {
                PyValueError::new_err(message)
            } else {
                PyTypeError::new_err(message)
            });
        }
        Count::extract(obj).map(WorkersArg::Count)
    }
}

/// `mixup=`: MixUp's alpha alone, or a `stoker.Mix` (MixUp, CutMix and the chance
/// of CutMix when both are on).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MixArg {
    pub mixup: Option<f64>,
    pub cutmix: Option<f64>,
    pub prob: Option<f64>,
}

impl<'a, 'py> FromPyObject<'a, 'py> for MixArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        if obj.hasattr("cutmix")? && obj.hasattr("prob")? {
            let get = |name: &str| -> PyResult<Option<f64>> {
                let v = obj.getattr(name)?;
                if v.is_none() {
                    return Ok(None);
                }
                v.extract::<Float>().map(|Float(f)| Some(f)).map_err(|e| {
                    PyTypeError::new_err(format!("stoker.Mix {name}: {}", e.value(obj.py())))
                })
            };
            return Ok(MixArg {
                mixup: get("mixup")?,
                cutmix: get("cutmix")?,
                prob: get("prob")?,
            });
        }
        let Float(alpha) = Float::extract(obj)?;
        Ok(MixArg {
            mixup: Some(alpha),
            cutmix: None,
            prob: None,
        })
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

/// `decoded_cache=`: `"auto"`, a size with an optional K, M, G or T, or an int of
/// bytes; a ValueError naming the argument otherwise (TypeError for a type that is
/// neither). Whether it is at least a byte and fits in the memory bound is the
/// loader's check.
pub fn decoded_cache(arg: SizeArg) -> PyResult<stoker_loader::DecodedCacheSize> {
    match arg {
        SizeArg::Text(s) => s
            .parse()
            .map_err(|e| PyValueError::new_err(format!("decoded_cache: {e}"))),
        SizeArg::Int(Int::Other(ty)) => Err(PyTypeError::new_err(format!(
            "decoded_cache must be a size (a str such as \"256M\" or \"auto\", or an int \
             of bytes), got {ty}"
        ))),
        // 0 converts, and the loader refuses it (LoaderConfig::validate).
        SizeArg::Int(n) => Ok(stoker_loader::DecodedCacheSize::Bytes(in_range(
            "decoded_cache",
            n,
            0,
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

/// One data set of `data`: its path or URL and the options of its source object
/// (`stoker.Data`, `Parquet`, `Coco`, `Pairs`, `Packed`), or none for a plain path.
pub struct SourceArg {
    pub path: PathBuf,
    pub options: OpenOptions,
}

/// A mixture's rules (`stoker.Mixture`): as given, judged by the mixture.
#[derive(Default)]
pub struct MixtureArg {
    pub weights: Option<Vec<f64>>,
    pub stop: Option<String>,
    pub epoch_batches: Option<usize>,
}

/// `data`: a path, a source object, a list of them, or a `stoker.Mixture`.
pub struct DataArg {
    pub sources: Vec<SourceArg>,
    /// Set for a list or a `stoker.Mixture`: several data sets as one.
    pub mixture: Option<MixtureArg>,
}

const DATA_TYPES: &str = "a path (str or pathlib.Path), a source (stoker.Data, Parquet, \
     Coco, Pairs, Packed), a list of them, or a stoker.Mixture";

impl<'a, 'py> FromPyObject<'a, 'py> for DataArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        // A source object's own errors (a bad option) are its, not "not a list".
        if obj.hasattr("_options")? || obj.extract::<PathBuf>().is_ok() {
            return Ok(DataArg {
                sources: vec![source_arg(&obj)?],
                mixture: None,
            });
        }
        if obj.hasattr("_mixture")? {
            let m = obj.call_method0("_mixture")?;
            let sources = many(&m.get_item("sources")?)?;
            let opt = |k: &str| -> PyResult<Option<Bound<'py, PyAny>>> {
                let v = m.get_item(k)?;
                Ok((!v.is_none()).then_some(v))
            };
            let mixture = MixtureArg {
                weights: opt("weights")?
                    .map(|w| w.extract::<Vec<Float>>())
                    .transpose()
                    .map_err(|e| {
                        PyTypeError::new_err(format!(
                            "stoker.Mixture weights: {}",
                            e.value(obj.py())
                        ))
                    })?
                    .map(|w| w.into_iter().map(|Float(f)| f).collect()),
                stop: opt("stop")?.map(|s| s.extract()).transpose()?,
                epoch_batches: opt("epoch_batches")?
                    .map(|n| n.extract::<Count>().map(|Count(c)| c))
                    .transpose()
                    .map_err(|e| {
                        PyErr::from_type(
                            e.get_type(obj.py()),
                            format!("stoker.Mixture epoch_batches {}", e.value(obj.py())),
                        )
                    })?,
            };
            return Ok(DataArg {
                sources,
                mixture: Some(mixture),
            });
        }
        Ok(DataArg {
            sources: many(&obj.to_owned())?,
            mixture: Some(MixtureArg::default()),
        })
    }
}

/// A list of data sets.
fn many(obj: &Bound<'_, PyAny>) -> PyResult<Vec<SourceArg>> {
    if obj.is_instance_of::<PyString>() || !obj.hasattr("__iter__")? {
        return Err(PyTypeError::new_err(format!("must be {DATA_TYPES}")));
    }
    obj.try_iter()?
        .map(|item| source_arg(&item?.as_borrowed()))
        .collect()
}

/// One data set: a path, or a source object's options (`_options()`, a dict).
fn source_arg(obj: &Borrowed<'_, '_, PyAny>) -> PyResult<SourceArg> {
    if let Ok(path) = obj.extract::<PathBuf>() {
        return Ok(SourceArg {
            path,
            options: OpenOptions::default(),
        });
    }
    if !obj.hasattr("_options")? {
        return Err(PyTypeError::new_err(format!(
            "must be {DATA_TYPES}, not {}",
            obj.get_type().name()?
        )));
    }
    let d = obj.call_method0("_options")?;
    fn get<'py, T: pyo3::conversion::FromPyObjectOwned<'py>>(
        d: &Bound<'py, PyAny>,
        key: &str,
    ) -> PyResult<Option<T>> {
        match d.get_item(key) {
            Ok(v) if !v.is_none() => v.extract::<T>().map(Some).map_err(|e| {
                let e: PyErr = e.into();
                let py = d.py();
                // Remade with the option's name only where one message makes the class.
                if e.get_type(py).is(py.get_type::<PyTypeError>()) {
                    PyTypeError::new_err(format!("{key}: {}", e.value(py)))
                } else {
                    e
                }
            }),
            _ => Ok(None),
        }
    }
    let path: PathBuf = get(&d, "path")?.unwrap_or_default();
    let split: Option<String> = get(&d, "split")?;
    let text = |p: Option<PathBuf>| p.map(|p| p.to_string_lossy().into_owned());
    let box_format = match get::<String>(&d, "box_format")? {
        None => BoxFormat::default(),
        Some(f) => f
            .parse()
            .map_err(|e| PyValueError::new_err(format!("box_format: {e}")))?,
    };
    let cache_bytes = match get::<SizeArg>(&d, "cache_size")? {
        None => OpenOptions::default().cache_bytes,
        Some(SizeArg::Text(s)) => {
            parse_size(&s).map_err(|e| PyValueError::new_err(format!("cache_size: {e}")))?
        }
        Some(SizeArg::Int(n)) => in_range("cache_size", n, 1, u64::MAX as i128)? as u64,
    };
    let options = OpenOptions {
        // Checked where the data set is opened, which knows whether it has splits.
        split: split.map_or(Split::Train, Split::Named),
        mmap: get(&d, "mmap")?.unwrap_or(false),
        cache: get(&d, "cache")?,
        cache_bytes,
        images: text(get(&d, "images")?),
        masks: text(get(&d, "masks")?),
        parquet: ParquetColumns {
            image: get(&d, "image_column")?.unwrap_or_else(|| "image".into()),
            label: Some(get(&d, "label_column")?.unwrap_or_else(|| "label".into())),
            text: get(&d, "text_column")?,
            boxes: get(&d, "boxes_column")?,
            box_format,
            box_classes: get(&d, "box_classes_column")?,
            labels: get(&d, "labels_column")?,
            mask: get(&d, "mask_column")?,
        },
        ..OpenOptions::default()
    };
    Ok(SourceArg { path, options })
}

/// `rank` and `world_size`: as given, else from the launcher's environment (MPI's
/// OMPI_COMM_WORLD_RANK/SIZE, then torchrun's RANK/WORLD_SIZE, as stoker-train reads
/// them), else (0, 1).
pub fn launch_rank(rank: Option<usize>, world: Option<usize>) -> PyResult<(usize, usize)> {
    launch_rank_from(rank, world, &|k| std::env::var(k).ok())
}

fn launch_rank_from(
    rank: Option<usize>,
    world: Option<usize>,
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
    // Their ranges are the loader's to judge.
    Ok((rank.unwrap_or(lr), world.unwrap_or(lw)))
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
            launch_rank_from(Some(0), Some(1), &env(&torch)).unwrap(),
            (0, 1)
        );
    }
}
