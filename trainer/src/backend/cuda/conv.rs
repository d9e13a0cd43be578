//! Convolution on CUDA: on cuDNN when the backend opened it and it has an algorithm
//! for the shape (`cudnn`), else as im2col + GEMM (`kernels/im2col.cu`): `im2col`
//! unfolds images into the column matrix, `col2im` (its adjoint) folds the columns'
//! gradient back, and `forward` / `backward` run a whole convolution as chunks of
//! images, each one im2col and a cuBLAS GEMM written straight into the output's
//! columns (the GEMM's `ldc` skips the other images); a chunk's columns fill the
//! scratch, sized by `im2col_budget`.

use super::buffer::{op_err, DevPtr};
use super::kernels::Im2col;
use super::CudaBackend;
use crate::backend::{
    BResult, ColLayout, ConvBackwardArgs, ConvForwardArgs, ConvGeom, ConvOps, Gemm, GemmArgs,
    GemmOps, Im2colArgs, Im2colOps, In, Out,
};

/// The kernels write and read the tap-major layout only.
fn check_layout(geom: &ConvGeom, op: &'static str) -> BResult<()> {
    match geom.col {
        ColLayout::TapMajor => Ok(()),
        ColLayout::PixelMajor => Err(op_err(
            op,
            "the CUDA backend supports only the tap-major im2col layout",
        )),
    }
}

/// The parameters of `im2col` and `col2im`, from `src` to `dst`, for images
/// `n0..n0+nc` of `geom`.
fn im2col_params(src: DevPtr, dst: DevPtr, geom: &ConvGeom, n0: usize, nc: usize) -> Im2col {
    Im2col {
        src,
        dst,
        c: geom.c as i32,
        n: geom.n as u64,
        h: geom.h as i32,
        w: geom.w as i32,
        kh: geom.kh as i32,
        kw: geom.kw as i32,
        stride: geom.stride as i32,
        pad: geom.pad as i32,
        oh: geom.out_h() as i32,
        ow: geom.out_w() as i32,
        n0: n0 as u64,
        nc: nc as u64,
    }
}

impl Im2colOps for CudaBackend {
    fn im2col_budget(&self) -> usize {
        // 64 MiB of f32 per conv layer: big enough that a chunk's GEMM fills the GPU,
        // small enough that a deep model's scratch stays under a GiB.
        16 << 20
    }

    fn col_layout(&self) -> ColLayout {
        // cuBLAS runs the tap-major products at full speed; the kernels know only it.
        ColLayout::TapMajor
    }

    fn im2col(&self, op: Im2colArgs<'_, Self>) -> BResult<()> {
        self.im2col_kernel(op, true)
    }

    fn col2im(&self, op: Im2colArgs<'_, Self>) -> BResult<()> {
        self.im2col_kernel(op, false)
    }
}

impl CudaBackend {
    /// `im2col` (`unfold`) or `col2im`: checks the layout, the chunk and both views, and
    /// launches one thread per element written (per column entry, or per image pixel).
    fn im2col_kernel(&self, op: Im2colArgs<'_, Self>, unfold: bool) -> BResult<()> {
        let cx = self.op(if unfold { "im2col" } else { "col2im" });
        let (geom, n0, nc) = (op.geom, op.n0, op.nc);
        check_layout(&geom, cx.name)?;
        geom.check_chunk(cx.name, n0, nc)?;
        let cols = geom.col_rows() * nc * geom.out_h() * geom.out_w();
        let (src_len, dst_len, total, kernel) = if unfold {
            (geom.input_len(), cols, cols, &self.kernels().im2col)
        } else {
            let pixels = geom.c * nc * geom.h * geom.w;
            (cols, geom.input_len(), pixels, &self.kernels().col2im)
        };
        let src = cx.read(op.src, src_len, "input")?;
        let dst = cx.write(&op.dst, dst_len, "output")?;
        if total == 0 {
            return Ok(());
        }
        cx.launch(
            kernel,
            cx.grid(total),
            im2col_params(src, dst, &geom, n0, nc),
        )
    }

    /// Unfolds images `n0..n0+nc` of `x` into `scratch`.
    fn unfold_chunk(
        &self,
        x: In<'_, Self>,
        geom: ConvGeom,
        (n0, nc): (usize, usize),
        scratch: Out<'_, Self>,
    ) -> BResult<()> {
        self.im2col(Im2colArgs {
            geom,
            n0,
            nc,
            src: x,
            dst: scratch,
        })
    }
}

/// Images per chunk: as many as the im2col budget holds, at least one.
fn chunk(backend: &CudaBackend, geom: &ConvGeom) -> usize {
    let per_image = geom.col_rows() * geom.out_h() * geom.out_w();
    (backend.im2col_budget() / per_image.max(1)).clamp(1, geom.n.max(1))
}

impl ConvOps for CudaBackend {
    fn conv_scratch(&self, geom: ConvGeom, _cout: usize) -> usize {
        let im2col = geom.col_rows() * geom.out_h() * geom.out_w() * chunk(self, &geom);
        // On cuDNN the scratch holds the input's copy (see `cudnn::run`); any shape may
        // still fall back to im2col, so it holds the columns too.
        if self.conv_engine().is_cudnn() {
            im2col.max(geom.input_len())
        } else {
            im2col
        }
    }

    fn conv_forward(&self, op: ConvForwardArgs<'_, Self>) -> BResult<()> {
        let (geom, cout, x) = (op.geom, op.cout, op.x);
        check_layout(&geom, "conv_forward")?;
        if self.cudnn_forward(&op)? {
            return Ok(());
        }
        let (ohw, kdim, n) = (geom.out_h() * geom.out_w(), geom.col_rows(), geom.n);
        let chunk = chunk(self, &geom);
        let (Out { buf: yb, off: yo }, Out { buf: sb, off: so }) = (op.y, op.scratch);
        for n0 in (0..n).step_by(chunk) {
            let nc = chunk.min(n - n0);
            self.unfold_chunk(x, geom, (n0, nc), Out::at(&mut *sb, so))?;
            let mut spec = Gemm::dense(false, false, cout, nc * ohw, kdim);
            spec.ldc = n * ohw;
            self.gemm(GemmArgs {
                spec,
                a: op.w,
                b: In::at(&*sb, so),
                c: Out::at(&mut *yb, yo + n0 * ohw),
            })?;
        }
        Ok(())
    }

    fn conv_backward(&self, op: ConvBackwardArgs<'_, Self>) -> BResult<()> {
        let (geom, cout, dy) = (op.geom, op.cout, op.dy);
        check_layout(&geom, "conv_backward")?;
        if self.cudnn_backward(&op)? {
            return Ok(());
        }
        let (ohw, kdim, n) = (geom.out_h() * geom.out_w(), geom.col_rows(), geom.n);
        let chunk = chunk(self, &geom);
        // The forward's columns are still in the scratch only if it took one chunk, and
        // only if the forward ran here: on the cuDNN engine it may have run on cuDNN
        // (which leaves its copy of the input there) before this shape was given up on.
        let mut cols_valid = op.reuse && n <= chunk && !self.conv_engine().is_cudnn();
        let (Out { buf: wb, off: wo }, Out { buf: sb, off: so }) = (op.dw, op.scratch);
        let mut dx = op.dx;
        for (i, n0) in (0..n).step_by(chunk).enumerate() {
            let nc = chunk.min(n - n0);
            if !cols_valid {
                self.unfold_chunk(op.x, geom, (n0, nc), Out::at(&mut *sb, so))?;
            }
            // dW[cout, K] (+)= dy[cout, nc*ohw] col[K, nc*ohw]^T
            let mut gw = Gemm::dense(false, true, cout, kdim, nc * ohw);
            gw.lda = n * ohw;
            gw.beta = if i == 0 { 0.0 } else { 1.0 };
            self.gemm(GemmArgs {
                spec: gw,
                a: dy.skip(n0 * ohw),
                b: In::at(&*sb, so),
                c: Out::at(&mut *wb, wo),
            })?;
            if let Some(Out { buf: db, off: dof }) = dx.as_mut() {
                // dcol[K, nc*ohw] = W[cout, K]^T dy[cout, nc*ohw], into the same scratch.
                let mut gc = Gemm::dense(true, false, kdim, nc * ohw, cout);
                gc.ldb = n * ohw;
                self.gemm(GemmArgs {
                    spec: gc,
                    a: op.w,
                    b: dy.skip(n0 * ohw),
                    c: Out::at(&mut *sb, so),
                })?;
                self.col2im(Im2colArgs {
                    geom,
                    n0,
                    nc,
                    src: In::at(&*sb, so),
                    dst: Out::at(&mut **db, *dof),
                })?;
                cols_valid = false;
            }
        }
        Ok(())
    }
}
