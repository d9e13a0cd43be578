//! stoker-load: generate, pack, inspect and benchmark data sets through the loader.

mod args;
mod bench;
mod data;
mod demo;
mod generate;
mod inspect;
mod pack;
mod show;
mod tokens;
mod upload;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "stoker-load",
    version,
    about = "Measure and prepare data for the stoker loader"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a synthetic data set.
    Gen(generate::Args),
    /// Pack a data set into one packed file, or into WebDataset tar shards.
    Pack(pack::Args),
    /// Copy a local file or folder to a URL (s3://, gs://, az://, file://).
    Upload(upload::Args),
    /// Describe a data set: count, classes, image sizes; decodes every record.
    Inspect(inspect::Args),
    /// Measure loader throughput and where the time goes (boxed: its many flags would
    /// make every command as large).
    Bench(Box<bench::Args>),
    /// Draw a grid of augmented samples with their boxes, masks, keypoints and captions.
    Show(show::Args),
    /// Make a demo set if needed and compare sync and async reading side by side.
    Demo(demo::Args),
}

fn main() {
    stoker_loader::malloc::release_large_blocks();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Gen(a) => generate::run(a),
        Command::Pack(a) => pack::run(a),
        Command::Upload(a) => upload::run(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Bench(a) => bench::run(*a),
        Command::Show(a) => show::run(a),
        Command::Demo(a) => demo::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {}", flagged(&e));
        std::process::exit(1);
    }
}

/// `e` and its causes on one line (`stoker_loader::report::one_line`).
fn one_line(e: &anyhow::Error) -> String {
    stoker_loader::report::one_line(e.as_ref())
}

/// `e` on one line, a setting at fault spelled as its flag (`--batch-size`).
fn flagged(e: &anyhow::Error) -> String {
    use clap::CommandFactory;
    stoker_loader::cli_args::spell_settings(&one_line(e), &Cli::command(), e.as_ref())
}

/// A progress bar that draws only on a terminal (so logs and tests stay clean).
pub(crate) fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    let style = indicatif::ProgressStyle::with_template(
        "{msg:>8} [{bar:40}] {pos}/{len} ({per_sec}, {eta} left)",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::one_line;
    use anyhow::Context;
    use stoker_loader::{LoaderError, SampleError, SourceError};

    #[test]
    fn every_setting_bench_has_a_flag_for_is_spelled_as_it() {
        use clap::CommandFactory;
        use stoker_loader::Setting;
        // Settings bench leaves at the library's defaults (or sets from other flags:
        // --epochs sets the last epoch, never the per-sample steps).
        let none = [
            Setting::DropLast,
            Setting::Rank,
            Setting::WorldSize,
            Setting::ShardPolicy,
            Setting::Channels,
            Setting::MaxBufferBytes,
            Setting::Mixup,
            Setting::MinBoxVisibility,
            Setting::MaxInstances,
            Setting::Steps,
        ];
        let cmd = super::Cli::command();
        // clap's own checks of the definition (unique names and groups), which a
        // flattened group of the same name as another fails.
        cmd.clone().debug_assert();
        for s in Setting::ALL {
            let flag = stoker_loader::cli_args::flag(&cmd, s);
            if none.contains(&s) {
                assert_eq!(flag, None, "{s}");
            } else {
                assert_eq!(
                    flag,
                    Some(format!("--{}", s.name().replace('_', "-"))),
                    "{s}"
                );
            }
        }
    }

    #[test]
    fn an_error_line_says_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let sample = LoaderError::Sample {
            index: 3,
            what: "/d/a.jpg".into(),
            source: SampleError::Read(SourceError::io("/d/a.jpg", io)),
        };
        let e = Err::<(), _>(sample).context("epoch 0").unwrap_err();
        // The chain goes on to the source error ("/d/a.jpg: gone") and the I/O error;
        // both were said.
        assert_eq!(one_line(&e), "epoch 0: sample 3 (/d/a.jpg): gone");
        let plain = anyhow::anyhow!("no data").context("opening");
        assert_eq!(one_line(&plain), "opening: no data");
    }
}
