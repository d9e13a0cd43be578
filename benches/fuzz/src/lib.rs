//! Fuzz harnesses: each feeds arbitrary bytes through one of stoker's public entry
//! points for untrusted data and checks what must hold for any input.
//!
//! A harness answers every input with an [`Outcome`]; bad data must come back as
//! [`Outcome::Rejected`] (a typed error), never as a panic, an abort, a hang or an
//! absurd allocation (the binaries that run harnesses install
//! [`alloc_cap::CappedAlloc`], which makes one fail loudly). A harness panics only when a property it checks is broken (a
//! round trip that does not round-trip, a resume that differs from the full epoch,
//! a failed load that changed the model): under AFL++ that panic is a crash.
//!
//! The same harnesses serve the AFL++ driver (`src/bin/afl.rs`, built by
//! `scripts/fuzz.sh` with `cargo afl`) and the replay test (`tests/replay.rs`), which
//! runs every saved corpus and regression file through them in `cargo test`.

pub mod alloc_cap;
pub mod checkpoint;
pub mod cifar;
pub mod decode;
pub mod mnist;
pub mod packed;
mod scratch;
pub mod seeds;
pub mod spec;
pub mod state;

use std::fmt;

/// How far one input got.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted all the way through the entry point (and its checks held).
    Accepted,
    /// Refused with this error: the expected answer to bad data.
    Rejected(String),
    /// Not run, for this reason: an input the harness leaves out on purpose (an image
    /// header claiming more pixels than fuzzing should allocate), or a scratch file
    /// that could not be written.
    Skipped(String),
}

impl Outcome {
    pub fn rejected(e: impl fmt::Display) -> Self {
        Outcome::Rejected(e.to_string())
    }

    pub fn is_accepted(&self) -> bool {
        matches!(self, Outcome::Accepted)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Accepted => f.write_str("accepted"),
            Outcome::Rejected(e) => write!(f, "rejected: {e}"),
            Outcome::Skipped(why) => write!(f, "skipped: {why}"),
        }
    }
}

/// One harness: its name (also its corpus folder's) and its entry point.
#[derive(Clone, Copy)]
pub struct Harness {
    pub name: &'static str,
    /// What the harness feeds the bytes through, in a few words.
    pub about: &'static str,
    pub exercise: fn(&[u8]) -> Outcome,
}

impl Harness {
    /// Run one input, discarding the outcome (what the fuzzer calls).
    pub fn run(&self, data: &[u8]) {
        let _ = (self.exercise)(data);
    }
}

/// Every harness, in the order the campaign runs them.
pub const HARNESSES: [Harness; 7] = [
    Harness {
        name: "decode",
        about: "JPEG/PNG probe and decode, then a transform pipeline",
        exercise: decode::exercise,
    },
    Harness {
        name: "packed",
        about: "packed file: header, index, class table, records",
        exercise: packed::exercise,
    },
    Harness {
        name: "mnist",
        about: "MNIST IDX images + labels files, plain or gzipped",
        exercise: mnist::exercise,
    },
    Harness {
        name: "cifar",
        about: "CIFAR-10 binary batch and batches.meta.txt",
        exercise: cifar::exercise,
    },
    Harness {
        name: "checkpoint",
        about: "trainer checkpoint (safetensors): metadata and load",
        exercise: checkpoint::exercise,
    },
    Harness {
        name: "spec",
        about: "transform spec string: parse, canonical round trip, run",
        exercise: spec::exercise,
    },
    Harness {
        name: "state",
        about: "LoaderState JSON: parse, round trip, resume a loader",
        exercise: state::exercise,
    },
];

/// The harness called `name`.
pub fn harness(name: &str) -> Option<&'static Harness> {
    HARNESSES.iter().find(|h| h.name == name)
}

/// `data` split after a little-endian u32 length prefix: (the prefixed part, the
/// rest). Inputs of two files use this framing; a length past the end takes all.
pub(crate) fn split_prefixed(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(data.get(..4)?.try_into().ok()?) as usize;
    let body = &data[4..];
    Some(body.split_at(len.min(body.len())))
}

/// `first` and `second` in the framing [`split_prefixed`] reads.
pub fn join_prefixed(first: &[u8], second: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + first.len() + second.len());
    out.extend_from_slice(&(first.len() as u32).to_le_bytes());
    out.extend_from_slice(first);
    out.extend_from_slice(second);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixed_framing_round_trips_and_tolerates_any_length() {
        let joined = join_prefixed(b"abc", b"defg");
        assert_eq!(split_prefixed(&joined), Some((&b"abc"[..], &b"defg"[..])));
        // A length past the end takes what there is; too short for a prefix: none.
        assert_eq!(
            split_prefixed(&[255, 255, 255, 255, 1, 2]),
            Some((&[1u8, 2][..], &[][..]))
        );
        assert_eq!(split_prefixed(&[1, 0]), None);
    }

    #[test]
    fn harness_names_are_unique_and_found() {
        for h in &HARNESSES {
            assert_eq!(harness(h.name).map(|f| f.name), Some(h.name));
        }
        assert!(harness("nope").is_none());
    }
}
