//! Element-wise ops on the CPU: fill, add, the residual join, bias + activation and
//! ReLU, forward and backward; each split into fixed chunks across rayon's threads.

use rayon::prelude::*;

use super::{read_slice, write_slice, CpuBackend, CHUNK};
use crate::backend::{BResult, In, Out};

pub(super) fn fill(dst: Out<'_, CpuBackend>, len: usize, value: f32) -> BResult<()> {
    write_slice(dst, len, "fill")?
        .par_chunks_mut(CHUNK)
        .for_each(|c| c.fill(value));
    Ok(())
}

pub(super) fn add(x: In<'_, CpuBackend>, y: Out<'_, CpuBackend>, len: usize) -> BResult<()> {
    let x = read_slice(x, len, "add")?;
    let y = write_slice(y, len, "add")?;
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| y.iter_mut().zip(x).for_each(|(y, x)| *y += x));
    Ok(())
}

pub(super) fn add_act(
    a: In<'_, CpuBackend>,
    b: In<'_, CpuBackend>,
    y: Out<'_, CpuBackend>,
    len: usize,
    relu: bool,
) -> BResult<()> {
    let a = read_slice(a, len, "add_act")?;
    let b = read_slice(b, len, "add_act")?;
    let y = write_slice(y, len, "add_act")?;
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

pub(super) fn bias_act_forward(
    y: Out<'_, CpuBackend>,
    bias: Option<In<'_, CpuBackend>>,
    rows: usize,
    cols: usize,
    relu: bool,
) -> BResult<()> {
    let y = write_slice(y, rows * cols, "bias_act_forward")?;
    let bias = match bias {
        Some(b) => Some(read_slice(b, rows, "bias_act_forward")?),
        None => None,
    };
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

pub(super) fn bias_act_backward(
    y: In<'_, CpuBackend>,
    dy: Out<'_, CpuBackend>,
    dbias: Option<Out<'_, CpuBackend>>,
    rows: usize,
    cols: usize,
    relu: bool,
) -> BResult<()> {
    let y = read_slice(y, rows * cols, "bias_act_backward")?;
    let dy = write_slice(dy, rows * cols, "bias_act_backward")?;
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
    match dbias {
        Some(db) => {
            let db = write_slice(db, rows, "bias_act_backward")?;
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

pub(super) fn relu_forward(
    x: In<'_, CpuBackend>,
    y: Out<'_, CpuBackend>,
    len: usize,
) -> BResult<()> {
    let x = read_slice(x, len, "relu_forward")?;
    let y = write_slice(y, len, "relu_forward")?;
    y.par_chunks_mut(CHUNK)
        .zip(x.par_chunks(CHUNK))
        .for_each(|(y, x)| y.iter_mut().zip(x).for_each(|(y, x)| *y = x.max(0.0)));
    Ok(())
}

pub(super) fn relu_backward(
    y: In<'_, CpuBackend>,
    dy: In<'_, CpuBackend>,
    dx: Out<'_, CpuBackend>,
    len: usize,
) -> BResult<()> {
    let y = read_slice(y, len, "relu_backward")?;
    let dy = read_slice(dy, len, "relu_backward")?;
    let dx = write_slice(dx, len, "relu_backward")?;
    dx.par_chunks_mut(CHUNK)
        .zip(y.par_chunks(CHUNK).zip(dy.par_chunks(CHUNK)))
        .for_each(|(dx, (y, dy))| {
            for ((dx, y), dy) in dx.iter_mut().zip(y).zip(dy) {
                *dx = if *y > 0.0 { *dy } else { 0.0 };
            }
        });
    Ok(())
}
