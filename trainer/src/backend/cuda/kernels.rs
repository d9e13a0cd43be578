//! The kernel table: every kernel of `kernels/*.cu`, declared once with its source file
//! and its parameters. A declaration names the kernel (or several kernels with the same
//! parameters) and the struct of its parameters; it makes the kernel's field in
//! `Kernels`, a `Kernel` that launches it with that struct, and loads it from the
//! compiled program. A unit test checks every declaration against the kernel's C
//! signature.
//!
//! Adding a kernel: write it in a `.cu` file (`extern "C" __global__`), add one line
//! below under that file, and launch it as `cx.launch(&self.kernels().NAME, cfg,
//! Params { .. })` (see `launch`). A new `.cu` file is one more `"file.cu" { ... }`
//! group. Parameters that several kernels pass alike can be one field, a group
//! declared with `params!` (as `PoolDims`).
//!
//! The program (`common.cuh`, then every file in table order, with `#line` markers so
//! that NVRTC's errors name the file and line) is compiled by NVRTC for the device's
//! architecture, or read back from the PTX cache (see `ptx_cache`).

use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaStream, LaunchArgs, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use super::buffer::DevPtr;
use super::probe::guarded;
use super::ptx_cache::{self, CacheKey};
use super::CudaError;

/// Channels `datanorm` takes by value (see `kernels/datanorm.cu`).
pub const DATANORM_MAX_CHANNELS: usize = 16;

/// `datanorm`'s per-channel scale and shift, passed by value (`Affine` in
/// `kernels/datanorm.cu`).
pub(super) type Affine = [f32; 2 * DATANORM_MAX_CHANNELS];

/// A kernel parameter, or a struct of them passed one after the other.
pub(super) trait Param {
    /// Appends the types of the C parameters this stands for, by their names here
    /// (`DevPtr`, `u64`, `i32`, `f32`, `Affine`), for the signature test.
    #[cfg(test)]
    fn types(out: &mut Vec<&'static str>);
    /// Adds this to a launch's arguments.
    fn push<'a>(&'a self, launch: &mut LaunchArgs<'a>);
}

/// The parameters passed as they are: `DevPtr` for a pointer, `u64`, `i32` (`int`),
/// `f32` (`float`), `Affine`.
macro_rules! scalars {
    ($($t:ident),*) => {$(
        impl Param for $t {
            #[cfg(test)]
            fn types(out: &mut Vec<&'static str>) {
                out.push(stringify!($t));
            }
            fn push<'a>(&'a self, launch: &mut LaunchArgs<'a>) {
                launch.arg(self);
            }
        }
    )*};
}

scalars!(DevPtr, u64, i32, f32, Affine);

/// Declares structs of parameters, passed in field order: `Name { field: Type, ... }`,
/// each type a scalar or another such struct.
macro_rules! params {
    ($( $(#[$doc:meta])* $name:ident { $( $arg:ident : $ty:ty ),* $(,)? } )*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy)]
        pub(super) struct $name {
            $( pub(super) $arg: $ty, )*
        }

        impl Param for $name {
            #[cfg(test)]
            fn types(out: &mut Vec<&'static str>) {
                $( <$ty as Param>::types(out); )*
            }
            fn push<'a>(&'a self, launch: &mut LaunchArgs<'a>) {
                $( self.$arg.push(launch); )*
            }
        }
    )*};
}

params! {
    /// The shape parameters of both max-pooling kernels.
    PoolDims { planes: u64, h: i32, w: i32, k: i32, stride: i32, oh: i32, ow: i32 }
    /// The parameters the row kernels of the losses share: the logits `[classes, n]`, a
    /// sample's target(s), and the gradient to write if `has_dz`.
    LossRows { z: DevPtr, t: DevPtr, classes: u64, n: u64, dz: DevPtr, has_dz: i32 }
}

/// A loaded kernel that takes a `P`.
pub(super) struct Kernel<P> {
    function: CudaFunction,
    name: &'static str,
    _params: PhantomData<fn(P)>,
}

impl<P: Param> Kernel<P> {
    fn load(module: &Arc<CudaModule>, name: &'static str) -> Result<Self, CudaError> {
        Ok(Self {
            function: load_function(module, name)?,
            name,
            _params: PhantomData,
        })
    }

    /// Enqueues the kernel on `stream`.
    pub(super) fn launch(
        &self,
        stream: &CudaStream,
        cfg: LaunchConfig,
        params: P,
    ) -> Result<(), CudaError> {
        let mut launch = stream.launch_builder(&self.function);
        params.push(&mut launch);
        // SAFETY: `P` passes the kernel's C parameters in order, type by type (the
        // `declarations_match_the_sources` test checks it), and every `DevPtr` comes
        // from `device_addr`, which checked it against its buffer for the extent the
        // caller's sizes make the kernel touch.
        unsafe { launch.launch(cfg) }
            .map(|_| ())
            .map_err(|source| CudaError::Kernel {
                kernel: self.name,
                source,
            })
    }
}

/// Declares the kernels: `"file.cu" { kernel, ...: Params(arg: Type, ...); ... }`, the
/// types as in `params!`.
macro_rules! kernels {
    ($( $file:literal { $( $( $kernel:ident ),+ : $params:ident ( $( $arg:ident : $ty:ty ),* $(,)? ); )* } )*) => {
        /// The kernel sources, in the order they are concatenated into one program.
        pub(super) const SOURCES: &[(&str, &str)] = &[
            ("common.cuh", include_str!("../../kernels/common.cuh")),
            $( ($file, include_str!(concat!("../../kernels/", $file))), )*
        ];

        params! {
            $( $(
                #[doc = concat!("Parameters of a kernel of `", $file, "`, in C order.")]
                $params { $( $arg: $ty ),* }
            )* )*
        }

        /// Every kernel of the program, loaded once.
        pub(super) struct Kernels {
            $( $( $( pub(super) $kernel: Kernel<$params>, )+ )* )*
        }

        impl Kernels {
            fn load(module: &Arc<CudaModule>) -> Result<Self, CudaError> {
                Ok(Self {
                    $( $( $( $kernel: Kernel::load(module, stringify!($kernel))?, )+ )* )*
                })
            }
        }

        /// (file, kernel, its parameters' types) of every declaration, for the
        /// signature test.
        #[cfg(test)]
        const DECLARED: &[(&str, &str, fn(&mut Vec<&'static str>))] = &[
            $( $( $( ($file, stringify!($kernel), <$params as Param>::types), )+ )* )*
        ];
    };
}

kernels! {
    "elementwise.cu" {
        fill_f32: Fill(y: DevPtr, n: u64, value: f32);
        add_f32, relu_forward: Unary(x: DevPtr, y: DevPtr, n: u64);
        add_act: AddAct(a: DevPtr, b: DevPtr, y: DevPtr, n: u64, relu: i32);
        relu_backward: ReluBackward(y: DevPtr, dy: DevPtr, dx: DevPtr, n: u64);
    }
    "bias_act.cu" {
        bias_act_forward: BiasAct(y: DevPtr, bias: DevPtr, has_bias: i32, rows: u64, cols: u64,
            relu: i32);
        relu_mask: ReluMask(y: DevPtr, dy: DevPtr, n: u64);
        bias_act_backward_rows: BiasRows(y: DevPtr, dy: DevPtr, dbias: DevPtr, cols: u64,
            relu: i32);
    }
    "pool.cu" {
        maxpool_forward: MaxPoolForward(x: DevPtr, y: DevPtr, argmax: DevPtr, dims: PoolDims);
        maxpool_backward: MaxPoolBackward(dy: DevPtr, argmax: DevPtr, dx: DevPtr, dims: PoolDims);
        avgpool_forward, avgpool_backward: AvgPool(src: DevPtr, dst: DevPtr, planes: u64, hw: u64,
            inv: f32);
    }
    "im2col.cu" {
        im2col, col2im: Im2col(src: DevPtr, dst: DevPtr, c: i32, n: u64, h: i32, w: i32, kh: i32,
            kw: i32, stride: i32, pad: i32, oh: i32, ow: i32, n0: u64, nc: u64);
    }
    "batchnorm.cu" {
        bn_partial_stats: BnPartialStats(x: DevPtr, partial: DevPtr, m: u64, chunk: u64);
        bn_finalize_stats: BnFinalizeStats(x: DevPtr, partial: DevPtr, nchunks: u64, c: u64,
            m: u64, eps: f32, momentum: f32, saved: DevPtr, running: DevPtr);
        bn_apply: BnApply(x: DevPtr, gamma_beta: DevPtr, saved: DevPtr, running: DevPtr,
            y: DevPtr, c: u64, m: u64, eps: f32, train: i32, relu: i32);
        bn_partial_grads: BnPartialGrads(x: DevPtr, y: DevPtr, dy: DevPtr, saved: DevPtr,
            partial: DevPtr, m: u64, chunk: u64, relu: i32);
        bn_finalize_grads: BnFinalizeGrads(partial: DevPtr, nchunks: u64, c: u64, saved: DevPtr,
            dgamma_beta: DevPtr);
        bn_apply_grads: BnApplyGrads(x: DevPtr, y: DevPtr, dy: DevPtr, gamma_beta: DevPtr,
            saved: DevPtr, dgamma_beta: DevPtr, dx: DevPtr, c: u64, m: u64, relu: i32);
    }
    "datanorm.cu" {
        datanorm_cm, datanorm_fm: DataNorm(x: DevPtr, y: DevPtr, n: u64, hw: u64, c: i32,
            t: Affine);
    }
    "softmax_xent.cu" {
        xent_rows: XentRows(io: LossRows, inv_n: f32, rows: DevPtr, bad: DevPtr);
        xent_sum: XentSum(rows: DevPtr, n: u64, stats: DevPtr);
        xent_soft_rows: XentSoftRows(io: LossRows, inv_n: f32, rows: DevPtr);
        bce_rows: BceRows(io: LossRows, inv_k: f32, inv_nk: f32, rows: DevPtr);
    }
    "cast.cu" {
        cast_f32_bf16: CastBf16(x: DevPtr, y: DevPtr, n: u64);
        swap01_f32, swap01_f32_bf16, swap01_bf16_f32: Swap01(src: DevPtr, dst: DevPtr, a: u64,
            b: u64, p: u64);
    }
    "optim.cu" {
        sgd_step: SgdStep(p: DevPtr, g: DevPtr, buf: DevPtr, n: u64, decay_len: u64, lr: f32,
            momentum: f32, weight_decay: f32, nesterov: i32);
        adamw_step: AdamWStep(p: DevPtr, g: DevPtr, m: DevPtr, v: DevPtr, n: u64, decay_len: u64,
            lr: f32, beta1: f32, beta2: f32, one_minus_beta1: f32, one_minus_beta2: f32,
            eps: f32, weight_decay: f32, c1: f32, c2: f32);
    }
}

fn load_function(
    module: &Arc<CudaModule>,
    kernel: &'static str,
) -> Result<CudaFunction, CudaError> {
    module
        .load_function(kernel)
        .map_err(|source| CudaError::Kernel { kernel, source })
}

/// The whole kernel program as NVRTC compiles it.
pub fn kernel_source() -> String {
    let mut s = String::new();
    for (name, text) in SOURCES {
        s += &format!("#line 1 \"{name}\"\n{text}\n");
    }
    s
}

/// NVRTC's options for a device of compute capability `cc`. Hopper gets compute_90
/// (not 90a: no kernel here needs wgmma); any other device its own architecture. No
/// FMA contraction: element-wise results then round as the CPU's do.
fn compile_options(cc: (i32, i32)) -> CompileOptions {
    let (ma, mi) = cc;
    CompileOptions {
        fmad: Some(false),
        options: vec![
            format!("--gpu-architecture=compute_{ma}{mi}"),
            "--std=c++17".into(),
        ],
        name: Some("stoker_kernels.cu".into()),
        ..Default::default()
    }
}

/// Compiles the kernel program for a device of compute capability `cc` to PTX. Needs
/// only `libnvrtc` (no GPU), so a machine with the library can check the kernels build.
pub fn compile_kernels(cc: (i32, i32)) -> Result<Ptx, CudaError> {
    // SAFETY: only tries `dlopen`; nothing is resolved or called.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(CudaError::Missing(vec!["libnvrtc (CUDA runtime compiler)"]));
    }
    guarded("NVRTC", || {
        Ok(compile_ptx_with_opts(kernel_source(), compile_options(cc))?)
    })
}

/// NVRTC's (major, minor) version.
fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    guarded("NVRTC", || {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers; libnvrtc was found before this is called.
        unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|source| CudaError::Nvrtc {
                call: "nvrtcVersion",
                source,
            })?;
        Ok((major, minor))
    })
}

/// The cache key of the program for a device of compute capability `cc`.
fn program_key(cc: (i32, i32)) -> Result<CacheKey, CudaError> {
    let options = format!("{:?}", compile_options(cc));
    Ok(CacheKey::new(
        &kernel_source(),
        &options,
        cc,
        nvrtc_version()?,
    ))
}

/// The kernels for `ctx`'s device (compute capability `cc`): the cached PTX in
/// `cache_dir` when there is one for this source, options, architecture and NVRTC,
/// else compiled now and cached. A cache that cannot be read or written only costs
/// the compilation; a cached file the driver rejects is compiled again and replaced.
pub(super) fn load_kernels(
    ctx: &Arc<CudaContext>,
    cc: (i32, i32),
    cache_dir: &Path,
) -> Result<(Kernels, Arc<CudaModule>), CudaError> {
    let key = program_key(cc)?;
    if let Some(text) = ptx_cache::lookup(cache_dir, &key) {
        if let Ok(module) = ctx.load_module(Ptx::from_src(text)) {
            return Ok((Kernels::load(&module)?, module));
        }
    }
    let ptx = compile_kernels(cc)?;
    if let Some(bytes) = ptx.as_bytes() {
        // NVRTC's output ends with a NUL; the file holds the text before it.
        let text = String::from_utf8_lossy(bytes);
        // Best effort: a read-only or full disk only means compiling at the next start.
        let _ = ptx_cache::store(cache_dir, &key, text.trim_end_matches('\0'));
    }
    let module = ctx
        .load_module(ptx)
        .map_err(CudaError::driver("cuModuleLoadData"))?;
    Ok((Kernels::load(&module)?, module))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C parameters of `extern "C" __global__ void name(...)` in `text`.
    fn c_params<'a>(text: &'a str, name: &str) -> Option<Vec<&'a str>> {
        let start = text.find(&format!("__global__ void {name}("))?;
        let rest = &text[start..];
        let open = rest.find('(')?;
        let close = rest.find(')')?;
        Some(rest[open + 1..close].split(',').map(str::trim).collect())
    }

    fn same_type(c: &str, rust: &str) -> bool {
        match rust {
            "DevPtr" => c.contains('*'),
            "u64" => c.starts_with("u64 "),
            "i32" => c.starts_with("int "),
            "f32" => c.starts_with("float "),
            "Affine" => c.starts_with("Affine "),
            _ => false,
        }
    }

    #[test]
    fn declarations_match_the_sources() {
        for (file, name, types_of) in DECLARED {
            let mut types = Vec::new();
            types_of(&mut types);
            let text = SOURCES
                .iter()
                .find(|(f, _)| f == file)
                .map(|(_, t)| *t)
                .unwrap_or_else(|| panic!("{file} is not a source"));
            let params =
                c_params(text, name).unwrap_or_else(|| panic!("no kernel {name} in {file}"));
            assert_eq!(
                params.len(),
                types.len(),
                "{name}: {file} has {params:?}, the table {types:?}"
            );
            for (c, rust) in params.iter().zip(&types) {
                assert!(
                    same_type(c, rust),
                    "{name}: `{c}` in {file}, `{rust}` in the table"
                );
            }
        }
        // And nothing in the sources is left out of the table.
        for (file, text) in SOURCES {
            for piece in text.split("__global__ void ").skip(1) {
                let name = &piece[..piece.find('(').unwrap_or(0)];
                assert!(
                    DECLARED.iter().any(|(f, n, _)| f == file && *n == name),
                    "kernel {name} of {file} is not in the table"
                );
            }
        }
    }

    #[test]
    fn the_program_marks_every_file() {
        let src = kernel_source();
        for (name, _) in SOURCES {
            assert!(src.contains(&format!("#line 1 \"{name}\"")), "{name}");
        }
        assert!(src.starts_with("#line 1 \"common.cuh\""));
    }
}
