//! Times single CPU backend ops at the convnet's shapes (batch 128, 64 px): the fused
//! batch norm + ReLU + pool, im2col / col2im in the pixel-major layout, and the three
//! GEMMs of a convolution chunk. `cargo run --release -p stoker-trainer --example op_bench`.

use std::time::Instant;

// The op traits, their argument structs and the geometry types.
use stoker_trainer::backend::cpu::CpuBuf;
use stoker_trainer::backend::*;

/// Best of `reps` runs of `f`, in ms.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::INFINITY, f64::min)
}

/// One GEMM on the CPU backend.
fn gemm(
    be: &CpuBackend,
    spec: Gemm,
    a: In<'_, CpuBackend>,
    b: In<'_, CpuBackend>,
    c: Out<'_, CpuBackend>,
) {
    be.gemm(GemmArgs { spec, a, b, c }).unwrap()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let b = CpuBackend::new();
    let n = 128;
    for (c, hw) in [(32usize, 64usize), (64, 32), (128, 16)] {
        let g = BnPoolGeom {
            c,
            n,
            h: hw,
            w: hw,
            eps: 1e-5,
            momentum: 0.1,
        };
        let full = c * n * hw * hw;
        let pooled = full / 4;
        let x = b.alloc::<f32>(full)?;
        let mut xv = vec![0f32; full];
        for (i, v) in xv.iter_mut().enumerate() {
            *v = ((i * 7919) % 1000) as f32 / 500.0 - 1.0;
        }
        let mut x = x;
        b.upload(&xv, Out::new(&mut x))?;
        let mut gb = b.alloc::<f32>(2 * c)?;
        b.fill(FillArgs {
            dst: Out::new(&mut gb),
            len: c,
            value: 1.0,
        })?;
        let mut run = b.alloc::<f32>(2 * c)?;
        let mut saved = b.alloc::<f32>(2 * c)?;
        let mut y = b.alloc::<f32>(pooled)?;
        let mut win = b.alloc::<u32>(pooled)?;
        let mut scratch = b.alloc::<f32>(0)?;
        let mut dgb = b.alloc::<f32>(2 * c)?;
        let mut dx = b.alloc::<f32>(full)?;
        let fwd = best(5, || {
            let state = BnState {
                x: In::new(&x),
                gamma_beta: In::new(&gb),
                running: Out::new(&mut run),
                saved: Out::new(&mut saved),
                train: true,
            };
            b.bn_relu_pool_forward(BnReluPoolForwardArgs {
                state,
                y: Out::new(&mut y),
                winners: Out::new(&mut win),
                scratch: Out::new(&mut scratch),
                g,
            })
            .unwrap()
        });
        let bwd = best(5, || {
            let grads = BnGrads {
                x: In::new(&x),
                gamma_beta: In::new(&gb),
                saved: In::new(&saved),
                dgamma_beta: Out::new(&mut dgb),
                dx: Out::new(&mut dx),
            };
            b.bn_relu_pool_backward(BnReluPoolBackwardArgs {
                grads,
                dy: In::new(&y),
                winners: In::new(&win),
                scratch: Out::new(&mut scratch),
                g,
            })
            .unwrap()
        });
        println!(
            "bn+relu+pool {c}x{hw}x{hw}: forward {fwd:.1} ms, backward {bwd:.1} ms ({:.0} MB in)",
            full as f64 * 4e-6
        );
    }
    for (c, cout, hw) in [(3usize, 32usize, 64usize), (32, 64, 32), (64, 128, 16)] {
        let geom = ConvGeom {
            c,
            n,
            h: hw,
            w: hw,
            kh: 3,
            kw: 3,
            stride: 1,
            pad: 1,
            col: ColLayout::PixelMajor,
        };
        let k = geom.col_rows();
        let ohw = hw * hw;
        let chunk = (b.im2col_budget() / (k * ohw)).clamp(1, n);
        let p = chunk * ohw;
        let x = b.alloc::<f32>(c * n * ohw)?;
        let mut col = b.alloc::<f32>(k * p)?;
        let mut dx = b.alloc::<f32>(c * n * ohw)?;
        let w = b.alloc::<f32>(cout * k)?;
        let mut dw = b.alloc::<f32>(cout * k)?;
        let mut y = b.alloc::<f32>(cout * n * ohw)?;
        // The chunk of images `n0..n0+nc` unfolded into `col`, and folded back into `dx`.
        let im2col = |n0, nc, col: &mut CpuBuf<f32>| {
            let (src, dst) = (In::new(&x), Out::new(col));
            let op = Im2colArgs {
                geom,
                n0,
                nc,
                src,
                dst,
            };
            b.im2col(op).unwrap()
        };
        let col2im = |n0, nc, col: &CpuBuf<f32>, dx: &mut CpuBuf<f32>| {
            let (src, dst) = (In::new(col), Out::new(dx));
            let op = Im2colArgs {
                geom,
                n0,
                nc,
                src,
                dst,
            };
            b.col2im(op).unwrap()
        };
        let i2c = best(5, || im2col(0, chunk, &mut col));
        let c2i = best(5, || col2im(0, chunk, &col, &mut dx));
        let mut gf = Gemm::dense(false, true, cout, p, k);
        gf.ldc = n * ohw;
        let f = best(5, || {
            gemm(&b, gf, In::new(&w), In::new(&col), Out::new(&mut y));
        });
        let mut gw = Gemm::dense(false, false, cout, k, p);
        gw.lda = n * ohw;
        let wg = best(5, || {
            gemm(&b, gw, In::new(&y), In::new(&col), Out::new(&mut dw));
        });
        let mut gd = Gemm::dense(true, false, p, k, cout);
        gd.lda = n * ohw;
        let dg = best(5, || {
            gemm(&b, gd, In::new(&y), In::new(&w), Out::new(&mut col));
        });
        let gf_ = 2.0 * (cout * k * p) as f64 / 1e6;
        // The whole convolution, blocked, against the chunked sequence above.
        let mut scratch = b.alloc::<f32>(b.conv_scratch(geom, cout))?;
        let chunks = n.div_ceil(chunk);
        let (mut cf, mut cb, mut sf, mut sb) =
            (f64::INFINITY, f64::INFINITY, f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            cf = cf.min(best(1, || {
                b.conv_forward(ConvForwardArgs {
                    x: In::new(&x),
                    w: In::new(&w),
                    geom,
                    cout,
                    y: Out::new(&mut y),
                    scratch: Out::new(&mut scratch),
                })
                .unwrap()
            }));
            sf = sf.min(best(1, || {
                for i in 0..chunks {
                    let n0 = i * chunk;
                    let nc = chunk.min(n - n0);
                    let mut g2 = gf;
                    g2.n = nc * ohw;
                    im2col(n0, nc, &mut col);
                    gemm(
                        &b,
                        g2,
                        In::new(&w),
                        In::new(&col),
                        Out::at(&mut y, n0 * ohw),
                    );
                }
            }));
            cb = cb.min(best(1, || {
                b.conv_backward(ConvBackwardArgs {
                    x: In::new(&x),
                    w: In::new(&w),
                    dy: In::new(&y),
                    geom,
                    cout,
                    dw: Out::new(&mut dw),
                    dx: Some(Out::new(&mut dx)),
                    scratch: Out::new(&mut scratch),
                    reuse: false,
                })
                .unwrap()
            }));
            sb = sb.min(best(1, || {
                for i in 0..chunks {
                    let n0 = i * chunk;
                    let nc = chunk.min(n - n0);
                    let (mut w2, mut d2) = (gw, gd);
                    w2.k = nc * ohw;
                    d2.m = nc * ohw;
                    w2.beta = if i == 0 { 0.0 } else { 1.0 };
                    im2col(n0, nc, &mut col);
                    gemm(
                        &b,
                        w2,
                        In::at(&y, n0 * ohw),
                        In::new(&col),
                        Out::new(&mut dw),
                    );
                    gemm(
                        &b,
                        d2,
                        In::at(&y, n0 * ohw),
                        In::new(&w),
                        Out::new(&mut col),
                    );
                    col2im(n0, nc, &col, &mut dx);
                }
            }));
        }
        println!("conv {c}->{cout} {hw}px whole layer: blocked fwd {cf:.1} bwd {cb:.1} | chunked fwd {sf:.1} bwd {sb:.1} ms");
        println!(
            "conv {c}->{cout} {hw}px chunk {chunk} (x{} per step): im2col {i2c:.1} col2im {c2i:.1} | fwd {f:.1} ({:.0} GF/s) wgrad {wg:.1} ({:.0}) dgrad {dg:.1} ({:.0}) ms",
            n.div_ceil(chunk), gf_ / f, gf_ / wg, gf_ / dg
        );
    }
    Ok(())
}
