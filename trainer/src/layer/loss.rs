//! Fused softmax + cross-entropy: one pass gives the loss statistics and the logits'
//! gradient, which is just `(softmax - onehot) / n`.

use crate::backend::{BResult, Backend, In, LossIo, Out, RowLoss, RowLossArgs, SoftmaxXentArgs};
use crate::tensor::Tensor;

/// The classification loss head over `[classes, n]` logits; no parameters.
pub struct SoftmaxCrossEntropy {
    /// Classes (logits per sample); labels must be below it.
    pub classes: usize,
}

impl SoftmaxCrossEntropy {
    /// A loss over `classes` logits per sample.
    pub fn new(classes: usize) -> Self {
        Self { classes }
    }

    /// Writes `stats = [loss sum, correct count]` on the device and, when `dlogits` is
    /// given, the gradient of the mean loss. Logits are `[classes, n]`.
    pub fn forward_backward<B: Backend>(
        &self,
        b: &B,
        logits: &Tensor<B>,
        labels: In<'_, B, u32>,
        n: usize,
        dlogits: Option<&mut Tensor<B>>,
        stats: Out<'_, B>,
    ) -> BResult<()> {
        b.softmax_xent(SoftmaxXentArgs {
            io: self.io(logits, n, dlogits, stats),
            labels,
        })
    }

    /// As `forward_backward`, against soft targets `[classes, n]`.
    pub fn forward_backward_soft<B: Backend>(
        &self,
        b: &B,
        logits: &Tensor<B>,
        targets: In<'_, B>,
        n: usize,
        dlogits: Option<&mut Tensor<B>>,
        stats: Out<'_, B>,
    ) -> BResult<()> {
        b.row_loss(RowLossArgs {
            loss: RowLoss::SoftmaxXent,
            io: self.io(logits, n, dlogits, stats),
            targets,
        })
    }

    /// The loss ops' logits and outputs.
    fn io<'a, B: Backend>(
        &self,
        logits: &'a Tensor<B>,
        n: usize,
        dlogits: Option<&'a mut Tensor<B>>,
        stats: Out<'a, B>,
    ) -> LossIo<'a, B> {
        LossIo {
            logits: logits.view(),
            classes: self.classes,
            n,
            dlogits: dlogits.map(|d| d.view_mut()),
            stats,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Buffers, CpuBackend};
    use crate::rng::Rng;

    fn loss(z: &[f32], labels: &[u32], classes: usize, n: usize) -> f64 {
        (0..n)
            .map(|j| {
                let col: Vec<f64> = (0..classes).map(|k| z[k * n + j] as f64).collect();
                let m = col.iter().cloned().fold(f64::MIN, f64::max);
                let lse = col.iter().map(|v| (v - m).exp()).sum::<f64>().ln() + m;
                lse - col[labels[j] as usize]
            })
            .sum()
    }

    #[test]
    fn gradient_matches_finite_differences_and_stats_are_right() {
        let b = CpuBackend::new();
        let (classes, n) = (5, 4);
        let mut rng = Rng::new(9);
        let z: Vec<f32> = (0..classes * n)
            .map(|_| 2.0 * rng.normal() as f32)
            .collect();
        let labels = [0u32, 3, 4, 1];
        let mut lb = b.alloc::<u32>(n).unwrap();
        b.upload(&labels, Out::new(&mut lb)).unwrap();
        let zt = Tensor::from_slice(&b, &[classes, n], &z).unwrap();
        let mut dz = Tensor::zeros(&b, &[classes, n]).unwrap();
        let mut stats = Tensor::zeros(&b, &[2]).unwrap();
        let l = SoftmaxCrossEntropy::new(classes);
        l.forward_backward(&b, &zt, In::new(&lb), n, Some(&mut dz), stats.view_mut())
            .unwrap();
        let s = stats.to_vec(&b).unwrap();
        let want = loss(&z, &labels, classes, n);
        assert!((s[0] as f64 - want).abs() < 1e-4 * want.max(1.0));
        let correct = (0..n)
            .filter(|&j| {
                let arg = (0..classes)
                    .max_by(|&a, &c| z[a * n + j].total_cmp(&z[c * n + j]))
                    .unwrap();
                arg == labels[j] as usize
            })
            .count();
        assert_eq!(s[1] as usize, correct);
        // Gradient of the mean loss, in f64 central differences.
        let g = dz.to_vec(&b).unwrap();
        for i in 0..z.len() {
            let eps = 1e-3;
            let mut zp = z.clone();
            zp[i] += eps;
            let lp = loss(&zp, &labels, classes, n);
            zp[i] -= 2.0 * eps;
            let lm = loss(&zp, &labels, classes, n);
            let num = (lp - lm) / (2.0 * eps as f64) / n as f64;
            assert!(
                (num - g[i] as f64).abs() < 1e-3,
                "dz[{i}]: {num} vs {}",
                g[i]
            );
        }
    }

    /// Soft targets `[classes, n]` on the CPU backend: (dz, stats).
    fn soft(z: &[f32], t: &[f32], classes: usize, n: usize) -> (Vec<f32>, Vec<f32>) {
        let b = CpuBackend::new();
        let zt = Tensor::from_slice(&b, &[classes, n], z).unwrap();
        let tt = Tensor::from_slice(&b, &[classes, n], t).unwrap();
        let mut dz = Tensor::zeros(&b, &[classes, n]).unwrap();
        let mut stats = Tensor::zeros(&b, &[2]).unwrap();
        SoftmaxCrossEntropy::new(classes)
            .forward_backward_soft(&b, &zt, tt.view(), n, Some(&mut dz), stats.view_mut())
            .unwrap();
        (dz.to_vec(&b).unwrap(), stats.to_vec(&b).unwrap())
    }

    #[test]
    fn one_hot_soft_targets_are_the_hard_loss() {
        let b = CpuBackend::new();
        let (classes, n) = (4, 5);
        let mut rng = Rng::new(3);
        let z: Vec<f32> = (0..classes * n).map(|_| rng.normal() as f32).collect();
        let labels = [0u32, 3, 1, 1, 2];
        let mut t = vec![0.0; classes * n];
        for (j, &l) in labels.iter().enumerate() {
            t[l as usize * n + j] = 1.0;
        }
        let (dz_soft, st_soft) = soft(&z, &t, classes, n);
        let mut lb = b.alloc::<u32>(n).unwrap();
        b.upload(&labels, Out::new(&mut lb)).unwrap();
        let zt = Tensor::from_slice(&b, &[classes, n], &z).unwrap();
        let mut dz = Tensor::zeros(&b, &[classes, n]).unwrap();
        let mut stats = Tensor::zeros(&b, &[2]).unwrap();
        SoftmaxCrossEntropy::new(classes)
            .forward_backward(&b, &zt, In::new(&lb), n, Some(&mut dz), stats.view_mut())
            .unwrap();
        let hard = stats.to_vec(&b).unwrap();
        assert!((st_soft[0] - hard[0]).abs() < 1e-5 * hard[0].abs().max(1.0));
        assert_eq!(st_soft[1], hard[1]);
        for (a, h) in dz_soft.iter().zip(dz.to_vec(&b).unwrap()) {
            assert!((a - h).abs() < 1e-6, "{a} vs {h}");
        }
    }

    #[test]
    fn soft_gradient_matches_finite_differences() {
        let (classes, n) = (5, 3);
        let mut rng = Rng::new(4);
        let z: Vec<f32> = (0..classes * n)
            .map(|_| 1.5 * rng.normal() as f32)
            .collect();
        // Mixed pairs with smoothing: rows sum to 1.
        let mut t = vec![0.02; classes * n];
        for (j, (a, c)) in [(0usize, 2usize), (4, 4), (1, 3)].into_iter().enumerate() {
            t[a * n + j] += 0.9 * 0.6;
            t[c * n + j] += 0.9 * 0.4;
        }
        let loss = |z: &[f32]| -> f64 {
            (0..n)
                .map(|j| {
                    let col: Vec<f64> = (0..classes).map(|k| z[k * n + j] as f64).collect();
                    let m = col.iter().cloned().fold(f64::MIN, f64::max);
                    let lse = col.iter().map(|v| (v - m).exp()).sum::<f64>().ln() + m;
                    (0..classes)
                        .map(|k| t[k * n + j] as f64 * (lse - col[k]))
                        .sum::<f64>()
                })
                .sum()
        };
        let (g, st) = soft(&z, &t, classes, n);
        assert!((st[0] as f64 - loss(&z)).abs() < 1e-4);
        // Argmax of the targets: class 0 for sample 0 (0.56 vs 0.38).
        for i in 0..z.len() {
            let eps = 1e-3;
            let mut zp = z.clone();
            zp[i] += eps;
            let lp = loss(&zp);
            zp[i] -= 2.0 * eps;
            let lm = loss(&zp);
            let num = (lp - lm) / (2.0 * eps as f64) / n as f64;
            assert!(
                (num - g[i] as f64).abs() < 1e-3,
                "dz[{i}]: {num} vs {}",
                g[i]
            );
        }
    }

    #[test]
    fn out_of_range_label_is_an_error() {
        let b = CpuBackend::new();
        let mut lb = b.alloc::<u32>(2).unwrap();
        b.upload(&[0u32, 7], Out::new(&mut lb)).unwrap();
        let zt = Tensor::zeros(&b, &[3, 2]).unwrap();
        let mut stats = Tensor::zeros(&b, &[2]).unwrap();
        let r = SoftmaxCrossEntropy::new(3).forward_backward(
            &b,
            &zt,
            In::new(&lb),
            2,
            None,
            stats.view_mut(),
        );
        assert!(matches!(
            r,
            Err(crate::backend::BackendError::Label {
                row: 1,
                label: 7,
                ..
            })
        ));
    }
}
