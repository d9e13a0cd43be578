//! The AFL++ driver: `stoker-fuzz-afl HARNESS`, built by `cargo afl build` with the
//! `afl` feature and started by `scripts/fuzz.sh`. It runs in AFL's persistent mode:
//! one process takes many inputs, and a panic aborts it so that AFL sees a crash.

use std::process::ExitCode;

use stoker_fuzz::alloc_cap::CappedAlloc;
use stoker_fuzz::{harness, HARNESSES};

#[global_allocator]
static ALLOC: CappedAlloc = CappedAlloc;

fn main() -> ExitCode {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(h) = harness(&name) else {
        let names: Vec<&str> = HARNESSES.iter().map(|h| h.name).collect();
        eprintln!(
            "usage: stoker-fuzz-afl HARNESS (one of: {}); got '{name}'",
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    afl::fuzz(true, |data: &[u8]| h.run(data));
    ExitCode::SUCCESS
}
