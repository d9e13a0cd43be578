//! Normalisation on CUDA (`kernels/batchnorm.cu`, `kernels/datanorm.cu`): batch norm
//! as per-chunk partial sums reduced in a fixed order (so the result depends on the
//! shape only), and `datanorm`, u8 images to normalised f32.

use cudarc::driver::LaunchConfig;

use super::buffer::{device_addr, op_err, DevPtr};
use super::kernels::{Affine, DATANORM_MAX_CHANNELS};
use super::{cuda_err, CudaBackend, RED_THREADS};
use crate::backend::{BResult, BnGeom, DataLayout, In, Out};

/// Elements of one batch-norm partial sum: fixed, so the reduction order depends only
/// on the shape, never on the device.
const BN_CHUNK: usize = 8192;

#[allow(clippy::too_many_arguments)]
pub(super) fn batchnorm_forward(
    backend: &CudaBackend,
    x: In<'_, CudaBackend>,
    gamma_beta: In<'_, CudaBackend>,
    running: Out<'_, CudaBackend>,
    saved: Out<'_, CudaBackend>,
    y: Out<'_, CudaBackend>,
    bn: BnGeom,
    train: bool,
) -> BResult<()> {
    let op = "batchnorm_forward";
    let m = bn.n * bn.hw;
    let s = backend.stream();
    let xp = device_addr(s, x.buf, x.off, bn.c * m, op, "input")?;
    let gp = device_addr(
        s,
        gamma_beta.buf,
        gamma_beta.off,
        2 * bn.c,
        op,
        "gamma_beta",
    )?;
    let yp = device_addr(s, y.buf, y.off, bn.c * m, op, "output")?;
    let rp = device_addr(s, running.buf, running.off, 2 * bn.c, op, "running")?;
    if m == 0 || bn.c == 0 {
        return Ok(());
    }
    let (c, m64) = (bn.c as u64, m as u64);
    let apply = |sp: DevPtr| {
        backend
            .kernels()
            .bn_apply(
                s,
                backend.grid(bn.c * m),
                xp,
                gp,
                sp,
                rp,
                yp,
                c,
                m64,
                bn.eps,
                train as i32,
                bn.relu as i32,
            )
            .map_err(cuda_err(op))
    };
    if !train {
        // `saved` is neither read nor written in eval mode; pass a valid address.
        return apply(rp);
    }
    let sp = device_addr(s, saved.buf, saved.off, 2 * bn.c, op, "saved")?;
    let nchunks = m.div_ceil(BN_CHUNK);
    if bn.c > u16::MAX as usize || nchunks > i32::MAX as usize {
        return Err(op_err(op, "too many channels or chunks for one launch"));
    }
    backend.with_scratch(bn.c * nchunks * 16, |part| {
        let cfg = LaunchConfig {
            grid_dim: (nchunks as u32, bn.c as u32, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        backend
            .kernels()
            .bn_partial_stats(s, cfg, xp, part, m64, BN_CHUNK as u64)
            .map_err(cuda_err(op))?;
        backend
            .kernels()
            .bn_finalize_stats(
                s,
                backend.grid(bn.c),
                xp,
                part,
                nchunks as u64,
                c,
                m64,
                bn.eps,
                bn.momentum,
                sp,
                rp,
            )
            .map_err(cuda_err(op))
    })?;
    apply(sp)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn batchnorm_backward(
    backend: &CudaBackend,
    x: In<'_, CudaBackend>,
    y: In<'_, CudaBackend>,
    dy: In<'_, CudaBackend>,
    gamma_beta: In<'_, CudaBackend>,
    saved: In<'_, CudaBackend>,
    dgamma_beta: Out<'_, CudaBackend>,
    dx: Out<'_, CudaBackend>,
    bn: BnGeom,
) -> BResult<()> {
    let op = "batchnorm_backward";
    let m = bn.n * bn.hw;
    let s = backend.stream();
    let xp = device_addr(s, x.buf, x.off, bn.c * m, op, "input")?;
    let dyp = device_addr(s, dy.buf, dy.off, bn.c * m, op, "gradient")?;
    // `y` is read only with the fused ReLU; otherwise pass any valid address.
    let yp = if bn.relu {
        device_addr(s, y.buf, y.off, bn.c * m, op, "output")?
    } else {
        xp
    };
    let gp = device_addr(
        s,
        gamma_beta.buf,
        gamma_beta.off,
        2 * bn.c,
        op,
        "gamma_beta",
    )?;
    let sp = device_addr(s, saved.buf, saved.off, 2 * bn.c, op, "saved")?;
    let dgp = device_addr(
        s,
        dgamma_beta.buf,
        dgamma_beta.off,
        2 * bn.c,
        op,
        "dgamma_beta",
    )?;
    let dxp = device_addr(s, dx.buf, dx.off, bn.c * m, op, "input gradient")?;
    if m == 0 || bn.c == 0 {
        return Ok(());
    }
    let nchunks = m.div_ceil(BN_CHUNK);
    if bn.c > u16::MAX as usize || nchunks > i32::MAX as usize {
        return Err(op_err(op, "too many channels or chunks for one launch"));
    }
    let (c, m64, relu) = (bn.c as u64, m as u64, bn.relu as i32);
    backend.with_scratch(bn.c * nchunks * 16, |part| {
        let cfg = LaunchConfig {
            grid_dim: (nchunks as u32, bn.c as u32, 1),
            block_dim: (RED_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        backend
            .kernels()
            .bn_partial_grads(s, cfg, xp, yp, dyp, sp, part, m64, BN_CHUNK as u64, relu)
            .map_err(cuda_err(op))?;
        backend
            .kernels()
            .bn_finalize_grads(s, backend.grid(bn.c), part, nchunks as u64, c, sp, dgp)
            .map_err(cuda_err(op))
    })?;
    backend
        .kernels()
        .bn_apply_grads(
            s,
            backend.grid(bn.c * m),
            xp,
            yp,
            dyp,
            gp,
            sp,
            dgp,
            dxp,
            c,
            m64,
            relu,
        )
        .map_err(cuda_err(op))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn datanorm(
    backend: &CudaBackend,
    x: In<'_, CudaBackend, u8>,
    n: usize,
    h: usize,
    w: usize,
    mean: &[f32],
    std: &[f32],
    layout: DataLayout,
    y: Out<'_, CudaBackend>,
) -> BResult<()> {
    let c = mean.len();
    if std.len() != c || c == 0 {
        return Err(op_err(
            "datanorm",
            format!("{} means and {} stds", c, std.len()),
        ));
    }
    if c > DATANORM_MAX_CHANNELS {
        return Err(op_err(
            "datanorm",
            format!("{c} channels; the CUDA kernel takes at most {DATANORM_MAX_CHANNELS}"),
        ));
    }
    let hw = h * w;
    let s = backend.stream();
    let xp = device_addr(s, x.buf, x.off, n * hw * c, "datanorm", "input")?;
    let yp = device_addr(s, y.buf, y.off, n * hw * c, "datanorm", "output")?;
    if n == 0 || hw == 0 {
        return Ok(());
    }
    // The same per-channel constants as the CPU, computed the same way on the host.
    let mut t: Affine = [0.0; 2 * DATANORM_MAX_CHANNELS];
    for ch in 0..c {
        t[ch] = 1.0 / (255.0 * std[ch]);
        t[DATANORM_MAX_CHANNELS + ch] = -mean[ch] / std[ch];
    }
    let total = n * hw * c;
    match layout {
        DataLayout::ChannelMajor => backend
            .kernels()
            .datanorm_cm(
                s,
                backend.grid(total),
                xp,
                yp,
                n as u64,
                hw as u64,
                c as i32,
                t,
            )
            .map_err(cuda_err("datanorm")),
        DataLayout::FeatureMajor => backend
            .kernels()
            .datanorm_fm(
                s,
                backend.grid(total),
                xp,
                yp,
                n as u64,
                hw as u64,
                c as i32,
                t,
            )
            .map_err(cuda_err("datanorm")),
    }
}
