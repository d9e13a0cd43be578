//! stoker-loader's tests, one binary, a module per concern: each source format end to end
//! (folders and packed files in `sources`, `tar`, `parquet`, `coco`, S3 against moto in
//! `s3`), the engine, mixtures, elastic resume, fields, packs of resized or raw pixels
//! (`pack_resize`), steps, MixUp and CutMix, errors and durable writes, and the decoded
//! cache. `engine_support` holds the in-memory sources, `s3_support` moto's
//! server.

mod engine_support;
#[cfg(feature = "remote")]
mod s3_support;

mod coco;
mod decoded_cache;
mod durable;
mod elastic;
mod engine;
mod errors;
mod fields;
mod mixture;
mod mixup;
mod pack_fields;
mod pack_resize;
mod parquet;
#[cfg(feature = "remote")]
mod s3;
mod sources;
mod steps;
mod tar;
mod tokens;
