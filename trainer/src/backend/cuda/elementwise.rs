//! Element-wise ops on CUDA (`kernels/elementwise.cu`, `kernels/bias_act.cu`): fill,
//! add, the residual join, bias + activation and ReLU, forward and backward.

use super::kernels::{
    AddAct, BiasAct, BiasRows, Fill, Kernel, Param, ReluBackward, ReluMask, Unary,
};
use super::launch::{blocks, OpCx};
use super::CudaBackend;
use crate::backend::{
    AddActArgs, BResult, BiasActBackwardArgs, BiasActForwardArgs, ElementwiseOps, FillArgs,
    MapArgs, ReluBackwardArgs,
};

impl CudaBackend {
    /// Element-wise op `name` over `len` elements: nothing when there are none, else
    /// `kernel` with the parameters `params(cx, n)` makes (`n` is `len`), one thread
    /// per element.
    fn elementwise<P: Param>(
        &self,
        name: &'static str,
        len: usize,
        kernel: &Kernel<P>,
        params: impl FnOnce(&OpCx<'_>, u64) -> BResult<P>,
    ) -> BResult<()> {
        if len == 0 {
            return Ok(());
        }
        let cx = self.op(name);
        let params = params(&cx, len as u64)?;
        cx.launch(kernel, cx.grid(len), params)
    }

    /// Op `name`: `kernel` from `op.x` into `op.y`.
    fn map(
        &self,
        name: &'static str,
        kernel: &Kernel<Unary>,
        op: MapArgs<'_, Self>,
    ) -> BResult<()> {
        self.elementwise(name, op.len, kernel, |cx, n| {
            let x = cx.read(op.x, op.len, "input")?;
            let y = cx.write(&op.y, op.len, "output")?;
            Ok(Unary { x, y, n })
        })
    }
}

impl ElementwiseOps for CudaBackend {
    fn fill(&self, op: FillArgs<'_, Self>) -> BResult<()> {
        let kernel = &self.kernels().fill_f32;
        self.elementwise("fill", op.len, kernel, |cx, n| {
            let y = cx.write(&op.dst, op.len, "output")?;
            let value = op.value;
            Ok(Fill { y, n, value })
        })
    }

    fn add(&self, op: MapArgs<'_, Self>) -> BResult<()> {
        self.map("add", &self.kernels().add_f32, op)
    }

    fn add_act(&self, op: AddActArgs<'_, Self>) -> BResult<()> {
        let kernel = &self.kernels().add_act;
        self.elementwise("add_act", op.len, kernel, |cx, n| {
            Ok(AddAct {
                a: cx.read(op.a, op.len, "input")?,
                b: cx.read(op.b, op.len, "input")?,
                y: cx.write(&op.y, op.len, "output")?,
                n,
                relu: op.relu as i32,
            })
        })
    }

    fn bias_act_forward(&self, op: BiasActForwardArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("bias_act_forward");
        let (rows, cols) = (op.geom.rows, op.geom.cols);
        let y = cx.write(&op.y, rows * cols, "output")?;
        let bias = op.bias.map(|b| cx.read(b, rows, "bias")).transpose()?;
        if rows * cols == 0 {
            return Ok(());
        }
        let params = BiasAct {
            y,
            bias: bias.unwrap_or(y),
            has_bias: bias.is_some() as i32,
            rows: rows as u64,
            cols: cols as u64,
            relu: op.geom.relu as i32,
        };
        cx.launch(
            &self.kernels().bias_act_forward,
            cx.grid(rows * cols),
            params,
        )
    }

    fn bias_act_backward(&self, op: BiasActBackwardArgs<'_, Self>) -> BResult<()> {
        let cx = self.op("bias_act_backward");
        let (rows, cols, relu) = (op.geom.rows, op.geom.cols, op.geom.relu as i32);
        let n = rows * cols;
        let y = cx.read(op.y, n, "output")?;
        let dy = cx.write(&op.dy, n, "gradient")?;
        match op.dbias {
            Some(db) => {
                let dbias = cx.write(&db, rows, "bias gradient")?;
                if cols == 0 || rows == 0 {
                    // The CPU leaves dbias alone when there are no columns.
                    return Ok(());
                }
                if rows > u32::MAX as usize {
                    return Err(cx.err("too many rows"));
                }
                let cols = cols as u64;
                let params = BiasRows {
                    y,
                    dy,
                    dbias,
                    cols,
                    relu,
                };
                let kernel = &self.kernels().bias_act_backward_rows;
                cx.launch(kernel, blocks(rows as u32, 1), params)
            }
            None if op.geom.relu && n > 0 => {
                let params = ReluMask { y, dy, n: n as u64 };
                cx.launch(&self.kernels().relu_mask, cx.grid(n), params)
            }
            None => Ok(()),
        }
    }

    fn relu_forward(&self, op: MapArgs<'_, Self>) -> BResult<()> {
        self.map("relu_forward", &self.kernels().relu_forward, op)
    }

    fn relu_backward(&self, op: ReluBackwardArgs<'_, Self>) -> BResult<()> {
        let kernel = &self.kernels().relu_backward;
        self.elementwise("relu_backward", op.len, kernel, |cx, n| {
            Ok(ReluBackward {
                y: cx.read(op.y, op.len, "output")?,
                dy: cx.read(op.dy, op.len, "gradient")?,
                dx: cx.write(&op.dx, op.len, "input gradient")?,
                n,
            })
        })
    }
}
