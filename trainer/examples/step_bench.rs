//! Times training steps of a model on random data, to compare with PyTorch CPU.
//!
//! `cargo run --release -p stoker-trainer --example step_bench -- [kind] [batch] [size] [steps]`
//! (defaults: convnet 128 64 5). Prints the mean step time and a per-layer breakdown of
//! one step (forward and backward of each layer, measured with the layer profile hook).

use std::time::Instant;

use stoker_trainer::rng::Rng;
use stoker_trainer::{
    Backend, CpuBackend, Model, ModelConfig, ModelKind, Optimizer, OptimizerKind,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind: ModelKind = args
        .first()
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(ModelKind::Convnet);
    let n: usize = args.get(1).map(|s| s.parse()).transpose()?.unwrap_or(128);
    let size: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(64);
    let steps: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(5);
    let input = (size, size, 3);
    let b = CpuBackend::new();
    let mut m = Model::new(&b, ModelConfig::new(kind, input, 10, n))?;
    let mut o = Optimizer::new(&m, OptimizerKind::sgd(0.9, 5e-4))?;
    println!("{}", m.summary());
    let mut rng = Rng::new(1);
    let img: Vec<u8> = (0..n * size * size * 3)
        .map(|_| rng.next_u64() as u8)
        .collect();
    let labels: Vec<u32> = (0..n).map(|_| (rng.next_u64() % 10) as u32).collect();
    // Warm-up: first touches of every buffer, GEMM thread pool start.
    m.forward_backward(&img, &labels, n)?;
    o.step(&mut m, 0.01)?;
    let t = Instant::now();
    for _ in 0..steps {
        m.forward_backward(&img, &labels, n)?;
        o.step(&mut m, 0.01)?;
    }
    b.synchronize()?;
    let dt = t.elapsed().as_secs_f64() / steps as f64;
    let st = m.take_train_stats()?;
    println!(
        "{kind} batch {n} {size}x{size}x3: {:.1} ms/step, {:.0} images/s (loss {:.3})",
        dt * 1e3,
        n as f64 / dt,
        st.loss
    );
    let prof = m.profile_step(&img, &labels, n)?;
    println!("one step, per layer (ms):  forward  backward");
    for (name, f, bw) in prof {
        println!("  {name:<16} {:>8.1} {:>9.1}", f * 1e3, bw * 1e3);
    }
    Ok(())
}
