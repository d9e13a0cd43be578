//! One training run from the arguments (or one per reader with `--compare-readers`):
//! loaders, model, optimizer and schedule built, a checkpoint resumed, the loop run with
//! the console watching, and the report printed.

use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use anyhow::Context;
use stoker_loader::{LoaderConfig, Mix, Mode};
use stoker_trainer::model::Target;
use stoker_trainer::train::{History, Observer, Stop, Totals, TrainConfig, Trainer};
use stoker_trainer::{Backend, BatchFeed, Collective, Model, ModelConfig, Optimizer, Schedule};

use crate::args::{Args, Opt};
use crate::data::{Data, Reading};
use crate::plot;
use crate::report::{self, AutoChoice, CompareRow, Comparison, Console, RunInfo};

/// Makes the batch feed of one run: (reader mode, image shape, largest batch) -> feed.
pub type MakeFeed<'a, B> =
    dyn Fn(Mode, (usize, usize, usize), usize) -> anyhow::Result<Box<dyn BatchFeed<B>>> + 'a;

/// Trains once (or once per reader with `--compare-readers`) on `backend` and prints
/// the report.
pub fn train_and_report<B: Backend + Clone + 'static>(
    a: &Args,
    data: &Data,
    backend: &B,
    device: String,
    coll: Option<Rc<dyn Collective<B>>>,
    make_feed: &MakeFeed<'_, B>,
) -> anyhow::Result<()> {
    let say = |s: &str| a.say(s);
    if a.compare_readers {
        let mut runs = Vec::new();
        for mode in [Mode::Sync, Mode::Async] {
            say(&format!("\n== {mode} reader =="));
            let (history, info) =
                train_once(backend, a, data, &device, coll.clone(), make_feed, mode)?;
            runs.push((mode.to_string(), history, info));
        }
        if a.quiet {
            return Ok(());
        }
        let rows: Vec<CompareRow<'_>> = runs
            .iter()
            .map(|(name, h, info)| CompareRow {
                reader: name,
                wall_seconds: info.wall_seconds,
                history: h,
            })
            .collect();
        let table = report::compare_table(&rows);
        let (sync, asyn) = (&runs[0].2, &runs[1].2);
        let saved = 1.0 - asyn.wall_seconds / sync.wall_seconds.max(1e-9);
        // The same batches in the same order: both runs must end with the same loss.
        let same = runs[0].1.epochs.last().map(|e| e.train_loss)
            == runs[1].1.epochs.last().map(|e| e.train_loss);
        if a.json {
            let doc = Comparison {
                sync: report::summary(&runs[0].2, &runs[0].1),
                r#async: report::summary(&runs[1].2, &runs[1].1),
                async_saves_share_of_wall_time: saved,
                same_training: same,
            };
            println!("{}", report::json_text(&doc)?);
        } else {
            println!("\n{table}");
            let wait = |h: &History| 100.0 * Totals::of(h).wait_share();
            let caveat = if device == "cpu" {
                " (on a CPU the async workers share the cores with the step, so small \
                 differences are noise)"
            } else {
                ""
            };
            println!(
                "the step waited for data {:.1}% of the training time with the sync reader, {:.1}% \
                 with the async one; async wall time {:+.0}% against sync{caveat}; both \
                 runs trained identically: {}\ndata wait: {}",
                wait(&runs[0].1),
                wait(&runs[1].1),
                -100.0 * saved,
                if same { "yes" } else { "NO" },
                runs[1].2.wait_covers
            );
        }
        if let Some(path) = &a.plot {
            let series: Vec<(&str, &History)> =
                runs.iter().map(|(n, h, _)| (n.as_str(), h)).collect();
            plot::plot(path, &series)?;
            say(&format!("plot: {}", path.display()));
        }
        return Ok(());
    }

    let (history, info) = train_once(backend, a, data, &device, coll, make_feed, a.reader)?;
    if a.quiet {
        return Ok(());
    }
    if a.json {
        println!("{}", report::json_text(&report::summary(&info, &history))?);
    } else {
        println!("{}", report::summary_text(&info, &history));
    }
    if let Some(path) = &a.plot {
        plot::plot(path, &[(a.reader.to_string().as_str(), &history)])?;
        say(&format!("plot: {}", path.display()));
    }
    Ok(())
}

/// One training run with reader `mode`: builds loaders, model and optimizer from the
/// arguments, resumes when asked, trains, and returns what happened.
fn train_once<B: Backend + Clone + 'static>(
    backend: &B,
    a: &Args,
    data: &Data,
    device: &str,
    coll: Option<Rc<dyn Collective<B>>>,
    make_feed: &MakeFeed<'_, B>,
    mode: Mode,
) -> anyhow::Result<(History, RunInfo)> {
    let (rank, world) = coll.as_ref().map_or((0, 1), |c| (c.rank(), c.world()));
    let engine = coll.as_ref().map_or("local", |c| c.engine());
    let reading = Reading {
        rank,
        world_size: world,
        mode,
        batch_size: a.batch_size,
        workers: a.workers,
        cpu_budget: a
            .cpu_budget
            .unwrap_or_else(LoaderConfig::default_cpu_budget),
        prefetch: a.prefetch,
        seed: a.seed,
        epochs: a.epochs,
        read: a.read.clone(),
        mixup: match (a.mixup, a.cutmix, a.mix_prob) {
            (None, None, None) => None,
            (m, c, p) => Some(Mix::new(m, c, p).context("--mixup/--cutmix/--mix-prob")?),
        },
    };
    let (train, val) = data.loaders(&reading)?;
    let kind = a.model.kind();
    let input = train.image_shape();
    let classes = data.train.classes().len();
    let model = Model::new(
        backend,
        ModelConfig::new(kind, input, classes, a.batch_size)
            .seed(a.seed)
            .label_smoothing(a.label_smoothing)
            .target(data.target),
    )
    .context("building the model")?;
    let opt_kind = a.optimizer.kind(a.weight_decay);
    let lr = match (a.lr, data.sgd_lr, a.optimizer) {
        (Some(lr), ..) => lr,
        (None, Some(lr), Opt::Sgd) => lr,
        _ => opt_kind.default_lr(),
    };
    let opt = Optimizer::new(&model, opt_kind)?;
    let per_epoch = train.batches_per_epoch() as u64;
    let schedule = Schedule::warmup_cosine(lr, per_epoch, a.epochs);
    let warmup = schedule.warmup;
    let cfg = TrainConfig {
        epochs: a.epochs,
        schedule,
        log_every: a.log_every,
        max_steps: a.max_steps,
        checkpoint: a.checkpoint.clone(),
    };
    let say = |s: &str| a.say(s);
    say(&format!(
        "model: {kind}, {} parameters, input {}x{}x{}, {classes} classes{}, on {}",
        model.param_count(),
        input.0,
        input.1,
        input.2,
        match data.target {
            Target::Labels => " (multi-label: sigmoid + binary cross-entropy, exact-match)",
            Target::Class => "",
        },
        backend.name()
    ));
    let reader = match mode {
        Mode::Sync => "sync (read and decode on the training thread)".to_string(),
        Mode::Async => format!(
            "async ({} worker(s), {} batches prefetched)",
            match train.auto_workers() {
                Some(auto) => format!("auto: 1 to {}", auto.budget),
                None => train.config().workers.min().to_string(),
            },
            a.prefetch
        ),
    };
    say(&format!(
        "training: {} epochs x {per_epoch} steps of {} images, {} lr {lr} (warm-up {warmup} steps, cosine), reader {reader}",
        a.epochs,
        a.batch_size,
        opt_kind.name()
    ));
    let feed = make_feed(mode, input, a.batch_size).context("setting up the batch feed")?;
    let mut trainer = Trainer::new(model, opt, train, val, cfg).with_feed(feed);
    if let Some(c) = coll {
        trainer = trainer
            .with_collective(c)
            .context("joining the other ranks")?;
    }
    if device != "cpu" {
        say(&format!("data wait: {}", trainer.wait_covers()));
    }
    if let Some(path) = &a.resume {
        let changed = resume(&mut trainer, path)?;
        say(&format!(
            "resumed from {}: step {}, epoch {}, batch {}",
            path.display(),
            trainer.position.step,
            trainer.position.epoch + 1,
            trainer.position.loader.as_ref().map_or(0, |s| s.next_batch)
        ));
        if changed {
            say("note: the learning-rate schedule differs from the checkpoint's (other --epochs, --lr, --batch-size or number of ranks?): the run goes on with this one");
        }
        if trainer.position.epoch >= a.epochs {
            say(&format!(
                "the checkpoint has finished all {} epochs: nothing to train",
                a.epochs
            ));
        }
    }

    let tag = if a.compare_readers {
        format!("[{mode}] ")
    } else {
        String::new()
    };
    let metric = (data.target == Target::Labels).then(|| data.target.metric());
    let mut console = Console::new(a.epochs, a.json, &tag).metric(metric);
    let obs: &mut dyn Observer = if a.quiet { &mut () } else { &mut console };
    let t = Instant::now();
    let stop = trainer.run(obs)?;
    let wall_seconds = t.elapsed().as_secs_f64();
    if stop == Stop::MaxSteps {
        say(&format!(
            "stopped after {} steps (--max-steps)",
            trainer.position.step
        ));
    }
    if let Some(path) = &a.checkpoint {
        say(&format!("checkpoint: {}", path.display()));
    }
    let info = RunInfo {
        rank,
        world_size: world,
        collective: engine.to_string(),
        model: kind.to_string(),
        device: device.to_string(),
        precision: a.precision,
        wait_covers: trainer.wait_covers().to_string(),
        reader: mode.to_string(),
        batch_size: a.batch_size,
        workers: match trainer.train.auto_workers() {
            Some(auto) => auto.workers(),
            None => trainer.train.config().workers.min(),
        },
        auto_workers: trainer.train.auto_workers().map(|auto| AutoChoice {
            cpu_budget: auto.budget,
            workers: auto.workers(),
            io_depth: auto.io_depth(),
            changes: auto.changes(),
        }),
        train_data: data.train_path.display().to_string(),
        val_data: data.val_path.as_ref().map(|p| p.display().to_string()),
        wall_seconds,
        target: (data.target != Target::Class).then(|| data.target.as_str()),
        metric,
    };
    Ok((trainer.history, info))
}

fn resume<B: Backend + Clone + 'static>(
    trainer: &mut Trainer<B>,
    path: &Path,
) -> anyhow::Result<bool> {
    trainer
        .load(path)
        .with_context(|| format!("cannot resume from {}", path.display()))
}
