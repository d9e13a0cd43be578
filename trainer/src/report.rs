//! What a training run shows: a progress bar and one line per epoch while it runs, a
//! summary (text or JSON) at the end, a side-by-side table of reader modes, and the
//! training curves with the data wait of every step as an SVG or PNG picture.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Once;

use indicatif::{ProgressBar, ProgressStyle};
use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::{json, Value};

use crate::train::{EpochRecord, History, LogPoint, Observer, StepTime, Totals};

/// Progress on the terminal: a bar per epoch (on stderr, only when it is a terminal)
/// and a line per finished epoch (on stdout, or stderr when stdout carries JSON).
pub struct Console {
    epochs: u64,
    bar: ProgressBar,
    lines_to_stderr: bool,
    /// Prefix of every line, e.g. `[sync] ` when several runs share the screen.
    tag: String,
}

impl Console {
    pub fn new(epochs: u64, lines_to_stderr: bool, tag: &str) -> Self {
        Self {
            epochs,
            bar: ProgressBar::hidden(),
            lines_to_stderr,
            tag: tag.to_string(),
        }
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
        self.line(&epoch_line(rec, self.epochs));
    }
}

/// `epoch  3/10  loss 0.4123  train 86.2%  val 91.0%  1234 img/s  data wait 3.1%  ...`
pub fn epoch_line(rec: &EpochRecord, epochs: u64) -> String {
    let val = match rec.val {
        Some(v) => format!("val {:5.1}%", 100.0 * v.accuracy),
        None => "val    -  ".to_string(),
    };
    format!(
        "epoch {:>2}/{}  loss {:.4}  train {:5.1}%  {}  {:6.0} img/s  data wait {:4.1}%  {:.1} s (+{:.1} s eval)",
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

/// What a run was, for its summary.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// This process's rank, and the number of processes training together.
    pub rank: usize,
    pub world_size: usize,
    /// What averaged the gradients: `local` (one process), `mpi` or `nccl`.
    pub collective: String,
    pub model: String,
    /// `cpu`, or `cuda:N (<name>)`.
    pub device: String,
    /// What the data wait covers on this device (the feed's words).
    pub wait_covers: String,
    pub reader: String,
    pub batch_size: usize,
    pub workers: usize,
    pub train_data: String,
    pub val_data: Option<String>,
    /// From start to end of the training loop, evaluation included.
    pub wall_seconds: f64,
}

/// The final JSON object: `val_accuracy`, `train_loss`, `images_per_sec`,
/// `data_wait_share` (data wait / training time, evaluation excluded),
/// `data_wait_covers` (what the data wait is: the loader's `next()`, plus the upload on
/// CUDA), `epochs`, `device`, `reader`, and the per-epoch records.
pub fn summary_json(info: &RunInfo, h: &History) -> Value {
    let t = Totals::of(h);
    let last = h.epochs.last();
    let epochs: Vec<Value> = h
        .epochs
        .iter()
        .map(|e| {
            json!({
                "epoch": e.epoch + 1,
                "train_loss": e.train_loss,
                "train_accuracy": e.train_accuracy,
                "val_loss": e.val.map(|v| v.loss),
                "val_accuracy": e.val.map(|v| v.accuracy),
                "images_per_sec": e.images_per_sec(),
                "data_wait_share": e.wait_share(),
                "train_seconds": e.train_seconds,
                "eval_seconds": e.eval_seconds,
            })
        })
        .collect();
    json!({
        "val_accuracy": last.and_then(|e| e.val).map(|v| v.accuracy),
        "val_loss": last.and_then(|e| e.val).map(|v| v.loss),
        "train_loss": last.map(|e| e.train_loss),
        "train_accuracy": last.map(|e| e.train_accuracy),
        "images_per_sec": t.images_per_sec(),
        // Every rank trains on as many images per step as this one, in lock step.
        "images_per_sec_all_ranks": t.images_per_sec() * info.world_size as f64,
        "data_wait_share": t.wait_share(),
        "data_wait_covers": info.wait_covers,
        "allreduce_seconds": t.comm_seconds,
        "allreduce_share": t.comm_share(),
        "world_size": info.world_size,
        "rank": info.rank,
        "collective": info.collective,
        "epochs": h.epochs.len(),
        "steps": t.steps,
        "images": t.images,
        "train_seconds": t.train_seconds,
        "wait_seconds": t.wait_seconds,
        "eval_seconds": t.eval_seconds,
        "wall_seconds": info.wall_seconds,
        "device": info.device,
        "reader": info.reader,
        "model": info.model,
        "batch_size": info.batch_size,
        "workers": info.workers,
        "train_data": info.train_data,
        "val_data": info.val_data,
        "per_epoch": epochs,
    })
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
        "{} on {}, {} reader: {:.0} images/s{}, waiting for data {:.1}% of the training time",
        info.model,
        info.device,
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
        s += &format!(
            "\nfinal: train loss {:.4}, train accuracy {:.1}%",
            e.train_loss,
            100.0 * e.train_accuracy
        );
        if let Some(v) = e.val {
            s += &format!(
                ", val loss {:.4}, val accuracy {:.2}%",
                v.loss,
                100.0 * v.accuracy
            );
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

/// A plot could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct PlotError {
    pub path: PathBuf,
    pub reason: String,
}

const FONT: &str = "sans-serif";
const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Plotters draws text with ab_glyph from a registered font; the trainer ships a
/// small one so that no system font (or fontconfig) is needed.
fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../assets/DejaVuSans-ascii.ttf");
        // Cannot fail for the bundled file; a failure would show as a draw error.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, bytes);
    });
}

/// Draws training loss, accuracy per epoch, and data wait and compute time per step
/// for each run (one colour per run) into `path`: SVG for `.svg`, PNG for `.png`.
pub fn plot(path: &Path, runs: &[(&str, &History)]) -> Result<(), PlotError> {
    let err = |reason: String| PlotError {
        path: path.to_path_buf(),
        reason,
    };
    register_font();
    let size = (1000u32, 1000u32);
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "svg" => {
            let root = SVGBackend::new(path, size).into_drawing_area();
            draw(&root, runs).map_err(err)?;
            root.present().map_err(|e| err(e.to_string()))
        }
        "png" => {
            let mut buf = vec![0u8; (size.0 * size.1 * 3) as usize];
            {
                let root = BitMapBackend::with_buffer(&mut buf, size).into_drawing_area();
                draw(&root, runs).map_err(err)?;
                root.present().map_err(|e| err(e.to_string()))?;
            }
            image::save_buffer(path, &buf, size.0, size.1, image::ExtendedColorType::Rgb8)
                .map_err(|e| err(e.to_string()))
        }
        _ => Err(err(
            "unknown picture format: the file name must end in .svg or .png".into(),
        )),
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    runs: &[(&str, &History)],
) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(e)?;
    let root = root
        .titled("stoker-train", (FONT, 24))
        .map_err(|e| e.to_string())?;
    let panels = root.split_evenly((3, 1));
    let max_step = runs
        .iter()
        .filter_map(|(_, h)| h.steps.last().map(|s| s.step))
        .max()
        .unwrap_or(1)
        .max(1);
    let min_step = runs
        .iter()
        .filter_map(|(_, h)| h.steps.first().map(|s| s.step.saturating_sub(1)))
        .min()
        .unwrap_or(0);

    // Training loss at every logged step.
    let max_loss = runs
        .iter()
        .flat_map(|(_, h)| h.log.iter().map(|p| p.loss))
        .filter(|l| l.is_finite())
        .fold(0.1f32, f32::max);
    let mut c = ChartBuilder::on(&panels[0])
        .caption("training loss", (FONT, 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(min_step..max_step, 0f32..max_loss * 1.05)
        .map_err(|e| e.to_string())?;
    c.configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, h)) in runs.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
        c.draw_series(LineSeries::new(
            h.log.iter().map(|p| (p.step, p.loss)),
            col.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label(name.to_string())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .label_font((FONT, 13))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())?;

    // Accuracy per epoch: validation solid, training light.
    let epochs = runs
        .iter()
        .filter_map(|(_, h)| h.epochs.last().map(|e| e.epoch + 1))
        .max()
        .unwrap_or(1)
        .max(1);
    let mut c = ChartBuilder::on(&panels[1])
        .caption("accuracy per epoch (val solid, train light)", (FONT, 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0u64..epochs + 1, 0f64..100.0)
        .map_err(|e| e.to_string())?;
    c.configure_mesh()
        .x_labels((epochs + 2) as usize)
        .x_desc("epoch")
        .y_desc("accuracy %")
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, h)) in runs.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
        let train: Vec<(u64, f64)> = h
            .epochs
            .iter()
            .map(|e| (e.epoch + 1, 100.0 * e.train_accuracy))
            .collect();
        let val: Vec<(u64, f64)> = h
            .epochs
            .iter()
            .filter_map(|e| e.val.map(|v| (e.epoch + 1, 100.0 * v.accuracy as f64)))
            .collect();
        let light = col.mix(0.4);
        c.draw_series(LineSeries::new(
            train.iter().copied(),
            light.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
        c.draw_series(train.iter().map(|&p| Circle::new(p, 3, light.filled())))
            .map_err(|e| e.to_string())?;
        c.draw_series(LineSeries::new(val.iter().copied(), col.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(format!("{name} val"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
        c.draw_series(val.iter().map(|&p| Circle::new(p, 4, col.filled())))
            .map_err(|e| e.to_string())?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, 13))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())?;

    // Per step: time blocked waiting for the batch (bold) and compute (light).
    let max_ms = runs
        .iter()
        .flat_map(|(_, h)| h.steps.iter().map(|s| 1e3 * s.wait.max(s.compute)))
        .filter(|v| v.is_finite())
        .fold(1f32, f32::max);
    let mut c = ChartBuilder::on(&panels[2])
        .caption("per step: data wait (bold) and compute (light)", (FONT, 18))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(min_step..max_step, 0f32..max_ms * 1.05)
        .map_err(|e| e.to_string())?;
    c.configure_mesh()
        .x_desc("step")
        .y_desc("ms")
        .label_style((FONT, 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, h)) in runs.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
        c.draw_series(LineSeries::new(
            h.steps.iter().map(|s| (s.step, 1e3 * s.compute)),
            col.mix(0.35).stroke_width(1),
        ))
        .map_err(|e| e.to_string())?;
        c.draw_series(LineSeries::new(
            h.steps.iter().map(|s| (s.step, 1e3 * s.wait)),
            col.stroke_width(2),
        ))
        .map_err(|e| e.to_string())?
        .label(format!("{name} data wait"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .label_font((FONT, 13))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}
