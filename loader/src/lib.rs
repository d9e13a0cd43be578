//! stoker-loader: a deterministic, bounded-memory data pipeline that keeps an
//! accelerator fed.
//!
//! Build a [`Loader`] from a [`Source`], a [`LoaderConfig`] (batch size, [`Mode`],
//! workers, transform...) and iterate an epoch:
//!
//! ```no_run
//! use stoker_loader::source::{self, Split};
//! use stoker_loader::{Loader, LoaderConfig, Mode};
//! use stoker_augment::Pipeline;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let src = source::open("data/train", Split::Train)?;
//! let config = LoaderConfig {
//!     batch_size: 64,
//!     mode: Mode::Async,
//!     transform: Pipeline::parse("rrc:224,flip")?,
//!     ..LoaderConfig::default()
//! };
//! let mut loader = Loader::new(src, config)?;
//! for epoch in 0..2 {
//!     for batch in loader.epoch(epoch) {
//!         let b = batch?;
//!         let [n, h, w, c] = b.shape();
//!         assert_eq!(b.images.len(), n * h * w * c); // u8 NHWC
//!         let _labels: &[u32] = &b.labels;
//!     }
//! }
//! # Ok(()) }
//! ```
//!
//! Batches are bit-identical in both modes and for any number of workers, because
//! every random choice is seeded by (seed, epoch, sample index).

#![warn(missing_docs)]

pub mod array;
mod batch;
#[cfg(feature = "clap")]
pub mod cli_args;
pub mod config;
pub mod digest;
pub mod durable;
pub mod elastic;
pub mod epoch_plan;
mod error;
#[cfg(any(test, feature = "test-support"))]
pub mod gpu_test;
pub mod malloc;
pub mod metrics;
pub mod mixup;
pub mod output;
/// The old name of [`mixup`] (MixUp/CutMix; data sets are mixed by a [`Mixture`]).
#[doc(hidden)]
pub use mixup as mix;
pub mod pipeline;
pub mod pool;
mod positioned;
pub mod report;
pub mod sample;
pub mod sampler;
mod setting;
pub mod slots;
pub mod source;
pub mod spec;
pub mod state;
pub mod step;
#[cfg(feature = "remote")]
pub mod storage;
pub mod synthetic;
pub mod system;
pub mod tokens;
pub mod trace;
#[cfg(feature = "cuda")]
pub mod upload;

pub use batch::{Batch, Images};
pub use config::{DecodedCacheSize, LoaderConfig, Mode, OnError, Workers};
pub use digest::Digest;
pub use error::{LoaderError, SampleError};
pub use metrics::Metrics;
pub use mixup::Mix;
pub use pipeline::{Cursor, Epoch, Loader, Next};
pub use sample::{Annotation, BatchFields, Field, Fields};
pub use sampler::{Sampler, ShardPolicy};
pub use setting::{ParseSettingError, Setting, SettingError};
pub use source::mixture;
pub use source::mixture::{Mixture, MixtureSpec, Stop};
pub use source::{RecordKind, Source, SourceError};
pub use state::LoaderState;
pub use step::{Array, ArrayData, Step, StepError, StepSample, UserStep};

// The Rust examples of the project's README and of this crate's, compiled by
// `cargo test --doc` so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ProjectReadme;
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadme;
