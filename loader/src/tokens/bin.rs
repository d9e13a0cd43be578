//! Pre-tokenized flat files (nanoGPT's `train.bin`: little-endian uint16 or uint32
//! ids, no header): one stream, cut into windows as a text stream is; a token's
//! position counts from the file's start, or from the last EOS before it.

use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::pack::TokenBatch;
use super::{TokenError, TokenSetting};

/// The width of the ids in a `.bin` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TokenDtype {
    /// Two bytes an id (nanoGPT's GPT-2 files).
    #[default]
    U16,
    /// Four bytes an id.
    U32,
}

impl std::str::FromStr for TokenDtype {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uint16" | "u16" => Ok(TokenDtype::U16),
            "uint32" | "u32" => Ok(TokenDtype::U32),
            _ => Err(format!("token_dtype '{s}': expected uint16 or uint32")),
        }
    }
}

/// A token file, mapped.
pub(crate) struct BinTokens {
    path: PathBuf,
    map: Mmap,
    dtype: TokenDtype,
    /// Where the EOS tokens are, in order (empty without an EOS).
    eos_at: Vec<u64>,
}

impl BinTokens {
    pub(crate) fn open(
        path: &Path,
        dtype: TokenDtype,
        eos: Option<u32>,
    ) -> Result<BinTokens, TokenError> {
        let file = File::open(path).map_err(|e| TokenError::io(path, e))?;
        // SAFETY: the file is only read; one changed under the map changes the tokens
        // read, as a read() would.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| TokenError::io(path, e))?;
        let width = match dtype {
            TokenDtype::U16 => 2,
            TokenDtype::U32 => 4,
        };
        if map.len() % width != 0 {
            return Err(TokenError::record(
                path.display().to_string(),
                format!(
                    "{} bytes is not a whole number of {}-byte ids (is token_dtype right?)",
                    map.len(),
                    width
                ),
            ));
        }
        let mut out = BinTokens {
            path: path.to_path_buf(),
            map,
            dtype,
            eos_at: Vec::new(),
        };
        if let Some(e) = eos {
            if dtype == TokenDtype::U16 && e > u32::from(u16::MAX) {
                return Err(TokenError::setting(
                    TokenSetting::Eos,
                    format!("id {e} does not fit the uint16 ids of {}", path.display()),
                ));
            }
            out.eos_at = (0..out.len() as u64).filter(|&i| out.id(i) == e).collect();
        }
        Ok(out)
    }

    /// The number of tokens.
    pub(crate) fn len(&self) -> usize {
        match self.dtype {
            TokenDtype::U16 => self.map.len() / 2,
            TokenDtype::U32 => self.map.len() / 4,
        }
    }

    fn id(&self, i: u64) -> u32 {
        let i = i as usize;
        match self.dtype {
            TokenDtype::U16 => {
                u32::from(u16::from_le_bytes([self.map[2 * i], self.map[2 * i + 1]]))
            }
            TokenDtype::U32 => u32::from_le_bytes([
                self.map[4 * i],
                self.map[4 * i + 1],
                self.map[4 * i + 2],
                self.map[4 * i + 3],
            ]),
        }
    }

    /// Windows of `seq_len + 1` tokens with a stride of `seq_len`.
    pub(crate) fn windows(&self, seq_len: usize) -> usize {
        self.len().saturating_sub(1) / seq_len
    }

    /// Appends window `w` to `batch`.
    pub(crate) fn window(
        &self,
        w: usize,
        seq_len: usize,
        batch: &mut TokenBatch,
    ) -> Result<(), TokenError> {
        let start = (w * seq_len) as u64;
        // The last EOS before the window: positions count from the token after it.
        let k = self.eos_at.partition_point(|&e| e < start);
        let mut doc_start = if k == 0 { 0 } else { self.eos_at[k - 1] + 1 };
        let at = |i: u64| format!("{} token {i}", self.path.display());
        for i in start..start + seq_len as u64 + 1 {
            let id = self.id(i);
            let token = i32::try_from(id)
                .map_err(|_| TokenError::record(at(i), format!("id {id} does not fit int32")))?;
            let pos = i32::try_from(i - doc_start).map_err(|_| {
                TokenError::record(at(i), "its position is past the int32 positions")
            })?;
            batch.tokens.push(token);
            batch.positions.push(pos);
            if !self.eos_at.is_empty() && self.eos_at.binary_search(&i).is_ok() {
                doc_start = i + 1;
            }
        }
        batch.rows += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_restart_after_each_eos() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let ids: [u16; 8] = [5, 6, 0, 7, 8, 9, 0, 4];
        let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        std::fs::write(&path, bytes).unwrap();
        let bin = BinTokens::open(&path, TokenDtype::U16, Some(0)).unwrap();
        assert_eq!(bin.windows(3), 2);
        let mut b = TokenBatch::default();
        bin.window(1, 3, &mut b).unwrap();
        assert_eq!(b.tokens, vec![7, 8, 9, 0]);
        assert_eq!(b.positions, vec![0, 1, 2, 3]);
        let no_eos = BinTokens::open(&path, TokenDtype::U16, None).unwrap();
        let mut b = TokenBatch::default();
        no_eos.window(1, 3, &mut b).unwrap();
        assert_eq!(b.positions, vec![3, 4, 5, 6]);
    }

    #[test]
    fn a_uint32_id_past_int32_names_the_file_and_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.bin");
        let ids: [u32; 3] = [1, u32::MAX, 2];
        let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
        std::fs::write(&path, bytes).unwrap();
        let bin = BinTokens::open(&path, TokenDtype::U32, None).unwrap();
        let err = bin
            .window(0, 2, &mut TokenBatch::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("big.bin token 1") && err.contains("4294967295"),
            "{err}"
        );
        let odd = dir.path().join("odd.bin");
        std::fs::write(&odd, [1u8, 2, 3]).unwrap();
        let err = BinTokens::open(&odd, TokenDtype::U16, None)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("odd.bin") && err.contains("3 bytes"), "{err}");
    }
}
