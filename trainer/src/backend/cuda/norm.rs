//! Normalisation on CUDA (`kernels/batchnorm.cu`, `kernels/datanorm.cu`): batch norm
//! as per-chunk partial sums reduced in a fixed order (so the result depends on the
//! shape only), and `datanorm`, u8 images to normalised f32.

use cudarc::driver::LaunchConfig;

use super::buffer::DevPtr;
use super::kernels::{
    Affine, BnApply, BnApplyGrads, BnFinalizeGrads, BnFinalizeStats, BnPartialGrads,
    BnPartialStats, DataNorm, DATANORM_MAX_CHANNELS,
};
use super::launch::{blocks, OpCx};
use super::CudaBackend;
use crate::backend::{
    BResult, BatchNormBackwardArgs, BatchNormForwardArgs, BnGeom, DataLayout, DataNormArgs, NormOps,
};

/// Elements of one batch-norm partial sum: fixed, so the reduction order depends only
/// on the shape, never on the device.
const BN_CHUNK: usize = 8192;

/// The partial sums of a batch norm over `m` elements per channel: runs `f` with a
/// scratch area for them, their number of chunks per channel, and the grid of the
/// kernel that writes them (a block per chunk and channel).
fn with_partials(
    cx: &OpCx<'_>,
    bn: &BnGeom,
    m: usize,
    f: impl FnOnce(DevPtr, u64, LaunchConfig) -> BResult<()>,
) -> BResult<()> {
    let nchunks = m.div_ceil(BN_CHUNK);
    if bn.c > u16::MAX as usize || nchunks > i32::MAX as usize {
        return Err(cx.err("too many channels or chunks for one launch"));
    }
    let grid = blocks(nchunks as u32, bn.c as u32);
    cx.backend
        .with_scratch(bn.c * nchunks * 16, |part| f(part, nchunks as u64, grid))
}

impl NormOps for CudaBackend {
    fn batchnorm_forward(&self, op: BatchNormForwardArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("batchnorm_forward");
        let (bn, train) = (op.bn, op.state.train);
        let m = bn.n * bn.hw;
        let x = cx.read(op.state.x, bn.c * m, "input")?;
        let gamma_beta = cx.read(op.state.gamma_beta, 2 * bn.c, "gamma_beta")?;
        let y = cx.write(&op.y, bn.c * m, "output")?;
        let running = cx.write(&op.state.running, 2 * bn.c, "running")?;
        if m == 0 || bn.c == 0 {
            return Ok(());
        }
        let (c, m64) = (bn.c as u64, m as u64);
        let apply = |saved| {
            let params = BnApply {
                x,
                gamma_beta,
                saved,
                running,
                y,
                c,
                m: m64,
                eps: bn.eps,
                train: train as i32,
                relu: bn.relu as i32,
            };
            cx.launch(&self.kernels().bn_apply, cx.grid(bn.c * m), params)
        };
        if !train {
            // `saved` is neither read nor written in eval mode; pass a valid address.
            return apply(running);
        }
        let saved = cx.write(&op.state.saved, 2 * bn.c, "saved")?;
        with_partials(&cx, &bn, m, |partial, nchunks, grid| {
            let stats = BnPartialStats {
                x,
                partial,
                m: m64,
                chunk: BN_CHUNK as u64,
            };
            let k = self.kernels();
            cx.launch(&k.bn_partial_stats, grid, stats)?;
            let finalize = BnFinalizeStats {
                x,
                partial,
                nchunks,
                c,
                m: m64,
                eps: bn.eps,
                momentum: bn.momentum,
                saved,
                running,
            };
            cx.launch(&k.bn_finalize_stats, cx.grid(bn.c), finalize)
        })?;
        apply(saved)
    }

    fn batchnorm_backward(&self, op: BatchNormBackwardArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("batchnorm_backward");
        let bn = op.bn;
        let m = bn.n * bn.hw;
        let x = cx.read(op.grads.x, bn.c * m, "input")?;
        let dy = cx.read(op.dy, bn.c * m, "gradient")?;
        // `y` is read only with the fused ReLU; otherwise pass any valid address.
        let y = if bn.relu {
            cx.read(op.y, bn.c * m, "output")?
        } else {
            x
        };
        let gamma_beta = cx.read(op.grads.gamma_beta, 2 * bn.c, "gamma_beta")?;
        let saved = cx.read(op.grads.saved, 2 * bn.c, "saved")?;
        let dgamma_beta = cx.write(&op.grads.dgamma_beta, 2 * bn.c, "dgamma_beta")?;
        let dx = cx.write(&op.grads.dx, bn.c * m, "input gradient")?;
        if m == 0 || bn.c == 0 {
            return Ok(());
        }
        let (c, m64, relu) = (bn.c as u64, m as u64, bn.relu as i32);
        let k = self.kernels();
        with_partials(&cx, &bn, m, |partial, nchunks, grid| {
            let grads = BnPartialGrads {
                x,
                y,
                dy,
                saved,
                partial,
                m: m64,
                chunk: BN_CHUNK as u64,
                relu,
            };
            cx.launch(&k.bn_partial_grads, grid, grads)?;
            let finalize = BnFinalizeGrads {
                partial,
                nchunks,
                c,
                saved,
                dgamma_beta,
            };
            cx.launch(&k.bn_finalize_grads, cx.grid(bn.c), finalize)
        })?;
        let params = BnApplyGrads {
            x,
            y,
            dy,
            gamma_beta,
            saved,
            dgamma_beta,
            dx,
            c,
            m: m64,
            relu,
        };
        cx.launch(&k.bn_apply_grads, cx.grid(bn.c * m), params)
    }

    fn datanorm(&self, op: DataNormArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("datanorm");
        let c = op.channels()?;
        if c > DATANORM_MAX_CHANNELS {
            return Err(cx.err(format!(
                "{c} channels; the CUDA kernel takes at most {DATANORM_MAX_CHANNELS}"
            )));
        }
        let (n, hw) = (op.n, op.h * op.w);
        let x = cx.read(op.x, n * hw * c, "input")?;
        let y = cx.write(&op.y, n * hw * c, "output")?;
        if n == 0 || hw == 0 {
            return Ok(());
        }
        // The same per-channel constants as the CPU, computed the same way on the host.
        let mut t: Affine = [0.0; 2 * DATANORM_MAX_CHANNELS];
        for ch in 0..c {
            t[ch] = 1.0 / (255.0 * op.std[ch]);
            t[DATANORM_MAX_CHANNELS + ch] = -op.mean[ch] / op.std[ch];
        }
        let kernel = match op.layout {
            DataLayout::ChannelMajor => &self.kernels().datanorm_cm,
            DataLayout::FeatureMajor => &self.kernels().datanorm_fm,
        };
        let params = DataNorm {
            x,
            y,
            n: n as u64,
            hw: hw as u64,
            c: c as i32,
            t,
        };
        cx.launch(kernel, cx.grid(n * hw * c), params)
    }
}
