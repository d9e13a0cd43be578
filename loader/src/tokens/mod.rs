//! Token streams for language models: documents read from Parquet text columns,
//! JSON-lines, plain text files or pre-tokenized `.bin` files, tokenized on worker
//! threads, packed into windows of `seq_len + 1` tokens and batched, deterministically
//! and resumably (docs/tokens.md).
//!
//! The packing rule: each rank takes its documents in the epoch's order (the
//! sampler's, by seed and epoch), encodes each, appends EOS and concatenates them into
//! one stream; the stream is cut into windows of `seq_len + 1` tokens with a stride of
//! `seq_len`; a batch is `batch_size` consecutive windows, and what does not fill a
//! batch ends the epoch.

mod bin;
mod docs;
mod error;
mod feed;
mod pack;
mod state;
mod stream;
mod tokenize;

pub use bin::TokenDtype;
pub use docs::{DocFormat, DEFAULT_CHUNK_BYTES};
pub use error::{TokenError, TokenSetting};
pub use pack::TokenBatch;
pub use state::{TokenElastic, TokenState};
pub use stream::{TokenConfig, TokenEpoch, TokenLoader, TokenMode};
pub use tokenize::{Eos, TextTokenizer};
