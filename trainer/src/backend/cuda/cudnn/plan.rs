//! The plan of one convolution shape on cuDNN: its descriptors and the algorithm of
//! each direction (forward, backward data, backward filter), chosen once by cuDNN's
//! heuristics (`cudnnGetConvolution*Algorithm_v7`, what PyTorch does with
//! `benchmark=False`) and kept for the shape's next calls.
//!
//! An algorithm qualifies when cuDNN says it supports the shape (status SUCCESS), it is
//! deterministic (the `Backend` contract: the same bits on every call), its workspace
//! fits [`WORKSPACE_LIMIT`], and in f32 mode it runs with FMA math only (no TF32). The
//! first that qualifies, in cuDNN's order of expected speed, is taken.

use std::ffi::c_int;

use cudarc::cudnn::sys::{
    self, cudnnConvolutionBwdDataAlgoPerf_t as BwdDataPerf,
    cudnnConvolutionBwdFilterAlgoPerf_t as BwdFilterPerf, cudnnConvolutionFwdAlgoPerf_t as FwdPerf,
    cudnnMathType_t as Math,
};

use super::desc::{cudnn_err, ConvDesc, FilterDesc, TensorDesc};
use super::CudnnLayout;
use crate::backend::cuda::CudaError;
use crate::backend::ConvGeom;
use crate::precision::Precision;

/// The most device memory one convolution call's workspace may take.
pub(super) const WORKSPACE_LIMIT: usize = 256 << 20;

/// Results asked of a heuristic: more than any direction has algorithms (8, 6, 7).
const MAX_ALGOS: usize = 16;

/// What a plan is for: the geometry (batch size included), the output channels and the
/// arithmetic.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub(super) struct PlanKey {
    dims: [usize; 9],
    precision: Precision,
}

impl PlanKey {
    pub(super) fn new(g: &ConvGeom, cout: usize, precision: Precision) -> Self {
        Self {
            dims: [g.c, g.n, g.h, g.w, g.kh, g.kw, g.stride, g.pad, cout],
            precision,
        }
    }
}

/// A chosen algorithm, the math it runs with, and its workspace in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Algo<A> {
    pub(super) algo: A,
    pub(super) math: Math,
    pub(super) workspace: usize,
}

/// The fields of a heuristic's result that the choice reads (the three directions have
/// a struct each, alike).
pub(super) trait Perf: Copy {
    type Algo: Copy;
    fn algo(&self) -> Self::Algo;
    fn ok(&self) -> bool;
    fn deterministic(&self) -> bool;
    fn memory(&self) -> usize;
    fn math(&self) -> Math;
}

macro_rules! perf {
    ($($t:ty => $a:ty),*) => {$(
        impl Perf for $t {
            type Algo = $a;
            fn algo(&self) -> $a {
                self.algo
            }
            fn ok(&self) -> bool {
                self.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS
            }
            fn deterministic(&self) -> bool {
                self.determinism == sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC
            }
            fn memory(&self) -> usize {
                self.memory
            }
            fn math(&self) -> Math {
                self.mathType
            }
        }
    )*};
}

perf!(
    FwdPerf => sys::cudnnConvolutionFwdAlgo_t,
    BwdDataPerf => sys::cudnnConvolutionBwdDataAlgo_t,
    BwdFilterPerf => sys::cudnnConvolutionBwdFilterAlgo_t
);

/// The math a convolution descriptor asks for: FMA only in f32 (parity with the CPU,
/// PyTorch's `allow_tf32 = False`), tensor cores in bf16.
pub(super) fn requested_math(precision: Precision) -> Math {
    match precision {
        Precision::F32 => Math::CUDNN_FMA_MATH,
        Precision::Bf16 => Math::CUDNN_TENSOR_OP_MATH,
    }
}

/// The first of `results` (cuDNN's order) that qualifies; see the module's note.
pub(super) fn pick<P: Perf>(results: &[P], precision: Precision) -> Option<Algo<P::Algo>> {
    results
        .iter()
        .find(|p| {
            p.ok()
                && p.deterministic()
                && p.memory() <= WORKSPACE_LIMIT
                && (precision == Precision::Bf16 || p.math() == Math::CUDNN_FMA_MATH)
        })
        .map(|p| Algo {
            algo: p.algo(),
            math: p.math(),
            workspace: p.memory(),
        })
}

/// cuDNN's element type for `precision`'s operands.
pub(super) fn data_type(precision: Precision) -> sys::cudnnDataType_t {
    match precision {
        Precision::F32 => sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
        Precision::Bf16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
    }
}

/// A shape's descriptors and algorithms.
pub(super) struct Plan {
    /// How the activations are given to cuDNN.
    pub(super) layout: CudnnLayout,
    /// The input, `[n, c, h, w]` as `layout` lays it out.
    pub(super) x: TensorDesc,
    /// The output, `[n, cout, oh, ow]` likewise.
    pub(super) y: TensorDesc,
    /// The weights, KCRS `[cout, c, kh, kw]`.
    pub(super) w: FilterDesc,
    pub(super) conv: ConvDesc,
    pub(super) fwd: Algo<sys::cudnnConvolutionFwdAlgo_t>,
    pub(super) bwd_data: Algo<sys::cudnnConvolutionBwdDataAlgo_t>,
    pub(super) bwd_filter: Algo<sys::cudnnConvolutionBwdFilterAlgo_t>,
}

// SAFETY: the descriptors are host-side structs that cuDNN lets any thread use, one at
// a time; a plan lives in the backend's cuDNN state, behind its mutex.
unsafe impl Send for Plan {}

/// Why a shape runs on im2col instead: no algorithm qualifies in `direction`.
fn none_qualifies(direction: &str) -> String {
    format!(
        "no deterministic {direction} algorithm with a workspace under {} MiB",
        WORKSPACE_LIMIT >> 20
    )
}

impl Plan {
    /// The plan of `key`'s shape on `handle`: `Ok(Err(reason))` when some direction has
    /// no qualifying algorithm (the shape then runs on im2col).
    pub(super) fn new(
        handle: sys::cudnnHandle_t,
        geom: &ConvGeom,
        cout: usize,
        precision: Precision,
        layout: CudnnLayout,
    ) -> Result<Result<Self, String>, CudaError> {
        let dt = data_type(precision);
        let x = TensorDesc::new(dt, [geom.n, geom.c, geom.h, geom.w], layout)?;
        let y = TensorDesc::new(dt, [geom.n, cout, geom.out_h(), geom.out_w()], layout)?;
        let w = FilterDesc::kcrs(dt, [cout, geom.c, geom.kh, geom.kw])?;
        let conv = ConvDesc::new(geom.pad, geom.stride)?;
        let math = requested_math(precision);
        conv.set_math(math)?;
        check_output_dims(&conv, &x, &w, [geom.n, cout, geom.out_h(), geom.out_w()])?;

        // SAFETY (the three queries): live handle and descriptors; `out` has room for
        // MAX_ALGOS results, and only the `count` cuDNN wrote are read.
        let mut out = [zeroed::<FwdPerf>(); MAX_ALGOS];
        let mut count: c_int = 0;
        unsafe {
            sys::cudnnGetConvolutionForwardAlgorithm_v7(
                handle,
                x.0,
                w.0,
                conv.0,
                y.0,
                MAX_ALGOS as c_int,
                &mut count,
                out.as_mut_ptr(),
            )
        }
        .result()
        .map_err(cudnn_err("cudnnGetConvolutionForwardAlgorithm_v7"))?;
        let Some(mut fwd) = pick(&out[..clamp(count)], precision) else {
            return Ok(Err(none_qualifies("forward")));
        };

        let mut out = [zeroed::<BwdDataPerf>(); MAX_ALGOS];
        unsafe {
            sys::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                handle,
                w.0,
                y.0,
                conv.0,
                x.0,
                MAX_ALGOS as c_int,
                &mut count,
                out.as_mut_ptr(),
            )
        }
        .result()
        .map_err(cudnn_err("cudnnGetConvolutionBackwardDataAlgorithm_v7"))?;
        let Some(mut bwd_data) = pick(&out[..clamp(count)], precision) else {
            return Ok(Err(none_qualifies("backward-data")));
        };

        let mut out = [zeroed::<BwdFilterPerf>(); MAX_ALGOS];
        unsafe {
            sys::cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                handle,
                x.0,
                y.0,
                conv.0,
                w.0,
                MAX_ALGOS as c_int,
                &mut count,
                out.as_mut_ptr(),
            )
        }
        .result()
        .map_err(cudnn_err("cudnnGetConvolutionBackwardFilterAlgorithm_v7"))?;
        let Some(mut bwd_filter) = pick(&out[..clamp(count)], precision) else {
            return Ok(Err(none_qualifies("backward-filter")));
        };

        // The workspace each call asks for with its algorithm and math, which the
        // heuristic's estimate may understate.
        conv.set_math(fwd.math)?;
        fwd.workspace = fwd.workspace.max(
            // SAFETY: live handle and descriptors, an algorithm cuDNN returned.
            unsafe {
                cudarc::cudnn::result::get_convolution_forward_workspace_size(
                    handle, x.0, w.0, conv.0, y.0, fwd.algo,
                )
            }
            .map_err(cudnn_err("cudnnGetConvolutionForwardWorkspaceSize"))?,
        );
        conv.set_math(bwd_data.math)?;
        bwd_data.workspace = bwd_data.workspace.max(
            // SAFETY: as above.
            unsafe {
                cudarc::cudnn::result::get_convolution_backward_data_workspace_size(
                    handle,
                    w.0,
                    y.0,
                    conv.0,
                    x.0,
                    bwd_data.algo,
                )
            }
            .map_err(cudnn_err("cudnnGetConvolutionBackwardDataWorkspaceSize"))?,
        );
        conv.set_math(bwd_filter.math)?;
        bwd_filter.workspace = bwd_filter.workspace.max(
            // SAFETY: as above.
            unsafe {
                cudarc::cudnn::result::get_convolution_backward_filter_workspace_size(
                    handle,
                    x.0,
                    y.0,
                    conv.0,
                    w.0,
                    bwd_filter.algo,
                )
            }
            .map_err(cudnn_err("cudnnGetConvolutionBackwardFilterWorkspaceSize"))?,
        );
        if fwd
            .workspace
            .max(bwd_data.workspace)
            .max(bwd_filter.workspace)
            > WORKSPACE_LIMIT
        {
            return Ok(Err(none_qualifies("(after the workspace query)")));
        }
        Ok(Ok(Self {
            layout,
            x,
            y,
            w,
            conv,
            fwd,
            bwd_data,
            bwd_filter,
        }))
    }
}

/// The returned count as a length, within the array cuDNN was given.
fn clamp(count: c_int) -> usize {
    (count.max(0) as usize).min(MAX_ALGOS)
}

/// An all-zero perf struct: every field's zero is a valid value (algorithm 0, status
/// SUCCESS, NON_DETERMINISTIC, DEFAULT_MATH), and cuDNN overwrites those it returns.
fn zeroed<P>() -> P {
    // SAFETY: only for the three perf structs above (C structs of C enums, integers
    // and floats), whose zero bit pattern is valid as said.
    unsafe { std::mem::zeroed() }
}

/// cuDNN's output shape must be ours (`ConvGeom::out_h`, `out_w`): a mismatch would
/// write outside the output.
fn check_output_dims(
    conv: &ConvDesc,
    x: &TensorDesc,
    w: &FilterDesc,
    want: [usize; 4],
) -> Result<(), CudaError> {
    let mut d: [c_int; 4] = [0; 4];
    let [n, c, h, wd] = &mut d;
    // SAFETY: live descriptors, four valid out-pointers.
    unsafe { sys::cudnnGetConvolution2dForwardOutputDim(conv.0, x.0, w.0, n, c, h, wd) }
        .result()
        .map_err(cudnn_err("cudnnGetConvolution2dForwardOutputDim"))?;
    if d.map(|v| v as usize) != want {
        return Err(CudaError::Cudnn {
            call: "cudnnGetConvolution2dForwardOutputDim",
            source: cudarc::cudnn::result::CudnnError(sys::cudnnStatus_t::CUDNN_STATUS_BAD_PARAM),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sys::cudnnConvolutionFwdAlgo_t as A;

    fn perf(algo: A, ok: bool, det: bool, memory: usize, math: Math) -> FwdPerf {
        let mut p = zeroed::<FwdPerf>();
        p.algo = algo;
        p.status = if ok {
            sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS
        } else {
            sys::cudnnStatus_t::CUDNN_STATUS_NOT_SUPPORTED
        };
        p.determinism = if det {
            sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC
        } else {
            sys::cudnnDeterminism_t::CUDNN_NON_DETERMINISTIC
        };
        p.memory = memory;
        p.mathType = math;
        p
    }

    #[test]
    fn the_first_supported_deterministic_algorithm_within_the_workspace_is_taken() {
        let fma = Math::CUDNN_FMA_MATH;
        let results = [
            perf(A::CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, false, true, 0, fma),
            perf(A::CUDNN_CONVOLUTION_FWD_ALGO_FFT, true, false, 0, fma),
            perf(
                A::CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
                true,
                true,
                WORKSPACE_LIMIT + 1,
                fma,
            ),
            perf(A::CUDNN_CONVOLUTION_FWD_ALGO_GEMM, true, true, 1 << 20, fma),
            perf(A::CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, true, true, 0, fma),
        ];
        let got = pick(&results, Precision::F32).expect("one qualifies");
        assert_eq!(got.algo, A::CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
        assert_eq!(got.workspace, 1 << 20);
        assert_eq!(pick(&results[..3], Precision::F32), None);
        assert_eq!(pick::<FwdPerf>(&[], Precision::Bf16), None);
    }

    #[test]
    fn f32_refuses_tensor_core_math_and_bf16_takes_it() {
        let tc = perf(
            A::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
            true,
            true,
            0,
            Math::CUDNN_TENSOR_OP_MATH,
        );
        let default = perf(
            A::CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
            true,
            true,
            0,
            Math::CUDNN_DEFAULT_MATH,
        );
        let fma = perf(
            A::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
            true,
            true,
            0,
            Math::CUDNN_FMA_MATH,
        );
        // DEFAULT_MATH on f32 data lets cuDNN use TF32 on Ampere and later: refused too.
        let got = pick(&[tc, default, fma], Precision::F32).expect("fma qualifies");
        assert_eq!(got.algo, A::CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
        let got = pick(&[tc, default, fma], Precision::Bf16).expect("tensor cores");
        assert_eq!(got.math, Math::CUDNN_TENSOR_OP_MATH);
        assert_eq!(requested_math(Precision::F32), Math::CUDNN_FMA_MATH);
        assert_eq!(requested_math(Precision::Bf16), Math::CUDNN_TENSOR_OP_MATH);
    }

    #[test]
    fn keys_tell_shapes_batches_and_precisions_apart() {
        let g = ConvGeom {
            c: 3,
            n: 8,
            h: 32,
            w: 32,
            kh: 3,
            kw: 3,
            stride: 1,
            pad: 1,
            col: crate::backend::ColLayout::TapMajor,
        };
        let k = PlanKey::new(&g, 16, Precision::F32);
        assert_eq!(k, PlanKey::new(&g, 16, Precision::F32));
        assert_ne!(k, PlanKey::new(&ConvGeom { n: 7, ..g }, 16, Precision::F32));
        assert_ne!(k, PlanKey::new(&g, 17, Precision::F32));
        assert_ne!(k, PlanKey::new(&g, 16, Precision::Bf16));
        assert_ne!(
            k,
            PlanKey::new(&ConvGeom { stride: 2, ..g }, 16, Precision::F32)
        );
    }
}
