//! Document readers: a data set as a list of documents (Parquet rows, JSON lines, text
//! files), each read as a run of text chunks of bounded size, cut at whitespace, so a
//! very long document never sits in memory whole.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::sample::{Annotation, Field, Fields};
use crate::source::Source;
use crate::source::{open_with, OpenOptions};

use super::{TokenError, TokenSetting};

/// The largest text chunk handed to the tokenizer at once, by default: 64 KiB.
pub const DEFAULT_CHUNK_BYTES: usize = 64 << 10;

/// The smallest chunk size accepted: a chunk must hold a few UTF-8 characters.
pub(crate) const MIN_CHUNK_BYTES: usize = 64;

/// The largest chunk size accepted (1 GiB): a chunk is one allocation of text.
pub(crate) const MAX_CHUNK_BYTES: usize = 1 << 30;

/// What a data argument holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocFormat {
    /// Parquet files (a file, folder, glob or URL): the text column, one document a row.
    Parquet,
    /// JSON-lines files: one document a line, in its text field.
    JsonLines,
    /// Plain text files: one document a file.
    Text,
    /// A flat file of token ids (nanoGPT's `.bin`): no documents, one stream.
    Bin,
}

impl DocFormat {
    /// The format of `data`, from its name (for a folder, from the names of its files).
    pub fn of(data: &str) -> DocFormat {
        let lower = data.to_ascii_lowercase();
        let by_name = |n: &str| {
            if n.ends_with(".bin") {
                Some(DocFormat::Bin)
            } else if n.ends_with(".jsonl") || n.ends_with(".ndjson") {
                Some(DocFormat::JsonLines)
            } else if n.ends_with(".txt") {
                Some(DocFormat::Text)
            } else {
                None
            }
        };
        if let Some(f) = by_name(&lower) {
            return f;
        }
        let path = Path::new(data);
        if path.is_dir() {
            if let Ok(names) = sorted_files(path) {
                let has = |f| {
                    names
                        .iter()
                        .any(|p| by_name(&p.to_string_lossy().to_ascii_lowercase()) == Some(f))
                };
                let parquet = names
                    .iter()
                    .any(|p| crate::source::parquet::is_parquet_name(&p.to_string_lossy()));
                if !parquet {
                    if has(DocFormat::JsonLines) {
                        return DocFormat::JsonLines;
                    }
                    if has(DocFormat::Text) {
                        return DocFormat::Text;
                    }
                }
            }
        }
        DocFormat::Parquet
    }
}

/// The plain files of folder `dir`, sorted by name.
fn sorted_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// `data` itself, or the files of the folder `data` whose names end with one of `ext`.
fn files_of(data: &str, ext: &[&str]) -> Result<Vec<PathBuf>, TokenError> {
    let path = Path::new(data);
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let files: Vec<PathBuf> = sorted_files(path)
        .map_err(|e| TokenError::io(path, e))?
        .into_iter()
        .filter(|p| {
            let n = p.to_string_lossy().to_ascii_lowercase();
            ext.iter().any(|e| n.ends_with(e))
        })
        .collect();
    if files.is_empty() {
        return Err(TokenError::record(
            data,
            format!("the folder holds no {} files", ext.join(" or ")),
        ));
    }
    Ok(files)
}

/// One JSON line: its file, byte range and line number (from 1).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Line {
    file: u32,
    start: u64,
    len: u32,
    number: u64,
}

/// A data set as documents.
pub(crate) enum Docs {
    /// Rows of a source's text field (Parquet files, local or remote).
    Rows(Arc<dyn Source>),
    /// JSON lines: the files, open, and every non-blank line.
    Lines {
        files: Vec<(PathBuf, File)>,
        lines: Vec<Line>,
        field: String,
    },
    /// Text files, one document each.
    Texts(Vec<PathBuf>),
}

impl Docs {
    /// Opens `data` as `format` (not [`DocFormat::Bin`]); `field` is the text column or
    /// JSON field.
    pub(crate) fn open(data: &str, format: DocFormat, field: &str) -> Result<Docs, TokenError> {
        match format {
            DocFormat::Parquet => {
                let mut options = OpenOptions::default();
                options.parquet.image = String::new();
                options.parquet.label = None;
                options.parquet.text = Some(field.to_string());
                let source = open_with(data, &options)?;
                if source.format() != "parquet" {
                    return Err(TokenError::record(
                        data,
                        format!(
                            "a {} data set, not documents: give Parquet files, JSON lines \
                             (.jsonl), text files (.txt) or a token file (.bin)",
                            source.format()
                        ),
                    ));
                }
                Ok(Docs::Rows(source))
            }
            DocFormat::JsonLines => {
                let mut files = Vec::new();
                let mut lines = Vec::new();
                for (fi, path) in files_of(data, &[".jsonl", ".ndjson"])?
                    .into_iter()
                    .enumerate()
                {
                    let file = File::open(&path).map_err(|e| TokenError::io(&path, e))?;
                    index_lines(&path, &file, fi as u32, &mut lines)?;
                    files.push((path, file));
                }
                Ok(Docs::Lines {
                    files,
                    lines,
                    field: field.to_string(),
                })
            }
            DocFormat::Text => Ok(Docs::Texts(files_of(data, &[".txt"])?)),
            DocFormat::Bin => Err(TokenError::setting(
                TokenSetting::Data,
                "a .bin file holds tokens, not documents",
            )),
        }
    }

    /// The number of documents.
    pub(crate) fn len(&self) -> usize {
        match self {
            Docs::Rows(s) => s.len(),
            Docs::Lines { lines, .. } => lines.len(),
            Docs::Texts(f) => f.len(),
        }
    }

    /// Runs of documents stored together (Parquet row groups), for the shard-aware
    /// shuffle.
    pub(crate) fn shards(&self) -> Option<&[Range<usize>]> {
        match self {
            Docs::Rows(s) => s.shards(),
            _ => None,
        }
    }

    /// Document `i` in messages: its file and row or line.
    pub(crate) fn describe(&self, i: usize) -> String {
        match self {
            Docs::Rows(s) => s.describe(i),
            Docs::Lines { files, lines, .. } => match lines.get(i) {
                Some(l) => format!("{} line {}", files[l.file as usize].0.display(), l.number),
                None => format!("document {i} (out of range)"),
            },
            Docs::Texts(f) => f
                .get(i)
                .map_or(format!("document {i} (out of range)"), |p| {
                    p.display().to_string()
                }),
        }
    }

    /// A reader of document `i`'s text in chunks of at most `chunk_bytes`.
    pub(crate) fn reader(&self, i: usize, chunk_bytes: usize) -> Result<DocReader, TokenError> {
        let text = match self {
            Docs::Rows(s) => {
                let mut buf = Vec::new();
                let mut ann = Annotation::default();
                s.read_sample(i, Fields::of(&[Field::Text]), &mut buf, &mut ann)?;
                ann.text
                    .ok_or_else(|| TokenError::record(s.describe(i), "the text cell is null"))?
            }
            Docs::Lines {
                files,
                lines,
                field,
            } => {
                let l = lines[i];
                let mut bytes = vec![0u8; l.len as usize];
                let (path, file) = &files[l.file as usize];
                file.read_exact_at(&mut bytes, l.start)
                    .map_err(|e| TokenError::io(path, e))?;
                json_text(&bytes, field).map_err(|r| TokenError::record(self.describe(i), r))?
            }
            Docs::Texts(paths) => {
                let path = &paths[i];
                let file = File::open(path).map_err(|e| TokenError::io(path, e))?;
                return Ok(DocReader::File(FileChunks {
                    path: path.clone(),
                    file,
                    pending: Vec::with_capacity(chunk_bytes + 1),
                    offset: 0,
                    eof: false,
                    limit: chunk_bytes,
                }));
            }
        };
        Ok(DocReader::Mem {
            text,
            at: 0,
            limit: chunk_bytes,
        })
    }
}

/// Records where each non-blank line of `file` starts, reading it once in blocks.
fn index_lines(path: &Path, file: &File, fi: u32, out: &mut Vec<Line>) -> Result<(), TokenError> {
    let mut block = vec![0u8; 1 << 20];
    let mut pos = 0u64;
    let mut start = 0u64;
    let mut number = 1u64;
    let mut blank = true;
    let mut push = |start: u64, end: u64, number: u64, blank: bool| -> Result<(), TokenError> {
        if blank {
            return Ok(());
        }
        let len = u32::try_from(end - start).map_err(|_| {
            TokenError::record(
                format!("{} line {number}", path.display()),
                "the line is longer than 4 GiB",
            )
        })?;
        out.push(Line {
            file: fi,
            start,
            len,
            number,
        });
        Ok(())
    };
    loop {
        let n = file
            .read_at(&mut block, pos)
            .map_err(|e| TokenError::io(path, e))?;
        if n == 0 {
            break;
        }
        for (k, &b) in block[..n].iter().enumerate() {
            let at = pos + k as u64;
            if b == b'\n' {
                push(start, at, number, blank)?;
                start = at + 1;
                number += 1;
                blank = true;
            } else if !b.is_ascii_whitespace() {
                blank = false;
            }
        }
        pos += n as u64;
    }
    push(start, pos, number, blank)
}

/// The string in field `field` of one JSON line.
fn json_text(line: &[u8], field: &str) -> Result<String, String> {
    let v: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("not a JSON object: {e}"))?;
    let obj = v
        .as_object()
        .ok_or_else(|| "not a JSON object".to_string())?;
    match obj.get(field) {
        None => Err(format!("no field '{field}'")),
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!(
            "field '{field}' is {}, not a string",
            kind_of(other)
        )),
    }
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Where the next chunk of `bytes` ends: all of them when they fit in `limit`, else
/// before the last ASCII whitespace within `limit` (GPT-2-style tokenizers attach a
/// space to the word after it), else at the last character boundary within it.
pub(crate) fn cut(bytes: &[u8], limit: usize) -> usize {
    if bytes.len() <= limit {
        return bytes.len();
    }
    if let Some(p) = bytes[..limit].iter().rposition(u8::is_ascii_whitespace) {
        if p > 0 {
            return p;
        }
    }
    let mut p = limit;
    // A UTF-8 continuation byte is 0b10xx_xxxx: back up to the start of its character.
    while p > 1 && bytes[p] & 0xC0 == 0x80 {
        p -= 1;
    }
    p
}

/// One document's text, chunk by chunk.
pub(crate) enum DocReader {
    /// A text held whole (a Parquet cell, a JSON line).
    Mem {
        text: String,
        at: usize,
        limit: usize,
    },
    /// A text file, read as it is cut.
    File(FileChunks),
}

/// A text file read in chunks: `pending` holds at most `limit` bytes plus one read.
pub(crate) struct FileChunks {
    path: PathBuf,
    file: File,
    pending: Vec<u8>,
    /// The file offset of `pending[0]`.
    offset: u64,
    eof: bool,
    limit: usize,
}

impl DocReader {
    /// The next chunk, `None` at the document's end. Invalid UTF-8 in a text file is an
    /// error naming the file and the byte offset.
    pub(crate) fn next_chunk(&mut self) -> Result<Option<String>, TokenError> {
        match self {
            DocReader::Mem { text, at, limit } => {
                if *at >= text.len() {
                    return Ok(None);
                }
                let n = cut(&text.as_bytes()[*at..], *limit);
                let chunk = text[*at..*at + n].to_string();
                *at += n;
                Ok(Some(chunk))
            }
            DocReader::File(f) => f.next_chunk(),
        }
    }

    /// The most bytes this reader has held at once (its buffer's capacity, for a file).
    pub(crate) fn held(&self) -> usize {
        match self {
            DocReader::Mem { text, .. } => text.len(),
            DocReader::File(f) => f.pending.capacity(),
        }
    }
}

impl FileChunks {
    fn next_chunk(&mut self) -> Result<Option<String>, TokenError> {
        // Fill to one byte past the limit: enough to know whether a cut is needed.
        while !self.eof && self.pending.len() <= self.limit {
            let have = self.pending.len();
            self.pending.resize(self.limit + 1, 0);
            let n = self
                .file
                .read(&mut self.pending[have..])
                .map_err(|e| TokenError::io(&self.path, e))?;
            self.pending.truncate(have + n);
            self.eof = n == 0;
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        let n = cut(&self.pending, self.limit);
        let chunk = std::str::from_utf8(&self.pending[..n]).map_err(|e| {
            TokenError::record(
                self.path.display().to_string(),
                format!(
                    "invalid UTF-8 at byte {}",
                    self.offset + e.valid_up_to() as u64
                ),
            )
        })?;
        let chunk = chunk.to_string();
        self.pending.drain(..n);
        self.offset += n as u64;
        Ok(Some(chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_before_whitespace_and_never_inside_a_character() {
        assert_eq!(cut(b"short", 64), 5);
        assert_eq!(cut(b"aaaa bbbb cccc", 11), 9);
        // No whitespace: the last character boundary within the limit.
        let s = "ééééé".as_bytes();
        assert_eq!(cut(s, 5), 4);
        assert!(std::str::from_utf8(&s[..cut(s, 5)]).is_ok());
    }

    #[test]
    fn a_file_read_in_chunks_is_the_file_and_holds_a_bounded_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        let text: String = (0..20_000).map(|i| format!("w{i} ")).collect();
        std::fs::write(&path, &text).unwrap();
        let docs = Docs::Texts(vec![path]);
        let mut r = docs.reader(0, 256).unwrap();
        let mut back = String::new();
        let mut largest = 0;
        while let Some(c) = r.next_chunk().unwrap() {
            largest = largest.max(c.len());
            back.push_str(&c);
        }
        assert_eq!(back, text);
        assert!(largest <= 256);
        assert!(r.held() <= 2 * 256 + 1, "held {}", r.held());
    }

    #[test]
    fn invalid_utf8_names_the_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.txt");
        std::fs::write(&path, b"good text \xff more").unwrap();
        let docs = Docs::Texts(vec![path]);
        let err = docs.reader(0, 4096).unwrap().next_chunk().unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("bad.txt") && msg.contains("invalid UTF-8 at byte 10"),
            "{msg}"
        );
    }
}
