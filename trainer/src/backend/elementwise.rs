//! Element-wise ops: fill, add, the residual join, bias + activation and ReLU, forward
//! and backward.

use super::{BResult, Buffers, In, Out};

/// Element-wise ops, over `len` elements (or `rows x cols`) from each view's offset.
pub trait ElementwiseOps: Buffers {
    /// `dst[..len] = value`.
    fn fill(&self, op: FillArgs<'_, Self>) -> BResult<()>;
    /// `y[..len] += x[..len]`.
    fn add(&self, op: MapArgs<'_, Self>) -> BResult<()>;
    /// `y = a + b`, then ReLU if `relu` (the residual join).
    fn add_act(&self, op: AddActArgs<'_, Self>) -> BResult<()>;
    /// In place on `y [rows, cols]`: `y = act(y + bias[row])`.
    fn bias_act_forward(&self, op: BiasActForwardArgs<'_, Self>) -> BResult<()>;
    /// In place on `dy`: mask by `y > 0` if `relu`; then `dbias[row] = sum(dy[row])`.
    fn bias_act_backward(&self, op: BiasActBackwardArgs<'_, Self>) -> BResult<()>;
    /// `y = max(x, 0)`.
    fn relu_forward(&self, op: MapArgs<'_, Self>) -> BResult<()>;
    /// `dx = dy * (y > 0)`.
    fn relu_backward(&self, op: ReluBackwardArgs<'_, Self>) -> BResult<()>;
}

/// Arguments of [`ElementwiseOps::fill`].
pub struct FillArgs<'a, B: Buffers + ?Sized> {
    /// Where the values go.
    pub dst: Out<'a, B>,
    /// Elements written.
    pub len: usize,
    /// The value written.
    pub value: f32,
}

/// Arguments of [`ElementwiseOps::add`] and [`ElementwiseOps::relu_forward`]: `x` into
/// `y`, element by element.
pub struct MapArgs<'a, B: Buffers + ?Sized> {
    /// The input.
    pub x: In<'a, B>,
    /// The output (added to by `add`, overwritten by `relu_forward`).
    pub y: Out<'a, B>,
    /// Elements.
    pub len: usize,
}

/// Arguments of [`ElementwiseOps::add_act`].
pub struct AddActArgs<'a, B: Buffers + ?Sized> {
    /// The first summand.
    pub a: In<'a, B>,
    /// The second summand.
    pub b: In<'a, B>,
    /// The sum (overwritten).
    pub y: Out<'a, B>,
    /// Elements summed.
    pub len: usize,
    /// Apply ReLU to the sum.
    pub relu: bool,
}

/// The shape and settings of a bias + activation, the same for its forward and its
/// backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BiasActGeom {
    /// Rows of the activation (channels or features).
    pub rows: usize,
    /// Columns of the activation (samples times pixels).
    pub cols: usize,
    /// Apply ReLU after the bias.
    pub relu: bool,
}

/// Arguments of [`ElementwiseOps::bias_act_forward`].
pub struct BiasActForwardArgs<'a, B: Buffers + ?Sized> {
    /// The activation `[rows, cols]`, changed in place.
    pub y: Out<'a, B>,
    /// One bias per row, if any.
    pub bias: Option<In<'a, B>>,
    /// The shape and settings.
    pub geom: BiasActGeom,
}

/// Arguments of [`ElementwiseOps::bias_act_backward`].
pub struct BiasActBackwardArgs<'a, B: Buffers + ?Sized> {
    /// The forward's output `[rows, cols]` (read for the ReLU mask).
    pub y: In<'a, B>,
    /// The gradient of `y`, masked in place.
    pub dy: Out<'a, B>,
    /// The bias gradient, one per row (overwritten), if there is a bias.
    pub dbias: Option<Out<'a, B>>,
    /// The forward's shape and settings.
    pub geom: BiasActGeom,
}

/// Arguments of [`ElementwiseOps::relu_backward`].
pub struct ReluBackwardArgs<'a, B: Buffers + ?Sized> {
    /// The forward's output.
    pub y: In<'a, B>,
    /// The gradient of `y`.
    pub dy: In<'a, B>,
    /// The gradient of the input (overwritten).
    pub dx: Out<'a, B>,
    /// Elements.
    pub len: usize,
}
