//! CUDA backend tests: the probe never panics, the kernels compile, and (on a machine
//! with a usable GPU) every op, every layer's forward and backward, and a few full
//! training steps of each model agree with the CPU backend.
//!
//! Without a GPU the device tests print `SKIPPED: no usable CUDA device (<reason>)` to
//! stderr and pass; `cuda_tests_skipped_without_gpu` says so once, visibly, in the
//! test list (run with `--nocapture` to see the messages).
//!
//! Tolerances, and why:
//! - exact (bit for bit): element-wise ops, im2col/col2im, pooling, datanorm and the
//!   optimizer steps. The kernels do the CPU's f32 operations in the CPU's order, with
//!   FMA contraction off and IEEE division and square root (NVRTC's defaults), and the
//!   sums of col2im / maxpool backward / avgpool run in the CPU's order.
//! - GEMM: `|gpu - cpu| <= 1e-4 * (sqrt(k) + |cpu|)`. cuBLAS and gemm-f32 sum
//!   the k products in different orders; with O(1) inputs each order's rounding error
//!   is a few f32 ulps of partial sums of size ~sqrt(k).
//! - reductions summed in double in a different order (bias gradient, batch-norm
//!   statistics and gradients, the loss sum): rtol 1e-5, atol 1e-5; expf/logf of the
//!   loss differ from Rust's by an ulp or two: rtol 1e-5 on the loss and dlogits.
//! - layers: rtol 1e-4, atol 1e-4 (one GEMM plus one reduction deep).
//! - training steps: per-step loss rtol 1e-3; weights after the steps rtol 1e-3 and
//!   atol 1e-4: GEMM rounding differences grow through the layers and the updates.

mod util;

use stoker_trainer::backend::cuda::{self, CudaBackend};
use util::gpu;
// Every op trait and argument struct, and the geometry types.
use stoker_trainer::backend::*;
use stoker_trainer::layer::conv::ConvSpec;
use stoker_trainer::layer::{
    BatchNorm2d, BatchNormReluPool, Builder, Conv2d, GlobalAvgPool, Layer, Linear, MaxPool2d,
    ModelBuffers, Relu, Shape,
};
use stoker_trainer::rng::Rng;
use stoker_trainer::tensor::Tensor;
use stoker_trainer::{
    BackendError, CpuBackend, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind,
};

#[test]
fn cuda_tests_skipped_without_gpu() {
    match cuda::probe() {
        Ok(info) => eprintln!("CUDA device present: {info}; the parity tests run on it"),
        Err(why) => stoker_loader::gpu_test::skip(format!(
            "no usable CUDA device ({why}); every CUDA parity test in this file passes \
             without running"
        )),
    }
}

#[test]
fn probe_returns_an_error_not_a_panic() {
    let r = std::panic::catch_unwind(cuda::probe);
    let r = r.expect("probe must never panic");
    if let Err(why) = &r {
        let why = why.to_string();
        assert!(!why.is_empty());
        assert!(!why.contains('\n'), "one line: {why}");
    }
    // A device that cannot exist is an error on every machine, GPU or not.
    let r = std::panic::catch_unwind(|| cuda::probe_ordinal(4096)).expect("no panic");
    assert!(r.is_err());
    let r = std::panic::catch_unwind(|| CudaBackend::new(4096)).expect("no panic");
    assert!(r.is_err());
}

#[test]
fn backend_creation_without_cuda_is_an_error() {
    if cuda::probe().is_ok() {
        eprintln!("(a GPU is present: nothing to check here)");
        return;
    }
    let e = CudaBackend::new(0).expect_err("no GPU: must fail");
    assert!(e.to_string().contains("cuda:0"), "{e}");
}

#[test]
fn kernels_compile_with_nvrtc() {
    // Needs only libnvrtc, not a GPU: the build machine can run it with the library.
    for cc in [(9, 0), (8, 0)] {
        match cuda::compile_kernels(cc) {
            Ok(ptx) => {
                let text = ptx.to_src();
                for kernel in ["bn_partial_stats", "swap01_f32_bf16", "swap01_bf16_f32"] {
                    assert!(text.contains(kernel), "PTX lacks {kernel}");
                }
            }
            Err(why @ cuda::CudaError::Missing(_)) => {
                stoker_loader::gpu_test::skip(format!("cannot compile the kernels here ({why})"));
                return;
            }
            Err(why) => panic!("kernels do not compile for {cc:?}: {why}"),
        }
    }
}

// ---------------------------------------------------------------------------------
// Helpers

fn randn(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.normal() as f32).collect()
}

fn up<B: Backend>(b: &B, v: &[f32]) -> B::Buf<f32> {
    let mut buf = b.alloc::<f32>(v.len()).unwrap();
    b.upload(v, Out::new(&mut buf)).unwrap();
    buf
}

fn up_t<B: Backend, T: stoker_trainer::backend::Elem>(b: &B, v: &[T]) -> B::Buf<T> {
    let mut buf = b.alloc::<T>(v.len()).unwrap();
    b.upload(v, Out::new(&mut buf)).unwrap();
    buf
}

fn down<B: Backend>(b: &B, buf: &B::Buf<f32>, n: usize) -> Vec<f32> {
    let mut v = vec![0.0; n];
    b.download(In::new(buf), &mut v).unwrap();
    v
}

fn down_u32<B: Backend>(b: &B, buf: &B::Buf<u32>, n: usize) -> Vec<u32> {
    let mut v = vec![0; n];
    b.download(In::new(buf), &mut v).unwrap();
    v
}

#[track_caller]
fn exact(what: &str, cpu: &[f32], gpu: &[f32]) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: lengths");
    for (i, (c, g)) in cpu.iter().zip(gpu).enumerate() {
        assert!(
            c.to_bits() == g.to_bits() || (c.is_nan() && g.is_nan()),
            "{what}[{i}]: cpu {c} gpu {g} (expected bit-identical)"
        );
    }
}

#[track_caller]
fn close(what: &str, cpu: &[f32], gpu: &[f32], rtol: f32, atol: f32) {
    assert_eq!(cpu.len(), gpu.len(), "{what}: lengths");
    let mut worst = (0.0f32, 0usize);
    for (i, (c, g)) in cpu.iter().zip(gpu).enumerate() {
        let err = (c - g).abs();
        let lim = atol + rtol * c.abs();
        assert!(
            err <= lim,
            "{what}[{i}]: cpu {c} gpu {g} (|diff| {err} > {lim})"
        );
        if err > worst.0 {
            worst = (err, i);
        }
    }
    eprintln!("{what}: max |diff| {} at {}", worst.0, worst.1);
}

// ---------------------------------------------------------------------------------
// Ops

#[test]
fn elementwise_ops_are_bit_identical() {
    let Some(g) = gpu("elementwise") else { return };
    let c = CpuBackend::new();
    let mut rng = Rng::new(1);
    let n = 70_001;
    let (a, b0) = (randn(&mut rng, n), randn(&mut rng, n));
    fn run<B: Backend>(be: &B, a: &[f32], b0: &[f32]) -> Vec<Vec<f32>> {
        let n = a.len();
        let (ab, bb) = (up(be, a), up(be, b0));
        let mut out = Vec::new();
        let mut y = be.alloc::<f32>(n + 3).unwrap();
        be.fill(FillArgs {
            dst: Out::at(&mut y, 3),
            len: n - 5,
            value: 0.25,
        })
        .unwrap();
        out.push(down(be, &y, n + 3));
        be.add(MapArgs {
            x: In::at(&ab, 2),
            y: Out::at(&mut y, 1),
            len: n - 2,
        })
        .unwrap();
        out.push(down(be, &y, n + 3));
        for relu in [false, true] {
            be.add_act(AddActArgs {
                a: In::new(&ab),
                b: In::new(&bb),
                y: Out::new(&mut y),
                len: n,
                relu,
            })
            .unwrap();
            out.push(down(be, &y, n));
        }
        be.relu_forward(MapArgs {
            x: In::new(&ab),
            y: Out::new(&mut y),
            len: n,
        })
        .unwrap();
        out.push(down(be, &y, n));
        let mut dx = be.alloc::<f32>(n).unwrap();
        be.relu_backward(ReluBackwardArgs {
            y: In::new(&ab),
            dy: In::new(&bb),
            dx: Out::new(&mut dx),
            len: n,
        })
        .unwrap();
        out.push(down(be, &dx, n));
        out
    }
    for (i, (x, y)) in run(&c, &a, &b0).iter().zip(run(&g, &a, &b0)).enumerate() {
        exact(&format!("elementwise op {i}"), x, &y);
    }
}

#[test]
fn gemm_matches_in_every_transpose_and_stride() {
    let Some(g) = gpu("gemm") else { return };
    let c = CpuBackend::new();
    let mut rng = Rng::new(2);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for (m, n, k) in [
            (33, 47, 65),
            (128, 300, 288),
            (1, 5, 1),
            (7, 1, 513),
            (5, 7, 8197),
        ] {
            for beta in [0.0, 1.0] {
                let mut gm = Gemm::dense(ta, tb, m, n, k).beta(beta);
                gm.alpha = 0.75;
                // Padded strides and offsets, as the conv layer's chunked GEMMs use.
                gm.lda += 3;
                gm.ldb += 2;
                gm.ldc += 5;
                let (ar, br) = (if ta { k } else { m }, if tb { n } else { k });
                let a = randn(&mut rng, 4 + ar * gm.lda);
                let b = randn(&mut rng, 1 + br * gm.ldb);
                let c0 = randn(&mut rng, 2 + m * gm.ldc);
                fn run<B: Backend>(be: &B, gm: Gemm, a: &[f32], b: &[f32], c0: &[f32]) -> Vec<f32> {
                    let (ab, bb, mut cb) = (up(be, a), up(be, b), up(be, c0));
                    be.gemm(GemmArgs {
                        spec: gm,
                        a: In::at(&ab, 4),
                        b: In::at(&bb, 1),
                        c: Out::at(&mut cb, 2),
                    })
                    .unwrap();
                    down(be, &cb, c0.len())
                }
                let (x, y) = (run(&c, gm, &a, &b, &c0), run(&g, gm, &a, &b, &c0));
                let tol = 1e-4 * (k as f32).sqrt();
                close(
                    &format!("gemm ta={ta} tb={tb} {m}x{n}x{k} beta={beta}"),
                    &x,
                    &y,
                    1e-4,
                    tol,
                );
            }
        }
    }
}

#[test]
fn im2col_and_col2im_are_bit_identical() {
    let Some(g) = gpu("im2col") else { return };
    let c = CpuBackend::new();
    let mut rng = Rng::new(3);
    for (stride, pad, k) in [(1, 1, 3), (2, 1, 3), (2, 0, 1), (1, 0, 2), (3, 2, 5)] {
        let geo = ConvGeom {
            c: 3,
            n: 5,
            h: 9,
            w: 7,
            kh: k,
            kw: k,
            stride,
            pad,
            col: ColLayout::TapMajor,
        };
        let x = randn(&mut rng, geo.c * geo.n * geo.h * geo.w);
        let nc = 3;
        let cols = geo.col_rows() * nc * geo.out_h() * geo.out_w();
        let colv = randn(&mut rng, cols);
        fn run<B: Backend>(be: &B, geo: ConvGeom, x: &[f32], colv: &[f32]) -> [Vec<f32>; 2] {
            let (n0, nc) = (1, 3);
            let xb = up(be, x);
            let mut col = be.alloc::<f32>(colv.len()).unwrap();
            be.im2col(Im2colArgs {
                geom: geo,
                n0,
                nc,
                src: In::new(&xb),
                dst: Out::new(&mut col),
            })
            .unwrap();
            let a = down(be, &col, colv.len());
            let cb = up(be, colv);
            // dx starts as x: col2im must overwrite images n0..n0+nc and keep the rest.
            let mut dx = up(be, x);
            be.col2im(Im2colArgs {
                geom: geo,
                n0,
                nc,
                src: In::new(&cb),
                dst: Out::new(&mut dx),
            })
            .unwrap();
            [a, down(be, &dx, x.len())]
        }
        let (p, q) = (run(&c, geo, &x, &colv), run(&g, geo, &x, &colv));
        exact(&format!("im2col {geo:?}"), &p[0], &q[0]);
        exact(&format!("col2im {geo:?}"), &p[1], &q[1]);
    }
}

#[test]
fn bias_act_matches() {
    let Some(g) = gpu("bias_act") else { return };
    let c = CpuBackend::new();
    let mut rng = Rng::new(4);
    let (rows, cols) = (37, 1029);
    let y0 = randn(&mut rng, rows * cols);
    let bias = randn(&mut rng, rows);
    let dy0 = randn(&mut rng, rows * cols);
    for relu in [false, true] {
        for with_bias in [false, true] {
            fn run<B: Backend>(
                be: &B,
                y0: &[f32],
                bias: &[f32],
                dy0: &[f32],
                relu: bool,
                with_bias: bool,
            ) -> [Vec<f32>; 3] {
                let (rows, cols) = (bias.len(), y0.len() / bias.len());
                let mut y = up(be, y0);
                let bb = up(be, bias);
                let bo = with_bias.then(|| In::new(&bb));
                be.bias_act_forward(BiasActForwardArgs {
                    y: Out::new(&mut y),
                    bias: bo,
                    geom: BiasActGeom { rows, cols, relu },
                })
                .unwrap();
                let mut dy = up(be, dy0);
                let mut db = be.alloc::<f32>(rows).unwrap();
                let dbo = with_bias.then(|| Out::new(&mut db));
                be.bias_act_backward(BiasActBackwardArgs {
                    y: In::new(&y),
                    dy: Out::new(&mut dy),
                    dbias: dbo,
                    geom: BiasActGeom { rows, cols, relu },
                })
                .unwrap();
                [
                    down(be, &y, y0.len()),
                    down(be, &dy, y0.len()),
                    down(be, &db, rows),
                ]
            }
            let p = run(&c, &y0, &bias, &dy0, relu, with_bias);
            let q = run(&g, &y0, &bias, &dy0, relu, with_bias);
            let what = format!("bias_act relu={relu} bias={with_bias}");
            exact(&format!("{what} forward"), &p[0], &q[0]);
            exact(&format!("{what} dy"), &p[1], &q[1]);
            close(&format!("{what} dbias"), &p[2], &q[2], 1e-5, 1e-5);
        }
    }
}

#[test]
fn pooling_is_bit_identical() {
    let Some(g) = gpu("pool") else { return };
    let c = CpuBackend::new();
    let mut rng = Rng::new(5);
    for (k, stride, h, w) in [(2, 2, 8, 6), (3, 2, 9, 9), (2, 1, 5, 4), (3, 3, 7, 8)] {
        let geo = PoolGeom {
            planes: 13,
            h,
            w,
            k,
            stride,
        };
        let ohw = geo.out_h() * geo.out_w();
        // After a ReLU, ties at zero are common: make some. And NaN, which never wins:
        // a plane's first element, one further in, and the first plane's first row.
        let mut x: Vec<f32> = randn(&mut rng, 13 * h * w)
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
        for i in [0, 5 * w + 3].into_iter().chain(0..w).chain([h * w]) {
            x[i] = f32::NAN;
        }
        let dy = randn(&mut rng, 13 * ohw);
        fn run<B: Backend>(be: &B, geo: PoolGeom, x: &[f32], dy: &[f32]) -> [Vec<f32>; 3] {
            let ohw = geo.out_h() * geo.out_w();
            let xb = up(be, x);
            let mut y = be.alloc::<f32>(geo.planes * ohw).unwrap();
            let mut am = be.alloc::<u32>(geo.planes * ohw).unwrap();
            be.maxpool_forward(MaxPoolForwardArgs {
                x: In::new(&xb),
                geom: geo,
                y: Out::new(&mut y),
                argmax: Out::new(&mut am),
            })
            .unwrap();
            let dyb = up(be, dy);
            let mut dx = be.alloc::<f32>(x.len()).unwrap();
            be.maxpool_backward(MaxPoolBackwardArgs {
                dy: In::new(&dyb),
                argmax: In::new(&am),
                geom: geo,
                dx: Out::new(&mut dx),
            })
            .unwrap();
            let amv = down_u32(be, &am, geo.planes * ohw);
            [
                down(be, &y, geo.planes * ohw),
                down(be, &dx, x.len()),
                amv.iter().map(|&v| v as f32).collect(),
            ]
        }
        let (p, q) = (run(&c, geo, &x, &dy), run(&g, geo, &x, &dy));
        exact(&format!("maxpool {geo:?} y"), &p[0], &q[0]);
        exact(&format!("maxpool {geo:?} dx"), &p[1], &q[1]);
        exact(&format!("maxpool {geo:?} argmax"), &p[2], &q[2]);
    }
    let (planes, hw) = (300, 49);
    let x = randn(&mut rng, planes * hw);
    let dy = randn(&mut rng, planes);
    fn avg<B: Backend>(be: &B, x: &[f32], dy: &[f32], hw: usize) -> [Vec<f32>; 2] {
        let planes = dy.len();
        let xb = up(be, x);
        let mut y = be.alloc::<f32>(planes).unwrap();
        be.avgpool_forward(AvgPoolForwardArgs {
            x: In::new(&xb),
            planes,
            hw,
            y: Out::new(&mut y),
        })
        .unwrap();
        let dyb = up(be, dy);
        let mut dx = be.alloc::<f32>(x.len()).unwrap();
        be.avgpool_backward(AvgPoolBackwardArgs {
            dy: In::new(&dyb),
            planes,
            hw,
            dx: Out::new(&mut dx),
        })
        .unwrap();
        [down(be, &y, planes), down(be, &dx, x.len())]
    }
    let (p, q) = (avg(&c, &x, &dy, hw), avg(&g, &x, &dy, hw));
    exact("avgpool y", &p[0], &q[0]);
    exact("avgpool dx", &p[1], &q[1]);
}

#[test]
fn batchnorm_matches() {
    let Some(g) = gpu("batchnorm") else { return };
    let c = CpuBackend::new();
    let mut rng = Rng::new(6);
    // m = 20000 spans three partial-sum chunks; a large mean tests the shifted sums.
    for (ch, n, hw, relu) in [(5, 20, 1000, true), (3, 7, 9, false), (2, 1, 1, false)] {
        let geo = BnGeom {
            c: ch,
            n,
            hw,
            eps: 1e-5,
            momentum: 0.1,
            relu,
        };
        let x: Vec<f32> = randn(&mut rng, ch * n * hw)
            .into_iter()
            .map(|v| 3.0 * v + 10.0)
            .collect();
        let gb: Vec<f32> = randn(&mut rng, 2 * ch);
        let running: Vec<f32> = (0..2 * ch).map(|i| 0.5 + i as f32 * 0.1).collect();
        let dy = randn(&mut rng, x.len());
        fn run<B: Backend>(
            be: &B,
            geo: BnGeom,
            x: &[f32],
            gb: &[f32],
            running: &[f32],
            dy: &[f32],
        ) -> Vec<Vec<f32>> {
            let (xb, gbb, dyb) = (up(be, x), up(be, gb), up(be, dy));
            let mut rb = up(be, running);
            let mut saved = be.alloc::<f32>(2 * geo.c).unwrap();
            let mut y = be.alloc::<f32>(x.len()).unwrap();
            let mut out = Vec::new();
            let state = BnState {
                x: In::new(&xb),
                gamma_beta: In::new(&gbb),
                running: Out::new(&mut rb),
                saved: Out::new(&mut saved),
                train: true,
            };
            be.batchnorm_forward(BatchNormForwardArgs {
                state,
                y: Out::new(&mut y),
                bn: geo,
            })
            .unwrap();
            out.push(down(be, &y, x.len()));
            out.push(down(be, &saved, 2 * geo.c));
            out.push(down(be, &rb, 2 * geo.c));
            let mut dgb = be.alloc::<f32>(2 * geo.c).unwrap();
            let mut dx = be.alloc::<f32>(x.len()).unwrap();
            let grads = BnGrads {
                x: In::new(&xb),
                gamma_beta: In::new(&gbb),
                saved: In::new(&saved),
                dgamma_beta: Out::new(&mut dgb),
                dx: Out::new(&mut dx),
            };
            be.batchnorm_backward(BatchNormBackwardArgs {
                grads,
                y: In::new(&y),
                dy: In::new(&dyb),
                bn: geo,
            })
            .unwrap();
            out.push(down(be, &dgb, 2 * geo.c));
            out.push(down(be, &dx, x.len()));
            let mut ye = be.alloc::<f32>(x.len()).unwrap();
            let state = BnState {
                x: In::new(&xb),
                gamma_beta: In::new(&gbb),
                running: Out::new(&mut rb),
                saved: Out::new(&mut saved),
                train: false,
            };
            be.batchnorm_forward(BatchNormForwardArgs {
                state,
                y: Out::new(&mut ye),
                bn: geo,
            })
            .unwrap();
            out.push(down(be, &ye, x.len()));
            out
        }
        let p = run(&c, geo, &x, &gb, &running, &dy);
        let q = run(&g, geo, &x, &gb, &running, &dy);
        let names = ["y", "saved", "running", "dgamma_beta", "dx", "eval y"];
        for ((name, a), b) in names.iter().zip(&p).zip(&q) {
            close(&format!("batchnorm {geo:?} {name}"), a, b, 1e-5, 1e-5);
        }
    }
}

#[test]
fn datanorm_is_bit_identical() {
    let Some(g) = gpu("datanorm") else { return };
    let c = CpuBackend::new();
    let mut rng = Rng::new(7);
    let (n, h, w, ch) = (6, 5, 7, 3);
    let x: Vec<u8> = (0..n * h * w * ch).map(|_| rng.next_u64() as u8).collect();
    for layout in [DataLayout::ChannelMajor, DataLayout::FeatureMajor] {
        fn run<B: Backend>(be: &B, x: &[u8], layout: DataLayout) -> Vec<f32> {
            let (n, h, w) = (6, 5, 7);
            let (mean, std) = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]);
            let xb = up_t(be, x);
            let mut y = be.alloc::<f32>(x.len()).unwrap();
            be.datanorm(DataNormArgs {
                x: In::new(&xb),
                n,
                h,
                w,
                mean: &mean,
                std: &std,
                layout,
                y: Out::new(&mut y),
            })
            .unwrap();
            down(be, &y, x.len())
        }
        exact(
            &format!("datanorm {layout:?}"),
            &run(&c, &x, layout),
            &run(&g, &x, layout),
        );
    }
}

#[test]
fn softmax_xent_matches() {
    let Some(g) = gpu("softmax_xent") else { return };
    let c = CpuBackend::new();
    let mut rng = Rng::new(8);
    for (classes, n) in [(10, 300), (2, 1), (1000, 17)] {
        let z = randn(&mut rng, classes * n);
        let labels: Vec<u32> = (0..n)
            .map(|_| (rng.next_u64() % classes as u64) as u32)
            .collect();
        fn run<B: Backend>(be: &B, z: &[f32], labels: &[u32], classes: usize) -> [Vec<f32>; 3] {
            let n = labels.len();
            let (zb, lb) = (up(be, z), up_t(be, labels));
            let mut dz = be.alloc::<f32>(z.len()).unwrap();
            let mut st = be.alloc::<f32>(2).unwrap();
            be.softmax_xent(SoftmaxXentArgs {
                io: LossIo {
                    logits: In::new(&zb),
                    classes,
                    n,
                    dlogits: Some(Out::new(&mut dz)),
                    stats: Out::new(&mut st),
                },
                labels: In::new(&lb),
            })
            .unwrap();
            let mut st2 = be.alloc::<f32>(2).unwrap();
            be.softmax_xent(SoftmaxXentArgs {
                io: LossIo {
                    logits: In::new(&zb),
                    classes,
                    n,
                    dlogits: None,
                    stats: Out::new(&mut st2),
                },
                labels: In::new(&lb),
            })
            .unwrap();
            [down(be, &dz, z.len()), down(be, &st, 2), down(be, &st2, 2)]
        }
        let p = run(&c, &z, &labels, classes);
        let q = run(&g, &z, &labels, classes);
        close(&format!("dlogits {classes}x{n}"), &p[0], &q[0], 1e-5, 1e-7);
        close(
            &format!("loss {classes}x{n}"),
            &p[1][..1],
            &q[1][..1],
            1e-5,
            1e-5,
        );
        exact(&format!("correct {classes}x{n}"), &p[1][1..], &q[1][1..]);
        exact(
            &format!("stats without dlogits {classes}x{n}"),
            &q[1],
            &q[2],
        );
    }
}

/// `row_loss` of `loss` on the CPU and `g` against each other: the logits' gradient to
/// within `atol_dlogits`, the mean loss to 1e-5 and the count of correct rows exactly.
fn row_loss_parity(
    g: &CudaBackend,
    loss: RowLoss,
    name: &str,
    (z, t): (&[f32], &[f32]),
    classes: usize,
    atol_dlogits: f32,
) {
    fn run<B: Backend>(
        be: &B,
        loss: RowLoss,
        z: &[f32],
        t: &[f32],
        classes: usize,
    ) -> [Vec<f32>; 2] {
        let n = z.len() / classes;
        let (zb, tb) = (up(be, z), up(be, t));
        let mut dz = be.alloc::<f32>(z.len()).unwrap();
        let mut st = be.alloc::<f32>(2).unwrap();
        be.row_loss(RowLossArgs {
            loss,
            io: LossIo {
                logits: In::new(&zb),
                classes,
                n,
                dlogits: Some(Out::new(&mut dz)),
                stats: Out::new(&mut st),
            },
            targets: In::new(&tb),
        })
        .unwrap();
        [down(be, &dz, z.len()), down(be, &st, 2)]
    }
    let n = z.len() / classes;
    let p = run(&CpuBackend::new(), loss, z, t, classes);
    let q = run(g, loss, z, t, classes);
    let what = |s: &str| format!("{name} {s} {classes}x{n}");
    close(&what("dlogits"), &p[0], &q[0], 1e-5, atol_dlogits);
    close(&what("loss"), &p[1][..1], &q[1][..1], 1e-5, 1e-5);
    exact(&what("correct"), &p[1][1..], &q[1][1..]);
}

#[test]
fn softmax_xent_soft_matches() {
    let Some(g) = gpu("softmax_xent_soft") else {
        return;
    };
    let mut rng = Rng::new(9);
    for (classes, n) in [(10, 300), (2, 1), (1000, 17)] {
        let z = randn(&mut rng, classes * n);
        // Two labels mixed 0.7 / 0.3 plus 0.1 of label smoothing, as the trainer builds.
        let mut t = vec![0.01 / classes as f32; classes * n];
        for j in 0..n {
            let a = (rng.next_u64() % classes as u64) as usize;
            let b = (rng.next_u64() % classes as u64) as usize;
            t[a * n + j] += 0.9 * 0.7;
            t[b * n + j] += 0.9 * 0.3;
        }
        row_loss_parity(&g, RowLoss::SoftmaxXent, "soft", (&z, &t), classes, 1e-7);
    }
}

#[test]
fn sigmoid_bce_matches() {
    let Some(g) = gpu("sigmoid_bce") else {
        return;
    };
    let mut rng = Rng::new(11);
    for (classes, n) in [(10, 300), (2, 1), (80, 17)] {
        // Logits up to ~±24, some far past where a naive log(sigmoid) overflows.
        let z: Vec<f32> = randn(&mut rng, classes * n)
            .into_iter()
            .map(|v| 8.0 * v)
            .collect();
        let t: Vec<f32> = (0..classes * n)
            .map(|_| f32::from(u8::from(rng.next_u64().is_multiple_of(4))))
            .collect();
        row_loss_parity(&g, RowLoss::SigmoidBce, "bce", (&z, &t), classes, 1e-8);
    }
}

#[test]
fn a_bad_label_is_reported_at_the_next_download() {
    if gpu("bad label").is_none() {
        return;
    }
    // A backend of its own: the deferred error must not reach another test's download.
    let g = CudaBackend::new(0).expect("device");
    let z = up(&g, &[0.0; 12]);
    let lb = up_t(&g, &[1u32, 7, 2, 9]);
    let mut st = g.alloc::<f32>(2).unwrap();
    g.softmax_xent(SoftmaxXentArgs {
        io: LossIo {
            logits: In::new(&z),
            classes: 3,
            n: 4,
            dlogits: None,
            stats: Out::new(&mut st),
        },
        labels: In::new(&lb),
    })
    .expect("enqueued without waiting");
    let mut v = [0.0; 2];
    match g.download(In::new(&st), &mut v) {
        Err(BackendError::Label {
            row,
            label,
            classes,
        }) => assert_eq!((row, label, classes), (1, 7, 3)),
        other => panic!("expected a label error, got {other:?}"),
    }
    // Reported once; the backend stays usable.
    g.download(In::new(&st), &mut v).unwrap();
}

#[test]
fn optimizer_steps_are_bit_identical() {
    let Some(g) = gpu("optim") else { return };
    let c = CpuBackend::new();
    let mut rng = Rng::new(9);
    let n = 50_000;
    let (p0, gr, s0) = (randn(&mut rng, n), randn(&mut rng, n), randn(&mut rng, n));
    let v0: Vec<f32> = randn(&mut rng, n).iter().map(|v| v.abs()).collect();
    fn run<B: Backend>(be: &B, p0: &[f32], gr: &[f32], s0: &[f32], v0: &[f32]) -> Vec<Vec<f32>> {
        let n = p0.len();
        let gb = up(be, gr);
        let mut out = Vec::new();
        for nesterov in [false, true] {
            let (mut p, mut b) = (up(be, p0), up(be, s0));
            let h = SgdStep {
                lr: 0.1,
                momentum: 0.9,
                weight_decay: 5e-4,
                nesterov,
            };
            let flat = FlatParams {
                params: Out::new(&mut p),
                grads: In::new(&gb),
                len: n,
                decay_len: n / 3,
            };
            be.sgd_step(SgdStepArgs {
                flat,
                momentum: Out::new(&mut b),
                h,
            })
            .unwrap();
            out.push(down(be, &p, n));
            out.push(down(be, &b, n));
        }
        let (mut p, mut m, mut v) = (up(be, p0), up(be, s0), up(be, v0));
        for step in 1..=3 {
            let h = AdamWStep {
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.01,
                step,
            };
            let flat = FlatParams {
                params: Out::new(&mut p),
                grads: In::new(&gb),
                len: n,
                decay_len: n / 2,
            };
            be.adamw_step(AdamWStepArgs {
                flat,
                m: Out::new(&mut m),
                v: Out::new(&mut v),
                h,
            })
            .unwrap();
        }
        out.push(down(be, &p, n));
        out.push(down(be, &m, n));
        out.push(down(be, &v, n));
        out
    }
    let (p, q) = (run(&c, &p0, &gr, &s0, &v0), run(&g, &p0, &gr, &s0, &v0));
    for (i, (a, b)) in p.iter().zip(&q).enumerate() {
        exact(&format!("optimizer output {i}"), a, b);
    }
}

// ---------------------------------------------------------------------------------
// Layers

/// Builds one layer on any backend (a closure cannot be generic over the backend).
trait MakeLayer {
    fn input(&self) -> Shape;
    fn make<B: Backend + 'static>(&self, bld: &mut Builder<'_, B>) -> Box<dyn Layer<B>>;
}

/// Forward (train and eval) and backward of one layer on backend `b`: returns y, dx,
/// parameter gradients, state, eval y.
fn layer_run<B: Backend + 'static, M: MakeLayer>(b: &B, mk: &M, n: usize) -> Vec<Vec<f32>> {
    let mut bld = Builder::new(b, n);
    let mut layer = mk.make(&mut bld);
    bld.params.finish();
    bld.state.finish();
    let (reg, sreg) = (bld.params.clone(), bld.state.clone());
    let mut rng = Rng::new(11);
    let p0: Vec<f32> = reg
        .init_values(3)
        .iter()
        .map(|v| v + 0.3 * rng.normal() as f32)
        .collect();
    let inp = mk.input();
    let out = layer.out_shape();
    let x0 = randn(&mut rng, inp.numel() * n);
    let dy0 = randn(&mut rng, out.numel() * n);
    let mut s0 = sreg.init_values(0);
    s0.resize(s0.len().max(1), 0.0);
    let params = Tensor::from_slice(b, &[p0.len().max(1)], &{
        let mut p = p0.clone();
        p.resize(p0.len().max(1), 0.0);
        p
    })
    .unwrap();
    let mut grads = Tensor::zeros(b, &[p0.len().max(1)]).unwrap();
    let mut state = Tensor::from_slice(b, &[s0.len()], &s0).unwrap();
    let x = Tensor::from_slice(b, &[x0.len()], &x0).unwrap();
    let mut y = Tensor::zeros(b, &[dy0.len()]).unwrap();
    let mut dy = Tensor::from_slice(b, &[dy0.len()], &dy0).unwrap();
    let mut dx = Tensor::zeros(b, &[x0.len()]).unwrap();
    let mut ye = Tensor::zeros(b, &[dy0.len()]).unwrap();
    {
        let mut bufs = ModelBuffers {
            backend: b,
            reg: &reg,
            params: params.buf(),
            grads: grads.buf_mut(),
            state_reg: &sreg,
            state: state.buf_mut(),
        };
        layer.forward(&mut bufs, &x, &mut y, n, true).unwrap();
        layer
            .backward(&mut bufs, &x, &y, &mut dy, Some(&mut dx), n)
            .unwrap();
        layer.forward(&mut bufs, &x, &mut ye, n, false).unwrap();
    }
    vec![
        y.to_vec(b).unwrap(),
        dx.to_vec(b).unwrap(),
        grads.to_vec(b).unwrap(),
        state.to_vec(b).unwrap(),
        ye.to_vec(b).unwrap(),
    ]
}

fn layer_parity<M: MakeLayer>(name: &str, mk: &M, n: usize) {
    let Some(g) = gpu(name) else { return };
    let p = layer_run(&CpuBackend::new(), mk, n);
    let q = layer_run(&g, mk, n);
    for ((what, a), b) in ["y", "dx", "param grads", "state", "eval y"]
        .iter()
        .zip(&p)
        .zip(&q)
    {
        close(&format!("{name} {what}"), a, b, 1e-4, 1e-4);
    }
}

macro_rules! layer_maker {
    ($name:ident, $input:expr, |$bld:ident, $inp:ident| $body:expr) => {
        struct $name;
        impl MakeLayer for $name {
            fn input(&self) -> Shape {
                $input
            }
            fn make<B: Backend + 'static>(&self, $bld: &mut Builder<'_, B>) -> Box<dyn Layer<B>> {
                let $inp = self.input();
                Box::new($body)
            }
        }
    };
}

layer_maker!(MkLinear, Shape::vector(37), |bld, inp| Linear::new(
    bld, "fc", inp, 19, true
)
.unwrap());
layer_maker!(MkConv, Shape::new(3, 9, 9), |bld, inp| Conv2d::new(
    bld,
    "conv",
    inp,
    ConvSpec {
        cout: 8,
        k: 3,
        stride: 2,
        pad: 1,
        bias: true,
        relu: true
    }
)
.unwrap());
layer_maker!(MkConvSame, Shape::new(4, 8, 8), |bld, inp| Conv2d::new(
    bld,
    "conv_same",
    inp,
    ConvSpec::same(6, 3, 1)
)
.unwrap());
// 8 input channels: the CPU runs this one as Winograd F(2x2, 3x3), CUDA on cuDNN (or im2col).
layer_maker!(MkConvWinograd, Shape::new(8, 10, 7), |bld, inp| {
    Conv2d::new(bld, "conv_winograd", inp, ConvSpec::same(5, 3, 1)).unwrap()
});
layer_maker!(MkBn, Shape::new(6, 5, 5), |bld, inp| BatchNorm2d::new(
    bld, "bn", inp, true
)
.unwrap());
layer_maker!(MkPool, Shape::new(4, 8, 6), |bld, inp| MaxPool2d::new(
    bld, "pool", inp, 2, 2
)
.unwrap());
layer_maker!(MkBnPool, Shape::new(5, 7, 6), |bld, inp| {
    BatchNormReluPool::new(bld, "bn", "pool", inp).unwrap()
});
layer_maker!(MkGap, Shape::new(5, 4, 4), |_bld, inp| GlobalAvgPool::new(
    "gap", inp
));
layer_maker!(MkRelu, Shape::new(3, 4, 4), |_bld, inp| Relu::new(
    "relu", inp
));

#[test]
fn every_layer_matches_forward_and_backward() {
    layer_parity("linear", &MkLinear, 13);
    layer_parity("conv stride 2 + bias + relu", &MkConv, 6);
    layer_parity("conv same", &MkConvSame, 5);
    layer_parity("conv same, Winograd on the CPU", &MkConvWinograd, 5);
    layer_parity("batchnorm + relu", &MkBn, 7);
    layer_parity("maxpool", &MkPool, 3);
    // The CPU's fused op against the CUDA backend's sequence of the two kernels.
    layer_parity("batchnorm + relu + maxpool", &MkBnPool, 4);
    layer_parity("global avg pool", &MkGap, 4);
    layer_parity("relu", &MkRelu, 4);
}

// ---------------------------------------------------------------------------------
// Models

/// Class k brightens quadrant k of channel k % c on a noisy background.
fn batch(rng: &mut Rng, n: usize, (h, w, c): (usize, usize, usize)) -> (Vec<u8>, Vec<u32>) {
    let mut img = vec![0u8; n * h * w * c];
    let mut labels = vec![0u32; n];
    for i in 0..n {
        let k = (rng.next_u64() % 4) as usize;
        labels[i] = k as u32;
        for y in 0..h {
            for x in 0..w {
                for ch in 0..c {
                    let q = (y >= h / 2) as usize * 2 + (x >= w / 2) as usize;
                    let base = if q == k && ch == k % c { 170.0 } else { 70.0 };
                    let v = base + 40.0 * rng.normal();
                    img[((i * h + y) * w + x) * c + ch] = v.clamp(0.0, 255.0) as u8;
                }
            }
        }
    }
    (img, labels)
}

/// A few training steps: per-step losses, the first step's gradients, final weights.
fn steps<B: Backend + Clone + 'static>(
    b: &B,
    kind: ModelKind,
    opt: OptimizerKind,
    lr: f32,
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let input = (12, 12, 3);
    let n = 16;
    let mut m = Model::new(b, ModelConfig::new(kind, input, 4, n).seed(5)).unwrap();
    let mut o = Optimizer::new(&m, opt).unwrap();
    let mut rng = Rng::new(21);
    let (mut losses, mut grads) = (Vec::new(), Vec::new());
    for s in 0..4 {
        // The last step uses a smaller batch: buffers planned for 16 serve 11.
        let nb = if s == 3 { 11 } else { n };
        let (x, y) = batch(&mut rng, nb, input);
        m.forward_backward(&x, &y, nb).unwrap();
        if s == 0 {
            grads = m.grads_to_host().unwrap();
        }
        o.step(&mut m, lr).unwrap();
        losses.push(m.last_step_stats().unwrap().loss);
    }
    (losses, grads, m.params_to_host().unwrap())
}

#[test]
fn training_steps_match_the_cpu_for_every_model() {
    let Some(g) = gpu("training steps") else {
        return;
    };
    let c = CpuBackend::new();
    for kind in ModelKind::ALL {
        for (opt, lr) in [
            (OptimizerKind::sgd(0.9, 1e-4), 0.05),
            (OptimizerKind::adamw(1e-2), 1e-3),
        ] {
            let what = format!("{kind} {}", opt.name());
            let (lc, gc, wc) = steps(&c, kind, opt, lr);
            let (lg, gg, wg) = steps(&g, kind, opt, lr);
            close(&format!("{what} losses"), &lc, &lg, 1e-3, 1e-4);
            // Gradients of one step: relative to the largest one.
            let scale = gc.iter().fold(0f32, |a, v| a.max(v.abs()));
            close(
                &format!("{what} step-1 grads"),
                &gc,
                &gg,
                1e-3,
                1e-3 * scale,
            );
            close(&format!("{what} weights"), &wc, &wg, 1e-3, 1e-4);
        }
    }
}

#[test]
fn cuda_training_is_deterministic() {
    let Some(g) = gpu("determinism") else { return };
    for kind in ModelKind::ALL {
        let a = steps(&g, kind, OptimizerKind::adamw(1e-2), 1e-3);
        let b = steps(&g, kind, OptimizerKind::adamw(1e-2), 1e-3);
        exact(&format!("{kind} losses, run 1 vs 2"), &a.0, &b.0);
        exact(&format!("{kind} weights, run 1 vs 2"), &a.2, &b.2);
    }
}

#[test]
fn a_cuda_step_allocates_no_buffers() {
    if gpu("no allocation").is_none() {
        return;
    }
    // A backend of its own, so other tests' allocations do not move its counter.
    let g = CudaBackend::new(0).expect("device");
    let input = (10, 10, 3);
    let mut m = Model::new(&g, ModelConfig::new(ModelKind::Resnet, input, 4, 8)).unwrap();
    let mut o = Optimizer::new(&m, OptimizerKind::sgd(0.9, 0.0)).unwrap();
    let before = g.alloc_count();
    let mut rng = Rng::new(3);
    for n in [8, 5, 8, 1] {
        let (x, y) = batch(&mut rng, n, input);
        m.forward_backward(&x, &y, n).unwrap();
        o.step(&mut m, 0.01).unwrap();
        m.evaluate(&x, &y, n).unwrap();
    }
    assert_eq!(m.take_train_stats().unwrap().samples, 22);
    assert_eq!(g.alloc_count(), before, "a step allocated a buffer");
}

// ---------------------------------------------------------------------------------
// bf16 autocast (`Precision::Bf16`): the GEMMs on bf16 operands with f32 accumulation.
//
// Reference: the CPU's product of the operands rounded to bf16 (`bf16_bits`, the host
// twin of the device cast), summed in f64. The product of two bf16 values is exact in
// f32 (8 + 8 significant bits), so the device's only rounding is that of its f32
// sums: at most about `sqrt(k) * 2^-24 * sum_i |a_i b_i|` for the blocked and split
// orders cuBLAS uses (the probabilistic bound of Higham and Mary; the worst case is k
// times that), plus an ulp of `beta * C` and of the result. We allow 8 times the
// probabilistic bound. Leaving the operands in f32 (no rounding) misses the reference
// by about `2^-9 * sqrt(k)` of a typical product, which the last check tells apart.

/// A backend of its own in bf16 (the shared one is f32).
fn gpu_bf16(test: &str) -> Option<CudaBackend> {
    gpu(test)?;
    Some(CudaBackend::with_precision(0, stoker_trainer::Precision::Bf16).expect("bf16 backend"))
}

fn bf16_round(v: &[f32]) -> Vec<f32> {
    use stoker_trainer::precision::{bf16_bits, bf16_value};
    v.iter().map(|&x| bf16_value(bf16_bits(x))).collect()
}

/// Row-major `alpha op(A) op(B) + beta C` of `gm` in f64, and for each element of C the
/// sum of `|a_i b_i|` (the scale of its rounding error). C's padding is kept.
fn gemm_ref(gm: Gemm, a: &[f32], b: &[f32], c0: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let (mut c, mut mag): (Vec<f64>, Vec<f64>) =
        (c0.iter().map(|&x| x as f64).collect(), vec![0.0; c0.len()]);
    for i in 0..gm.m {
        for j in 0..gm.n {
            let (mut s, mut sa) = (0f64, 0f64);
            for p in 0..gm.k {
                let x = if gm.ta {
                    a[p * gm.lda + i]
                } else {
                    a[i * gm.lda + p]
                } as f64;
                let y = if gm.tb {
                    b[j * gm.ldb + p]
                } else {
                    b[p * gm.ldb + j]
                } as f64;
                s += x * y;
                sa += (x * y).abs();
            }
            let at = i * gm.ldc + j;
            c[at] = gm.alpha as f64 * s + gm.beta as f64 * c0[at] as f64;
            mag[at] = (gm.alpha as f64).abs() * sa + (gm.beta as f64 * c0[at] as f64).abs();
        }
    }
    (c, mag)
}

#[test]
fn bf16_gemm_matches_a_reference_on_rounded_operands() {
    let Some(g) = gpu_bf16("bf16 gemm") else {
        return;
    };
    assert_eq!(g.precision(), stoker_trainer::Precision::Bf16);
    let mut rng = Rng::new(47);
    let (mut off_bf16, mut off_f32) = (0f64, 0f64);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        for (m, n, k) in [
            (33, 47, 65),
            (128, 300, 288),
            (1, 5, 1),
            (7, 1, 513),
            (5, 7, 8197),
        ] {
            for beta in [0.0, 1.0] {
                let mut gm = Gemm::dense(ta, tb, m, n, k).beta(beta);
                gm.alpha = 0.75;
                gm.lda += 3;
                gm.ldb += 2;
                gm.ldc += 5;
                let (ar, br) = (if ta { k } else { m }, if tb { n } else { k });
                let a = randn(&mut rng, 4 + ar * gm.lda);
                let b = randn(&mut rng, 1 + br * gm.ldb);
                let c0 = randn(&mut rng, 2 + m * gm.ldc);
                let (ab, bb, mut cb) = (up(&g, &a), up(&g, &b), up(&g, &c0));
                g.gemm(GemmArgs {
                    spec: gm,
                    a: In::at(&ab, 4),
                    b: In::at(&bb, 1),
                    c: Out::at(&mut cb, 2),
                })
                .unwrap();
                let got = down(&g, &cb, c0.len());
                let what = format!("bf16 gemm ta={ta} tb={tb} {m}x{n}x{k} beta={beta}");
                // The operands did not change: the casts went to the backend's scratch.
                exact(&format!("{what}: A after"), &a, &down(&g, &ab, a.len()));
                let (want, mag) =
                    gemm_ref(gm, &bf16_round(&a[4..]), &bf16_round(&b[1..]), &c0[2..]);
                let (plain, _) = gemm_ref(gm, &a[4..], &b[1..], &c0[2..]);
                let u = f32::EPSILON as f64 / 2.0;
                let mut worst = 0f64;
                for (i, &w) in want.iter().enumerate() {
                    let x = got[2 + i] as f64;
                    let tol = 8.0 * (k as f64).sqrt() * u * mag[i] + 2.0 * u * w.abs() + 1e-30;
                    assert!(
                        (x - w).abs() <= tol,
                        "{what}[{i}]: cuda {x} reference {w} (|diff| {} > {tol})",
                        (x - w).abs()
                    );
                    worst = worst.max((x - w).abs() / tol.max(1e-30));
                    off_bf16 += (x - w).abs();
                    off_f32 += (x - plain[i]).abs();
                }
                // C's padding (never part of C) is untouched.
                exact(&format!("{what}: C's head"), &c0[..2], &got[..2]);
                eprintln!("{what}: worst |diff| / tolerance {worst:.3}");
            }
        }
    }
    // The operands were rounded: the result is far nearer the bf16 reference than the
    // f32 one.
    assert!(
        off_bf16 * 20.0 < off_f32,
        "bf16 GEMMs are as near the f32 reference ({off_f32}) as the bf16 one ({off_bf16}): \
         were the operands rounded?"
    );
}

#[test]
fn bf16_training_is_deterministic_and_near_f32() {
    let Some(bf) = gpu_bf16("bf16 training steps") else {
        return;
    };
    let f32b = gpu("bf16 training steps").expect("f32 backend");
    for kind in ModelKind::ALL {
        let opt = OptimizerKind::sgd(0.9, 1e-4);
        let a = steps(&bf, kind, opt, 0.05);
        let b = steps(&bf, kind, opt, 0.05);
        exact(&format!("{kind} bf16 losses, run 1 vs 2"), &a.0, &b.0);
        exact(&format!("{kind} bf16 weights, run 1 vs 2"), &a.2, &b.2);
        // Four steps from the same weights: bf16 operands (8 significant bits) move each
        // loss by well under a percent of a loss near ln 4.
        let f = steps(&f32b, kind, opt, 0.05);
        close(
            &format!("{kind} bf16 vs f32 losses"),
            &f.0,
            &a.0,
            2e-2,
            2e-2,
        );
        assert!(
            a.2.iter().all(|w| w.is_finite()),
            "{kind}: bf16 weights finite"
        );
    }
}

// ---------------------------------------------------------------------------------
// Convolutions on cuDNN
//
// `gpu()` above opens the engine STOKER_CONV asks for (cuDNN when it loads), so the
// layer and model tests run on it too. These tests pin the engine: they open backends
// with `ConvChoice::Cudnn` (a missing libcudnn is then an error, not a quiet im2col)
// and `ConvChoice::Im2col`, and check that cuDNN ran every shape (`cudnn_fallbacks`).
// cuDNN's tests run in both layouts (STOKER_CUDNN_LAYOUT): packed copies, and our
// layout described with strides (a shape cuDNN refuses strided is said on stderr and
// runs packed, which these tests accept).
//
// Tolerances, and why:
// - f32 against the CPU, and cuDNN against im2col: the GEMM rule above with k the
//   length of each output's sum (c*kh*kw for y, cout*kh*kw for dx, n*oh*ow for dw):
//   cuDNN runs FMA math (no TF32), so only the summation order differs.
// - bf16 against the CPU on bf16-rounded operands: a product of two bf16 values is
//   exact in f32 and cuDNN accumulates in f32, so before its output is rounded the
//   two differ by the f32 rule; the output is then rounded to bf16, at most 2^-9
//   relative. Hence rtol 2^-8 (twice that) and atol twice the f32 rule's.

use stoker_trainer::backend::cuda::{ConvChoice, ConvConfig, CudnnLayout};
use stoker_trainer::precision::{bf16_bits, bf16_value};
use stoker_trainer::Precision;

/// A convolution to test: (c, n, h, w, k, stride, pad, cout), the input gradient wanted.
type ConvCase = (
    (usize, usize, usize, usize, usize, usize, usize, usize),
    bool,
);

/// The model's shapes: 3x3 pad 1 stride 1, 1x1, stride 2, the first layer (3
/// channels, no input gradient), batch 1, and batch 128 (which im2col cuts into
/// chunks whose weight gradients it accumulates).
const CONV_CASES: &[ConvCase] = &[
    ((16, 8, 12, 12, 3, 1, 1, 32), true),
    ((32, 8, 8, 8, 1, 1, 0, 16), true),
    ((16, 4, 11, 9, 3, 2, 1, 24), true),
    ((24, 4, 10, 10, 1, 2, 0, 48), true),
    ((3, 128, 32, 32, 3, 1, 1, 32), false),
    ((64, 1, 16, 16, 3, 1, 1, 64), true),
    ((64, 128, 32, 32, 3, 1, 1, 64), true),
];

fn conv_geom<B: Backend>(b: &B, case: &ConvCase) -> (ConvGeom, usize) {
    let (c, n, h, w, k, stride, pad, cout) = case.0;
    let geom = ConvGeom {
        c,
        n,
        h,
        w,
        kh: k,
        kw: k,
        stride,
        pad,
        col: b.col_layout(),
    };
    (geom, cout)
}

/// Inputs of a case: x, w, dy.
fn conv_inputs(case: &ConvCase, seed: u64) -> [Vec<f32>; 3] {
    let (c, n, h, w, k, stride, pad, cout) = case.0;
    let (oh, ow) = (
        (h + 2 * pad - k) / stride + 1,
        (w + 2 * pad - k) / stride + 1,
    );
    let mut rng = Rng::new(seed);
    let x = randn(&mut rng, c * n * h * w);
    // He-like scale, so that outputs stay O(1) as the layers' are.
    let scale = (2.0 / (c * k * k) as f32).sqrt();
    let wt = randn(&mut rng, cout * c * k * k)
        .into_iter()
        .map(|v| v * scale)
        .collect();
    let dy = randn(&mut rng, cout * n * oh * ow);
    [x, wt, dy]
}

/// Forward and backward of `case` on `b`: y, dw, dx (empty when not wanted). The
/// backward reuses what the forward left in the scratch if `reuse`; if not, the scratch
/// is filled with NaN in between, so that a backward that read it would show.
fn conv_run<B: Backend>(
    b: &B,
    case: &ConvCase,
    inputs: &[Vec<f32>; 3],
    reuse: bool,
) -> [Vec<f32>; 3] {
    let (geom, cout) = conv_geom(b, case);
    let [x, wt, dy] = inputs;
    let (xb, wb, dyb) = (up(b, x), up(b, wt), up(b, dy));
    let mut y = b.alloc::<f32>(dy.len()).unwrap();
    let mut dw = b.alloc::<f32>(wt.len()).unwrap();
    let mut dx = b.alloc::<f32>(x.len()).unwrap();
    let mut scratch = b.alloc::<f32>(b.conv_scratch(geom, cout)).unwrap();
    b.conv_forward(ConvForwardArgs {
        x: In::new(&xb),
        w: In::new(&wb),
        geom,
        cout,
        y: Out::new(&mut y),
        scratch: Out::new(&mut scratch),
    })
    .unwrap();
    if !reuse {
        let len = b.buf_len(&scratch);
        b.upload(&vec![f32::NAN; len], Out::new(&mut scratch))
            .unwrap();
    }
    b.conv_backward(ConvBackwardArgs {
        x: In::new(&xb),
        w: In::new(&wb),
        dy: In::new(&dyb),
        geom,
        cout,
        dw: Out::new(&mut dw),
        dx: case.1.then(|| Out::new(&mut dx)),
        scratch: Out::new(&mut scratch),
        reuse,
    })
    .unwrap();
    let dxv = if case.1 {
        down(b, &dx, x.len())
    } else {
        Vec::new()
    };
    [down(b, &y, dy.len()), down(b, &dw, wt.len()), dxv]
}

/// The sum lengths of y, dw and dx of `case`.
fn conv_k(case: &ConvCase) -> [usize; 3] {
    let (c, n, h, w, k, stride, pad, cout) = case.0;
    let (oh, ow) = (
        (h + 2 * pad - k) / stride + 1,
        (w + 2 * pad - k) / stride + 1,
    );
    [c * k * k, n * oh * ow, cout * k * k]
}

#[track_caller]
fn conv_close(what: &str, case: &ConvCase, a: &[Vec<f32>; 3], b: &[Vec<f32>; 3], bf16: bool) {
    let ks = conv_k(case);
    for (i, name) in ["y", "dw", "dx"].iter().enumerate() {
        let f32_atol = 1e-4 * (ks[i] as f32).sqrt();
        let (rtol, atol) = if bf16 {
            (1.0 / 256.0, 2.0 * f32_atol)
        } else {
            (1e-4, f32_atol)
        };
        close(
            &format!("{what} {:?} {name}", case.0),
            &a[i],
            &b[i],
            rtol,
            atol,
        );
    }
}

/// A backend on device 0 whose convolutions run on `choice` (in `layout` on cuDNN),
/// or `None` (skipped) without a GPU. With a GPU, cuDNN must be usable: run with its
/// library on `LD_LIBRARY_PATH` (PyTorch's wheels carry it in `nvidia/cudnn/lib`).
fn conv_gpu(
    test: &str,
    precision: Precision,
    choice: ConvChoice,
    layout: CudnnLayout,
) -> Option<CudaBackend> {
    gpu(test)?;
    let conv = ConvConfig { choice, layout };
    let b = CudaBackend::with_conv(0, precision, conv)
        .unwrap_or_else(|e| panic!("{test}: a {precision} backend with {conv:?}: {e}"));
    eprintln!("{test}: convolutions on {}", b.conv_engine());
    Some(b)
}

#[track_caller]
fn all_on_cudnn(b: &CudaBackend) {
    assert!(b.conv_engine().is_cudnn(), "{}", b.conv_engine());
    let f = b.cudnn_fallbacks();
    assert!(f.is_empty(), "shapes left to im2col: {f:#?}");
}

#[test]
fn cudnn_library_loads_and_reads_its_version() {
    // Needs only libcudnn, not a GPU.
    match cuda::cudnn::library() {
        Ok(v) => {
            eprintln!("cuDNN {v}");
            assert!(v.major >= 9, "{v}");
        }
        Err(why @ cuda::CudaError::Missing(_)) => stoker_loader::gpu_test::skip(format!(
            "libcudnn not found ({why}): put PyTorch's nvidia/cudnn/lib on LD_LIBRARY_PATH"
        )),
        Err(why) => panic!("libcudnn found but unusable: {why}"),
    }
}

#[test]
fn cudnn_convolutions_match_the_cpu() {
    for layout in [CudnnLayout::Packed, CudnnLayout::Strided] {
        cudnn_f32_vs_cpu(layout);
    }
}

fn cudnn_f32_vs_cpu(layout: CudnnLayout) {
    let Some(g) = conv_gpu("cudnn conv f32", Precision::F32, ConvChoice::Cudnn, layout) else {
        return;
    };
    let c = CpuBackend::new();
    for (i, case) in CONV_CASES.iter().enumerate() {
        let inputs = conv_inputs(case, 100 + i as u64);
        let p = conv_run(&c, case, &inputs, true);
        let q = conv_run(&g, case, &inputs, true);
        conv_close(&format!("cudnn {layout:?} vs cpu"), case, &p, &q, false);
        // Bit-identical on every call (deterministic algorithms only), whether the
        // backward reuses the forward's copy of x or makes its own.
        let r = conv_run(&g, case, &inputs, false);
        for (k, name) in ["y", "dw", "dx"].iter().enumerate() {
            exact(
                &format!("cudnn {layout:?} run 1 vs 2 {:?} {name}", case.0),
                &q[k],
                &r[k],
            );
        }
    }
    all_on_cudnn(&g);
}

#[test]
fn cudnn_bf16_convolutions_match_the_cpu_on_rounded_operands() {
    for layout in [CudnnLayout::Packed, CudnnLayout::Strided] {
        cudnn_bf16_vs_cpu(layout);
    }
}

fn cudnn_bf16_vs_cpu(layout: CudnnLayout) {
    let Some(g) = conv_gpu(
        "cudnn conv bf16",
        Precision::Bf16,
        ConvChoice::Cudnn,
        layout,
    ) else {
        return;
    };
    let c = CpuBackend::new();
    let round =
        |v: &Vec<f32>| -> Vec<f32> { v.iter().map(|&x| bf16_value(bf16_bits(x))).collect() };
    for (i, case) in CONV_CASES.iter().enumerate() {
        let inputs = conv_inputs(case, 200 + i as u64);
        let rounded = [round(&inputs[0]), round(&inputs[1]), round(&inputs[2])];
        let p = conv_run(&c, case, &rounded, true);
        let q = conv_run(&g, case, &inputs, true);
        conv_close(
            &format!("cudnn {layout:?} bf16 vs cpu on bf16 operands"),
            case,
            &p,
            &q,
            true,
        );
        // Every result is a widened bf16 (the weight gradient too, before the f32
        // optimizer sees it).
        for (k, name) in ["y", "dw", "dx"].iter().enumerate() {
            assert!(
                q[k].iter().all(|v| v.to_bits() & 0xffff == 0),
                "{:?} {name}: not bf16 values",
                case.0
            );
        }
        let r = conv_run(&g, case, &inputs, false);
        for (k, name) in ["y", "dw", "dx"].iter().enumerate() {
            exact(
                &format!("cudnn {layout:?} bf16 run 1 vs 2 {:?} {name}", case.0),
                &q[k],
                &r[k],
            );
        }
    }
    all_on_cudnn(&g);
}

#[test]
fn stoker_conv_im2col_and_cudnn_agree() {
    for layout in [CudnnLayout::Packed, CudnnLayout::Strided] {
        im2col_vs_cudnn(layout);
    }
}

fn im2col_vs_cudnn(layout: CudnnLayout) {
    let Some(d) = conv_gpu("im2col vs cudnn", Precision::F32, ConvChoice::Cudnn, layout) else {
        return;
    };
    let i =
        CudaBackend::with_conv(0, Precision::F32, ConvConfig::engine(ConvChoice::Im2col)).unwrap();
    assert_eq!(
        i.conv_engine().to_string(),
        "im2col + cuBLAS (STOKER_CONV=im2col)"
    );
    for (n, case) in CONV_CASES.iter().enumerate() {
        let inputs = conv_inputs(case, 300 + n as u64);
        let p = conv_run(&i, case, &inputs, true);
        let q = conv_run(&d, case, &inputs, true);
        conv_close(&format!("im2col vs cudnn {layout:?}"), case, &p, &q, false);
    }
    all_on_cudnn(&d);
}

#[test]
fn training_steps_on_cudnn_match_im2col() {
    for layout in [CudnnLayout::Packed, CudnnLayout::Strided] {
        steps_cudnn_vs_im2col(layout);
    }
}

fn steps_cudnn_vs_im2col(layout: CudnnLayout) {
    let test = "steps cudnn vs im2col";
    let Some(d) = conv_gpu(test, Precision::F32, ConvChoice::Cudnn, layout) else {
        return;
    };
    let i =
        CudaBackend::with_conv(0, Precision::F32, ConvConfig::engine(ConvChoice::Im2col)).unwrap();
    for kind in ModelKind::ALL {
        let opt = OptimizerKind::sgd(0.9, 1e-4);
        let (li, _, wi) = steps(&i, kind, opt, 0.05);
        let (ld, _, wd) = steps(&d, kind, opt, 0.05);
        close(
            &format!("{kind} losses im2col vs cudnn {layout:?}"),
            &li,
            &ld,
            1e-3,
            1e-4,
        );
        close(
            &format!("{kind} weights im2col vs cudnn {layout:?}"),
            &wi,
            &wd,
            1e-3,
            1e-4,
        );
    }
    all_on_cudnn(&d);
}

#[test]
fn a_bf16_training_step_on_cudnn_stays_near_f32() {
    let packed = CudnnLayout::Packed;
    let Some(f) = conv_gpu(
        "steps bf16 vs f32",
        Precision::F32,
        ConvChoice::Cudnn,
        packed,
    ) else {
        return;
    };
    let h = conv_gpu(
        "steps bf16 vs f32",
        Precision::Bf16,
        ConvChoice::Cudnn,
        packed,
    )
    .unwrap();
    for kind in ModelKind::ALL {
        let opt = OptimizerKind::sgd(0.9, 1e-4);
        let (lf, _, _) = steps(&f, kind, opt, 0.05);
        let (lh, _, wh) = steps(&h, kind, opt, 0.05);
        // The first loss is a forward only: a few bf16 roundings (2^-9 each) per layer
        // move an O(1) loss by well under 2%.
        close(
            &format!("{kind} first loss bf16 vs f32"),
            &lf[..1],
            &lh[..1],
            2e-2,
            0.0,
        );
        assert!(
            lh.iter().chain(&wh).all(|v| v.is_finite()),
            "{kind}: bf16 not finite"
        );
    }
    all_on_cudnn(&h);
}
