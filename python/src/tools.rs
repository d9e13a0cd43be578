//! Module functions: `pack` (as `stoker-load pack`), `gen_shapes` (as
//! `stoker-load gen shapes`, which the tests use to make small image folders) and
//! `cache_dir` (where the demo set lives).

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use stoker_loader::source::{self, packed};
use stoker_loader::synthetic::{self, GenError, ScenesOptions, ShapesOptions};

use crate::args::{in_range, Int};
use crate::errors::{source_error, LoaderError};

/// Packs an image folder (or an MNIST/CIFAR-10 set: its training split, or its test
/// split with `test=True`) into one packed file at `out`, as `stoker-load pack` does;
/// `max_side` and `encoding` as its `--max-side` and `--encoding`. Returns a dict:
/// records, classes, record_bytes, file_bytes.
#[pyfunction]
#[pyo3(signature = (src, out, test = false, max_side = None, encoding = "keep"))]
pub fn pack<'py>(
    py: Python<'py>,
    src: PathBuf,
    out: PathBuf,
    test: bool,
    max_side: Option<Int>,
    encoding: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let max_side = max_side
        .map(|m| in_range("max_side", m, 1, 65535).map(|v| v as u32))
        .transpose()?;
    let encoding: source::Encoding = encoding
        .parse()
        .map_err(|e: stoker_loader::ParseSettingError| PyValueError::new_err(e.to_string()))?;
    let opts = source::PackOptions::new(max_side, encoding)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let (stats, classes) = py.detach(|| {
        let split = if test {
            source::Split::Test
        } else {
            source::Split::Train
        };
        let s = source::open(&src, split).map_err(source_error)?;
        let stats = packed::pack_source_with(s.as_ref(), &out, &opts, |_, _| {}).map_err(|e| {
            LoaderError::new_err(format!(
                "packing {} into {}: {e}",
                src.display(),
                out.display()
            ))
        })?;
        Ok::<_, PyErr>((stats, s.classes().len()))
    })?;
    let d = PyDict::new(py);
    d.set_item("records", stats.records)?;
    d.set_item("classes", classes)?;
    d.set_item("record_bytes", stats.record_bytes)?;
    d.set_item("file_bytes", stats.file_bytes)?;
    Ok(d)
}

/// Writes `count` procedurally drawn JPEGs of `size` x `size` pixels into an image
/// folder at `out` (one sub-folder per class), as `stoker-load gen shapes` does.
#[pyfunction]
#[pyo3(signature = (out, count, size = Int::of(64), classes = Int::of(10), seed = Int::of(0)))]
pub fn gen_shapes(
    py: Python<'_>,
    out: PathBuf,
    count: Int,
    size: Int,
    classes: Int,
    seed: Int,
) -> PyResult<()> {
    let opts = ShapesOptions {
        count: in_range("count", count, 1, 10_000_000)? as usize,
        size: in_range("size", size, 8, 4096)? as u32,
        classes: in_range("classes", classes, 1, 10)? as usize,
        seed: in_range("seed", seed, 0, u64::MAX as i128)? as u64,
    };
    py.detach(|| synthetic::shapes(&out, &opts, |_, _| {}))
        .map(|_| ())
        .map_err(|e| match e {
            GenError::Options(m) => PyValueError::new_err(format!("gen_shapes: {m}")),
            e => LoaderError::new_err(format!("gen_shapes into {}: {e}", out.display())),
        })
}

/// Writes `count` synthetic scenes (several shapes per image) into `out`: `images/`,
/// `masks/` and the manifest `train.jsonl` with boxes, tags, captions and keypoints,
/// as `stoker-load gen scenes` does.
#[pyfunction]
#[pyo3(signature = (out, count, width = Int::of(64), height = Int::of(64), max_shapes = Int::of(4), classes = Int::of(10), seed = Int::of(0)))]
pub fn gen_scenes(
    out: PathBuf,
    count: Int,
    width: Int,
    height: Int,
    max_shapes: Int,
    classes: Int,
    seed: Int,
) -> PyResult<()> {
    let opts = ScenesOptions {
        count: in_range("count", count, 1, 10_000_000)? as usize,
        width: in_range("width", width, 16, 4096)? as u32,
        height: in_range("height", height, 16, 4096)? as u32,
        max_shapes: in_range("max_shapes", max_shapes, 1, 64)? as usize,
        classes: in_range("classes", classes, 1, 10)? as usize,
        seed: in_range("seed", seed, 0, u64::MAX as i128)? as u64,
    };
    // The arguments are the Python ones only (seven, clippy's limit): the caller holds
    // the interpreter already, so attaching is free.
    Python::attach(|py| py.detach(|| synthetic::scenes(&out, &opts, |_, _| {})))
        .map(|_| ())
        .map_err(|e| match e {
            GenError::Options(m) => PyValueError::new_err(format!("gen_scenes: {m}")),
            e => LoaderError::new_err(format!("gen_scenes into {}: {e}", out.display())),
        })
}

/// The folder for generated demo data, as the Rust tools use it: `$STOKER_CACHE`, else
/// `$XDG_CACHE_HOME/stoker`, else `~/.cache/stoker`.
#[pyfunction]
pub fn cache_dir() -> PathBuf {
    stoker_loader::system::cache_dir()
}

/// The JPEG decoder this build of the module uses: `libjpeg-turbo X.Y.Z` (the
/// crop-window, DCT-scaled fast path; the wheel carries it inside) or `zune-jpeg` (a
/// build from source on a machine without libjpeg-turbo).
#[pyfunction]
pub fn decoder() -> String {
    stoker_augment::decoder()
}
