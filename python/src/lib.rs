//! The `stoker` Python module (native part, `stoker._stoker`): the loader, its
//! iterator, zero-copy batch arrays (and device arrays, `device="cuda"`), the batch
//! digest, `pack`, `gen_shapes` and `cache_dir`.

mod args;
mod batch;
mod bind;
mod collate;
mod convert;
mod device;
mod digest;
#[cfg(feature = "cuda")]
mod dlpack;
mod epoch;
mod errors;
mod handle;
mod loader;
mod loader_args;
mod map;
mod map_buffers;
mod output;
mod signals;
mod tokens;
mod tools;

use pyo3::prelude::*;

// Python allocates objects 16-byte aligned; a pyclass that needs more would be
// misaligned (a field of it must then be boxed, as the digest's hasher is).
const _: () = {
    use std::mem::align_of;
    assert!(align_of::<handle::PyLoader>() <= 16);
    assert!(align_of::<epoch::EpochIter>() <= 16);
    assert!(align_of::<batch::BatchBuffer>() <= 16);
    assert!(align_of::<map_buffers::MapBuffer>() <= 16);
    assert!(align_of::<digest::PyDigest>() <= 16);
    #[cfg(feature = "cuda")]
    assert!(align_of::<device::array::DeviceArray>() <= 16);
};

// Safe without the GIL (free-threaded CPython 3.13t+): what was checked is in
// docs/python.md, "Free threading".
#[pymodule(gil_used = false)]
fn _stoker(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    load_numpy_api(py)?;
    m.add("LoaderError", py.get_type::<errors::LoaderError>())?;
    m.add_class::<handle::PyLoader>()?;
    m.add_class::<epoch::EpochIter>()?;
    m.add_class::<batch::BatchBuffer>()?;
    m.add_class::<map_buffers::MapBuffers>()?;
    m.add_class::<map_buffers::MapBuffer>()?;
    #[cfg(feature = "cuda")]
    m.add_class::<device::array::DeviceArray>()?;
    m.add_class::<digest::PyDigest>()?;
    m.add_class::<tokens::PyTokenLoader>()?;
    m.add_function(wrap_pyfunction!(tools::pack, m)?)?;
    m.add_function(wrap_pyfunction!(tools::gen_shapes, m)?)?;
    m.add_function(wrap_pyfunction!(tools::gen_scenes, m)?)?;
    m.add_function(wrap_pyfunction!(tools::cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(tools::decoder, m)?)?;
    m.add_function(wrap_pyfunction!(collate::collate_layout, m)?)?;
    m.add_function(wrap_pyfunction!(map::map_rng, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_setting_names, m)?)?;
    m.add_function(wrap_pyfunction!(map::stop_map_threads, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Loads numpy's C API now, on a thread of its own. The numpy crate loads it lazily, at
/// the first array made, running numpy's Python code (its version check); a Ctrl-C
/// that lands in that code raises KeyboardInterrupt inside the crate, which turns it
/// into a panic: a `PanicException` from the first batch instead of the interrupt.
/// Python runs signal handlers on the main thread only, so on another thread that code
/// cannot be interrupted.
fn load_numpy_api(py: Python<'_>) -> PyResult<()> {
    let loaded = py.detach(|| {
        std::thread::Builder::new()
            .name("stoker-numpy-api".into())
            .spawn(|| {
                Python::attach(|py| {
                    numpy::PyArray1::<u8>::zeros(py, 0, false);
                })
            })
            .map(|t| t.join().is_ok())
    });
    match loaded {
        Ok(true) => Ok(()),
        // The crate's panic (numpy missing, or of another ABI) was printed with its reason.
        Ok(false) => Err(pyo3::exceptions::PyImportError::new_err(
            "stoker could not load numpy's C API (the reason is printed above)",
        )),
        Err(e) => Err(pyo3::exceptions::PyImportError::new_err(format!(
            "stoker could not start a thread to load numpy's C API: {e}"
        ))),
    }
}
