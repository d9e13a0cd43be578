//! Where a token epoch stands: the next window's first token, as a document of the
//! rank's epoch order and an index into its tokens, so a resume re-encodes only that
//! one document.

use serde::{Deserialize, Serialize};

use super::TokenError;

/// A token loader's resumable state. The epoch's document order is a function of
/// (seed, epoch, rank, world), so (epoch, doc, offset) says where the stream stands;
/// the other fields guard against resuming with a loader that would cut the stream
/// differently.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenState {
    /// The run's seed.
    pub seed: u64,
    /// The epoch the state stands in.
    pub epoch: u64,
    /// Batches delivered in this epoch.
    pub batches: u64,
    /// The document (its place in this rank's epoch order) of the next window's first
    /// token; for a `.bin` file, the next window of the rank's order.
    pub doc: usize,
    /// That token's index in its document's tokens (0 for a `.bin` file).
    pub offset: u64,
    /// Tokens a window predicts (`seq_len`).
    pub seq_len: usize,
    /// Windows per batch.
    pub batch_size: usize,
    /// Rank and world size of the run that saved it.
    pub rank: usize,
    /// Number of ranks.
    #[serde(alias = "world")]
    pub world_size: usize,
    /// Whether documents were shuffled.
    pub shuffle: bool,
    /// Documents in the data set (windows for a `.bin` file).
    pub documents: usize,
    /// Set once the epoch was taken over from another world size: where each rank of
    /// that layout stood; `doc` and `offset` then count in the rest it left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elastic: Option<TokenElastic>,
}

/// Where each rank of the layout an epoch started in stood when another world size
/// took it over.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenElastic {
    /// Ranks of that layout.
    #[serde(alias = "world")]
    pub world_size: usize,
    /// Per rank: the document (its place in that rank's order) and token where its
    /// next window started.
    pub at: Vec<(usize, u64)>,
}

impl TokenState {
    /// Checks that `self` was saved by a loader that cuts the stream as `now` would.
    pub(crate) fn check(&self, now: &TokenState) -> Result<(), TokenError> {
        let same = |what: &str, a: String, b: String| {
            if a == b {
                Ok(())
            } else {
                Err(TokenError::State(format!(
                    "it was saved with {what} {a}, this loader has {b} (to go on at \
                     another world size, load every rank's state: an elastic resume)"
                )))
            }
        };
        same("seed", self.seed.to_string(), now.seed.to_string())?;
        same("seq_len", self.seq_len.to_string(), now.seq_len.to_string())?;
        same(
            "batch_size",
            self.batch_size.to_string(),
            now.batch_size.to_string(),
        )?;
        same("rank", self.rank.to_string(), now.rank.to_string())?;
        same(
            "world size",
            self.world_size.to_string(),
            now.world_size.to_string(),
        )?;
        same("shuffle", self.shuffle.to_string(), now.shuffle.to_string())?;
        same(
            "documents",
            self.documents.to_string(),
            now.documents.to_string(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_state_saved_with_the_old_world_key_loads() {
        let old = r#"{"seed":0,"epoch":1,"batches":3,"doc":2,"offset":5,"seq_len":8,
            "batch_size":2,"rank":0,"world":2,"shuffle":true,"documents":9,
            "elastic":{"world":3,"at":[[0,0],[1,4],[2,0]]}}"#;
        let s: TokenState = serde_json::from_str(old).expect("an old state loads");
        assert_eq!(s.world_size, 2);
        assert_eq!(s.elastic.as_ref().map(|e| e.world_size), Some(3));
        let new = serde_json::to_string(&s).unwrap();
        assert!(
            new.contains(r#""world_size":2"#) && !new.contains(r#""world":"#),
            "{new}"
        );
    }
}
