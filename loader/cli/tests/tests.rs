//! stoker-load's tests, one binary running the built program: its command forms and
//! digests (`cli`), every flag given an absurd value (`flags`), decompression bombs, memory
//! limits, packs that never harm their output path or survive SIGKILL, packs of resized
//! or raw pixels (`pack_encodings`), and S3 against moto.

#[path = "../../tests/s3_support/mod.rs"]
mod s3_support;
mod util;

mod bombs;
mod cli;
mod flags;
mod kill;
mod memory_limits;
mod pack_encodings;
mod pack_outputs;
mod s3;
