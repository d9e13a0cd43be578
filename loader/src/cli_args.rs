//! The data-reading flags of both command lines (`stoker-load bench`, `stoker-train`),
//! defined once as clap argument groups that each binary flattens, and the spelling of
//! a [`Setting`] as the flag that sets it.
//!
//! Behind the `clap` feature, so that the library keeps no command-line weight for
//! other users. The values are only parsed here (a number is a number); whether they
//! can work is the library's check ([`LoaderConfig::validate`](crate::LoaderConfig),
//! [`MixtureSpec::validate`](crate::MixtureSpec), [`Loader::new`](crate::Loader)), and
//! its [`SettingError`] is reworded with the flag by [`spell_settings`].

use std::error::Error;
use std::path::PathBuf;

use crate::config::{parse_size, MAX_IO_DEPTH, MAX_SHUFFLE_BUFFER};
use crate::source::{
    BoxFormat, OpenOptions, ParquetColumns, SourceError, Split, DEFAULT_CACHE_BYTES,
};
use crate::{DecodedCacheSize, LoaderError, OnError, Setting, SettingError, Stop};

/// How a data set is opened: the memory map, the cache of remote data, the files
/// beside an annotation file, Parquet's columns and the Hub split. They become the
/// library's [`OpenOptions`].
#[derive(clap::Args, Clone, Debug)]
pub struct OpenArgs {
    /// Read packed files through a memory map (faster per record; only for files
    /// nothing rewrites while they are read: a truncated map kills the process).
    #[arg(long)]
    pub mmap: bool,
    /// Keep remote tar shards and images in this folder for later epochs and runs.
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// The cache's size bound (K, M, G, T suffixes); least recently used objects go first.
    #[arg(long, default_value_t = DEFAULT_CACHE_BYTES, value_parser = cache_size)]
    pub cache_size: u64,
    /// For a COCO annotation file (DATA ends in .json): the folder (or URL prefix) its
    /// images' file_names are relative to.
    #[arg(long, value_name = "DIR")]
    pub images: Option<String>,
    /// Segmentation pairs: the folder (or URL prefix) of mask PNGs whose stems match
    /// the images of DATA.
    #[arg(long, value_name = "DIR")]
    pub masks: Option<String>,
    /// Parquet: the column of images (the datasets Image struct, or binary).
    #[arg(long, default_value = "image", value_name = "NAME")]
    pub image_column: String,
    /// Parquet: the integer column of labels (used when present).
    #[arg(long, default_value = "label", value_name = "NAME")]
    pub label_column: String,
    /// Parquet: a string column of captions (the `text` field).
    #[arg(long, value_name = "NAME")]
    pub text_column: Option<String>,
    /// Parquet: a column of boxes, list<list<number>> (a dotted path into a struct
    /// column, e.g. objects.bbox).
    #[arg(long, value_name = "PATH")]
    pub boxes_column: Option<String>,
    /// Parquet: the order of each box's four numbers.
    #[arg(long, default_value = "xyxy", value_parser = box_format)]
    pub box_format: BoxFormat,
    /// Parquet: one class number per box, list<integer> (e.g. objects.category).
    #[arg(long, value_name = "PATH")]
    pub box_classes_column: Option<String>,
    /// Parquet: multi-label tags, list<integer>.
    #[arg(long, value_name = "PATH")]
    pub labels_column: Option<String>,
    /// Parquet: segmentation masks, PNG images stored as the images are.
    #[arg(long, value_name = "PATH")]
    pub mask_column: Option<String>,
    /// Parquet in the Hugging Face Hub's layout (`data/{split}-*.parquet`,
    /// `{config}/{split}/*.parquet`): the split to read [default: train, or for
    /// held-out data validation, else test].
    #[arg(long, value_name = "NAME")]
    pub split: Option<String>,
}

impl OpenArgs {
    /// The library's options for these flags, for the training part of a data set
    /// (`train`) or its held-out part; `--split` picks a part by name instead.
    pub fn options(&self, train: bool) -> OpenOptions {
        OpenOptions {
            split: match &self.split {
                Some(name) => Split::named(name.as_str()),
                None if train => Split::Train,
                None => Split::Test,
            },
            mmap: self.mmap,
            cache: self.cache.clone(),
            cache_bytes: self.cache_size,
            images: self.images.clone(),
            masks: self.masks.clone(),
            parquet: ParquetColumns {
                image: self.image_column.clone(),
                label: Some(self.label_column.clone()),
                text: self.text_column.clone(),
                boxes: self.boxes_column.clone(),
                box_format: self.box_format,
                box_classes: self.box_classes_column.clone(),
                labels: self.labels_column.clone(),
                mask: self.mask_column.clone(),
            },
            ..OpenOptions::default()
        }
    }
}

/// Several data sets mixed by weight: the weights, the stop rule and a never-ending
/// mixture's batches per epoch (the data sets themselves are each binary's own
/// arguments).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MixtureArgs {
    /// One weight per data set, e.g. `7,3` (default: equal).
    #[arg(long, value_parser = weights)]
    pub weights: Option<Weights>,
    /// When a mixed epoch ends: first_exhausted, all_exhausted (default) or never.
    #[arg(long)]
    pub stop: Option<Stop>,
    /// Batches per epoch on each rank with `--stop never`.
    #[arg(long, value_name = "N", value_parser = count::<1, { 1 << 40 }, usize>)]
    pub epoch_batches: Option<usize>,
    /// The old spelling of --epoch-batches (deprecated: `steps` are the per-sample
    /// steps).
    #[arg(long = "steps", hide = true, value_name = "N", conflicts_with = "epoch_batches",
          value_parser = count::<1, { 1 << 40 }, usize>)]
    pub old_steps: Option<usize>,
}

impl MixtureArgs {
    /// `--epoch-batches`, or its old spelling `--steps` with a note on stderr.
    pub fn epoch_batches(&self) -> Option<usize> {
        if self.old_steps.is_some() {
            eprintln!(
                "note: --steps is deprecated and will be removed: the batches per epoch of a \
                 never-ending mixture are --epoch-batches"
            );
        }
        self.epoch_batches.or(self.old_steps)
    }

    /// Whether any mixing flag was given.
    pub fn any(&self) -> bool {
        self.weights.is_some()
            || self.stop.is_some()
            || self.epoch_batches.is_some()
            || self.old_steps.is_some()
    }
}

/// Mixture weights, one per data set (a type of its own: clap reads a bare `Vec` as a
/// flag given several times).
#[derive(Clone, Debug, PartialEq)]
pub struct Weights(pub Vec<f64>);

/// Numbers separated by commas; whether they can weigh a mixture is
/// [`MixtureSpec::validate`](crate::MixtureSpec::validate)'s check.
fn weights(s: &str) -> Result<Weights, String> {
    crate::mixture::parse_weights(s).map(Weights)
}

/// How samples are read: what a bad one does, reads in flight, the decode limit, the
/// decoded cache and the shuffle buffer of tar shards.
#[derive(clap::Args, Clone, Debug)]
pub struct ReadArgs {
    /// What a sample that cannot be read or decoded does: `fail` (end with an error
    /// naming it) or `skip` (leave it out of its batch and count it).
    #[arg(long, default_value = "fail")]
    pub on_error: OnError,
    /// Reads in flight (async mode; `--workers auto` may raise it).
    #[arg(long, default_value_t = 8, value_parser = count::<1, { MAX_IO_DEPTH as u64 }, usize>)]
    pub io_depth: usize,
    /// Refuse images of more pixels than this, from their header.
    #[arg(long, default_value_t = stoker_augment::DEFAULT_MAX_PIXELS, value_parser = count::<1, { 1 << 40 }, usize>)]
    pub max_pixels: usize,
    /// Keep decoded images (and their fields) for later epochs, up to SIZE bytes (K, M,
    /// G, T suffixes), or `auto`: what the memory bound leaves beside the batch buffers.
    /// Batches are the same bytes with or without it.
    #[arg(long, value_name = "SIZE", value_parser = decoded_cache)]
    pub decoded_cache: Option<DecodedCacheSize>,
    /// Samples in the shuffle buffer of tar shards (1: each shard in order).
    #[arg(long, default_value_t = crate::sampler::DEFAULT_SHUFFLE_BUFFER, value_parser = count::<1, { MAX_SHUFFLE_BUFFER as u64 }, usize>)]
    pub shuffle_buffer: usize,
}

/// A whole number from LO to HI, as the integer type a flag holds (a clap value
/// parser for counts; the binaries' own count flags use it too).
pub fn count<const LO: u64, const HI: u64, T: TryFrom<u64>>(s: &str) -> Result<T, String> {
    let v: u64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number from {LO} to {HI}"))?;
    if !(LO..=HI).contains(&v) {
        return Err(format!("{v} is out of range (expected {LO} to {HI})"));
    }
    T::try_from(v).map_err(|_| format!("{v} does not fit this machine"))
}

/// The bound of `--cache`: 1M to 1P.
fn cache_size(s: &str) -> Result<u64, String> {
    let v = parse_size(s).map_err(|e| e.to_string())?;
    let (lo, hi) = (1u64 << 20, 1u64 << 50);
    if v < lo || v > hi {
        return Err(format!("{s} is out of range (expected {lo} to {hi} bytes)"));
    }
    Ok(v)
}

fn box_format(s: &str) -> Result<BoxFormat, String> {
    s.parse()
        .map_err(|e: crate::ParseSettingError| e.to_string())
}

/// `auto`, or a size of at least one byte (whether it fits in the memory bound is the
/// loader's check, which knows the batch buffers).
fn decoded_cache(s: &str) -> Result<DecodedCacheSize, String> {
    s.parse()
        .map_err(|e: crate::ParseSettingError| e.to_string())
}

/// The flag of `cmd` (or of one of its subcommands) that sets `setting`: the one whose
/// long name, or one of whose aliases, is the setting's name with `-` for `_`
/// (`batch_size` is `--batch-size`), spelled as the command's help shows it. `None`
/// where the command has no such flag.
pub fn flag(cmd: &clap::Command, setting: Setting) -> Option<String> {
    let want = setting.name().replace('_', "-");
    // A hidden flag is an old spelling of another setting (`--steps`).
    let mine = cmd.get_arguments().filter(|a| !a.is_hide_set()).find(|a| {
        a.get_long() == Some(want.as_str())
            || a.get_all_aliases()
                .is_some_and(|al| al.iter().any(|x| *x == want))
    });
    match mine {
        Some(a) => a.get_long().map(|l| format!("--{l}")),
        None => cmd.get_subcommands().find_map(|c| flag(c, setting)),
    }
}

/// The [`SettingError`] in `e`'s chain of causes, if any.
pub fn setting_error<'a>(e: &'a (dyn Error + 'static)) -> Option<&'a SettingError> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(s) = c.downcast_ref::<SettingError>() {
            return Some(s);
        }
        if let Some(LoaderError::Setting(s) | LoaderError::Source(SourceError::Setting(s))) =
            c.downcast_ref::<LoaderError>()
        {
            return Some(s);
        }
        // Transparent: its cause is the setting error's own, so it is looked in here.
        if let Some(SourceError::Setting(s)) = c.downcast_ref::<SourceError>() {
            return Some(s);
        }
        cause = c.source();
    }
    None
}

/// `line` (an error said on one line, [`report::one_line`](crate::report::one_line))
/// with the setting `e` names spelled as `cmd`'s flag: `batch_size: ...` becomes
/// `--batch-size: ...`. As it is when no setting is at fault or no flag sets it.
pub fn spell_settings(line: &str, cmd: &clap::Command, e: &(dyn Error + 'static)) -> String {
    let Some(se) = setting_error(e) else {
        return line.to_string();
    };
    let Some(flag) = flag(cmd, se.setting) else {
        return line.to_string();
    };
    let said = se.to_string();
    let line = line.replacen("invalid loader configuration: ", "", 1);
    if line.contains(&said) {
        line.replacen(&said, &format!("{flag}: {}", se.problem), 1)
    } else {
        format!("{flag}: {line}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        open: OpenArgs,
        #[command(flatten)]
        mixture: MixtureArgs,
        #[command(flatten)]
        read: ReadArgs,
        #[arg(long, alias = "batch-size")]
        batch: Option<usize>,
    }

    #[test]
    fn a_setting_is_spelled_as_the_flag_that_sets_it() {
        let cmd = Cli::command();
        assert_eq!(flag(&cmd, Setting::IoDepth).as_deref(), Some("--io-depth"));
        assert_eq!(
            flag(&cmd, Setting::EpochBatches).as_deref(),
            Some("--epoch-batches")
        );
        // Found through an alias, spelled as the help shows it.
        assert_eq!(flag(&cmd, Setting::BatchSize).as_deref(), Some("--batch"));
        assert_eq!(flag(&cmd, Setting::Channels), None);
        // `--steps`, the old spelling of --epoch-batches, is not the per-sample steps.
        assert_eq!(flag(&cmd, Setting::Steps), None);
        let e = LoaderError::from(SettingError::new(Setting::IoDepth, "0 is out of range"));
        let line = format!("reading x: {e}");
        assert_eq!(
            spell_settings(&line, &cmd, &e),
            "reading x: --io-depth: 0 is out of range"
        );
        let plain = LoaderError::NoSamples;
        assert_eq!(spell_settings("no", &cmd, &plain), "no");
    }

    #[test]
    fn the_old_spelling_of_epoch_batches_still_works() {
        let old = Cli::try_parse_from(["x", "--stop", "never", "--steps", "5"]).unwrap();
        assert_eq!(old.mixture.epoch_batches(), Some(5));
        let new = Cli::try_parse_from(["x", "--epoch-batches", "7"]).unwrap();
        assert_eq!(new.mixture.epoch_batches(), Some(7));
        assert!(Cli::try_parse_from(["x", "--epoch-batches", "7", "--steps", "5"]).is_err());
        // Weights are parsed, not judged: the library's check does that once.
        let w = Cli::try_parse_from(["x", "--weights=-1,2"]).unwrap();
        assert_eq!(w.mixture.weights, Some(Weights(vec![-1.0, 2.0])));
    }

    #[test]
    fn the_flags_become_the_libraries_options() {
        let a = Cli::try_parse_from([
            "x",
            "--image-column",
            "img",
            "--label-column",
            "y",
            "--box-format",
            "xywh",
            "--split",
            "dev",
            "--mmap",
        ])
        .unwrap();
        let o = a.open.options(false);
        assert_eq!(o.parquet.image, "img");
        assert_eq!(o.parquet.label.as_deref(), Some("y"));
        assert_eq!(o.parquet.box_format, BoxFormat::Xywh);
        assert_eq!(o.split, Split::named("dev"));
        assert!(o.mmap);
        let plain = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(plain.open.options(false).split, Split::Test);
        assert_eq!(plain.open.options(true).split, Split::Train);
        assert!(Cli::try_parse_from(["x", "--box-format", "cxcy"]).is_err());
        assert!(Cli::try_parse_from(["x", "--io-depth", "0"]).is_err());
    }
}
