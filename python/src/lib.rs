//! The `stoker` Python module (native part, `stoker._stoker`): the loader, its
//! iterator, zero-copy batch arrays, the batch digest, `pack` and `gen_shapes`.

mod args;
mod batch;
mod digest;
mod epoch;
mod errors;
mod loader;
mod tools;

use pyo3::prelude::*;

#[pymodule]
fn _stoker(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("LoaderError", py.get_type::<errors::LoaderError>())?;
    m.add_class::<loader::PyLoader>()?;
    m.add_class::<epoch::EpochIter>()?;
    m.add_class::<batch::BatchBuffer>()?;
    m.add_class::<digest::PyDigest>()?;
    m.add_function(wrap_pyfunction!(tools::pack, m)?)?;
    m.add_function(wrap_pyfunction!(tools::gen_shapes, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
