//! The training curves of one or more runs as an SVG or PNG picture: training loss by
//! step, accuracy by epoch, and the data wait and compute time of every step.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use stoker_trainer::train::History;

/// A plot could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct PlotError {
    pub path: PathBuf,
    pub reason: String,
    /// The drawing library's or the PNG encoder's error, where there was one.
    #[source]
    pub source: Option<Cause>,
}

/// The error under a [`PlotError`].
type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

const FONT: &str = "sans-serif";
const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Plotters draws text with ab_glyph from a registered font; the binary ships a small
/// one so that no system font (or fontconfig) is needed.
fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../assets/DejaVuSans-ascii.ttf");
        // Cannot fail for the bundled file; a failure would show as a draw error.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, bytes);
    });
}

/// Checks, before training, that `path` names a picture format `plot` writes and a
/// folder that exists.
pub fn check_path(path: &Path) -> Result<(), PlotError> {
    let err = |reason: &str| PlotError {
        path: path.to_path_buf(),
        reason: reason.into(),
        source: None,
    };
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if ext != "svg" && ext != "png" {
        return Err(err(
            "unknown picture format: the file name must end in .svg or .png",
        ));
    }
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.is_dir() => {
            Err(err("its folder does not exist"))
        }
        _ => Ok(()),
    }
}

/// Draws training loss, accuracy per epoch, and data wait and compute time per step
/// for each run (one colour per run) into `path`: SVG for `.svg`, PNG for `.png`.
pub fn plot(path: &Path, runs: &[(&str, &History)]) -> Result<(), PlotError> {
    let err = |e: Cause| PlotError {
        path: path.to_path_buf(),
        reason: e.to_string(),
        source: Some(e),
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
            root.present().map_err(|e| err(e.into()))
        }
        "png" => {
            let mut buf = vec![0u8; (size.0 * size.1 * 3) as usize];
            {
                let root = BitMapBackend::with_buffer(&mut buf, size).into_drawing_area();
                draw(&root, runs).map_err(err)?;
                root.present().map_err(|e| err(e.into()))?;
            }
            image::save_buffer(path, &buf, size.0, size.1, image::ExtendedColorType::Rgb8)
                .map_err(|e| err(e.into()))
        }
        _ => Err(PlotError {
            path: path.to_path_buf(),
            reason: "unknown picture format: the file name must end in .svg or .png".into(),
            source: None,
        }),
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    runs: &[(&str, &History)],
) -> Result<(), Cause>
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    let root = root.titled("stoker-train", (FONT, 24))?;
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
        .build_cartesian_2d(min_step..max_step, 0f32..max_loss * 1.05)?;
    c.configure_mesh()
        .x_desc("step")
        .y_desc("loss")
        .label_style((FONT, 13))
        .draw()?;
    for (i, (name, h)) in runs.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
        c.draw_series(LineSeries::new(
            h.log.iter().map(|p| (p.step, p.loss)),
            col.stroke_width(2),
        ))?
        .label(name.to_string())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .label_font((FONT, 13))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;

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
        .build_cartesian_2d(0u64..epochs + 1, 0f64..100.0)?;
    c.configure_mesh()
        .x_labels((epochs + 2) as usize)
        .x_desc("epoch")
        .y_desc("accuracy %")
        .label_style((FONT, 13))
        .draw()?;
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
        ))?;
        c.draw_series(train.iter().map(|&p| Circle::new(p, 3, light.filled())))?;
        c.draw_series(LineSeries::new(val.iter().copied(), col.stroke_width(2)))?
            .label(format!("{name} val"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
        c.draw_series(val.iter().map(|&p| Circle::new(p, 4, col.filled())))?;
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .label_font((FONT, 13))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;

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
        .build_cartesian_2d(min_step..max_step, 0f32..max_ms * 1.05)?;
    c.configure_mesh()
        .x_desc("step")
        .y_desc("ms")
        .label_style((FONT, 13))
        .draw()?;
    for (i, (name, h)) in runs.iter().enumerate() {
        let col = COLORS[i % COLORS.len()];
        c.draw_series(LineSeries::new(
            h.steps.iter().map(|s| (s.step, 1e3 * s.compute)),
            col.mix(0.35).stroke_width(1),
        ))?;
        c.draw_series(LineSeries::new(
            h.steps.iter().map(|s| (s.step, 1e3 * s.wait)),
            col.stroke_width(2),
        ))?
        .label(format!("{name} data wait"))
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .label_font((FONT, 13))
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use stoker_trainer::model::Stats;
    use stoker_trainer::train::{EpochRecord, LogPoint, StepTime};

    use super::*;

    /// Two epochs of six steps, a log point per step.
    fn history() -> History {
        let mut h = History::default();
        for step in 1..=12u64 {
            let epoch = (step - 1) / 6;
            h.log.push(LogPoint {
                step,
                epoch,
                loss: 2.0 / step as f32,
                accuracy: step as f32 / 12.0,
                lr: 0.1,
            });
            h.push_step(StepTime {
                step,
                count: 1,
                samples: 8,
                wait: 0.001 * step as f32,
                compute: 0.01,
                comm: 0.0,
            });
        }
        for epoch in 0..2 {
            h.epochs.push(EpochRecord {
                epoch,
                train_loss: 1.0 / (epoch + 1) as f64,
                train_accuracy: 0.5 + 0.2 * epoch as f64,
                samples: 48,
                val: Some(Stats {
                    loss: 0.9,
                    accuracy: 0.6 + 0.1 * epoch as f32,
                    samples: 16,
                    labels: None,
                }),
                train_seconds: 0.1,
                wait_seconds: 0.01,
                eval_seconds: 0.02,
            });
        }
        h
    }

    #[test]
    fn plots_are_written_as_svg_and_png() {
        let tmp = tempfile::tempdir().unwrap();
        let h = history();
        let svg = tmp.path().join("curves.svg");
        plot(&svg, &[("sync", &h), ("async", &h)]).unwrap();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg"), "{}", &text[..text.len().min(200)]);
        assert!(text.contains("training loss") && text.contains("data wait"));
        // One polyline per curve at least: loss (2 runs), wait and compute (2 runs each).
        assert!(text.matches("<polyline").count() >= 6, "too few curves");
        let png = tmp.path().join("curves.png");
        plot(&png, &[("async", &h)]).unwrap();
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"));
        let bad = plot(&tmp.path().join("curves.pdf"), &[("async", &h)]);
        assert!(bad.unwrap_err().to_string().contains(".svg or .png"));
        // The encoder's error is kept under the message that quotes it.
        let nowhere = tmp.path().join("no/such/folder/curves.png");
        let e = plot(&nowhere, &[("async", &h)]).unwrap_err();
        let cause = e.source.as_ref().expect("the encoder's error");
        assert!(cause.is::<image::ImageError>(), "{cause:?}");
        assert_eq!(e.to_string(), format!("{}: {cause}", nowhere.display()));
    }
}
