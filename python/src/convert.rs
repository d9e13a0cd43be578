//! `device=`, `dtype=`, `layout=` and `normalize=`: what a batch's images are handed
//! out as. On the host (`device="cpu"`), the images array is converted at handout
//! (`stoker_loader::output`, one pass with the GIL released) into a new numpy array,
//! and the loader's pooled buffer goes back to the pool at once: the pool, and so the
//! memory bound, is the same as without conversion. With the defaults nothing is
//! done: the batch is the same object as before, with no extra pass. (On a CUDA
//! device `device.rs` converts; `output.rs` picks which.)

use numpy::{PyArray4, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use pyo3::Borrowed;
use stoker_loader::output::{Normalize, OutDtype, OutputSpec};

use crate::args::Float;
use crate::errors::LoaderError;

/// `normalize=(mean, std)`: two sequences of numbers, one of each per channel.
#[derive(Clone, Debug)]
pub struct NormalizeArg {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

impl<'a, 'py> FromPyObject<'a, 'py> for NormalizeArg {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        let bad = || {
            PyTypeError::new_err(
                "must be (mean, std): two sequences of numbers, one of each per channel, on \
                 the 0-1 scale (torchvision's convention), e.g. ((0.485, 0.456, 0.406), \
                 (0.229, 0.224, 0.225))",
            )
        };
        // A tuple or a list of the two; a str is no pair.
        let pair: Vec<Bound<'py, PyAny>> = obj.extract().map_err(|_| bad())?;
        let [mean, std] = <[Bound<'py, PyAny>; 2]>::try_from(pair).map_err(|_| bad())?;
        let floats = |o: &Bound<'py, PyAny>| -> PyResult<Vec<f32>> {
            o.extract::<Vec<Float>>()
                .map(|v| v.into_iter().map(|Float(f)| f as f32).collect())
                .map_err(|_| bad())
        };
        Ok(NormalizeArg {
            mean: floats(&mean)?,
            std: floats(&std)?,
        })
    }
}

/// Where batches go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    Cpu,
    Cuda(usize),
}

/// `device=`: "cpu", "cuda" (device 0) or "cuda:N".
pub fn device(s: &str) -> PyResult<Device> {
    let t = s.trim();
    if t == "cpu" {
        return Ok(Device::Cpu);
    }
    if t == "cuda" {
        return Ok(Device::Cuda(0));
    }
    if let Some(n) = t.strip_prefix("cuda:").and_then(|n| n.parse().ok()) {
        return Ok(Device::Cuda(n));
    }
    Err(PyValueError::new_err(format!(
        "argument 'device': must be \"cpu\", \"cuda\" or \"cuda:N\" (N the device's \
         number), got {s:?}"
    )))
}

/// The output spec from `dtype=`, `layout=` and `normalize=`; a ValueError naming the
/// argument otherwise. [`check_channels`] checks it against the images once the data
/// is open.
pub fn output_spec(
    dtype: &str,
    layout: &str,
    normalize: Option<NormalizeArg>,
) -> PyResult<OutputSpec> {
    let spec = OutputSpec {
        dtype: dtype
            .parse()
            .map_err(|e| PyValueError::new_err(format!("argument 'dtype': {e}")))?,
        layout: layout
            .parse()
            .map_err(|e| PyValueError::new_err(format!("argument 'layout': {e}")))?,
        normalize: normalize
            .map(|n| Normalize::new(n.mean, n.std))
            .transpose()
            .map_err(|e| PyValueError::new_err(format!("argument 'normalize': {e}")))?,
    };
    Ok(spec)
}

/// `spec` against images of `channels` channels.
pub fn check_channels(spec: &OutputSpec, channels: usize) -> PyResult<()> {
    spec.check(channels)
        .map_err(|e| PyValueError::new_err(format!("argument 'normalize': {e}")))
}

/// The images of a batch as Python has it: the first of an `(images, labels)` pair,
/// or a dict's `image`.
pub fn images_of<'py>(batch: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyAny>>> {
    if let Ok(t) = batch.cast::<PyTuple>() {
        return Ok(Some(t.get_item(0)?));
    }
    if let Ok(d) = batch.cast::<PyDict>() {
        return d.get_item("image");
    }
    Ok(None)
}

/// `batch` with its images replaced by `images`: a new pair or dict (`batch` itself
/// is left as it was, so a batch whose handout failed can be converted again).
pub fn with_images<'py>(
    batch: Bound<'py, PyAny>,
    images: Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = batch.py();
    if let Ok(t) = batch.cast::<PyTuple>() {
        let mut items: Vec<Bound<'py, PyAny>> = t.iter().collect();
        items[0] = images;
        return Ok(PyTuple::new(py, items)?.into_any());
    }
    if let Ok(d) = batch.cast::<PyDict>() {
        let d = d.copy()?;
        d.set_item("image", images)?;
        return Ok(d.into_any());
    }
    Ok(batch)
}

/// The u8 (N, H, W, C) images array of a batch, C-contiguous, or a LoaderError that
/// says what it is instead (a `map=` may return another).
pub fn u8_images<'py>(images: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyArray4<u8>>> {
    let arr = images.cast::<PyArray4<u8>>().map_err(|_| {
        LoaderError::new_err(format!(
            "dtype, layout, normalize and device apply to a uint8 (N, H, W, C) 'image' \
             array; this batch's is {}",
            describe(images)
        ))
    })?;
    if !arr.is_c_contiguous() {
        return Err(LoaderError::new_err(
            "dtype, layout, normalize and device apply to a C-contiguous 'image' array; \
             this batch's is not (a map returned a view?): return np.ascontiguousarray",
        ));
    }
    Ok(arr.clone())
}

fn describe(o: &Bound<'_, PyAny>) -> String {
    let shape = o
        .getattr("shape")
        .and_then(|s| s.str().map(|s| s.to_string()));
    let dtype = o
        .getattr("dtype")
        .and_then(|s| s.str().map(|s| s.to_string()));
    match (shape, dtype) {
        (Ok(s), Ok(d)) => format!("{d} of shape {s}"),
        _ => o
            .get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into()),
    }
}

/// The host conversion of one batch (`device="cpu"`, a spec that is not the identity).
pub fn convert_host<'py>(
    batch: Bound<'py, PyAny>,
    spec: &OutputSpec,
) -> PyResult<Bound<'py, PyAny>> {
    let py = batch.py();
    let Some(images) = images_of(&batch)? else {
        return Ok(batch);
    };
    let arr = u8_images(&images)?;
    let shape: [usize; 4] = arr
        .shape()
        .try_into()
        .map_err(|_| LoaderError::new_err("images array is not 4-D"))?;
    spec.check(shape[3])
        .map_err(|e| LoaderError::new_err(format!("normalize, for this batch's images: {e}")))?;
    let out_shape = spec.out_shape(shape);
    let src = arr.readonly();
    let src = src.as_slice()?;
    let out: Bound<'py, PyAny> = match spec.dtype {
        OutDtype::U8 => {
            let dst = PyArray4::<u8>::zeros(py, out_shape, false);
            fill(py, spec, src, shape, &dst)?;
            dst.into_any()
        }
        OutDtype::F32 => {
            let dst = PyArray4::<f32>::zeros(py, out_shape, false);
            fill(py, spec, src, shape, &dst)?;
            dst.into_any()
        }
        OutDtype::F16 | OutDtype::Bf16 => {
            let dst = PyArray4::<u16>::zeros(py, out_shape, false);
            fill(py, spec, src, shape, &dst)?;
            if spec.dtype == OutDtype::F16 {
                // numpy's float16 is IEEE half: the same bits, viewed as such.
                dst.call_method1("view", ("float16",))?
            } else {
                // numpy has no bfloat16: the bit patterns as uint16
                // (`torch.from_numpy(a).view(torch.bfloat16)` reads them).
                dst.into_any()
            }
        }
    };
    with_images(batch, out)
}

/// Converts `src` into the fresh array `dst`, with the GIL released.
fn fill<T: numpy::Element>(
    py: Python<'_>,
    spec: &OutputSpec,
    src: &[u8],
    shape: [usize; 4],
    dst: &Bound<'_, PyArray4<T>>,
) -> PyResult<()> {
    let mut guard = dst.readwrite();
    let out = guard.as_slice_mut()?;
    let bytes = std::mem::size_of_val(out);
    // SAFETY: `out` is the array's whole C-contiguous data, `bytes` long; every bit
    // pattern is a valid u8, and the conversion writes the element type's native bytes.
    let out = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), bytes) };
    // Nothing else can reach either array while the GIL is released: `src` is the
    // batch not yet handed out, `dst` was made here.
    py.detach(|| spec.convert(src, shape, out));
    Ok(())
}
