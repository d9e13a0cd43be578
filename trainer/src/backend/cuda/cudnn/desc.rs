//! cuDNN's descriptors of a convolution (its tensors, its filter, the convolution
//! itself), each freed when dropped, and each call's failure a [`CudaError::Cudnn`]
//! naming the call.

use std::ffi::c_int;

use cudarc::cudnn::result::{self, CudnnError};
use cudarc::cudnn::sys;

use super::CudnnLayout;
use crate::backend::cuda::CudaError;

/// `Err` mapper for cuDNN call `call`.
pub(super) fn cudnn_err(call: &'static str) -> impl Fn(CudnnError) -> CudaError {
    move |source| CudaError::Cudnn { call, source }
}

/// A dimension as cuDNN's `int`: a larger one is refused here rather than wrapped.
fn dim(call: &'static str, v: usize) -> Result<c_int, CudaError> {
    c_int::try_from(v).map_err(|_| CudaError::Cudnn {
        call,
        source: CudnnError(sys::cudnnStatus_t::CUDNN_STATUS_BAD_PARAM),
    })
}

fn dims4(call: &'static str, d: [usize; 4]) -> Result<[c_int; 4], CudaError> {
    Ok([
        dim(call, d[0])?,
        dim(call, d[1])?,
        dim(call, d[2])?,
        dim(call, d[3])?,
    ])
}

/// A packed NCHW tensor.
pub(super) struct TensorDesc(pub(super) sys::cudnnTensorDescriptor_t);

impl TensorDesc {
    /// `[n, c, h, w]` of `dtype` laid out as `layout` says: packed NCHW, or our own
    /// channel-major `[c, n, h, w]` described with strides.
    pub(super) fn new(
        dtype: sys::cudnnDataType_t,
        d: [usize; 4],
        layout: CudnnLayout,
    ) -> Result<Self, CudaError> {
        match layout {
            CudnnLayout::Packed => Self::nchw(dtype, d),
            CudnnLayout::Strided => Self::cnhw(dtype, d),
        }
    }

    /// `[n, c, h, w]` stored as `[c, n, h, w]`: strides n `h*w`, c `n*h*w`, h `w`, w 1.
    fn cnhw(dtype: sys::cudnnDataType_t, d: [usize; 4]) -> Result<Self, CudaError> {
        const CALL: &str = "cudnnSetTensor4dDescriptorEx";
        let [n, _, h, w] = d;
        let strides = dims4(CALL, [h * w, n * h * w, w, 1])?;
        let d = dims4(CALL, d)?;
        let desc = Self(
            result::create_tensor_descriptor().map_err(cudnn_err("cudnnCreateTensorDescriptor"))?,
        );
        // SAFETY: `desc.0` was just created and is freed only by `drop`.
        unsafe { result::set_tensor4d_descriptor_ex(desc.0, dtype, d, strides) }
            .map_err(cudnn_err(CALL))?;
        Ok(desc)
    }

    /// `[n, c, h, w]` of `dtype`, packed (w fastest).
    fn nchw(dtype: sys::cudnnDataType_t, d: [usize; 4]) -> Result<Self, CudaError> {
        const CALL: &str = "cudnnSetTensor4dDescriptor";
        let d = dims4(CALL, d)?;
        let desc = Self(
            result::create_tensor_descriptor().map_err(cudnn_err("cudnnCreateTensorDescriptor"))?,
        );
        // SAFETY: `desc.0` was just created and is freed only by `drop`.
        unsafe {
            result::set_tensor4d_descriptor(
                desc.0,
                sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                dtype,
                d,
            )
        }
        .map_err(cudnn_err(CALL))?;
        Ok(desc)
    }
}

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created by `nchw`, destroyed once, here. A failure cannot be reported
        // from a drop and leaks only the descriptor.
        let _ = unsafe { result::destroy_tensor_descriptor(self.0) };
    }
}

/// A filter `[k, c, r, s]` (out, in, kernel rows, kernel columns): `CUDNN_TENSOR_NCHW`
/// is KCRS, the layout of our weights `[cout, c, kh, kw]`.
pub(super) struct FilterDesc(pub(super) sys::cudnnFilterDescriptor_t);

impl FilterDesc {
    pub(super) fn kcrs(dtype: sys::cudnnDataType_t, d: [usize; 4]) -> Result<Self, CudaError> {
        const CALL: &str = "cudnnSetFilter4dDescriptor";
        let d = dims4(CALL, d)?;
        let desc = Self(
            result::create_filter_descriptor().map_err(cudnn_err("cudnnCreateFilterDescriptor"))?,
        );
        // SAFETY: `desc.0` was just created and is freed only by `drop`.
        unsafe {
            result::set_filter4d_descriptor(
                desc.0,
                dtype,
                sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                d,
            )
        }
        .map_err(cudnn_err(CALL))?;
        Ok(desc)
    }
}

impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: created by `kcrs`, destroyed once, here.
        let _ = unsafe { result::destroy_filter_descriptor(self.0) };
    }
}

/// A 2-D cross-correlation (what im2col + GEMM computes: no kernel flip), the same
/// padding and stride on both axes, no dilation, accumulating in f32.
pub(super) struct ConvDesc(pub(super) sys::cudnnConvolutionDescriptor_t);

impl ConvDesc {
    pub(super) fn new(pad: usize, stride: usize) -> Result<Self, CudaError> {
        const CALL: &str = "cudnnSetConvolution2dDescriptor";
        let (pad, stride) = (dim(CALL, pad)?, dim(CALL, stride)?);
        let desc = Self(
            result::create_convolution_descriptor()
                .map_err(cudnn_err("cudnnCreateConvolutionDescriptor"))?,
        );
        // SAFETY: `desc.0` was just created and is freed only by `drop`.
        unsafe {
            sys::cudnnSetConvolution2dDescriptor(
                desc.0,
                pad,
                pad,
                stride,
                stride,
                1,
                1,
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                sys::cudnnDataType_t::CUDNN_DATA_FLOAT,
            )
        }
        .result()
        .map_err(cudnn_err(CALL))?;
        Ok(desc)
    }

    /// The math the next calls with this descriptor may use (FMA only, or tensor cores).
    pub(super) fn set_math(&self, math: sys::cudnnMathType_t) -> Result<(), CudaError> {
        // SAFETY: a live descriptor and a valid enum value.
        unsafe { result::set_convolution_math_type(self.0, math) }
            .map_err(cudnn_err("cudnnSetConvolutionMathType"))
    }
}

impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: created by `new`, destroyed once, here.
        let _ = unsafe { result::destroy_convolution_descriptor(self.0) };
    }
}
