//! Batches as numpy arrays without a copy: the images array is a view on the loader's
//! pooled buffer, owned by a [`BatchBuffer`] that numpy keeps as the array's `base`.
//! The buffer goes back to the pool when the array and every view of it are gone.

use numpy::ndarray::{ArrayView3, ArrayView4};
use numpy::{PyArray1, PyArray2, PyArray3, PyArray4, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use stoker_loader::{Batch, BatchFields, Field, Images};

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

/// A batch as Python gets it: the `(images, labels)` pair for classification, or a
/// dict: `image`, `label` and `soft_labels` (float32 (N, classes)) for a batch mixed by
/// MixUp/CutMix; the fields (`image`, `label`, `labels`, `text`, `boxes`, `box_labels`,
/// `box_count`, `mask`, `masks`, `keypoints`, `keypoint_count`, `raw`) for a source
/// with more.
pub fn to_python(py: Python<'_>, mut batch: Batch, classes: usize) -> PyResult<Bound<'_, PyAny>> {
    if let Some(soft) = batch.soft_labels.take() {
        let n = batch.len();
        let classes = soft.len() / n.max(1);
        let (images, labels) = to_numpy(py, batch)?;
        let d = PyDict::new(py);
        d.set_item("image", images)?;
        d.set_item("label", labels)?;
        d.set_item(
            "soft_labels",
            PyArray1::from_vec(py, soft).reshape([n, classes])?,
        )?;
        return Ok(d.into_any());
    }
    if batch.fields.is_none() {
        return to_numpy(py, batch).and_then(|pair| pair.into_pyobject(py).map(Bound::into_any));
    }
    to_dict(py, batch, classes).map(Bound::into_any)
}

/// A batch as the dict a `map` reads its samples from: `to_python`'s dict, and for
/// a classification batch the dict `image`, `label` (mixed batches do not reach a
/// map: the two are refused together).
pub fn to_map_input(py: Python<'_>, batch: Batch, classes: usize) -> PyResult<Bound<'_, PyDict>> {
    if batch.fields.is_some() {
        return to_dict(py, batch, classes);
    }
    let (images, labels) = to_numpy(py, batch)?;
    let d = PyDict::new(py);
    d.set_item("image", images)?;
    d.set_item("label", labels)?;
    Ok(d)
}

/// Owns `batch`'s buffer in a [`BatchBuffer`] and views its images from numpy.
fn images_view<'py>(
    py: Python<'py>,
    images: Images,
    shape: [usize; 4],
    position: (u64, usize),
) -> PyResult<(Bound<'py, PyArray4<u8>>, Bound<'py, BatchBuffer>)> {
    let owner = Bound::new(
        py,
        BatchBuffer {
            images,
            shape,
            epoch: position.0,
            step: position.1,
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
    Ok((images, owner))
}

pub fn to_numpy(py: Python<'_>, batch: Batch) -> PyResult<Pair<'_>> {
    let shape = batch.shape();
    let labels: Vec<i64> = batch.labels.iter().map(|&l| i64::from(l)).collect();
    let (images, _owner) = images_view(py, batch.images, shape, (batch.epoch, batch.step))?;
    Ok((images, PyArray1::from_vec(py, labels)))
}

fn to_dict(py: Python<'_>, batch: Batch, classes: usize) -> PyResult<Bound<'_, PyDict>> {
    let shape = batch.shape();
    let [n, h, w, _] = shape;
    let f: Box<BatchFields> = batch.fields.unwrap_or_default();
    let has = |x: Field| f.fields.contains(x);
    let d = PyDict::new(py);
    let labels: Vec<i64> = batch.labels.iter().map(|&l| i64::from(l)).collect();
    let (images, owner) = images_view(py, batch.images, shape, (batch.epoch, batch.step))?;
    d.set_item("image", images)?;
    if has(Field::Class) {
        d.set_item("label", PyArray1::from_vec(py, labels))?;
    }
    if has(Field::Mask) {
        let masks = owner.get().images.masks();
        let view = ArrayView3::from_shape([n, h, w], masks)
            .map_err(|e| PyValueError::new_err(format!("masks of shape {:?}: {e}", [n, h, w])))?;
        // SAFETY: as for the images: the masks lie in the same buffer, owned by `owner`.
        let masks = unsafe { PyArray3::borrow_from_array(&view, owner.clone().into_any()) };
        d.set_item("mask", masks)?;
    }
    if has(Field::Masks) {
        // One per box: (N, M, H, W) with M the boxes' padded count.
        let shape = [n, f.boxes.max, h, w];
        let masks = owner.get().images.instance_masks();
        let view = ArrayView4::from_shape(shape, masks)
            .map_err(|e| PyValueError::new_err(format!("masks of shape {shape:?}: {e}")))?;
        // SAFETY: as for the images: the masks lie in the same buffer, owned by `owner`.
        let masks = unsafe { PyArray4::borrow_from_array(&view, owner.clone().into_any()) };
        d.set_item("masks", masks)?;
    }
    if has(Field::Labels) {
        let k_hot = PyArray1::from_vec(py, f.labels_k_hot(classes)).reshape([n, classes])?;
        d.set_item("labels", k_hot)?;
    }
    if has(Field::Text) {
        d.set_item("text", PyList::new(py, &f.text)?)?;
    }
    if has(Field::Boxes) {
        let b = &f.boxes;
        let flat: Vec<f32> = b.boxes.iter().flatten().copied().collect();
        d.set_item(
            "boxes",
            PyArray1::from_vec(py, flat).reshape([n, b.max, 4])?,
        )?;
        let labels: Bound<'_, PyArray2<i64>> =
            PyArray1::from_slice(py, &b.labels).reshape([n, b.max])?;
        d.set_item("box_labels", labels)?;
        d.set_item("box_count", PyArray1::from_slice(py, &b.count))?;
    }
    if has(Field::Keypoints) {
        let k = &f.keypoints;
        let points = PyArray1::from_slice(py, &k.points).reshape([n, k.max, k.per_instance, 3])?;
        d.set_item("keypoints", points)?;
        d.set_item("keypoint_count", PyArray1::from_slice(py, &k.count))?;
    }
    if has(Field::Raw) {
        let raw: Vec<Bound<'_, PyBytes>> = f.raw.iter().map(|r| PyBytes::new(py, r)).collect();
        d.set_item("raw", PyList::new(py, raw)?)?;
    }
    Ok(d)
}
