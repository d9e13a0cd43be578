//! What a training run shows: a progress bar and one line per epoch while it runs, a
//! summary (text or JSON) at the end, and a side-by-side table of reader modes. (The
//! curves are drawn by `plot`.)

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use stoker_trainer::train::{EpochRecord, History, LogPoint, Observer, StepTime, Totals};
use stoker_trainer::{LabelMetrics, Precision};

/// Progress on the terminal: a bar per epoch (on stderr, only when it is a terminal)
/// and a line per finished epoch (on stdout, or stderr when stdout carries JSON).
pub struct Console {
    epochs: u64,
    bar: ProgressBar,
    lines_to_stderr: bool,
    /// Prefix of every line, e.g. `[sync] ` when several runs share the screen.
    tag: String,
    /// The name of the accuracy when it is not top-1 (multi-label: `exact-match`).
    metric: Option<&'static str>,
}

impl Console {
    pub fn new(epochs: u64, lines_to_stderr: bool, tag: &str) -> Self {
        Self {
            epochs,
            bar: ProgressBar::hidden(),
            lines_to_stderr,
            tag: tag.to_string(),
            metric: None,
        }
    }

    /// Names the accuracy in the epoch lines (`None`: top-1, unnamed as before).
    pub fn metric(mut self, metric: Option<&'static str>) -> Self {
        self.metric = metric;
        self
    }

    /// Prints a line without tearing the progress bar.
    pub fn line(&self, s: &str) {
        let s = format!("{}{s}", self.tag);
        self.bar.suspend(|| {
            if self.lines_to_stderr {
                eprintln!("{s}");
            } else {
                println!("{s}");
            }
        });
    }
}

impl Observer for Console {
    fn epoch_start(&mut self, epoch: u64, batches: usize, done: usize) {
        self.bar = if std::io::stderr().is_terminal() {
            ProgressBar::new(batches as u64)
        } else {
            ProgressBar::hidden()
        };
        let template = format!(
            "{}epoch {}/{} [{{bar:30}}] {{pos}}/{{len}} {{msg}} ({{eta}} left)",
            self.tag,
            epoch + 1,
            self.epochs
        );
        if let Ok(style) = ProgressStyle::with_template(&template) {
            self.bar.set_style(style.progress_chars("=> "));
        }
        self.bar.set_position(done as u64);
    }

    fn step(&mut self, _time: &StepTime, log: Option<&LogPoint>) {
        self.bar.inc(1);
        if let Some(p) = log {
            self.bar.set_message(format!("loss {:.4}", p.loss));
        }
    }

    fn eval_start(&mut self, _epoch: u64) {
        self.bar.set_message("evaluating");
    }

    fn epoch_end(&mut self, rec: &EpochRecord) {
        self.bar.finish_and_clear();
        self.line(&epoch_line(rec, self.epochs, self.metric));
    }
}

/// `epoch  3/10  loss 0.4123  train 86.2%  val 91.0%  1234 img/s  data wait 3.1%  ...`;
/// with a `metric` named, `train exact-match 40.2%  val exact-match 38.0%`, and for a
/// multi-label evaluation `mAP 0.812  F1 micro 0.801 macro 0.783` after it.
pub fn epoch_line(rec: &EpochRecord, epochs: u64, metric: Option<&str>) -> String {
    let m = metric.map_or(String::new(), |m| format!("{m} "));
    let val = match rec.val {
        Some(v) => format!(
            "val {m}{:5.1}%{}",
            100.0 * v.accuracy,
            v.labels
                .map_or(String::new(), |l| format!("  {}", label_text(&l)))
        ),
        None => format!("val {m}   -  "),
    };
    format!(
        "epoch {:>2}/{}  loss {:.4}  train {m}{:5.1}%  {}  {:6.0} img/s  data wait {:4.1}%  {:.1} s (+{:.1} s eval)",
        rec.epoch + 1,
        epochs,
        rec.train_loss,
        100.0 * rec.train_accuracy,
        val,
        rec.images_per_sec(),
        100.0 * rec.wait_share(),
        rec.train_seconds,
        rec.eval_seconds
    )
}

/// `mAP 0.812  F1 micro 0.801 macro 0.783` (`mAP -` when no class had a positive).
fn label_text(l: &LabelMetrics) -> String {
    let map = l.map.map_or("-".to_string(), |m| format!("{m:.3}"));
    format!(
        "mAP {map}  F1 micro {:.3} macro {:.3}",
        l.f1_micro, l.f1_macro
    )
}

/// What a run was, for its summary (where its fields appear under these names, but
/// `wait_covers`).
#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    /// This process's rank, and the number of processes training together.
    pub rank: usize,
    pub world_size: usize,
    /// What averaged the gradients: `local` (one process), `mpi` or `nccl`.
    pub collective: String,
    pub model: String,
    /// `cpu`, or `cuda:N (<name>)`.
    pub device: String,
    /// The step's arithmetic: `f32`, or `bf16` (autocast, CUDA only).
    pub precision: Precision,
    /// What the data wait covers on this device (the feed's words).
    #[serde(rename = "data_wait_covers")]
    pub wait_covers: String,
    pub reader: String,
    pub batch_size: usize,
    /// Decode threads (at the end, when `auto` chose them).
    pub workers: usize,
    /// What `--workers auto` chose and when, when it was on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_workers: Option<AutoChoice>,
    pub train_data: String,
    pub val_data: Option<String>,
    /// From start to end of the training loop, evaluation included.
    pub wall_seconds: f64,
    /// `labels` for a multi-label run (absent for classification, as before).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<&'static str>,
    /// What the `*_accuracy` figures measure when it is not top-1: `exact-match`
    /// (every tag of a sample right at threshold 0.5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<&'static str>,
}

/// What `--workers auto` did.
#[derive(Debug, Clone, Serialize)]
pub struct AutoChoice {
    pub cpu_budget: usize,
    pub workers: usize,
    pub io_depth: usize,
    pub changes: Vec<stoker_loader::pipeline::tune::AutoChange>,
}

/// A multi-label evaluation's metrics as `--json` names them (absent for
/// classification): `val_map`, mean average precision over the classes with a positive
/// (scikit-learn's `average_precision_score` per class; null when no class had one),
/// and `val_f1_micro`, `val_f1_macro` at threshold 0.5.
#[derive(Debug, Serialize)]
pub struct ValLabels {
    pub val_map: Option<f64>,
    pub val_f1_micro: f64,
    pub val_f1_macro: f64,
}

impl ValLabels {
    fn of(l: LabelMetrics) -> Self {
        Self {
            val_map: l.map,
            val_f1_micro: l.f1_micro,
            val_f1_macro: l.f1_macro,
        }
    }
}

/// The final JSON object (`--json`): `val_accuracy`, `train_loss`, `images_per_sec`,
/// `data_wait_share` (data wait / training time, evaluation excluded),
/// `data_wait_covers` (what the data wait is: the loader's `next()`, plus the upload on
/// CUDA), `epochs`, `device`, `reader`, and the per-epoch records. The field names are
/// a contract with whoever reads the output.
#[derive(Debug, Serialize)]
pub struct Summary<'a> {
    #[serde(flatten)]
    pub run: &'a RunInfo,
    /// The last epoch's.
    pub val_accuracy: Option<f32>,
    pub val_loss: Option<f32>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub val_labels: Option<ValLabels>,
    pub train_loss: Option<f64>,
    pub train_accuracy: Option<f64>,
    pub images_per_sec: f64,
    /// Every rank trains on as many images per step as this one, in lock step.
    pub images_per_sec_all_ranks: f64,
    pub data_wait_share: f64,
    pub allreduce_seconds: f64,
    pub allreduce_share: f64,
    pub epochs: usize,
    pub steps: u64,
    pub images: u64,
    pub train_seconds: f64,
    pub wait_seconds: f64,
    pub eval_seconds: f64,
    pub per_epoch: Vec<EpochSummary>,
}

/// One epoch of [`Summary::per_epoch`].
#[derive(Debug, Serialize)]
pub struct EpochSummary {
    /// 1-based, as the progress lines count.
    pub epoch: u64,
    pub train_loss: f64,
    pub train_accuracy: f64,
    pub val_loss: Option<f32>,
    pub val_accuracy: Option<f32>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub val_labels: Option<ValLabels>,
    pub images_per_sec: f64,
    pub data_wait_share: f64,
    pub train_seconds: f64,
    pub eval_seconds: f64,
}

/// `--compare-readers --json`: both runs, and what the async reader saved.
#[derive(Debug, Serialize)]
pub struct Comparison<'a> {
    pub sync: Summary<'a>,
    pub r#async: Summary<'a>,
    pub async_saves_share_of_wall_time: f64,
    /// The same batches in the same order: both runs must end with the same loss.
    pub same_training: bool,
}

/// The summary of run `info` that recorded `h`.
pub fn summary<'a>(info: &'a RunInfo, h: &History) -> Summary<'a> {
    let t = Totals::of(h);
    let last = h.epochs.last();
    let per_epoch = h
        .epochs
        .iter()
        .map(|e| EpochSummary {
            epoch: e.epoch + 1,
            train_loss: e.train_loss,
            train_accuracy: e.train_accuracy,
            val_loss: e.val.map(|v| v.loss),
            val_accuracy: e.val.map(|v| v.accuracy),
            val_labels: e.val.and_then(|v| v.labels).map(ValLabels::of),
            images_per_sec: e.images_per_sec(),
            data_wait_share: e.wait_share(),
            train_seconds: e.train_seconds,
            eval_seconds: e.eval_seconds,
        })
        .collect();
    Summary {
        run: info,
        val_accuracy: last.and_then(|e| e.val).map(|v| v.accuracy),
        val_loss: last.and_then(|e| e.val).map(|v| v.loss),
        val_labels: last
            .and_then(|e| e.val)
            .and_then(|v| v.labels)
            .map(ValLabels::of),
        train_loss: last.map(|e| e.train_loss),
        train_accuracy: last.map(|e| e.train_accuracy),
        images_per_sec: t.images_per_sec(),
        images_per_sec_all_ranks: t.images_per_sec() * info.world_size as f64,
        data_wait_share: t.wait_share(),
        allreduce_seconds: t.comm_seconds,
        allreduce_share: t.comm_share(),
        epochs: h.epochs.len(),
        steps: t.steps,
        images: t.images,
        train_seconds: t.train_seconds,
        wait_seconds: t.wait_seconds,
        eval_seconds: t.eval_seconds,
        per_epoch,
    }
}

/// Pretty JSON text of a report, through `serde_json::Value` as it always was: keys in
/// alphabetical order and f32 values widened to f64, so the output reads the same.
pub fn json_text<T: Serialize>(report: &T) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&serde_json::to_value(report)?)
}

/// The closing lines of a run, as text.
pub fn summary_text(info: &RunInfo, h: &History) -> String {
    let t = Totals::of(h);
    let mut s = format!(
        "done: {} epochs, {} steps in {:.1} s ({:.1} s training, {:.1} s evaluating)\n",
        h.epochs.len(),
        t.steps,
        info.wall_seconds,
        t.train_seconds,
        t.eval_seconds
    );
    s += &format!(
        "{} on {} ({}), {} reader: {:.0} images/s{}, waiting for data {:.1}% of the training time",
        info.model,
        info.device,
        info.precision,
        info.reader,
        t.images_per_sec(),
        if info.world_size > 1 {
            " on rank 0"
        } else {
            ""
        },
        100.0 * t.wait_share()
    );
    if info.world_size > 1 {
        s += &format!(
            "\n{} ranks ({}): {:.0} images/s over all ranks, averaging gradients {:.1}% of \
             the training time",
            info.world_size,
            info.collective,
            t.images_per_sec() * info.world_size as f64,
            100.0 * t.comm_share()
        );
    }
    if let Some(e) = h.epochs.last() {
        let metric = info.metric.unwrap_or("accuracy");
        s += &format!(
            "\nfinal: train loss {:.4}, train {metric} {:.1}%",
            e.train_loss,
            100.0 * e.train_accuracy
        );
        if let Some(v) = e.val {
            s += &format!(
                ", val loss {:.4}, val {metric} {:.2}%",
                v.loss,
                100.0 * v.accuracy
            );
            if let Some(l) = v.labels {
                s += &format!(", val {}", label_text(&l).replace("  ", ", "));
            }
        }
    }
    s
}

/// One row of the reader comparison.
pub struct CompareRow<'a> {
    pub reader: &'a str,
    pub wall_seconds: f64,
    pub history: &'a History,
}

/// A side-by-side table: wall time, training time, images/s, data wait share, val
/// accuracy for each reader mode.
pub fn compare_table(rows: &[CompareRow<'_>]) -> String {
    let mut s = format!(
        "{:<8} {:>9} {:>10} {:>9} {:>10} {:>8}\n",
        "reader", "wall s", "train s", "images/s", "data wait", "val acc"
    );
    for r in rows {
        let t = Totals::of(r.history);
        let val = r
            .history
            .epochs
            .last()
            .and_then(|e| e.val)
            .map_or("-".to_string(), |v| format!("{:.2}%", 100.0 * v.accuracy));
        s += &format!(
            "{:<8} {:>9.1} {:>10.1} {:>9.0} {:>9.1}% {:>8}\n",
            r.reader,
            r.wall_seconds,
            t.train_seconds,
            t.images_per_sec(),
            100.0 * t.wait_share(),
            val
        );
    }
    s
}
