//! The `stoker` Python module (native part, `stoker._stoker`): the loader, its
//! iterator, zero-copy batch arrays, the batch digest, `pack`, `gen_shapes` and
//! `cache_dir`.

mod args;
mod batch;
mod bind;
mod digest;
mod epoch;
mod errors;
mod handle;
mod loader;
mod loader_args;
mod map;
mod signals;
mod tools;

use pyo3::prelude::*;

// Python allocates objects 16-byte aligned; a pyclass that needs more would be
// misaligned (a field of it must then be boxed, as the digest's hasher is).
const _: () = {
    use std::mem::align_of;
    assert!(align_of::<handle::PyLoader>() <= 16);
    assert!(align_of::<epoch::EpochIter>() <= 16);
    assert!(align_of::<batch::BatchBuffer>() <= 16);
    assert!(align_of::<digest::PyDigest>() <= 16);
};

// Safe without the GIL (free-threaded CPython 3.13t+): what was checked is in
// docs/python.md, "Free threading".
#[pymodule(gil_used = false)]
fn _stoker(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("LoaderError", py.get_type::<errors::LoaderError>())?;
    m.add_class::<handle::PyLoader>()?;
    m.add_class::<epoch::EpochIter>()?;
    m.add_class::<batch::BatchBuffer>()?;
    m.add_class::<digest::PyDigest>()?;
    m.add_function(wrap_pyfunction!(tools::pack, m)?)?;
    m.add_function(wrap_pyfunction!(tools::gen_shapes, m)?)?;
    m.add_function(wrap_pyfunction!(tools::gen_scenes, m)?)?;
    m.add_function(wrap_pyfunction!(tools::cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(tools::decoder, m)?)?;
    m.add_function(wrap_pyfunction!(map::map_rng, m)?)?;
    m.add_function(wrap_pyfunction!(map::stop_map_threads, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
