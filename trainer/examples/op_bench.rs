//! Times single CPU backend ops at the convnet's shapes (batch 128, 64 px): the fused
//! batch norm + ReLU + pool, im2col / col2im in the pixel-major layout, and the three
//! GEMMs of a convolution chunk. `cargo run --release -p stoker-trainer --example op_bench`.

use std::time::Instant;

use stoker_trainer::backend::{BnPoolGeom, ColLayout, ConvGeom, Gemm, In, Out};
use stoker_trainer::{Backend, CpuBackend};

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
        b.fill(Out::new(&mut gb), c, 1.0)?;
        let mut run = b.alloc::<f32>(2 * c)?;
        let mut saved = b.alloc::<f32>(2 * c)?;
        let mut y = b.alloc::<f32>(pooled)?;
        let mut win = b.alloc::<u32>(pooled)?;
        let mut scratch = b.alloc::<f32>(0)?;
        let mut dgb = b.alloc::<f32>(2 * c)?;
        let mut dx = b.alloc::<f32>(full)?;
        let fwd = best(5, || {
            b.bn_relu_pool_forward(
                In::new(&x),
                In::new(&gb),
                Out::new(&mut run),
                Out::new(&mut saved),
                Out::new(&mut y),
                Out::new(&mut win),
                Out::new(&mut scratch),
                g,
                true,
            )
            .unwrap()
        });
        let bwd = best(5, || {
            b.bn_relu_pool_backward(
                In::new(&x),
                In::new(&y),
                In::new(&win),
                In::new(&gb),
                In::new(&saved),
                Out::new(&mut dgb),
                Out::new(&mut dx),
                Out::new(&mut scratch),
                g,
            )
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
        let i2c = best(5, || {
            b.im2col(In::new(&x), geom, 0, chunk, Out::new(&mut col))
                .unwrap()
        });
        let c2i = best(5, || {
            b.col2im(In::new(&col), geom, 0, chunk, Out::new(&mut dx))
                .unwrap()
        });
        let mut gf = Gemm::dense(false, true, cout, p, k);
        gf.ldc = n * ohw;
        let f = best(5, || {
            b.gemm(gf, In::new(&w), In::new(&col), Out::new(&mut y))
                .unwrap()
        });
        let mut gw = Gemm::dense(false, false, cout, k, p);
        gw.lda = n * ohw;
        let wg = best(5, || {
            b.gemm(gw, In::new(&y), In::new(&col), Out::new(&mut dw))
                .unwrap()
        });
        let mut gd = Gemm::dense(true, false, p, k, cout);
        gd.lda = n * ohw;
        let dg = best(5, || {
            b.gemm(gd, In::new(&y), In::new(&w), Out::new(&mut col))
                .unwrap()
        });
        let gf_ = 2.0 * (cout * k * p) as f64 / 1e6;
        // The whole convolution, blocked, against the chunked sequence above.
        let mut scratch = b.alloc::<f32>(b.conv_scratch(geom, cout))?;
        let chunks = n.div_ceil(chunk);
        let (mut cf, mut cb, mut sf, mut sb) =
            (f64::INFINITY, f64::INFINITY, f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            cf = cf.min(best(1, || {
                b.conv_forward(
                    In::new(&x),
                    In::new(&w),
                    geom,
                    cout,
                    Out::new(&mut y),
                    Out::new(&mut scratch),
                )
                .unwrap()
            }));
            sf = sf.min(best(1, || {
                for i in 0..chunks {
                    let n0 = i * chunk;
                    let nc = chunk.min(n - n0);
                    let mut g2 = gf;
                    g2.n = nc * ohw;
                    b.im2col(In::new(&x), geom, n0, nc, Out::new(&mut col))
                        .unwrap();
                    b.gemm(g2, In::new(&w), In::new(&col), Out::at(&mut y, n0 * ohw))
                        .unwrap();
                }
            }));
            cb = cb.min(best(1, || {
                b.conv_backward(
                    In::new(&x),
                    In::new(&w),
                    In::new(&y),
                    geom,
                    cout,
                    Out::new(&mut dw),
                    Some(Out::new(&mut dx)),
                    Out::new(&mut scratch),
                    false,
                )
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
                    b.im2col(In::new(&x), geom, n0, nc, Out::new(&mut col))
                        .unwrap();
                    b.gemm(w2, In::at(&y, n0 * ohw), In::new(&col), Out::new(&mut dw))
                        .unwrap();
                    b.gemm(d2, In::at(&y, n0 * ohw), In::new(&w), Out::new(&mut col))
                        .unwrap();
                    b.col2im(In::new(&col), geom, n0, nc, Out::new(&mut dx))
                        .unwrap();
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
