//! A convolution layer's forward and backward on the CPU, by blocks of images, through
//! im2col; the 3x3, stride-1, pad-1 layers go to `winograd` instead.
//!
//! The batch is cut into a fixed number of groups of consecutive images (`GROUPS`, or
//! one per image for smaller batches), and each group runs on one thread, a block of
//! images at a time: the block's columns (at most about 1 MiB, so they stay in L2) are
//! unfolded, multiplied (a single-threaded GEMM) and, backward, folded back, before the
//! next block. The forward unfolds them tap-major (`[K, P]`: gemm-f32 reads it as it
//! is), the backward pixel-major (`[P, K]`, for the weight gradient). No column matrix
//! ever goes out to memory, and the two cores work on different images instead of
//! meeting inside every GEMM.
//!
//! Determinism: the groups and blocks depend only on the shapes, never on the thread
//! count; each group sums its weight gradient over its blocks in order into its own
//! slice of the scratch, and the groups' sums are added in group order.

use std::marker::PhantomData;

use gemm_common::Parallelism;
use rayon::prelude::*;

use super::conv::{col2im_image_fn, im2col_block, im2col_tap_block, planes_by_image};
use super::gemm::{RawGemm, Strided};
use super::winograd;
use super::{read_slice, write_slice, CpuBackend};
use crate::backend::{
    BResult, BackendError, ColLayout, ConvBackwardArgs, ConvForwardArgs, ConvGeom, ConvOps,
};

/// Groups of images the batch is cut into: enough to balance up to 8 threads.
const GROUPS: usize = 8;

/// Most floats in one block's column matrix (1 MiB): an L2's worth.
const BLOCK_FLOATS: usize = 1 << 18;

/// Padding of a block's rows of `y` or `dy` in the scratch. The activations' rows are
/// `n * oh * ow` floats apart, a power of two at the usual batch sizes, so a block's
/// few columns of every row all fall in the same cache sets; the GEMMs work on a
/// padded, contiguous copy instead.
const ROW_PAD: usize = 16;

/// How a batch of `geom.n` images is cut.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Taps (rows of `W`, columns of the column matrix) and output pixels per image.
    kdim: usize,
    ohw: usize,
    /// Images per block.
    block: usize,
    groups: usize,
    /// Row stride of a block's copy of `y` or `dy`.
    ldb: usize,
    /// Scratch per group: a block's columns, its `y` or `dy` rows, then the group's
    /// weight gradient.
    per_group: usize,
}

impl Plan {
    fn new(geom: &ConvGeom, cout: usize, block_floats: usize) -> Self {
        let (kdim, ohw) = (geom.col_rows(), geom.out_h() * geom.out_w());
        let n = geom.n.max(1);
        let block = (block_floats / (kdim * ohw).max(1)).clamp(1, n);
        let ldb = block * ohw + ROW_PAD;
        Self {
            kdim,
            ohw,
            block,
            groups: GROUPS.min(n),
            ldb,
            per_group: block * kdim * ohw + cout * ldb + cout * kdim,
        }
    }

    fn scratch(&self) -> usize {
        self.groups * self.per_group
    }

    /// Images of group `g` of a batch of `n`.
    fn images(&self, g: usize, n: usize) -> (usize, usize) {
        (g * n / self.groups, (g + 1) * n / self.groups)
    }
}

/// A row-major matrix (`rows` x `ld`) that parallel tasks write in disjoint column
/// ranges: a column range is not a slice, so it is written through a raw pointer, each
/// write checked against the matrix's bounds.
struct ColumnSplit<'a> {
    ptr: *mut f32,
    rows: usize,
    ld: usize,
    _borrow: PhantomData<&'a mut [f32]>,
}

// SAFETY: it writes f32 (Send + Sync) inside one exclusive borrow; the callers of
// `write_cols` keep their column ranges disjoint.
unsafe impl Send for ColumnSplit<'_> {}
unsafe impl Sync for ColumnSplit<'_> {}

impl<'a> ColumnSplit<'a> {
    fn new(m: &'a mut [f32], rows: usize, ld: usize) -> Self {
        assert!(
            rows * ld <= m.len(),
            "matrix {rows}x{ld} in {} floats",
            m.len()
        );
        Self {
            ptr: m.as_mut_ptr(),
            rows,
            ld,
            _borrow: PhantomData,
        }
    }

    /// Copies `src` (`rows` rows of `w` floats, `src_ld` apart) into columns
    /// `c0..c0 + w` of every row.
    ///
    /// # Safety
    /// No other caller may write these columns at the same time.
    unsafe fn write_cols(&self, c0: usize, w: usize, src: &[f32], src_ld: usize) {
        assert!(c0 + w <= self.ld, "columns {c0}..{} of {}", c0 + w, self.ld);
        for r in 0..self.rows {
            let row = &src[r * src_ld..][..w];
            // SAFETY: row r, columns c0..c0 + w, is inside the matrix (checked in
            // `new` and above) and, by the caller's contract, written by no one else.
            std::ptr::copy_nonoverlapping(row.as_ptr(), self.ptr.add(r * self.ld + c0), w);
        }
    }
}

fn check(geom: &ConvGeom, op: &'static str) -> BResult<()> {
    if geom.col != ColLayout::PixelMajor {
        return Err(BackendError::Op {
            op,
            reason: format!(
                "the CPU convolution uses the pixel-major layout, not {:?}",
                geom.col
            ),
        });
    }
    Ok(())
}

impl ConvOps for CpuBackend {
    fn conv_scratch(&self, geom: ConvGeom, cout: usize) -> usize {
        if winograd::applies(&geom) {
            return winograd::scratch(&geom, cout);
        }
        Plan::new(&geom, cout, BLOCK_FLOATS).scratch()
    }

    fn conv_forward(&self, op: ConvForwardArgs<'_, Self>) -> BResult<()> {
        check(&op.geom, "conv_forward")?;
        if winograd::applies(&op.geom) {
            return winograd::forward(op, winograd::BLOCK_FLOATS);
        }
        forward_with(op, BLOCK_FLOATS)
    }

    fn conv_backward(&self, op: ConvBackwardArgs<'_, Self>) -> BResult<()> {
        // `op.reuse` goes unused: the backward unfolds its columns again, pixel-major,
        // where the forward's were tap-major.
        check(&op.geom, "conv_backward")?;
        if winograd::applies(&op.geom) {
            return winograd::backward(op, winograd::BLOCK_FLOATS);
        }
        backward_with(op, BLOCK_FLOATS)
    }
}

/// `conv_forward` by blocks of at most `block_floats` floats of columns.
fn forward_with(op: ConvForwardArgs<'_, CpuBackend>, block_floats: usize) -> BResult<()> {
    const OP: &str = "conv_forward";
    let (geom, cout) = (op.geom, op.cout);
    let p = Plan::new(&geom, cout, block_floats);
    let n = geom.n;
    let x = read_slice(op.x, geom.input_len(), OP)?;
    let w = read_slice(op.w, cout * p.kdim, OP)?;
    let y = write_slice(op.y, cout * n * p.ohw, OP)?;
    let scratch = write_slice(op.scratch, p.scratch(), OP)?;
    if n == 0 || p.ohw == 0 || cout == 0 {
        return Ok(());
    }
    let ys = ColumnSplit::new(y, cout, n * p.ohw);
    scratch
        .par_chunks_mut(p.per_group)
        .enumerate()
        .for_each(|(g, sc)| {
            let (i0, i1) = p.images(g, n);
            let (cols_all, rest) = sc.split_at_mut(p.block * p.ohw * p.kdim);
            let yb = &mut rest[..cout * p.ldb];
            for b0 in (i0..i1).step_by(p.block) {
                let nb = p.block.min(i1 - b0);
                let cols_b = &mut cols_all[..nb * p.ohw * p.kdim];
                // Tap-major here: the forward GEMM reads it without repacking (the
                // backward's weight gradient prefers pixel-major).
                im2col_tap_block(x, &geom, b0, nb, cols_b);
                // yb[cout, nb * ohw] = W[cout, K] x cols[K, nb * ohw]
                // SAFETY: W, the columns and yb are slices of the sizes addressed.
                unsafe {
                    RawGemm {
                        dims: (cout, nb * p.ohw, p.kdim),
                        alpha: 1.0,
                        a: w.as_ptr(),
                        sa: Strided::rows(p.kdim),
                        b: cols_b.as_ptr(),
                        sb: Strided::rows(nb * p.ohw),
                        beta: 0.0,
                        c: yb.as_mut_ptr(),
                        ldc: p.ldb,
                        par: Parallelism::None,
                    }
                    .run();
                    // SAFETY: this block's columns of y belong to this task alone.
                    ys.write_cols(b0 * p.ohw, nb * p.ohw, yb, p.ldb);
                }
            }
        });
    Ok(())
}

/// `conv_backward` by blocks of at most `block_floats` floats of columns.
fn backward_with(op: ConvBackwardArgs<'_, CpuBackend>, block_floats: usize) -> BResult<()> {
    const OP: &str = "conv_backward";
    let (geom, cout) = (op.geom, op.cout);
    let p = Plan::new(&geom, cout, block_floats);
    let n = geom.n;
    let ld = n * p.ohw;
    let x = read_slice(op.x, geom.input_len(), OP)?;
    let w = read_slice(op.w, cout * p.kdim, OP)?;
    let dy = read_slice(op.dy, cout * ld, OP)?;
    let dw = write_slice(op.dw, cout * p.kdim, OP)?;
    let dx = op
        .dx
        .map(|d| write_slice(d, geom.input_len(), OP))
        .transpose()?;
    let scratch = write_slice(op.scratch, p.scratch(), OP)?;
    if n == 0 || p.ohw == 0 || cout == 0 {
        dw.fill(0.0);
        if let Some(dx) = dx {
            dx.fill(0.0);
        }
        return Ok(());
    }
    let with_dx = dx.is_some();
    // Each group's planes of dx: [image - i0][channel].
    let mut planes: Vec<Vec<Vec<&mut [f32]>>> = Vec::with_capacity(p.groups);
    match dx {
        Some(dx) => {
            let mut all = planes_by_image(dx, &geom, 0, n).into_iter();
            for g in 0..p.groups {
                let (i0, i1) = p.images(g, n);
                planes.push(all.by_ref().take(i1 - i0).collect());
            }
        }
        None => planes.resize_with(p.groups, Vec::new),
    }
    let fold = col2im_image_fn(geom.kw);
    let per_image = p.kdim * p.ohw;
    scratch
        .par_chunks_mut(p.per_group)
        .zip(planes.par_iter_mut())
        .enumerate()
        .for_each(|(g, (sc, planes))| {
            let (i0, i1) = p.images(g, n);
            let (cols_all, rest) = sc.split_at_mut(p.block * per_image);
            let (dyb, dwg) = rest.split_at_mut(cout * p.ldb);
            for (bi, b0) in (i0..i1).step_by(p.block).enumerate() {
                let nb = p.block.min(i1 - b0);
                let cols_b = &mut cols_all[..nb * per_image];
                im2col_block(x, &geom, b0, nb, cols_b);
                for (co, row) in dyb.chunks_exact_mut(p.ldb).enumerate() {
                    row[..nb * p.ohw].copy_from_slice(&dy[co * ld + b0 * p.ohw..][..nb * p.ohw]);
                }
                // SAFETY (both GEMMs): dyb holds cout rows `ldb` apart of nb * ohw
                // columns; W, the columns and this group's weight gradient are slices
                // of the sizes addressed, owned or read-only here.
                unsafe {
                    // dW_g (+)= dy_b[cout, P] x cols[P, K]
                    RawGemm {
                        dims: (cout, p.kdim, nb * p.ohw),
                        alpha: 1.0,
                        a: dyb.as_ptr(),
                        sa: Strided::rows(p.ldb),
                        b: cols_b.as_ptr(),
                        sb: Strided::rows(p.kdim),
                        beta: if bi == 0 { 0.0 } else { 1.0 },
                        c: dwg.as_mut_ptr(),
                        ldc: p.kdim,
                        par: Parallelism::None,
                    }
                    .run();
                    if !with_dx {
                        continue;
                    }
                    // dcols[P, K] = dy_b^T[P, cout] x W[cout, K], over the columns.
                    RawGemm {
                        dims: (nb * p.ohw, p.kdim, cout),
                        alpha: 1.0,
                        a: dyb.as_ptr(),
                        sa: Strided::cols(p.ldb),
                        b: w.as_ptr(),
                        sb: Strided::rows(p.kdim),
                        beta: 0.0,
                        c: cols_b.as_mut_ptr(),
                        ldc: p.kdim,
                        par: Parallelism::None,
                    }
                    .run();
                }
                for (j, src) in cols_b.chunks_exact(per_image).enumerate() {
                    fold(src, &geom, &mut planes[b0 - i0 + j]);
                }
            }
        });
    // The groups' weight gradients, added in group order.
    let cols_len = p.block * per_image + cout * p.ldb;
    for (j, v) in dw.iter_mut().enumerate() {
        *v = (0..p.groups)
            .map(|g| scratch[g * p.per_group + cols_len + j])
            .fold(0.0, |s, t| s + t);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::conv::{check_convolution, test_geom, Blocked};
    use crate::backend::cpu::CpuBuf;
    use crate::backend::{In, Out};

    /// Against a direct convolution, with blocks of one image and of several, groups of
    /// one image and of several, strides, padding and 1x1 kernels.
    #[test]
    fn blocked_convolution_matches_a_direct_one() {
        let im2col = Blocked {
            forward: forward_with,
            backward: backward_with,
            scratch: |g, cout, block| Plan::new(g, cout, block).scratch(),
        };
        for (c, cout, k, stride, pad, n) in [
            (3, 5, 3, 1, 1, 11),
            (2, 4, 3, 2, 1, 3),
            (4, 3, 1, 1, 0, 20),
            (3, 2, 3, 1, 0, 9),
        ] {
            let g = test_geom((c, n), (k, stride, pad), ColLayout::PixelMajor);
            let per_image = g.col_rows() * g.out_h() * g.out_w();
            check_convolution(&im2col, g, cout, &[1, 2 * per_image, 1 << 20]);
        }
    }

    /// The other layout is refused, not misread.
    #[test]
    fn tap_major_is_refused() {
        let g = ConvGeom {
            c: 1,
            n: 1,
            h: 3,
            w: 3,
            kh: 3,
            kw: 3,
            stride: 1,
            pad: 1,
            col: ColLayout::TapMajor,
        };
        let b = CpuBuf::from(vec![0.0; 64]);
        let mut y = CpuBuf::from(vec![0.0; 64]);
        let mut s = CpuBuf::from(vec![0.0; 1024]);
        let e = CpuBackend::new().conv_forward(ConvForwardArgs {
            x: In::new(&b),
            w: In::new(&b),
            geom: g,
            cout: 1,
            y: Out::new(&mut y),
            scratch: Out::new(&mut s),
        });
        assert!(
            matches!(
                e,
                Err(BackendError::Op {
                    op: "conv_forward",
                    ..
                })
            ),
            "{e:?}"
        );
    }
}
