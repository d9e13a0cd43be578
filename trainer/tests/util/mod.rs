//! What the trainer's test binaries (and stoker-train's, through `#[path]`) share: a
//! small shapes data set, and the GPU or a loud skip.

// Each binary takes what it needs of this module: the CPU tests no GPU, the GPU
// parity tests no data set.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_trainer::backend::cuda::{self, CudaBackend};

/// `count` 16 x 16 images of 4 classes in `dir`, generated from `seed`.
pub fn shapes(dir: &Path, count: usize, seed: u64) -> PathBuf {
    let opts = ShapesOptions {
        count,
        size: 16,
        classes: 4,
        seed,
    };
    synthetic::shapes(dir, &opts, |_, _| {}).expect("generate shapes");
    dir.to_path_buf()
}

/// The binary's one CUDA backend on device 0 (shared: one context, one set of compiled
/// kernels), or `None` with `SKIPPED: ...` printed for `test`.
pub fn gpu(test: &str) -> Option<CudaBackend> {
    static B: OnceLock<Result<CudaBackend, String>> = OnceLock::new();
    let b = B.get_or_init(|| match cuda::probe() {
        Ok(_) => CudaBackend::new(0).map_err(|e| e.to_string()),
        Err(why) => Err(why.to_string()),
    });
    match b {
        Ok(b) => Some(b.clone()),
        Err(why) => {
            stoker_loader::gpu_test::skip(format!("no usable CUDA device ({why}) [{test}]"));
            None
        }
    }
}
