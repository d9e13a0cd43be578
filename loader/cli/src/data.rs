//! The flags every command that reads data shares: the split, the memory map, and the
//! cache for remote data; they become the library's [`OpenOptions`].

use std::path::PathBuf;

use stoker_loader::source::{OpenOptions, DEFAULT_CACHE_BYTES};

use crate::args;

#[derive(clap::Args, Clone, Debug)]
pub struct DataArgs {
    /// Use the test split of an MNIST/CIFAR set.
    #[arg(long)]
    pub test: bool,
    /// Read packed files through a memory map (faster per record; only for files
    /// nothing rewrites while they are read: a truncated map kills the process).
    #[arg(long)]
    pub mmap: bool,
    /// Keep remote tar shards and images in this folder for later epochs and runs.
    #[arg(long, value_name = "DIR")]
    pub cache: Option<PathBuf>,
    /// The cache's size bound (K, M, G, T suffixes); least recently used objects go first.
    #[arg(long, default_value_t = DEFAULT_CACHE_BYTES, value_parser = args::cache_size)]
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
    #[arg(long, default_value = "xyxy", value_parser = ["xyxy", "xywh"])]
    pub box_format: String,
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
    /// `{config}/{split}/*.parquet`): the split to read [default: train, or with
    /// --test validation, else test].
    #[arg(long, value_name = "NAME")]
    pub split: Option<String>,
}

impl DataArgs {
    pub fn options(&self) -> OpenOptions {
        OpenOptions {
            train: !self.test,
            mmap: self.mmap,
            cache: self.cache.clone(),
            cache_bytes: self.cache_size,
            images: self.images.clone(),
            masks: self.masks.clone(),
            parquet: stoker_loader::source::ParquetColumns {
                image: self.image_column.clone(),
                label: Some(self.label_column.clone()),
                text: self.text_column.clone(),
                boxes: self.boxes_column.clone(),
                // Checked by clap's value_parser.
                box_format: self.box_format.parse().unwrap_or_default(),
                box_classes: self.box_classes_column.clone(),
                labels: self.labels_column.clone(),
                mask: self.mask_column.clone(),
            },
            split: self.split.clone(),
            ..OpenOptions::default()
        }
    }
}
