//! The convnet: three blocks of conv3x3 -> batch norm + ReLU + maxpool 2x2 (one fused
//! layer), with 32, 64 and 128 channels, then global average pooling and a linear head.
//! Pooling is skipped once a feature map is down to 1 pixel, so small inputs work too.

use crate::backend::Backend;
use crate::error::Result;
use crate::layer::conv::ConvSpec;
use crate::layer::{
    BatchNorm2d, BatchNormReluPool, Builder, Conv2d, GlobalAvgPool, Layer, Linear, Shape,
};

/// Output channels of the three blocks.
pub const WIDTHS: [usize; 3] = [32, 64, 128];

/// The convnet's layers from `input` (per sample) to `classes` logits, registered with
/// `bld`.
pub fn build<B: Backend + 'static>(
    bld: &mut Builder<'_, B>,
    input: Shape,
    classes: usize,
) -> Result<Vec<Box<dyn Layer<B>>>> {
    let mut layers: Vec<Box<dyn Layer<B>>> = Vec::new();
    let mut s = input;
    for (i, &c) in WIDTHS.iter().enumerate() {
        let conv = Conv2d::new(bld, &format!("conv{}", i + 1), s, ConvSpec::same(c, 3, 1))?;
        s = Layer::<B>::out_shape(&conv);
        layers.push(Box::new(conv));
        let (bn, pool) = (format!("bn{}", i + 1), format!("pool{}", i + 1));
        if s.h >= 2 && s.w >= 2 {
            let block = BatchNormReluPool::new(bld, &bn, &pool, s)?;
            s = Layer::<B>::out_shape(&block);
            layers.push(Box::new(block));
        } else {
            layers.push(Box::new(BatchNorm2d::new(bld, &bn, s, true)?));
        }
    }
    let gap = GlobalAvgPool::new("gap", s);
    s = Layer::<B>::out_shape(&gap);
    layers.push(Box::new(gap));
    layers.push(Box::new(Linear::new(bld, "head", s, classes, false)?));
    Ok(layers)
}
