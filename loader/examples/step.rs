//! A step of your own in the loader: after the built-in transforms, each sample's
//! pixels are jittered with the sample's own random stream, and a field is added (the
//! image's mean brightness, f32), which the batch carries as `fields.extra`. The output
//! is the same in both modes and for any worker count. Run with
//! `cargo run --release -p stoker-loader --example step`.

use std::sync::Arc;

use stoker_augment::{Pipeline, SampleRng};
use stoker_loader::synthetic::{self, ShapesOptions};
use stoker_loader::{
    source, Array, ArrayData, Loader, LoaderConfig, Mode, Step, StepError, StepSample, UserStep,
};

/// Adds up to `amount` of noise to every pixel, and records the mean brightness.
struct Jitter {
    amount: u8,
}

impl Step for Jitter {
    fn name(&self) -> &str {
        "jitter"
    }

    fn apply(&self, s: &mut StepSample<'_>, rng: &mut SampleRng) -> Result<(), StepError> {
        for p in s.image.iter_mut() {
            *p = p.saturating_add(rng.below(u64::from(self.amount) + 1) as u8);
        }
        let mean = s.image.iter().map(|&p| p as f32).sum::<f32>() / s.image.len() as f32;
        let brightness = Array::scalar(ArrayData::F32(vec![mean])).ok_or("a scalar")?;
        s.insert("brightness", brightness);
        Ok(())
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("stoker-step-{}", std::process::id()));
    let opts = ShapesOptions {
        count: 64,
        size: 64,
        classes: 4,
        seed: 0,
    };
    synthetic::shapes(&dir, &opts, |_, _| {})?;
    let src: Arc<dyn source::Source> = source::open(&dir, source::Split::Train)?;
    let config = LoaderConfig {
        batch_size: 16,
        mode: Mode::Async,
        transform: Pipeline::parse("rrc:48,flip")?,
        steps: vec![UserStep::new(Jitter { amount: 8 })],
        ..LoaderConfig::default()
    };
    let mut loader = Loader::new(src, config)?;
    for batch in loader.epoch(0) {
        let b = batch?;
        let fields = b.fields.as_ref().ok_or("a loader with steps has fields")?;
        for (name, a) in &fields.extra {
            println!(
                "batch {}: {name} {:?} {}",
                b.step,
                a.array.shape,
                a.array.data.dtype()
            );
        }
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
