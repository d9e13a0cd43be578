//! Times training steps of a model on random data, to compare with PyTorch.
//!
//! `cargo run --release -p stoker-trainer --example step_bench -- [kind] [batch] [size]
//! [steps] [--warmup N] [--json] [--cuda] [--precision f32|bf16]` (defaults: convnet 128
//! 64 10, 2 warm-up steps, the CPU, f32; `--cuda`: CUDA device 0; `--precision bf16`: bf16
//! autocast, CUDA only). The batch is uploaded once, before the warm-up, as the PyTorch
//! peer moves its batch to the device once: both time the step alone. Each
//! timed step (forward, backward, SGD update, then a wait for the device) is timed on its
//! own; prints the median and a per-layer breakdown of one more step (forward and
//! backward of each layer, measured with the layer profile hook). With `--json`: one
//! JSON object instead, with `ms_per_step` (the median), `ms_min`, `images_per_sec`
//! (batch / median), `params_xxh3` (a hash of the weights after all the steps),
//! `precision`, `conv_engine` (what the convolutions ran on) and `layers` (that
//! breakdown), to set beside
//! `benches/peers/torch_train.py --json` (`step_ms`); `benches/peers/train_step_compare.sh`
//! runs the two alternately.

use std::time::Instant;

use stoker_trainer::backend::Out;
use stoker_trainer::rng::Rng;
use stoker_trainer::{
    Backend, CpuBackend, CudaBackend, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind,
    Precision,
};

/// The command line: positional kind, batch, size, steps; `--warmup N`; `--json`;
/// `--cuda`; `--precision`.
#[derive(Debug)]
struct Args {
    kind: ModelKind,
    n: usize,
    size: usize,
    steps: usize,
    warmup: usize,
    json: bool,
    cuda: bool,
    precision: Precision,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, Box<dyn std::error::Error>> {
    let mut pos = Vec::new();
    let (mut warmup, mut json, mut cuda) = (2, false, false);
    let mut precision = Precision::F32;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--cuda" => cuda = true,
            "--precision" => {
                let v = it.next().ok_or("--precision needs f32 or bf16")?;
                precision = v.parse().map_err(|e| format!("--precision: {e}"))?;
            }
            "--warmup" => {
                let v = it.next().ok_or("--warmup needs a number")?;
                warmup = v.parse().map_err(|e| format!("--warmup {v}: {e}"))?;
            }
            s if s.starts_with("--") => return Err(format!("unknown flag {s}").into()),
            _ => pos.push(a),
        }
    }
    let num = |i: usize, name: &str, default: usize| -> Result<usize, String> {
        pos.get(i).map_or(Ok(default), |s| {
            s.parse().map_err(|e| format!("{name} {s:?}: {e}"))
        })
    };
    let steps = num(3, "steps", 10)?;
    if steps == 0 {
        return Err("steps must be at least 1".into());
    }
    if precision != Precision::F32 && !cuda {
        return Err(format!("--precision {precision} needs --cuda; the CPU trains in f32").into());
    }
    Ok(Args {
        kind: pos
            .first()
            .map(|s| s.parse())
            .transpose()?
            .unwrap_or(ModelKind::Convnet),
        n: num(1, "batch", 128)?,
        size: num(2, "size", 64)?,
        steps,
        warmup,
        json,
        cuda,
        precision,
    })
}

/// xxh3 of the parameters' bits.
fn params_hash<B: Backend + Clone + 'static>(
    m: &Model<B>,
) -> Result<u64, Box<dyn std::error::Error>> {
    let bytes: Vec<u8> = m
        .params_to_host()?
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    Ok(xxhash_rust::xxh3::xxh3_64(&bytes))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = parse(std::env::args().skip(1))?;
    if a.cuda {
        let b = CudaBackend::with_precision(0, a.precision)?;
        let engine = b.conv_engine().to_string();
        run(&a, &b, &engine, &|| b.cudnn_fallbacks())
    } else {
        run(&a, &CpuBackend::new(), "im2col + gemm (CPU)", &Vec::new)
    }
}

fn run<B: Backend + Clone + 'static>(
    a: &Args,
    b: &B,
    conv_engine: &str,
    fallbacks: &dyn Fn() -> Vec<String>,
) -> Result<(), Box<dyn std::error::Error>> {
    let (kind, n, size) = (a.kind, a.n, a.size);
    let input = (size, size, 3);
    let mut m = Model::new(b, ModelConfig::new(kind, input, 10, n))?;
    let mut o = Optimizer::new(&m, OptimizerKind::sgd(0.9, 5e-4))?;
    if !a.json {
        println!("{}", m.summary());
    }
    let mut rng = Rng::new(1);
    let img: Vec<u8> = (0..n * size * size * 3)
        .map(|_| rng.next_u64() as u8)
        .collect();
    let labels: Vec<u32> = (0..n).map(|_| (rng.next_u64() % 10) as u32).collect();
    let mut xb = b.alloc::<u8>(img.len())?;
    b.upload(&img, Out::new(&mut xb))?;
    let mut yb = b.alloc::<u32>(n)?;
    b.upload(&labels, Out::new(&mut yb))?;
    // Warm-up: first touches of every buffer, thread pool start.
    for _ in 0..a.warmup {
        m.forward_backward_on(&xb, &yb, n)?;
        o.step(&mut m, 0.01)?;
    }
    b.synchronize()?;
    let mut times = Vec::with_capacity(a.steps);
    for _ in 0..a.steps {
        let t = Instant::now();
        m.forward_backward_on(&xb, &yb, n)?;
        o.step(&mut m, 0.01)?;
        b.synchronize()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let median = if times.len() % 2 == 1 {
        times[times.len() / 2]
    } else {
        (times[times.len() / 2 - 1] + times[times.len() / 2]) / 2.0
    };
    let st = m.take_train_stats()?;
    // Shapes that ran on im2col although cuDNN is the engine (no qualifying algorithm,
    // or a call that failed): without them the figures would pass for cuDNN's.
    let fallbacks = fallbacks();
    for f in &fallbacks {
        eprintln!("step_bench: on im2col: {f}");
    }
    let prof = m.profile_step(&img, &labels, n)?;
    if a.json {
        let layers: Vec<_> = prof
            .iter()
            .map(|(name, f, bw)| {
                serde_json::json!({"name": name, "forward_ms": f * 1e3, "backward_ms": bw * 1e3})
            })
            .collect();
        let out = serde_json::json!({
            "model": kind.as_str(),
            "device": b.name(),
            "precision": a.precision,
            "conv_engine": conv_engine,
            "cudnn_fallbacks": fallbacks,
            "threads": rayon::current_num_threads(),
            "batch_size": n,
            "size": size,
            "steps": a.steps,
            "warmup": a.warmup,
            "ms_per_step": median,
            "ms_min": times[0],
            "images_per_sec": n as f64 * 1e3 / median,
            "loss": st.loss,
            // Same weights after the same steps on any thread count: compare runs
            // with RAYON_NUM_THREADS=1 and 2.
            "params_xxh3": format!("{:016x}", params_hash(&m)?),
            "layers": layers,
        });
        println!("{out}");
        return Ok(());
    }
    println!(
        "{kind} batch {n} {size}x{size}x3 on {} in {} (convolutions: {conv_engine}): {median:.1} ms/step (median of {}, min {:.1}), {:.0} images/s (loss {:.3})",
        b.name(),
        a.precision,
        a.steps,
        times[0],
        n as f64 * 1e3 / median,
        st.loss
    );
    println!("one step, per layer (ms):  forward  backward");
    for (name, f, bw) in prof {
        println!("  {name:<16} {:>8.1} {:>9.1}", f * 1e3, bw * 1e3);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Result<Args, String> {
        parse(v.iter().map(|s| s.to_string())).map_err(|e| e.to_string())
    }

    #[test]
    fn bf16_needs_cuda_and_f32_is_the_default() {
        assert_eq!(args(&[]).unwrap().precision, Precision::F32);
        let a = args(&["convnet", "8", "16", "1", "--cuda", "--precision", "bf16"]).unwrap();
        assert_eq!((a.precision, a.cuda), (Precision::Bf16, true));
        assert_eq!(
            args(&["--precision", "bf16"]).unwrap_err(),
            "--precision bf16 needs --cuda; the CPU trains in f32"
        );
        assert_eq!(
            args(&["--cuda", "--precision", "fp16"]).unwrap_err(),
            "--precision: unknown precision 'fp16' (expected f32 or bf16)"
        );
        assert_eq!(
            args(&["--precision"]).unwrap_err(),
            "--precision needs f32 or bf16"
        );
    }
}
