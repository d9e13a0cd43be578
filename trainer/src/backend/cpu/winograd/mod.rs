//! Winograd F(2x2, 3x3) convolution on the CPU, for the 3x3, stride-1, pad-1 layers:
//! each 2x2 tile of output is 16 products of transformed 4x4 input patches and
//! transformed weights instead of 36 multiply-adds, so the GEMMs do 4/9 of im2col's
//! work, and nothing 9 times the input's size is written and read back.
//!
//! The forward is `y = A^T [(G g G^T) . (B^T d B)] A` per tile (Lavin and Gray, "Fast
//! Algorithms for Convolutional Neural Networks", 2016): the input patches and the
//! weights are transformed, the 16 element-wise products summed over input channels
//! become 16 GEMMs `M[xi] = U[xi] V[xi]`, and the output transform folds each tile's 16
//! sums into its 2x2 pixels. The backward is that computation's adjoint, so it uses the
//! same transforms: the output gradient is taken to the 16 positions (`A dY A^T`), the
//! weight gradient is `G^T (sum over tiles of dM . V) G` and the input gradient
//! `B (U^T dM) B^T`, scattered back onto the overlapping 4x4 patches.
//!
//! The work is cut as in `conv_blocks`: fixed groups of images, one task each, blocks
//! of images whose transformed matrices stay in cache, single-threaded GEMMs, and the
//! groups' weight gradients added in group order, so the result does not depend on the
//! thread count.
//!
//! `plan` cuts the batch into groups and blocks and the scratch into their parts,
//! `weights` holds the kernels' transforms and `transforms` those of the image tiles.

mod plan;
mod transforms;
mod weights;

use gemm_common::Parallelism;

use super::gemm::{RawGemm, Strided};
use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{BResult, ConvBackwardArgs, ConvForwardArgs, ConvGeom, In, Out};
use plan::{planes_by_group, Job, Plan};
use transforms::Transforms;
use weights::{weight_gradient, weight_transform};

/// Transformed positions per tile (4 x 4).
const XI: usize = 16;

/// Groups of images the batch is cut into (as `conv_blocks`).
const GROUPS: usize = 8;

/// Fewer input channels than this stay on im2col: the GEMMs' sums would be too short
/// to pay for the transforms (the first layer, with its 3 colour channels).
const MIN_CHANNELS: usize = 8;

/// Most floats of one block's transformed input and output (1 MiB): an L2's worth.
pub(super) const BLOCK_FLOATS: usize = 1 << 18;

/// Whether this convolution runs here rather than on im2col.
pub(super) fn applies(geom: &ConvGeom) -> bool {
    geom.kh == 3 && geom.kw == 3 && geom.stride == 1 && geom.pad == 1 && geom.c >= MIN_CHANNELS
}

/// f32 elements of scratch for a convolution of `geom` into `cout` channels.
pub(super) fn scratch(geom: &ConvGeom, cout: usize) -> usize {
    Plan::new(geom, cout, BLOCK_FLOATS).scratch()
}

/// `C[m, n] (+)= A B` on this thread, all dense; `A` and `B` as the strides say.
///
/// # Safety
/// The operands must hold every element the shapes and strides address.
unsafe fn gemm(
    dims: (usize, usize, usize),
    a: (&[f32], Strided),
    b: (&[f32], Strided),
    c: &mut [f32],
    acc: bool,
) {
    RawGemm {
        dims,
        alpha: 1.0,
        a: a.0.as_ptr(),
        sa: a.1,
        b: b.0.as_ptr(),
        sb: b.1,
        beta: if acc { 1.0 } else { 0.0 },
        c: c.as_mut_ptr(),
        ldc: dims.1,
        par: Parallelism::None,
    }
    .run();
}

/// What both directions start from.
struct Prepared<'x, 's> {
    p: Plan,
    /// The input.
    x: &'x [f32],
    /// The transformed weights, at the head of the scratch.
    u: &'s [f32],
    /// The groups' parts of the scratch, after `u`.
    groups: &'s mut [f32],
}

/// A call's plan, its input `x`, and its scratch with the weights `w` transformed into
/// its head.
fn prepare<'x, 's>(
    (geom, cout, block_floats): (&ConvGeom, usize, usize),
    x: In<'x, CpuBackend>,
    (w, scratch): (In<'_, CpuBackend>, Out<'s, CpuBackend>),
    op: &'static str,
) -> BResult<Prepared<'x, 's>> {
    let p = Plan::new(geom, cout, block_floats);
    let x = read_slice(x, geom.input_len(), op)?;
    let w = read_slice(w, cout * geom.c * 9, op)?;
    let scratch = write_slice(scratch, p.scratch(), op)?;
    let (u, groups) = scratch.split_at_mut(p.weights());
    weight_transform(w, &p, u);
    Ok(Prepared { p, x, u, groups })
}

/// `conv_forward` by blocks of at most `block_floats` floats of transformed input and
/// output.
pub(super) fn forward(op: ConvForwardArgs<'_, CpuBackend>, block_floats: usize) -> BResult<()> {
    const OP: &str = "conv_forward";
    let geom = op.geom;
    let shape = (&geom, op.cout, block_floats);
    let Prepared { p, x, u, groups } = prepare(shape, op.x, (op.w, op.scratch), OP)?;
    let y = write_slice(op.y, p.cout * geom.n * geom.h * geom.w, OP)?;
    if p.is_empty(&geom) {
        return Ok(());
    }
    let t = Transforms::for_width(geom.w);
    let mut planes = planes_by_group(y, &geom, &p);
    p.each_block(&geom, groups, &mut planes, |job| {
        let Job {
            blk, v, m, out, wk, ..
        } = job;
        let tb = blk.nb * p.tiles;
        (t.input)(x, blk, wk, v);
        let (uw, vw, mw) = (p.cout * p.c, p.c * tb, p.cout * tb);
        for xi in 0..XI {
            // M[xi][cout, tb] = U[xi][cout, c] V[xi][c, tb]
            // SAFETY: the three are dense slices of these shapes.
            unsafe {
                gemm(
                    (p.cout, tb, p.c),
                    (&u[xi * uw..][..uw], Strided::rows(p.c)),
                    (&v[xi * vw..][..vw], Strided::rows(tb)),
                    &mut m[xi * mw..][..mw],
                    false,
                );
            }
        }
        (t.output)(m, blk, wk, out);
    });
    Ok(())
}

/// `conv_backward` by blocks of at most `block_floats` floats of transformed input and
/// output gradient.
pub(super) fn backward(op: ConvBackwardArgs<'_, CpuBackend>, block_floats: usize) -> BResult<()> {
    const OP: &str = "conv_backward";
    let geom = op.geom;
    let Prepared { p, x, u, groups } =
        prepare((&geom, op.cout, block_floats), op.x, (op.w, op.scratch), OP)?;
    let dy = read_slice(op.dy, p.cout * geom.n * geom.h * geom.w, OP)?;
    let dw = write_slice(op.dw, p.cout * geom.c * 9, OP)?;
    let dx = op
        .dx
        .map(|d| write_slice(d, geom.input_len(), OP))
        .transpose()?;
    if p.is_empty(&geom) {
        dw.fill(0.0);
        if let Some(dx) = dx {
            dx.fill(0.0);
        }
        return Ok(());
    }
    let with_dx = dx.is_some();
    let mut planes = match dx {
        Some(dx) => planes_by_group(dx, &geom, &p),
        None => (0..p.groups).map(|_| Vec::new()).collect(),
    };
    let t = Transforms::for_width(geom.w);
    p.each_block(&geom, groups, &mut planes, |job| {
        let Job {
            index: bi,
            blk,
            v,
            m,
            du,
            out,
            wk,
        } = job;
        let tb = blk.nb * p.tiles;
        (t.input)(x, blk, wk, v);
        (t.gradient)(dy, blk, wk, m);
        let (uw, vw, mw) = (p.cout * p.c, p.c * tb, p.cout * tb);
        for xi in 0..XI {
            let (vx, mx) = (&mut v[xi * vw..][..vw], &m[xi * mw..][..mw]);
            // SAFETY (both): dense slices of these shapes.
            unsafe {
                // dU[xi][cout, c] (+)= dM[xi][cout, tb] V[xi]^T[tb, c]
                gemm(
                    (p.cout, p.c, tb),
                    (mx, Strided::rows(tb)),
                    (vx, Strided::cols(tb)),
                    &mut du[xi * uw..][..uw],
                    bi > 0,
                );
                if with_dx {
                    // dV[xi][c, tb] = U[xi]^T[c, cout] dM[xi][cout, tb], over V.
                    gemm(
                        (p.c, tb, p.cout),
                        (&u[xi * uw..][..uw], Strided::cols(p.c)),
                        (mx, Strided::rows(tb)),
                        vx,
                        false,
                    );
                }
            }
        }
        if with_dx {
            (t.input_gradient)(v, blk, wk, out);
        }
    });
    // The groups' transformed gradients, added in group order into the first group's,
    // then taken back to 3x3.
    let uw = p.weights();
    let grad_at = p.per_group - uw;
    let (first, rest) = groups.split_at_mut(p.per_group);
    let sum = &mut first[grad_at..];
    for g in rest.chunks_exact(p.per_group) {
        for (s, t) in sum.iter_mut().zip(&g[grad_at..]) {
            *s += t;
        }
    }
    weight_gradient(sum, &p, dw);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::conv::{check_convolution, run_convolution, Blocked};
    use crate::backend::ColLayout;

    const WINOGRAD: Blocked = Blocked {
        forward,
        backward,
        scratch: |g, cout, block| Plan::new(g, cout, block).scratch(),
    };

    fn geom(c: usize, n: usize, h: usize, w: usize) -> ConvGeom {
        ConvGeom {
            c,
            n,
            h,
            w,
            kh: 3,
            kw: 3,
            stride: 1,
            pad: 1,
            col: ColLayout::PixelMajor,
        }
    }

    /// Against a direct convolution: odd and even sides (tiles cut by the edge), one
    /// pixel, the widths with transforms of their own (8, 16, 32, 64) and others,
    /// blocks of one image and of several, groups of one image and of several.
    #[test]
    fn winograd_matches_a_direct_convolution() {
        for (c, cout, n, h, w) in [
            (3, 5, 11, 7, 6),
            (8, 4, 3, 8, 8),
            (2, 3, 9, 5, 3),
            (4, 2, 2, 1, 1),
            (5, 6, 17, 4, 9),
            (3, 2, 2, 15, 16),
            (2, 3, 3, 32, 32),
            (2, 3, 2, 9, 64),
        ] {
            let per_image = XI * (c + cout) * usize::div_ceil(h, 2) * usize::div_ceil(w, 2);
            check_convolution(
                &WINOGRAD,
                geom(c, n, h, w),
                cout,
                &[1, 2 * per_image, 1 << 20],
            );
        }
    }

    /// The output and both gradients are the same bits on one thread and on three, and
    /// the weight gradient does not depend on whether dx is wanted.
    #[test]
    fn winograd_does_not_depend_on_the_threads() {
        let (g, cout) = (geom(9, 13, 6, 10), 7);
        let vals = |len: usize, f: f32| (0..len).map(|i| (i as f32 * f).cos()).collect::<Vec<_>>();
        let (x, w, dy) = (
            vals(g.input_len(), 0.3),
            vals(cout * g.c * 9, 0.7),
            vals(cout * g.n * 60, 0.2),
        );
        let run = |threads: usize, with_dx: bool| {
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| {
                    run_convolution(&WINOGRAD, (g, cout, BLOCK_FLOATS), [&x, &w, &dy], with_dx)
                })
                .map(bits)
        };
        let one = run(1, true);
        assert_eq!(one, run(3, true));
        assert_eq!(one[1], run(2, false)[1]);
    }

    /// Only the 3x3, stride-1, pad-1 convolutions with enough channels come here.
    #[test]
    fn applies_to_same_padded_3x3_only() {
        assert!(applies(&geom(MIN_CHANNELS, 1, 8, 8)));
        assert!(!applies(&geom(3, 1, 8, 8)));
        assert!(!applies(&ConvGeom {
            stride: 2,
            ..geom(16, 1, 8, 8)
        }));
        assert!(!applies(&ConvGeom {
            pad: 0,
            ..geom(16, 1, 8, 8)
        }));
        assert!(!applies(&ConvGeom {
            kh: 1,
            kw: 1,
            pad: 0,
            ..geom(16, 1, 8, 8)
        }));
    }
}
