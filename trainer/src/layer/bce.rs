//! Fused sigmoid + binary cross-entropy for multi-label targets: each logit answers its
//! own yes/no question, so the gradient is just `(sigmoid - target) / (n * classes)`.

use crate::backend::{BResult, Backend, In, LossIo, Out, RowLoss, RowLossArgs};
use crate::tensor::Tensor;

/// The multi-label loss head over `[classes, n]` logits; no parameters.
pub struct SigmoidBce {
    /// Classes (logits per sample).
    pub classes: usize,
}

impl SigmoidBce {
    /// A loss over `classes` logits per sample.
    pub fn new(classes: usize) -> Self {
        Self { classes }
    }

    /// Writes `stats = [sum over samples of the per-sample mean loss, exact matches]`
    /// on the device and, when `dlogits` is given, the gradient of the mean over all
    /// `n * classes` terms (PyTorch's `BCEWithLogitsLoss()` default). Logits and k-hot
    /// targets are `[classes, n]`.
    pub fn forward_backward<B: Backend>(
        &self,
        b: &B,
        logits: &Tensor<B>,
        targets: In<'_, B>,
        n: usize,
        dlogits: Option<&mut Tensor<B>>,
        stats: Out<'_, B>,
    ) -> BResult<()> {
        b.row_loss(RowLossArgs {
            loss: RowLoss::SigmoidBce,
            io: LossIo {
                logits: logits.view(),
                classes: self.classes,
                n,
                dlogits: dlogits.map(|d| d.view_mut()),
                stats,
            },
            targets,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::CpuBackend;
    use crate::rng::Rng;

    /// The summed loss in f64, term by term from the textbook definition
    /// `-(t log s + (1 - t) log(1 - s))`, with `log s` and `log(1 - s)` written as
    /// `-log(1 + exp(-z))` and `-log(1 + exp(z))` (exact in f64 for these ranges).
    fn loss64(z: &[f32], t: &[f32]) -> f64 {
        z.iter()
            .zip(t)
            .map(|(&z, &t)| {
                let (z, t) = (z as f64, t as f64);
                let log_s = -(-z).exp().ln_1p();
                let log_1ms = -z.exp().ln_1p();
                -(t * log_s + (1.0 - t) * log_1ms)
            })
            .sum()
    }

    /// (dz, stats) from the CPU backend.
    fn run(z: &[f32], t: &[f32], classes: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let b = CpuBackend::new();
        let zt = Tensor::from_slice(&b, &[classes, n], z).unwrap();
        let tt = Tensor::from_slice(&b, &[classes, n], t).unwrap();
        let mut dz = Tensor::zeros(&b, &[classes, n]).unwrap();
        let mut stats = Tensor::zeros(&b, &[2]).unwrap();
        SigmoidBce::new(classes)
            .forward_backward(&b, &zt, tt.view(), n, Some(&mut dz), stats.view_mut())
            .unwrap();
        (dz.to_vec(&b).unwrap(), stats.to_vec(&b).unwrap())
    }

    fn k_hot(tags: &[&[usize]], classes: usize) -> Vec<f32> {
        let n = tags.len();
        let mut t = vec![0.0; classes * n];
        for (j, row) in tags.iter().enumerate() {
            for &k in row.iter() {
                t[k * n + j] = 1.0;
            }
        }
        t
    }

    #[test]
    fn loss_and_gradient_match_f64_and_finite_differences() {
        let (classes, n) = (6, 5);
        let mut rng = Rng::new(21);
        let z: Vec<f32> = (0..classes * n)
            .map(|_| 2.5 * rng.normal() as f32)
            .collect();
        let t = k_hot(
            &[&[0, 3], &[], &[5], &[1, 2, 4], &[0, 1, 2, 3, 4, 5]],
            classes,
        );
        let (g, st) = run(&z, &t, classes, n);
        let nk = (n * classes) as f64;
        // stats[0] / n is the mean over all n * classes terms.
        let want = loss64(&z, &t) / nk;
        assert!(
            (st[0] as f64 / n as f64 - want).abs() < 1e-5,
            "{} vs {want}",
            st[0] / n as f32
        );
        for i in 0..z.len() {
            // The analytic gradient of the f64 mean, then central differences of it.
            let s = 1.0 / (1.0 + (-(z[i] as f64)).exp());
            let exact = (s - t[i] as f64) / nk;
            assert!((exact - g[i] as f64).abs() < 1e-7, "dz[{i}]");
            let eps = 1e-3;
            let mut zp = z.clone();
            zp[i] += eps;
            let lp = loss64(&zp, &t);
            zp[i] -= 2.0 * eps;
            let lm = loss64(&zp, &t);
            let num = (lp - lm) / (2.0 * eps as f64) / nk;
            assert!(
                (num - g[i] as f64).abs() < 1e-5,
                "dz[{i}]: {num} vs {}",
                g[i]
            );
        }
    }

    #[test]
    fn large_logits_stay_finite_and_exact() {
        // One sample per column: z = ±30, ±100, ±1e4 against both targets. A naive
        // log(sigmoid) would give -inf (or NaN) for most of these in f32.
        let zs = [30.0f32, -30.0, 100.0, -100.0, 1e4, -1e4];
        let n = zs.len() * 2;
        let classes = 1;
        let mut z = Vec::new();
        let mut t = Vec::new();
        for &v in &zs {
            for y in [0.0f32, 1.0] {
                z.push(v);
                t.push(y);
            }
        }
        let (g, st) = run(&z, &t, classes, n);
        assert!(st[0].is_finite() && g.iter().all(|v| v.is_finite()));
        // Wrong and confident costs |z| (plus exp(-|z|), below f32's resolution
        // here); right and confident costs exp(-|z|), ~0.
        let want: f64 = zs.iter().map(|v| v.abs() as f64).sum();
        assert!(
            ((st[0] as f64) - want).abs() < 1e-3 * want,
            "{} vs {want}",
            st[0]
        );
        for (i, (&zz, &tt)) in z.iter().zip(&t).enumerate() {
            let s = if zz > 0.0 { 1.0 } else { 0.0 };
            let exact = (s - tt) / n as f32;
            assert!((g[i] - exact).abs() < 1e-6, "dz[{i}] {} vs {exact}", g[i]);
        }
        // Right exactly where sign(z) agrees with the target: half the samples.
        assert_eq!(st[1], zs.len() as f32);
    }

    #[test]
    fn exact_match_needs_every_label_right() {
        let classes = 3;
        // Sample 0: all right; 1: one false positive; 2: one missed tag; 3: all right
        // with no tags; z = 0 counts as "no" (sigmoid is not above 0.5).
        let z = [
            2.0f32, 1.0, -1.0, -3.0, // class 0
            -2.0, 1.0, -1.0, -2.0, // class 1
            1.0, -1.0, 0.5, 0.0, // class 2
        ];
        let t = k_hot(&[&[0, 2], &[0], &[0, 2], &[]], classes);
        let (_, st) = run(&z, &t, classes, 4);
        assert_eq!(st[1], 2.0);
    }

    #[test]
    fn matches_pytorch_bce_with_logits_formula() {
        // ATen's `binary_cross_entropy_with_logits` (no weights), transcribed in f64:
        // m = max(-z, 0); l = (1 - t) z + m + log(exp(-m) + exp(-z - m)), then the
        // default reduction 'mean' over every element of the (n, classes) input; the
        // gradient is (sigmoid(z) - t) / numel. Torch is not installed here: this is
        // its formula, not its numbers.
        let z = [0.5f32, -1.5, 3.0, 0.0, -0.25, 8.0, -40.0, 40.0];
        let t = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0];
        let (classes, n) = (4, 2);
        let numel = z.len() as f64;
        let torch_mean = z
            .iter()
            .zip(&t)
            .map(|(&z, &t)| {
                let (z, t) = (z as f64, t as f64);
                let m = (-z).max(0.0);
                (1.0 - t) * z + m + ((-m).exp() + (-z - m).exp()).ln()
            })
            .sum::<f64>()
            / numel;
        let (g, st) = run(&z, &t, classes, n);
        let ours = st[0] as f64 / n as f64;
        assert!(
            (ours - torch_mean).abs() < 1e-5 * torch_mean,
            "{ours} vs {torch_mean}"
        );
        for (i, (&zz, &tt)) in z.iter().zip(&t).enumerate() {
            let want = (1.0 / (1.0 + (-(zz as f64)).exp()) - tt as f64) / numel;
            assert!(
                (g[i] as f64 - want).abs() < 1e-7,
                "dz[{i}] {} vs {want}",
                g[i]
            );
        }
    }
}
