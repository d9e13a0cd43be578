//! The packer: pieces of the token stream (a document's tokens, chunk by chunk, then
//! its EOS) cut into windows of `seq_len + 1` tokens with a stride of `seq_len`, each
//! token with its position in its document.

use super::TokenError;

/// One batch: `rows` windows of `cols = seq_len + 1` tokens, row-major.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenBatch {
    /// Token ids.
    pub tokens: Vec<i32>,
    /// Each token's position in its document: 0 at a document's first token.
    pub positions: Vec<i32>,
    /// Windows in the batch (the batch size).
    pub rows: usize,
    /// Tokens in a window (`seq_len + 1`).
    pub cols: usize,
}

/// A run of the stream: tokens of document `doc` (its place in the rank's epoch
/// order) from `offset` on; `what` names the document in errors.
#[derive(Debug, Default)]
pub(crate) struct Piece {
    pub doc: usize,
    pub offset: u64,
    pub tokens: Vec<u32>,
    pub what: String,
}

/// Where a window starts: the document (its place in the rank's order) and the
/// token's index in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mark {
    pub doc: usize,
    pub offset: u64,
}

/// Windows being filled.
pub(crate) struct Packer {
    window: usize,
    tokens: Vec<i32>,
    positions: Vec<i32>,
    /// Where the window being filled starts.
    pub start: Mark,
}

impl Packer {
    pub(crate) fn new(seq_len: usize, start: Mark) -> Packer {
        Packer {
            window: seq_len + 1,
            tokens: Vec::with_capacity(seq_len + 1),
            positions: Vec::with_capacity(seq_len + 1),
            start,
        }
    }

    /// Takes tokens from `piece` (from its index `*at` on) into the window; returns
    /// true once the window is full.
    pub(crate) fn fill(&mut self, piece: &Piece, at: &mut usize) -> Result<bool, TokenError> {
        if self.tokens.is_empty() && *at < piece.tokens.len() {
            self.start = Mark {
                doc: piece.doc,
                offset: piece.offset + *at as u64,
            };
        }
        let n = (self.window - self.tokens.len()).min(piece.tokens.len() - *at);
        for (k, &id) in piece.tokens.iter().enumerate().skip(*at).take(n) {
            let offset = piece.offset + k as u64;
            let token = i32::try_from(id).map_err(|_| {
                TokenError::record(
                    &piece.what,
                    format!("token id {id} does not fit the int32 batch"),
                )
            })?;
            let pos = i32::try_from(offset).map_err(|_| {
                TokenError::record(
                    &piece.what,
                    format!("token {offset} is past the int32 positions"),
                )
            })?;
            self.tokens.push(token);
            self.positions.push(pos);
        }
        *at += n;
        Ok(self.tokens.len() == self.window)
    }

    /// Moves the full window into `batch` and starts the next one with its last token
    /// (the stride is `seq_len`: the last token of a window is the first of the next).
    pub(crate) fn emit(&mut self, batch: &mut TokenBatch, last: Mark) {
        batch.tokens.extend_from_slice(&self.tokens);
        batch.positions.extend_from_slice(&self.positions);
        batch.rows += 1;
        let (t, p) = (
            self.tokens[self.window - 1],
            self.positions[self.window - 1],
        );
        self.tokens.clear();
        self.positions.clear();
        self.tokens.push(t);
        self.positions.push(p);
        self.start = last;
    }

    /// Where the window's last token came from, given the piece it was just filled
    /// from and the index after the last token taken.
    pub(crate) fn last_mark(piece: &Piece, at: usize) -> Mark {
        Mark {
            doc: piece.doc,
            offset: piece.offset + at as u64 - 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(doc: usize, offset: u64, tokens: &[u32]) -> Piece {
        Piece {
            doc,
            offset,
            tokens: tokens.to_vec(),
            what: format!("doc {doc}"),
        }
    }

    #[test]
    fn windows_overlap_by_one_token_and_carry_positions() {
        let mut p = Packer::new(3, Mark::default());
        let mut batch = TokenBatch::default();
        // Document 0: tokens 1 2 then EOS 0; document 1: 5 6 7 then EOS.
        let pieces = [piece(0, 0, &[1, 2, 0]), piece(1, 0, &[5, 6, 7, 0])];
        for pc in &pieces {
            let mut at = 0;
            while at < pc.tokens.len() {
                if p.fill(pc, &mut at).unwrap() {
                    p.emit(&mut batch, Packer::last_mark(pc, at));
                }
            }
        }
        assert_eq!(batch.tokens, vec![1, 2, 0, 5, 5, 6, 7, 0]);
        assert_eq!(batch.positions, vec![0, 1, 2, 0, 0, 1, 2, 3]);
        assert_eq!(batch.rows, 2);
        // The next window starts at document 1's EOS (its token 3).
        assert_eq!(p.start, Mark { doc: 1, offset: 3 });
    }

    #[test]
    fn an_id_past_int32_is_an_error_naming_the_document() {
        let mut p = Packer::new(4, Mark::default());
        let mut at = 0;
        let err = p
            .fill(&piece(7, 0, &[1, u32::MAX]), &mut at)
            .unwrap_err()
            .to_string();
        assert!(err.contains("doc 7") && err.contains("4294967295"), "{err}");
    }
}
