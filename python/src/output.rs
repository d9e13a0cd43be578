//! What `EpochIter` does to each batch before handing it out: nothing (the
//! defaults), the host conversion (`convert.rs`), or the upload to a CUDA device
//! (`device.rs`).

use pyo3::prelude::*;
use stoker_loader::output::OutputSpec;

use crate::convert::convert_host;
use crate::device::Opened;

/// The loader's output, chosen once from `device=`, `dtype=`, `layout=`, `normalize=`.
pub enum Output {
    /// On the host: the spec's conversion, or nothing for the identity.
    Host(OutputSpec),
    /// On a CUDA device.
    #[cfg(feature = "cuda")]
    Cuda(Box<crate::device::DeviceOut>),
}

impl Output {
    /// On the host, or on the device `dev` opened.
    pub fn new(spec: OutputSpec, dev: Option<Opened>) -> Output {
        match dev {
            None => Output::Host(spec),
            #[cfg(feature = "cuda")]
            Some(d) => Output::Cuda(Box::new(crate::device::DeviceOut::new(d, spec))),
            #[cfg(not(feature = "cuda"))]
            Some(d) => match d {},
        }
    }

    /// `batch` as the consumer gets it; `batch` itself is left as it was.
    pub fn finish<'py>(&mut self, batch: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Output::Host(spec) if spec.is_identity() => Ok(batch),
            Output::Host(spec) => convert_host(batch, spec),
            #[cfg(feature = "cuda")]
            Output::Cuda(dev) => dev.upload(batch),
        }
    }
}
