//! `_stoker.collate_layout`: the batch collation rules of the Rust loader
//! (`stoker_loader::array::layout`), for the outputs of `Loader(map=fn)`. Rust judges
//! the shapes (stack or pad, which count, its name and values); numpy copies the
//! elements, so any element type works.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use stoker_loader::array::{layout, FieldShape, Layout};

/// One sample's field as Python describes it: name, numpy dtype name, shape, and the
/// value of an integer scalar.
type Described = (String, String, Vec<usize>, Option<i64>);

/// How each field of a batch is made from its samples (in batch order), as
/// `(name, "stack", None)`, `(name, "pad", (longest, fill, count_name))` or
/// `(name, "count", [counts])`. Samples that cannot be collated are a ValueError
/// whose args are (position in the batch, field name, what is wrong).
#[pyfunction]
pub fn collate_layout<'py>(
    py: Python<'py>,
    samples: Vec<Vec<Described>>,
) -> PyResult<Vec<Bound<'py, PyTuple>>> {
    let shapes: Vec<Vec<FieldShape<'_>>> = samples
        .iter()
        .map(|s| {
            s.iter()
                .map(|(name, dtype, shape, int)| FieldShape {
                    name,
                    dtype,
                    shape,
                    int: *int,
                })
                .collect()
        })
        .collect();
    let refs: Vec<&[FieldShape<'_>]> = shapes.iter().map(Vec::as_slice).collect();
    let plan = layout(&refs).map_err(|e| PyValueError::new_err((e.pos, e.name, e.reason)))?;
    plan.into_iter()
        .map(|(name, l)| match l {
            Layout::Stack => PyTuple::new(
                py,
                [
                    name.into_pyobject(py)?.into_any(),
                    "stack".into_pyobject(py)?.into_any(),
                    py.None().into_bound(py),
                ],
            ),
            Layout::Pad {
                longest,
                fill,
                count,
            } => PyTuple::new(
                py,
                [
                    name.into_pyobject(py)?.into_any(),
                    "pad".into_pyobject(py)?.into_any(),
                    (longest, fill, count).into_pyobject(py)?.into_any(),
                ],
            ),
            Layout::Count(values) => PyTuple::new(
                py,
                [
                    name.into_pyobject(py)?.into_any(),
                    "count".into_pyobject(py)?.into_any(),
                    values.into_pyobject(py)?.into_any(),
                ],
            ),
        })
        .collect()
}
