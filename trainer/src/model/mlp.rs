//! The MLP: flattened pixels -> 256 -> 128 -> classes, ReLU fused into each hidden layer.

use crate::backend::Backend;
use crate::error::Result;
use crate::layer::{Builder, Layer, Linear, Shape};

/// Widths of the two hidden layers.
pub const HIDDEN: [usize; 2] = [256, 128];

/// The MLP's layers from `input` (a vector of `h * w * c` features) to `classes`
/// logits, registered with `bld`.
pub fn build<B: Backend + 'static>(
    bld: &mut Builder<'_, B>,
    input: Shape,
    classes: usize,
) -> Result<Vec<Box<dyn Layer<B>>>> {
    let mut layers: Vec<Box<dyn Layer<B>>> = Vec::new();
    let mut s = input;
    for (i, &h) in HIDDEN.iter().enumerate() {
        let l = Linear::new(bld, &format!("fc{}", i + 1), s, h, true)?;
        s = Shape::vector(h);
        layers.push(Box::new(l));
    }
    layers.push(Box::new(Linear::new(bld, "head", s, classes, false)?));
    Ok(layers)
}
