//! A Hugging Face `tokenizer.json`, loaded once and shared by the worker threads, and
//! the end-of-text token the packer appends to every document.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokenizers::Tokenizer;

use super::TokenError;

/// End-of-text tokens looked for, in this order, when no `eos` is given: GPT-2's, then
/// the SentencePiece families' (Llama, T5), then Gemma's.
pub const EOS_CANDIDATES: [&str; 3] = ["<|endoftext|>", "</s>", "<eos>"];

/// The end-of-text token, as a token string or an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Eos {
    /// A token of the tokenizer's vocabulary or added tokens (`"<|endoftext|>"`).
    Token(String),
    /// A token id.
    Id(u32),
}

/// A tokenizer read from a `tokenizer.json` file.
#[derive(Clone)]
pub struct TextTokenizer {
    inner: Arc<Tokenizer>,
    path: PathBuf,
}

impl std::fmt::Debug for TextTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextTokenizer")
            .field("path", &self.path)
            .finish()
    }
}

impl TextTokenizer {
    /// Reads `path`, a tokenizer in the Hub's `tokenizer.json` format.
    pub fn from_file(path: impl AsRef<Path>) -> Result<TextTokenizer, TokenError> {
        let path = path.as_ref().to_path_buf();
        let bytes = std::fs::read(&path).map_err(|e| TokenError::io(&path, e))?;
        let inner = Tokenizer::from_bytes(&bytes).map_err(|e| TokenError::Tokenizer {
            path: path.clone(),
            reason: format!("not a tokenizer.json this library reads: {e}"),
        })?;
        Ok(TextTokenizer {
            inner: Arc::new(inner),
            path,
        })
    }

    /// The file it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of `eos`, or of the first of [`EOS_CANDIDATES`] the tokenizer knows when
    /// `eos` is `None`; an error when it knows none, or not the one given.
    pub fn eos_id(&self, eos: Option<&Eos>) -> Result<u32, TokenError> {
        let bad = |reason: String| TokenError::Tokenizer {
            path: self.path.clone(),
            reason,
        };
        match eos {
            None => EOS_CANDIDATES
                .iter()
                .find_map(|t| self.inner.token_to_id(t))
                .ok_or_else(|| {
                    bad(format!(
                        "it has no end-of-text token ({}): give eos= as a token or an id",
                        EOS_CANDIDATES.join(", ")
                    ))
                }),
            Some(Eos::Token(t)) => self
                .inner
                .token_to_id(t)
                .ok_or_else(|| bad(format!("eos '{t}' is not a token of its vocabulary"))),
            Some(Eos::Id(id)) => {
                if (*id as usize) < self.vocab_size() {
                    Ok(*id)
                } else {
                    Err(bad(format!(
                        "eos id {id} is past its vocabulary ({} ids)",
                        self.vocab_size()
                    )))
                }
            }
        }
    }

    /// The ids of `text`, without the tokenizer's own special tokens (the packer adds
    /// EOS itself).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        self.inner
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| e.to_string())
    }
}
