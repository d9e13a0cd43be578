//! A standalone ReLU, for places no fused op covers.

use crate::backend::{BResult, Backend, MapArgs, ReluBackwardArgs};
use crate::layer::{Layer, ModelBuffers, Shape};
use crate::tensor::Tensor;

/// `y = max(x, 0)` element-wise, shape unchanged; no parameters.
pub struct Relu {
    name: String,
    shape: Shape,
}

impl Relu {
    /// A ReLU named `name` over activations of `shape`.
    pub fn new(name: &str, shape: Shape) -> Self {
        Self {
            name: name.to_string(),
            shape,
        }
    }
}

impl<B: Backend> Layer<B> for Relu {
    fn name(&self) -> &str {
        &self.name
    }

    fn out_shape(&self) -> Shape {
        self.shape
    }

    fn forward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &mut Tensor<B>,
        n: usize,
        _train: bool,
    ) -> BResult<()> {
        bufs.backend.relu_forward(MapArgs {
            x: x.view(),
            y: y.view_mut(),
            len: n * self.shape.numel(),
        })
    }

    fn backward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        _x: &Tensor<B>,
        y: &Tensor<B>,
        dy: &mut Tensor<B>,
        dx: Option<&mut Tensor<B>>,
        n: usize,
    ) -> BResult<()> {
        match dx {
            Some(dx) => bufs.backend.relu_backward(ReluBackwardArgs {
                y: y.view(),
                dy: dy.view(),
                dx: dx.view_mut(),
                len: n * self.shape.numel(),
            }),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::gradcheck;

    #[test]
    fn backward_matches_finite_differences() {
        let s = Shape::new(2, 3, 3);
        // Keep inputs at least 0.1 from the kink, where the derivative is undefined.
        gradcheck::check(
            |_| Box::new(Relu::new("relu", s)),
            s,
            2,
            |v| if v >= 0.0 { v + 0.1 } else { v - 0.1 },
        );
    }
}
