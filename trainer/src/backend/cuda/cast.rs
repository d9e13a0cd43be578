//! f32 to bf16 on the device (`kernels/cast.cu`): the operands of bf16 autocast.

use super::kernels::CastBf16;
use super::CudaBackend;
use crate::backend::{BResult, In, Out};

impl CudaBackend {
    /// Writes `len` elements of `x`, rounded to bf16 (nearest even), into `y` as bit
    /// patterns; `op` names the backend op that asked, in errors. Enqueued only.
    pub fn cast_bf16(
        &self,
        op: &'static str,
        x: In<'_, Self, f32>,
        y: Out<'_, Self, u16>,
        len: usize,
    ) -> BResult<()> {
        if len == 0 {
            return Ok(());
        }
        let cx = self.op(op);
        let params = CastBf16 {
            x: cx.read(x, len, "f32 input")?,
            y: cx.write(&y, len, "bf16 output")?,
            n: len as u64,
        };
        cx.launch(&self.kernels().cast_f32_bf16, cx.grid(len), params)
    }
}
