//! `stoker.Digest`: the same running hash of batches as `stoker-load bench --digest`,
//! so that Python batches can be compared byte for byte with the Rust loader's.

use numpy::{PyReadonlyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use stoker_loader::Digest;

/// A running hash of batches (images, then labels, in order). Two runs agree iff they
/// delivered the same pixels and labels in the same batches.
#[pyclass(module = "stoker", name = "Digest")]
#[derive(Default)]
pub struct PyDigest {
    // Boxed: the hasher state is 64-byte aligned, more than Python's allocator gives
    // an object.
    inner: Box<Digest>,
}

#[pymethods]
impl PyDigest {
    #[new]
    fn new() -> Self {
        PyDigest::default()
    }

    /// Adds one batch: `images` a C-contiguous uint8 array (N, H, W, C), `labels` the
    /// N labels (any integer array or sequence; each in 0..2**32), and a mixed batch's
    /// `soft_labels` (float32 (N, classes)).
    #[pyo3(signature = (images, labels, soft_labels = None))]
    fn update(
        &mut self,
        py: Python<'_>,
        images: PyReadonlyArrayDyn<'_, u8>,
        labels: &Bound<'_, PyAny>,
        soft_labels: Option<PyReadonlyArrayDyn<'_, f32>>,
    ) -> PyResult<()> {
        let labels: Vec<i64> = match labels.extract::<PyReadonlyArray1<'_, i64>>() {
            Ok(a) => a.as_array().to_vec(),
            Err(_) => labels.extract()?,
        };
        let labels = labels
            .iter()
            .map(|&l| {
                u32::try_from(l)
                    .map_err(|_| PyValueError::new_err(format!("label {l} is not in 0..2**32")))
            })
            .collect::<PyResult<Vec<u32>>>()?;
        let bytes = images.as_slice().map_err(|_| {
            PyValueError::new_err("images must be a C-contiguous uint8 array (N, H, W, C)")
        })?;
        if !labels.is_empty() && images.shape().first() != Some(&labels.len()) {
            return Err(PyValueError::new_err(format!(
                "images hold {} samples (first axis) but there are {} labels",
                images.shape().first().copied().unwrap_or(0),
                labels.len()
            )));
        }
        let soft = match &soft_labels {
            None => None,
            Some(a) => Some(a.as_slice().map_err(|_| {
                PyValueError::new_err("soft_labels must be a C-contiguous float32 array")
            })?),
        };
        let inner = &mut self.inner;
        py.detach(|| {
            inner.update_parts(bytes, &labels);
            if let Some(s) = soft {
                inner.update_soft(s);
            }
        });
        Ok(())
    }

    /// The digest so far, as 32 hex digits (as `stoker-load bench --digest` prints it).
    fn hexdigest(&self) -> String {
        self.inner.hex()
    }

    fn __repr__(&self) -> String {
        format!("<stoker.Digest {}>", self.inner.hex())
    }
}
