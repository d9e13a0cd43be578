//! A small ResNet: stem conv3x3 (32) + BN + ReLU (+ maxpool 2x2 for inputs of 48 px and
//! more, as one fused layer), three basic blocks of 32, 64, 128 channels with strides
//! 1, 2, 2, global average pooling and a linear head.
//!
//! A [`BasicBlock`] is one layer to the model: it owns the activations inside the
//! block, so the model stays a plain sequence and the skip connection's gradient sum is
//! explicit in the block's backward.

use crate::backend::{AddActArgs, BResult, Backend, MapArgs, ReluBackwardArgs};
use crate::error::Result;
use crate::layer::conv::ConvSpec;
use crate::layer::{
    BatchNorm2d, BatchNormReluPool, Builder, Conv2d, GlobalAvgPool, Layer, Linear, ModelBuffers,
    Shape,
};
use crate::tensor::Tensor;

/// Output channels of the three basic blocks (the stem has the first).
pub const WIDTHS: [usize; 3] = [32, 64, 128];
/// Strides of the three basic blocks' first convolutions.
pub const STRIDES: [usize; 3] = [1, 2, 2];

/// `relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))`, where the shortcut is the
/// identity, or a strided 1x1 conv + BN when the shape changes.
pub struct BasicBlock<B: Backend> {
    name: String,
    input: Shape,
    out: Shape,
    conv1: Conv2d<B>,
    bn1: BatchNorm2d<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm2d<B>,
    shortcut: Option<(Conv2d<B>, BatchNorm2d<B>)>,
    /// conv1, bn1, conv2, bn2 outputs; shortcut conv and bn outputs.
    a: [Tensor<B>; 6],
    /// Gradients of `a[0..3]`, of the block's pre-ReLU sum, of the shortcut conv output,
    /// and of the input through the shortcut.
    da: [Tensor<B>; 3],
    dsum: Tensor<B>,
    ds: Tensor<B>,
    dxs: Tensor<B>,
}

impl<B: Backend> BasicBlock<B> {
    /// A block named `name` from `input` to `cout` channels, its first convolution
    /// with `stride`; its parameters are named `<name>.conv1.weight`, `<name>.bn1.weight`,
    /// ... (`<name>.down`, `<name>.down_bn` for the shortcut).
    pub fn new(
        bld: &mut Builder<'_, B>,
        name: &str,
        input: Shape,
        cout: usize,
        stride: usize,
    ) -> Result<Self> {
        let conv1 = Conv2d::new(
            bld,
            &format!("{name}.conv1"),
            input,
            ConvSpec::same(cout, 3, stride),
        )?;
        let mid = Layer::<B>::out_shape(&conv1);
        let bn1 = BatchNorm2d::new(bld, &format!("{name}.bn1"), mid, true)?;
        let conv2 = Conv2d::new(
            bld,
            &format!("{name}.conv2"),
            mid,
            ConvSpec::same(cout, 3, 1),
        )?;
        let out = Layer::<B>::out_shape(&conv2);
        let bn2 = BatchNorm2d::new(bld, &format!("{name}.bn2"), out, false)?;
        let shortcut = if stride != 1 || input.c != cout {
            let spec = ConvSpec {
                pad: 0,
                ..ConvSpec::same(cout, 1, stride)
            };
            let c = Conv2d::new(bld, &format!("{name}.down"), input, spec)?;
            let bn = BatchNorm2d::new(bld, &format!("{name}.down_bn"), out, false)?;
            Some((c, bn))
        } else {
            None
        };
        let b = bld.backend;
        let n = bld.max_batch;
        let t = |s: Shape| Tensor::zeros(b, &[s.c, n, s.h, s.w]);
        let sc = |s: Shape| {
            if shortcut.is_some() {
                t(s)
            } else {
                Tensor::zeros(b, &[0])
            }
        };
        Ok(Self {
            name: name.to_string(),
            input,
            out,
            a: [t(mid)?, t(mid)?, t(out)?, t(out)?, sc(out)?, sc(out)?],
            da: [t(mid)?, t(mid)?, t(out)?],
            dsum: t(out)?,
            ds: sc(out)?,
            dxs: if shortcut.is_some() {
                t(input)?
            } else {
                Tensor::zeros(b, &[0])?
            },
            conv1,
            bn1,
            conv2,
            bn2,
            shortcut,
        })
    }
}

impl<B: Backend> Layer<B> for BasicBlock<B> {
    fn name(&self) -> &str {
        &self.name
    }

    fn out_shape(&self) -> Shape {
        self.out
    }

    fn forward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &mut Tensor<B>,
        n: usize,
        train: bool,
    ) -> BResult<()> {
        let [a0, a1, a2, a3, s0, s1] = &mut self.a;
        self.conv1.forward(bufs, x, a0, n, train)?;
        self.bn1.forward(bufs, a0, a1, n, train)?;
        self.conv2.forward(bufs, a1, a2, n, train)?;
        self.bn2.forward(bufs, a2, a3, n, train)?;
        let shortcut = match &mut self.shortcut {
            Some((conv, bn)) => {
                conv.forward(bufs, x, s0, n, train)?;
                bn.forward(bufs, s0, s1, n, train)?;
                &*s1
            }
            None => x,
        };
        bufs.backend.add_act(AddActArgs {
            a: a3.view(),
            b: shortcut.view(),
            y: y.view_mut(),
            len: n * self.out.numel(),
            relu: true,
        })
    }

    fn backward(
        &mut self,
        bufs: &mut ModelBuffers<'_, B>,
        x: &Tensor<B>,
        y: &Tensor<B>,
        dy: &mut Tensor<B>,
        mut dx: Option<&mut Tensor<B>>,
        n: usize,
    ) -> BResult<()> {
        let [a0, a1, a2, a3, s0, s1] = &self.a;
        let [da0, da1, da2] = &mut self.da;
        let b = bufs.backend;
        b.relu_backward(ReluBackwardArgs {
            y: y.view(),
            dy: dy.view(),
            dx: self.dsum.view_mut(),
            len: n * self.out.numel(),
        })?;
        // Batch norm reads its dy without writing it, so `dsum` feeds both branches.
        self.bn2
            .backward(bufs, a2, a3, &mut self.dsum, Some(da2), n)?;
        self.conv2.backward(bufs, a1, a2, da2, Some(da1), n)?;
        self.bn1.backward(bufs, a0, a1, da1, Some(da0), n)?;
        self.conv1
            .backward(bufs, x, a0, da0, dx.as_deref_mut(), n)?;
        let shortcut = match &mut self.shortcut {
            Some((conv, bn)) => {
                bn.backward(bufs, s0, s1, &mut self.dsum, Some(&mut self.ds), n)?;
                let want_dx = dx.is_some();
                conv.backward(
                    bufs,
                    x,
                    s0,
                    &mut self.ds,
                    want_dx.then_some(&mut self.dxs),
                    n,
                )?;
                &self.dxs
            }
            None => &self.dsum,
        };
        match dx {
            Some(dx) => b.add(MapArgs {
                x: shortcut.view(),
                y: dx.view_mut(),
                len: n * self.input.numel(),
            }),
            None => Ok(()),
        }
    }
}

/// The ResNet's layers from `input` (per sample) to `classes` logits, registered with
/// `bld`.
pub fn build<B: Backend + 'static>(
    bld: &mut Builder<'_, B>,
    input: Shape,
    classes: usize,
) -> Result<Vec<Box<dyn Layer<B>>>> {
    let mut layers: Vec<Box<dyn Layer<B>>> = Vec::new();
    let stem = Conv2d::new(bld, "stem", input, ConvSpec::same(WIDTHS[0], 3, 1))?;
    let mut s = Layer::<B>::out_shape(&stem);
    layers.push(Box::new(stem));
    if s.h >= 48 && s.w >= 48 {
        let block = BatchNormReluPool::new(bld, "stem_bn", "stem_pool", s)?;
        s = Layer::<B>::out_shape(&block);
        layers.push(Box::new(block));
    } else {
        layers.push(Box::new(BatchNorm2d::new(bld, "stem_bn", s, true)?));
    }
    for (i, (&c, &st)) in WIDTHS.iter().zip(&STRIDES).enumerate() {
        let blk = BasicBlock::new(bld, &format!("block{}", i + 1), s, c, st)?;
        s = blk.out;
        layers.push(Box::new(blk));
    }
    let gap = GlobalAvgPool::new("gap", s);
    s = Layer::<B>::out_shape(&gap);
    layers.push(Box::new(gap));
    layers.push(Box::new(Linear::new(bld, "head", s, classes, false)?));
    Ok(layers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layer::gradcheck;

    #[test]
    fn identity_block_backward_matches_finite_differences() {
        let s = Shape::new(3, 4, 4);
        gradcheck::check(
            |b| Box::new(BasicBlock::new(b, "blk", s, 3, 1).unwrap()),
            s,
            2,
            |v| v,
        );
    }

    #[test]
    fn downsampling_block_backward_matches_finite_differences() {
        let s = Shape::new(2, 5, 5);
        gradcheck::check(
            |b| Box::new(BasicBlock::new(b, "blk", s, 4, 2).unwrap()),
            s,
            3,
            |v| v,
        );
    }
}
