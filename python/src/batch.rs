//! Batches as numpy arrays without a copy: the images array is a view on the loader's
//! pooled buffer, owned by a [`BatchBuffer`] that numpy keeps as the array's `base`.
//! The buffer goes back to the pool when the array and every view of it are gone.

use numpy::ndarray::ArrayView4;
use numpy::{PyArray1, PyArray4, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use stoker_loader::{Batch, Images};

/// The owner of one batch's pooled image buffer (the `base` of the images array).
#[pyclass(module = "stoker", name = "BatchBuffer", frozen)]
pub struct BatchBuffer {
    images: Images,
    shape: [usize; 4],
    epoch: u64,
    step: usize,
}

#[pymethods]
impl BatchBuffer {
    /// Bytes held (N * H * W * C).
    fn __len__(&self) -> usize {
        self.images.len()
    }

    /// (epoch, batch) of the batch these images belong to.
    #[getter]
    fn position(&self) -> (u64, usize) {
        (self.epoch, self.step)
    }

    fn __repr__(&self) -> String {
        let [n, h, w, c] = self.shape;
        format!(
            "<stoker.BatchBuffer epoch {} batch {}: {n}x{h}x{w}x{c} u8>",
            self.epoch, self.step
        )
    }
}

/// The (images, labels) pair handed to Python: images u8 (N, H, W, C) borrowing the
/// batch buffer, labels int64 (N,).
pub type Pair<'py> = (Bound<'py, PyArray4<u8>>, Bound<'py, PyArray1<i64>>);

/// A batch as Python gets it: the (images, labels) pair, or, when the batch carries
/// soft labels (MixUp/CutMix), a dict (see [`batch_dict`]).
pub fn to_python(py: Python<'_>, mut batch: Batch) -> PyResult<Bound<'_, PyAny>> {
    let soft = batch.soft_labels.take();
    let n = batch.len();
    let (images, labels) = to_numpy(py, batch)?;
    match soft {
        None => Ok((images, labels).into_pyobject(py)?.into_any()),
        Some(soft) => {
            let classes = soft.len() / n.max(1);
            let soft = PyArray1::from_vec(py, soft).reshape([n, classes])?;
            Ok(batch_dict(py, images, labels, [("soft_labels", soft.into_any())])?.into_any())
        }
    }
}

/// The dict form of a batch: `image` (u8 N, H, W, C), `label` (int64 N), then the
/// extra fields in order (e.g. `soft_labels`, float32 (N, classes)).
pub fn batch_dict<'py, const K: usize>(
    py: Python<'py>,
    images: Bound<'py, PyArray4<u8>>,
    labels: Bound<'py, PyArray1<i64>>,
    extra: [(&str, Bound<'py, PyAny>); K],
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("image", images)?;
    d.set_item("label", labels)?;
    for (k, v) in extra {
        d.set_item(k, v)?;
    }
    Ok(d)
}

pub fn to_numpy(py: Python<'_>, batch: Batch) -> PyResult<Pair<'_>> {
    let shape = batch.shape();
    let labels: Vec<i64> = batch.labels.iter().map(|&l| i64::from(l)).collect();
    let owner = Bound::new(
        py,
        BatchBuffer {
            images: batch.images,
            shape,
            epoch: batch.epoch,
            step: batch.step,
        },
    )?;
    let data: &[u8] = &owner.get().images;
    let view = ArrayView4::from_shape(shape, data)
        .map_err(|e| PyValueError::new_err(format!("batch of shape {shape:?}: {e}")))?;
    // SAFETY: the view points into the heap buffer that `owner` holds and never moves
    // or frees while it lives; numpy keeps `owner` alive as the array's base for as
    // long as the array or any view of it exists. No one else writes to the buffer:
    // it left the pool's circulation when the batch was delivered.
    let images = unsafe { PyArray4::borrow_from_array(&view, owner.clone().into_any()) };
    Ok((images, PyArray1::from_vec(py, labels)))
}
