//! LoaderState JSON: the input is the text (invalid UTF-8 replaced), parsed with
//! `LoaderState::from_json`; a state that parses is resumed on a synchronous loader
//! built for it (its seed, batch size, rank and world) over an in-memory source of
//! `samples` tiny raw images, when those numbers are small enough to run.
//!
//! Checked for every state that parses: it survives `to_json` / `from_json`; when the
//! loader accepts the configuration, resuming gives exactly the batches of the whole
//! epoch from `next_batch` on, or refuses only a `next_batch` past the end; the same
//! state with another seed is refused.

use std::sync::Arc;

use stoker_loader::{
    Loader, LoaderConfig, LoaderState, Mode, RecordKind, ShardPolicy, Source, SourceError,
};

use crate::Outcome;

/// States with more samples, larger batches or more ranks than these are parsed and
/// round-tripped but not resumed (the epoch is computed in full).
pub const MAX_SAMPLES: usize = 512;
pub const MAX_BATCH: usize = 64;
pub const MAX_WORLD: usize = 16;

/// `len` samples of 2x2x1 raw pixels that spell their own index, three classes.
struct Tiny {
    len: usize,
    classes: Vec<String>,
}

impl Source for Tiny {
    fn len(&self) -> usize {
        self.len
    }

    fn classes(&self) -> &[String] {
        &self.classes
    }

    fn label(&self, index: usize) -> u32 {
        (index % self.classes.len()) as u32
    }

    fn describe(&self, index: usize) -> String {
        format!("tiny record {index}")
    }

    fn read(&self, index: usize, buf: &mut Vec<u8>) -> Result<RecordKind, SourceError> {
        buf.clear();
        if index >= self.len {
            return Err(SourceError::record(self.describe(index), "out of range"));
        }
        buf.extend_from_slice(&(index as u32).to_le_bytes());
        Ok(RecordKind::Raw {
            width: 2,
            height: 2,
            channels: 1,
        })
    }

    fn format(&self) -> &'static str {
        "tiny"
    }
}

/// What a batch holds, owned (so the loader's buffers go back to its pool).
type Owned = (Vec<usize>, Vec<u32>, Vec<u8>);

pub fn run(data: &[u8]) {
    let _ = exercise(data);
}

pub fn exercise(data: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(data);
    let state = match LoaderState::from_json(&text) {
        Ok(s) => s,
        Err(e) => return Outcome::rejected(e),
    };
    let json = state.to_json();
    match LoaderState::from_json(&json) {
        Ok(back) => assert_eq!(back, state, "{json} reads back differently"),
        Err(e) => panic!("{state:?} writes {json:?}, which does not parse: {e}"),
    }
    if state.samples > MAX_SAMPLES || state.batch_size > MAX_BATCH || state.world_size > MAX_WORLD {
        return Outcome::Skipped(format!("too large to resume here: {json}"));
    }
    let config = LoaderConfig {
        batch_size: state.batch_size,
        mode: Mode::Sync,
        seed: state.seed,
        shuffle: true,
        rank: state.rank,
        world_size: state.world_size,
        shard_policy: ShardPolicy::Pad,
        ..LoaderConfig::default()
    };
    let source = Arc::new(Tiny {
        len: state.samples,
        classes: ["a", "b", "c"].map(String::from).to_vec(),
    });
    let mut loader = match Loader::new(source, config) {
        Ok(l) => l,
        Err(e) => return Outcome::rejected(e),
    };
    if state.elastic.is_some() || state.mixture.is_some() {
        // A taken-over epoch's rest or another kind of loader's state: resumed or
        // refused, never a panic; its batches are not this harness's straight run.
        if let Ok(epoch) = loader.resume(&state) {
            let _ = batches(epoch, &json);
        }
        return Outcome::Skipped(format!("an elastic or mixture state: {json}"));
    }
    let full = batches(loader.epoch(state.epoch), &json);
    let len = full.len();
    let other = LoaderState {
        seed: state.seed ^ 1,
        ..state.clone()
    };
    assert!(
        loader.resume(&other).is_err(),
        "{json}: resumed with another seed"
    );
    let rest = match loader.resume(&state) {
        Ok(epoch) => batches(epoch, &json),
        Err(e) => {
            assert!(
                state.next_batch > len,
                "{json}: refused although the epoch has {len} batches: {e}"
            );
            return Outcome::rejected(e);
        }
    };
    assert!(
        rest[..] == full[state.next_batch.min(len)..],
        "{json}: resuming differs from the epoch's batches {}..",
        state.next_batch
    );
    Outcome::Accepted
}

fn batches(epoch: stoker_loader::Epoch<'_>, json: &str) -> Vec<Owned> {
    epoch
        .map(|b| match b {
            Ok(b) => (b.indices.clone(), b.labels.clone(), b.images.to_vec()),
            Err(e) => panic!("{json}: a batch of the in-memory source failed: {e}"),
        })
        .collect()
}
