//! A small tensor: a shape plus a buffer owned by a backend.

use crate::backend::{BResult, Backend, In, Out};

/// A dense f32 tensor on backend `B`. Activations are allocated once at their largest
/// (max batch) size; an op with a smaller batch uses a prefix of the buffer.
pub struct Tensor<B: Backend> {
    shape: Vec<usize>,
    buf: B::Buf<f32>,
}

impl<B: Backend> Tensor<B> {
    /// A zero-filled tensor.
    pub fn zeros(b: &B, shape: &[usize]) -> BResult<Self> {
        let len = shape.iter().product();
        Ok(Self {
            shape: shape.to_vec(),
            buf: b.alloc(len)?,
        })
    }

    /// A tensor holding a copy of `data`, which must have `shape`'s element count.
    pub fn from_slice(b: &B, shape: &[usize], data: &[f32]) -> BResult<Self> {
        let mut t = Self::zeros(b, shape)?;
        if data.len() != t.len() {
            return Err(crate::backend::BackendError::Op {
                op: "Tensor::from_slice",
                reason: format!("{} values for shape {:?}", data.len(), shape),
            });
        }
        b.upload(data, t.view_mut())?;
        Ok(t)
    }

    /// Dimensions as allocated, e.g. `[c, max_batch, h, w]` for an activation.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Elements in the tensor: the product of its shape.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements (a zero in its shape).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole tensor, for reading.
    pub fn view(&self) -> In<'_, B> {
        In::new(&self.buf)
    }

    /// The tensor from element `off` on, for reading.
    pub fn view_at(&self, off: usize) -> In<'_, B> {
        In::at(&self.buf, off)
    }

    /// The whole tensor, for writing.
    pub fn view_mut(&mut self) -> Out<'_, B> {
        Out::new(&mut self.buf)
    }

    /// The tensor from element `off` on, for writing.
    pub fn view_mut_at(&mut self, off: usize) -> Out<'_, B> {
        Out::at(&mut self.buf, off)
    }

    /// The backend buffer behind the tensor.
    pub fn buf(&self) -> &B::Buf<f32> {
        &self.buf
    }

    /// The backend buffer behind the tensor, for writing.
    pub fn buf_mut(&mut self) -> &mut B::Buf<f32> {
        &mut self.buf
    }

    /// Copies the whole tensor to the host (waits for the device).
    pub fn to_vec(&self, b: &B) -> BResult<Vec<f32>> {
        let mut v = vec![0.0; self.len()];
        b.download(self.view(), &mut v)?;
        Ok(v)
    }
}
