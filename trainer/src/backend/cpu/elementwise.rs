//! Element-wise ops on the CPU: fill, add, the residual join, bias + activation and
//! ReLU, forward and backward; each split into fixed chunks across rayon's threads.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend, CHUNK};
use crate::backend::{
    AddActArgs, BResult, BiasActBackwardArgs, BiasActForwardArgs, BiasActGeom, ElementwiseOps,
    FillArgs, MapArgs, ReluBackwardArgs,
};

/// Op `name`: `f(y, x)` for each element of `op`'s views, in fixed chunks.
fn map(
    op: MapArgs<'_, CpuBackend>,
    name: &'static str,
    f: impl Fn(&mut f32, f32) + Send + Sync,
) -> BResult<()> {
    let x = read_slice(op.x, op.len, name)?;
    let y = write_slice(op.y, op.len, name)?;
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| y.iter_mut().zip(x).for_each(|(y, &x)| f(y, x)));
    Ok(())
}

impl ElementwiseOps for CpuBackend {
    fn fill(&self, op: FillArgs<'_, Self>) -> BResult<()> {
        let value = op.value;
        write_slice(op.dst, op.len, "fill")?
            .par_chunks_mut(CHUNK)
            .for_each(|c| c.fill(value));
        Ok(())
    }

    fn add(&self, op: MapArgs<'_, Self>) -> BResult<()> {
        map(op, "add", |y, x| *y += x)
    }

    fn add_act(&self, op: AddActArgs<'_, Self>) -> BResult<()> {
        let relu = op.relu;
        let a = read_slice(op.a, op.len, "add_act")?;
        let b = read_slice(op.b, op.len, "add_act")?;
        let y = write_slice(op.y, op.len, "add_act")?;
        y.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
            .for_each(|(y, (a, b))| {
                for ((y, a), b) in y.iter_mut().zip(a).zip(b) {
                    let s = a + b;
                    *y = if relu { s.max(0.0) } else { s };
                }
            });
        Ok(())
    }

    fn bias_act_forward(&self, op: BiasActForwardArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "bias_act_forward";
        let BiasActGeom { rows, cols, relu } = op.geom;
        let y = write_slice(op.y, rows * cols, OP)?;
        let bias = op.bias.map(|b| read_slice(b, rows, OP)).transpose()?;
        if cols == 0 {
            return Ok(());
        }
        y.par_chunks_mut(cols).enumerate().for_each(|(r, row)| {
            let b = bias.map_or(0.0, |b| b[r]);
            for v in row {
                let s = *v + b;
                *v = if relu { s.max(0.0) } else { s };
            }
        });
        Ok(())
    }

    fn bias_act_backward(&self, op: BiasActBackwardArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "bias_act_backward";
        let BiasActGeom { rows, cols, relu } = op.geom;
        let y = read_slice(op.y, rows * cols, OP)?;
        let dy = write_slice(op.dy, rows * cols, OP)?;
        if cols == 0 {
            return Ok(());
        }
        let mask = |dy: &mut [f32], y: &[f32]| {
            if relu {
                for (d, y) in dy.iter_mut().zip(y) {
                    if *y <= 0.0 {
                        *d = 0.0;
                    }
                }
            }
        };
        match op.dbias {
            Some(db) => {
                let db = write_slice(db, rows, OP)?;
                dy.par_chunks_mut(cols)
                    .zip(y.par_chunks(cols))
                    .zip(db.par_iter_mut())
                    .for_each(|((dy, y), db)| {
                        mask(dy, y);
                        *db = dy.iter().map(|&v| v as f64).sum::<f64>() as f32;
                    });
            }
            None => dy
                .par_chunks_mut(cols)
                .zip(y.par_chunks(cols))
                .for_each(|(dy, y)| mask(dy, y)),
        }
        Ok(())
    }

    fn relu_forward(&self, op: MapArgs<'_, Self>) -> BResult<()> {
        map(op, "relu_forward", |y, x| *y = x.max(0.0))
    }

    fn relu_backward(&self, op: ReluBackwardArgs<'_, Self>) -> BResult<()> {
        const OP: &str = "relu_backward";
        let y = read_slice(op.y, op.len, OP)?;
        let dy = read_slice(op.dy, op.len, OP)?;
        let dx = write_slice(op.dx, op.len, OP)?;
        dx.par_chunks_mut(CHUNK)
            .zip(y.par_chunks(CHUNK).zip(dy.par_chunks(CHUNK)))
            .for_each(|(dx, (y, dy))| {
                for ((dx, y), dy) in dx.iter_mut().zip(y).zip(dy) {
                    *dx = if *y > 0.0 { *dy } else { 0.0 };
                }
            });
        Ok(())
    }
}
