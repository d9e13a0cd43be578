//! Multi-label metrics over a whole evaluation: mean average precision (a ranking
//! metric, so it needs every sample's scores at once) and F1 at threshold 0.5, from the
//! logits and k-hot tags a multi-label model's evaluation collects.

use serde::{Deserialize, Serialize};

/// What a multi-label evaluation scored, beside the loss and the exact-match ratio.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LabelMetrics {
    /// Mean over the classes with at least one positive sample of their average
    /// precision ([`average_precision`]); `None` when no class has a positive.
    pub map: Option<f64>,
    /// F1 of all (sample, class) decisions pooled: `2 TP / (2 TP + FP + FN)`.
    pub f1_micro: f64,
    /// Mean over every class of its own F1 (0 for a class with no tag and no
    /// prediction, as scikit-learn's `f1_score(average="macro")` counts it).
    pub f1_macro: f64,
}

/// Average precision of one class, as scikit-learn's `average_precision_score`: with
/// the samples ranked by score (ties taken together, as one threshold), the sum over
/// thresholds of the precision there times the recall it adds,
/// `AP = sum_n (R_n - R_(n-1)) P_n`, with no interpolation. `None` when no sample is
/// positive (recall is undefined).
pub fn average_precision(scores: &[f32], positive: &[bool]) -> Option<f64> {
    let positives = positive.iter().filter(|&&p| p).count();
    if positives == 0 {
        return None;
    }
    let mut order: Vec<usize> = (0..scores.len().min(positive.len())).collect();
    // Highest score first; `total_cmp` gives NaN a place instead of a panic.
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
    let (mut tp, mut fp, mut ap, mut recall) = (0usize, 0usize, 0.0f64, 0.0f64);
    let mut i = 0;
    while i < order.len() {
        let s = scores[order[i]];
        // Every sample tied at this score is on the same side of the threshold.
        while i < order.len() && scores[order[i]].total_cmp(&s).is_eq() {
            if positive[order[i]] {
                tp += 1;
            } else {
                fp += 1;
            }
            i += 1;
        }
        let r = tp as f64 / positives as f64;
        ap += (r - recall) * (tp as f64 / (tp + fp) as f64);
        recall = r;
    }
    Some(ap)
}

/// The logits and tags of the samples evaluated so far, row-major `(n, classes)`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelScores {
    classes: usize,
    logits: Vec<f32>,
    tags: Vec<bool>,
}

impl LabelScores {
    /// No samples yet, over `classes` classes.
    pub fn new(classes: usize) -> Self {
        Self {
            classes,
            ..Self::default()
        }
    }

    /// Classes per sample.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.logits.len() / self.classes.max(1)
    }

    /// Whether no sample is held.
    pub fn is_empty(&self) -> bool {
        self.logits.is_empty()
    }

    /// Row-major `(n, classes)` logits.
    pub fn logits(&self) -> &[f32] {
        &self.logits
    }

    /// Row-major `(n, classes)` tags.
    pub fn tags(&self) -> &[bool] {
        &self.tags
    }

    /// Adds `n` samples in the model's layout: `logits` and `targets` `[classes, n]`
    /// (class-major, as the loss reads them; a non-zero target is a tag).
    pub fn push_class_major(&mut self, logits: &[f32], targets: &[f32], n: usize) {
        let k = self.classes;
        for j in 0..n {
            self.logits.extend((0..k).map(|c| logits[c * n + j]));
            self.tags.extend((0..k).map(|c| targets[c * n + j] != 0.0));
        }
    }

    /// Adds `n` samples of row-major `(n, classes)` logits and tags.
    pub fn push_rows(&mut self, logits: &[f32], tags: &[bool]) {
        self.logits.extend_from_slice(logits);
        self.tags.extend_from_slice(tags);
    }

    /// The metrics of the samples held; a logit above 0 (`sigmoid > 0.5`) predicts
    /// the tag, as the exact-match ratio counts it.
    pub fn metrics(&self) -> LabelMetrics {
        let k = self.classes.max(1);
        let n = self.len();
        let (mut sum_ap, mut with_positives) = (0.0, 0usize);
        let (mut tp_all, mut wrong_all) = (0usize, 0usize);
        let mut sum_f1 = 0.0;
        let mut column = Vec::with_capacity(n);
        let mut truth = Vec::with_capacity(n);
        for c in 0..self.classes {
            column.clear();
            truth.clear();
            column.extend((0..n).map(|j| self.logits[j * k + c]));
            truth.extend((0..n).map(|j| self.tags[j * k + c]));
            if let Some(ap) = average_precision(&column, &truth) {
                sum_ap += ap;
                with_positives += 1;
            }
            let (mut tp, mut fp, mut fn_) = (0usize, 0usize, 0usize);
            for (&z, &t) in column.iter().zip(&truth) {
                match (z > 0.0, t) {
                    (true, true) => tp += 1,
                    (true, false) => fp += 1,
                    (false, true) => fn_ += 1,
                    (false, false) => {}
                }
            }
            sum_f1 += f1(tp, fp + fn_);
            tp_all += tp;
            wrong_all += fp + fn_;
        }
        LabelMetrics {
            map: (with_positives > 0).then(|| sum_ap / with_positives as f64),
            f1_micro: f1(tp_all, wrong_all),
            f1_macro: sum_f1 / k as f64,
        }
    }
}

/// `2 TP / (2 TP + FP + FN)`, 0 when nothing was tagged or predicted.
fn f1(tp: usize, wrong: usize) -> f64 {
    if tp + wrong == 0 {
        return 0.0;
    }
    2.0 * tp as f64 / (2 * tp + wrong) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn average_precision_matches_the_step_definition_worked_by_hand() {
        // scikit-learn's documentation example: y = [0, 0, 1, 1], scores
        // [0.1, 0.4, 0.35, 0.8]. Ranked: 0.8 (+), 0.4 (-), 0.35 (+), 0.1 (-).
        // Thresholds give (recall, precision): (1/2, 1), (1/2, 1/2), (1, 2/3), (1, 1/2);
        // AP = 1/2 * 1 + 0 + 1/2 * 2/3 + 0 = 5/6.
        let ap = average_precision(&[0.1, 0.4, 0.35, 0.8], &[false, false, true, true]).unwrap();
        assert!((ap - 5.0 / 6.0).abs() < 1e-12, "{ap}");
        // A perfect ranking is 1 whatever the scores' scale.
        let ap = average_precision(&[-3.0, 9.0, 8.5, -7.0], &[false, true, true, false]);
        assert_eq!(ap, Some(1.0));
        // The worst ranking of 1 positive among 4: precision 1/4 when it is recalled.
        let ap = average_precision(&[0.9, 0.8, 0.7, 0.1], &[false, false, false, true]);
        assert_eq!(ap, Some(0.25));
        assert_eq!(average_precision(&[0.3, 0.2], &[false, false]), None);
    }

    #[test]
    fn tied_scores_are_one_threshold() {
        // All four tied: one threshold at recall 1 and precision 2/4. Ranking the ties
        // one by one (positives first) would give 1 instead.
        let ap = average_precision(&[0.5; 4], &[true, false, true, false]).unwrap();
        assert!((ap - 0.5).abs() < 1e-12, "{ap}");
        // 0.9 (+); then 0.5 x3 (+, -, -) together: recall 1/2 -> 1 at precision 2/4.
        // AP = 1/2 * 1 + 1/2 * 1/2 = 3/4.
        let ap = average_precision(&[0.5, 0.9, 0.5, 0.5], &[true, true, false, false]).unwrap();
        assert!((ap - 0.75).abs() < 1e-12, "{ap}");
    }

    /// Three samples, three classes; the class-major layout the model downloads.
    fn scores() -> LabelScores {
        // Row-major logits (sample j, class c) and tags:
        //   sample 0: [ 2.0, -1.0,  0.5]  tags {0}
        //   sample 1: [-0.5,  3.0,  0.0]  tags {1, 2}
        //   sample 2: [ 1.0, -2.0, -1.0]  tags {}
        let rows = [[2.0f32, -1.0, 0.5], [-0.5, 3.0, 0.0], [1.0, -2.0, -1.0]];
        let tags = [[1.0f32, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]];
        let n = rows.len();
        let (mut logits, mut targets) = (vec![0.0; 9], vec![0.0; 9]);
        for j in 0..n {
            for c in 0..3 {
                logits[c * n + j] = rows[j][c];
                targets[c * n + j] = tags[j][c];
            }
        }
        let mut s = LabelScores::new(3);
        s.push_class_major(&logits, &targets, n);
        s
    }

    #[test]
    fn metrics_of_a_small_set_worked_by_hand() {
        let s = scores();
        assert_eq!(s.len(), 3);
        assert_eq!(
            s.logits(),
            &[2.0, -1.0, 0.5, -0.5, 3.0, 0.0, 1.0, -2.0, -1.0]
        );
        let t = [true, false, false, false, true, true, false, false, false];
        assert_eq!(s.tags(), &t);
        let m = s.metrics();
        // Class 0: scores 2.0 (+), 1.0 (-), -0.5 (-): AP 1. Predicted (z > 0): samples
        // 0 and 2: TP 1, FP 1, FN 0, F1 2/3.
        // Class 1: 3.0 (+) first: AP 1. Predicted: sample 1: TP 1, F1 1.
        // Class 2: 0.5 (-), 0.0 (+), -1.0 (-): P = 1/2 at recall 1, AP 1/2. Predicted:
        // sample 0 only (0.0 is not above the threshold): TP 0, FP 1, FN 1, F1 0.
        let map = m.map.unwrap();
        assert!((map - 2.5 / 3.0).abs() < 1e-12, "{map}");
        // Micro: TP 2, FP 2, FN 1: 4 / 7.
        assert!((m.f1_micro - 4.0 / 7.0).abs() < 1e-12, "{}", m.f1_micro);
        assert!((m.f1_macro - (2.0 / 3.0 + 1.0) / 3.0).abs() < 1e-12);
    }

    #[test]
    fn classes_without_positives_leave_the_mean_ap_but_not_macro_f1() {
        let mut s = LabelScores::new(2);
        // Class 1 is never tagged nor predicted; class 0 is perfect.
        s.push_rows(&[1.0, -1.0, -1.0, -2.0], &[true, false, false, false]);
        let m = s.metrics();
        assert_eq!(m.map, Some(1.0));
        assert_eq!(m.f1_micro, 1.0);
        assert_eq!(m.f1_macro, 0.5);
        // No tags at all: no mean AP, and F1 0 rather than a division by zero.
        let mut s = LabelScores::new(2);
        s.push_rows(&[-1.0, -1.0], &[false, false]);
        let m = s.metrics();
        assert_eq!((m.map, m.f1_micro, m.f1_macro), (None, 0.0, 0.0));
        assert_eq!(LabelScores::new(3).metrics().map, None);
    }
}
