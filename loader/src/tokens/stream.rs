//! The token loader: settings, the data (documents or a `.bin` stream), and an epoch's
//! batches with the state that resumes them.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::sampler::{deal, Sampler, ShardPolicy};
use crate::source::mixture::order::Generator;
use crate::source::mixture::{MixPos, Mixture, MixtureError, MixtureSpec, Stop};
use crate::source::Source;

use super::bin::{BinTokens, TokenDtype};
use super::docs::{DocFormat, Docs, DEFAULT_CHUNK_BYTES, MAX_CHUNK_BYTES, MIN_CHUNK_BYTES};
use super::feed::{AsyncFeed, Feed, Held, Jobs, Tokens};
use super::pack::{Mark, Packer, Piece, TokenBatch};
use super::state::TokenElastic;
use super::{Eos, TextTokenizer, TokenError, TokenSetting, TokenState};

/// The most tokenizing threads.
pub const MAX_WORKERS: usize = 256;

/// Where documents are tokenized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenMode {
    /// On the consumer's thread.
    Sync,
    /// On worker threads, ahead of the consumer.
    #[default]
    Async,
}

impl std::str::FromStr for TokenMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sync" => Ok(TokenMode::Sync),
            "async" => Ok(TokenMode::Async),
            _ => Err(format!("mode '{s}': expected sync or async")),
        }
    }
}

/// A token loader's settings.
#[derive(Clone, Debug)]
pub struct TokenConfig {
    /// Tokens each window predicts: a window holds `seq_len + 1` tokens.
    pub seq_len: usize,
    /// Windows per batch.
    pub batch_size: usize,
    /// The Parquet column, or JSON field, holding each document's text.
    pub text_column: String,
    /// The end-of-text token; `None`: the tokenizer's own (docs/tokens.md).
    pub eos: Option<Eos>,
    /// Where documents are tokenized.
    pub mode: TokenMode,
    /// Tokenizing threads (async).
    pub workers: usize,
    /// Seeds the document order, with the epoch.
    pub seed: u64,
    /// Shuffle documents each epoch (else file order).
    pub shuffle: bool,
    /// This process's rank, and the number of ranks.
    pub rank: usize,
    /// Number of ranks.
    pub world_size: usize,
    /// The id width of a `.bin` file.
    pub token_dtype: TokenDtype,
    /// The largest text chunk tokenized at once.
    pub chunk_bytes: usize,
    /// Chunks read ahead of the consumer (async).
    pub ahead: usize,
    /// A mixture's weights, one per data set ([`TokenLoader::open_many`]); `None`:
    /// 1 each.
    pub weights: Option<Vec<f64>>,
    /// When a mixture's epoch ends: `all_exhausted` (every document once) or
    /// `first_exhausted` (when a data set runs out, keeping to the weights).
    pub stop: Stop,
}

impl Default for TokenConfig {
    fn default() -> Self {
        TokenConfig {
            seq_len: 1024,
            batch_size: 8,
            text_column: "text".into(),
            eos: None,
            mode: TokenMode::Async,
            workers: 2,
            seed: 0,
            shuffle: true,
            rank: 0,
            world_size: 1,
            token_dtype: TokenDtype::U16,
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            ahead: 64,
            weights: None,
            stop: Stop::AllExhausted,
        }
    }
}

impl TokenConfig {
    fn validate(&self) -> Result<(), TokenError> {
        use TokenSetting as S;
        let bad = |s: TokenSetting, m: String| Err(TokenError::setting(s, m));
        // Positions are int32, and a window holds seq_len + 1 of them.
        let most_seq_len = i32::MAX as usize - 1;
        if !(1..=most_seq_len).contains(&self.seq_len) {
            return bad(
                S::SeqLen,
                format!("must be 1 to {most_seq_len}, not {}", self.seq_len),
            );
        }
        if self.batch_size == 0 {
            return bad(S::BatchSize, "must be at least 1, not 0".into());
        }
        if self
            .batch_size
            .checked_mul(self.seq_len + 1)
            .is_none_or(|n| n > (1 << 31))
        {
            return bad(
                S::BatchSize,
                format!(
                    "a batch of {} windows of {} tokens is too large (at most 2^31 tokens)",
                    self.batch_size,
                    self.seq_len + 1
                ),
            );
        }
        if !(1..=MAX_WORKERS).contains(&self.workers) {
            return bad(
                S::Workers,
                format!("must be 1 to {MAX_WORKERS}, not {}", self.workers),
            );
        }
        if !(MIN_CHUNK_BYTES..=MAX_CHUNK_BYTES).contains(&self.chunk_bytes) {
            return bad(
                S::ChunkBytes,
                format!(
                    "must be {MIN_CHUNK_BYTES} to {MAX_CHUNK_BYTES}, not {}",
                    self.chunk_bytes
                ),
            );
        }
        if self.ahead == 0 {
            return bad(S::Ahead, "must be at least 1, not 0".into());
        }
        Sampler::default()
            .distributed(self.rank, self.world_size, ShardPolicy::Exact)
            .validate()
            .map_err(|e| {
                let s = match e.setting {
                    crate::Setting::Rank => S::Rank,
                    _ => S::WorldSize,
                };
                TokenError::setting(s, e.problem)
            })
    }
}

enum Data {
    Docs {
        docs: Arc<Docs>,
        tok: TextTokenizer,
        eos: u32,
        /// Several Parquet data sets drawn by weight (the rows of `docs`).
        mix: Option<Arc<Mixture>>,
    },
    Bin {
        bin: Arc<BinTokens>,
        eos: Option<u32>,
    },
}

/// Batches of packed token windows from documents or a token file.
pub struct TokenLoader {
    cfg: TokenConfig,
    data: Data,
}

impl TokenLoader {
    /// Opens `data` (docs/tokens.md: Parquet files, folders or URLs; JSON lines; text
    /// files; a `.bin` token file) with the `tokenizer.json` at `tokenizer` (needed for
    /// text; for a `.bin` file only to name `eos` by its token).
    pub fn open(
        data: &str,
        tokenizer: Option<&Path>,
        cfg: TokenConfig,
    ) -> Result<TokenLoader, TokenError> {
        cfg.validate()?;
        let tok = tokenizer.map(TextTokenizer::from_file).transpose()?;
        let format = DocFormat::of(data);
        let data = if format == DocFormat::Bin {
            let eos = match (&cfg.eos, &tok) {
                (None, _) => None,
                (Some(Eos::Id(i)), None) => Some(*i),
                (Some(e), Some(t)) => Some(t.eos_id(Some(e))?),
                (Some(Eos::Token(t)), None) => {
                    return Err(TokenError::setting(
                        TokenSetting::Eos,
                        format!("'{t}' is a token: give a tokenizer to look it up, or its id"),
                    ))
                }
            };
            let bin = BinTokens::open(Path::new(data), cfg.token_dtype, eos)?;
            Data::Bin {
                bin: Arc::new(bin),
                eos,
            }
        } else {
            let tok = tok.ok_or_else(|| {
                TokenError::setting(
                    TokenSetting::Tokenizer,
                    format!("{data} holds text: give a tokenizer (a tokenizer.json file)"),
                )
            })?;
            let eos = tok.eos_id(cfg.eos.as_ref())?;
            let docs = Docs::open(data, format, &cfg.text_column)?;
            Data::Docs {
                docs: Arc::new(docs),
                tok,
                eos,
                mix: None,
            }
        };
        Ok(TokenLoader { cfg, data })
    }

    /// Opens several Parquet data sets as one mixture (docs/tokens.md, "Mixtures"):
    /// each position of the epoch's document order draws a data set by
    /// `cfg.weights`, as the image loader's mixtures do, until `cfg.stop` ends it.
    /// One data set without weights is [`open`](Self::open).
    pub fn open_many(
        data: &[String],
        tokenizer: Option<&Path>,
        cfg: TokenConfig,
    ) -> Result<TokenLoader, TokenError> {
        if let ([one], None) = (data, &cfg.weights) {
            return Self::open(one, tokenizer, cfg);
        }
        cfg.validate()?;
        if cfg.stop == Stop::Never {
            return Err(TokenError::setting(
                TokenSetting::Stop,
                "'never' is not for token streams: an epoch of documents ends",
            ));
        }
        let tok = tokenizer
            .map(TextTokenizer::from_file)
            .transpose()?
            .ok_or_else(|| {
                TokenError::setting(TokenSetting::Tokenizer, "a mixture holds text: give one")
            })?;
        let eos = tok.eos_id(cfg.eos.as_ref())?;
        let mut parts: Vec<Arc<dyn Source>> = Vec::with_capacity(data.len());
        for d in data {
            match Docs::open(d, DocFormat::of(d), &cfg.text_column)? {
                Docs::Rows(s) if DocFormat::of(d) == DocFormat::Parquet => parts.push(s),
                _ => {
                    return Err(TokenError::setting(
                        TokenSetting::Data,
                        format!("{d}: a mixture takes Parquet data sets (files, folders or URLs)"),
                    ))
                }
            }
        }
        let spec = MixtureSpec {
            weights: cfg
                .weights
                .clone()
                .unwrap_or_else(|| vec![1.0; parts.len()]),
            stop: cfg.stop,
            epoch_batches: None,
        };
        let mix = Arc::new(Mixture::new(parts, spec).map_err(|e| {
            let s = match e {
                MixtureError::WeightCount { .. }
                | MixtureError::BadWeight { .. }
                | MixtureError::AllZero => TokenSetting::Weights,
                _ => TokenSetting::Data,
            };
            TokenError::setting(s, e.to_string())
        })?);
        let rows: Arc<dyn Source> = mix.clone();
        Ok(TokenLoader {
            cfg,
            data: Data::Docs {
                docs: Arc::new(Docs::Rows(rows)),
                tok,
                eos,
                mix: Some(mix),
            },
        })
    }

    /// The settings.
    pub fn config(&self) -> &TokenConfig {
        &self.cfg
    }

    /// The number of documents (of windows, for a `.bin` file).
    pub fn documents(&self) -> usize {
        match &self.data {
            Data::Docs { docs, .. } => docs.len(),
            Data::Bin { bin, .. } => bin.windows(self.cfg.seq_len),
        }
    }

    /// The EOS id appended to every document (for a `.bin` file, the one given).
    pub fn eos_id(&self) -> Option<u32> {
        match &self.data {
            Data::Docs { eos, .. } => Some(*eos),
            Data::Bin { eos, .. } => *eos,
        }
    }

    /// This rank's documents (windows, for a `.bin` file) of `epoch`, in order.
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        self.order_of(epoch, self.cfg.rank, self.cfg.world_size)
    }

    /// The documents of `rank` of `world` in `epoch`, in order.
    fn order_of(&self, epoch: u64, rank: usize, world: usize) -> Vec<usize> {
        let sampler = if self.cfg.shuffle {
            Sampler::shuffled(self.cfg.seed)
        } else {
            Sampler::sequential()
        }
        .distributed(rank, world, ShardPolicy::Exact);
        match &self.data {
            Data::Docs { mix: Some(mix), .. } => {
                // The draws are the epoch's order of all ranks, dealt as any order is.
                let one = Sampler {
                    rank: 0,
                    world_size: 1,
                    ..sampler.clone()
                };
                let weights = mix.spec().weights.clone();
                let mut draws = Generator::new(mix, &one, &weights, epoch);
                let mut pos = MixPos::fresh(mix.parts().len(), epoch);
                let all: Vec<usize> = std::iter::from_fn(|| draws.next(&mut pos)).collect();
                deal(all, rank, world, ShardPolicy::Exact)
            }
            Data::Docs { docs, .. } => sampler.indices_in(docs.len(), docs.shards(), epoch),
            Data::Bin { .. } => sampler.indices(self.documents(), epoch),
        }
    }

    fn state_at(&self, epoch: u64) -> TokenState {
        TokenState {
            seed: self.cfg.seed,
            epoch,
            batches: 0,
            doc: 0,
            offset: 0,
            seq_len: self.cfg.seq_len,
            batch_size: self.cfg.batch_size,
            rank: self.cfg.rank,
            world_size: self.cfg.world_size,
            shuffle: self.cfg.shuffle,
            documents: self.documents(),
            elastic: None,
        }
    }

    /// Epoch `epoch` from its start.
    pub fn epoch(&self, epoch: u64) -> Result<TokenEpoch, TokenError> {
        self.start(self.state_at(epoch))
    }

    /// The epoch `state` stands in, from where it stood: the same batches as the run
    /// that saved it would have delivered next.
    pub fn resume(&self, state: &TokenState) -> Result<TokenEpoch, TokenError> {
        state.check(&self.state_at(state.epoch))?;
        self.start(state.clone())
    }

    /// Takes over the epoch that `states` stand in, one state of each rank of the
    /// layout they were saved at (another world size), at this loader's rank and world
    /// size: the documents no rank has started are dealt again, and a document a rank
    /// had partly consumed goes on from where that rank stopped (docs/tokens.md,
    /// "Elastic resume").
    pub fn resume_elastic(&self, states: &[TokenState]) -> Result<TokenEpoch, TokenError> {
        let first = states
            .first()
            .ok_or_else(|| TokenError::State("no states to take over from".into()))?;
        if matches!(self.data, Data::Bin { .. }) {
            return Err(TokenError::State(
                "elastic resume is for documents, not a .bin file".into(),
            ));
        }
        let world = first.world_size;
        let mut at = vec![None; world];
        for s in states {
            let mut now = self.state_at(first.epoch);
            now.rank = s.rank;
            now.world_size = world;
            s.check(&now)?;
            if s.elastic.is_some() {
                return Err(TokenError::State(
                    "a state that was itself taken over cannot be taken over again".into(),
                ));
            }
            match at.get_mut(s.rank) {
                Some(slot @ None) => *slot = Some((s.doc, s.offset)),
                _ => {
                    return Err(TokenError::State(format!(
                        "rank {} of world size {world} is given twice",
                        s.rank
                    )))
                }
            }
        }
        let at = at
            .into_iter()
            .enumerate()
            .map(|(r, a)| {
                a.ok_or_else(|| {
                    TokenError::State(format!("no state of rank {r} of world size {world}"))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let state = TokenState {
            elastic: Some(TokenElastic {
                world_size: world,
                at,
            }),
            ..self.state_at(first.epoch)
        };
        self.start(state)
    }

    /// The rank's documents of the epoch `state` stands in, and the tokens to skip of
    /// those another layout had partly consumed (by place in the order).
    fn layout(&self, state: &TokenState) -> (Vec<usize>, HashMap<usize, u64>) {
        let Some(el) = &state.elastic else {
            return (self.order(state.epoch), HashMap::new());
        };
        // Each rank's rest, its first document from where it stopped; interleaved
        // (the first of each rank, rank by rank, then the second ...).
        let tails: Vec<Vec<(usize, u64)>> = (0..el.world_size)
            .map(|r| {
                let order = self.order_of(state.epoch, r, el.world_size);
                let (doc, offset) = el.at[r];
                order
                    .get(doc..)
                    .unwrap_or_default()
                    .iter()
                    .enumerate()
                    .map(|(j, &g)| (g, if j == 0 { offset } else { 0 }))
                    .collect()
            })
            .collect();
        let longest = tails.iter().map(Vec::len).max().unwrap_or(0);
        let rest: Vec<(usize, u64)> = (0..longest)
            .flat_map(|j| tails.iter().filter_map(move |t| t.get(j).copied()))
            .collect();
        let mine = deal(
            (0..rest.len()).collect(),
            self.cfg.rank,
            self.cfg.world_size,
            ShardPolicy::Exact,
        );
        let order = mine.iter().map(|&i| rest[i].0).collect();
        let skips = mine
            .iter()
            .enumerate()
            .filter(|(_, &i)| rest[i].1 > 0)
            .map(|(p, &i)| (p, rest[i].1))
            .collect();
        (order, skips)
    }

    /// This rank's documents of the epoch `state` stands in, each with the tokens
    /// skipped at its start (for an elastic resume), for a test to check.
    pub fn documents_of(&self, state: &TokenState) -> Vec<(usize, u64)> {
        let (order, skips) = self.layout(state);
        order
            .into_iter()
            .enumerate()
            .map(|(p, g)| (g, skips.get(&p).copied().unwrap_or(0)))
            .collect()
    }

    fn start(&self, state: TokenState) -> Result<TokenEpoch, TokenError> {
        let (order, skips) = self.layout(&state);
        let order = Arc::new(order);
        if state.doc > order.len() {
            return Err(TokenError::State(format!(
                "document {} is past the rank's {} of the epoch",
                state.doc,
                order.len()
            )));
        }
        let held = Arc::new(Held::default());
        let kind = match &self.data {
            Data::Bin { bin, .. } => Kind::Bin {
                bin: bin.clone(),
                order,
            },
            Data::Docs { docs, tok, eos, .. } => {
                let jobs = Jobs::new(
                    docs.clone(),
                    order,
                    state.doc,
                    self.cfg.chunk_bytes,
                    held.clone(),
                );
                let feed = match self.cfg.mode {
                    TokenMode::Sync => Feed::Sync {
                        jobs,
                        tok: tok.clone(),
                        eos: *eos,
                    },
                    TokenMode::Async => Feed::Async(AsyncFeed::start(
                        jobs,
                        tok.clone(),
                        *eos,
                        self.cfg.workers,
                        self.cfg.ahead,
                    )),
                };
                let mark = Mark {
                    doc: state.doc,
                    offset: state.offset,
                };
                Kind::Docs(Box::new(DocStream {
                    feed,
                    packer: Packer::new(self.cfg.seq_len, mark),
                    skip: mark,
                    skips,
                    doc: None,
                    piece: Piece::default(),
                    at: 0,
                }))
            }
        };
        Ok(TokenEpoch {
            state,
            kind,
            held,
            ended: false,
        })
    }
}

/// A text epoch's moving parts.
struct DocStream {
    feed: Feed,
    packer: Packer,
    /// Tokens of the first document that a resume skips (those before its offset).
    skip: Mark,
    /// Tokens skipped at the start of documents another layout had partly consumed
    /// (an elastic resume), by place in the order.
    skips: HashMap<usize, u64>,
    /// The document being read and its next token's index.
    doc: Option<(usize, u64)>,
    piece: Piece,
    at: usize,
}

impl DocStream {
    /// The next run of tokens, with each token's place in its document.
    fn next_piece(&mut self) -> Result<bool, TokenError> {
        loop {
            let Some((doc, mut tokens)): Option<Tokens> = self.feed.next()? else {
                return Ok(false);
            };
            let offset = match self.doc {
                Some((d, next)) if d == doc => next,
                _ => 0,
            };
            self.doc = Some((doc, offset + tokens.len() as u64));
            let mut offset = offset;
            let mut skip_to = self.skips.get(&doc).copied().unwrap_or(0);
            if doc == self.skip.doc {
                skip_to = skip_to.max(self.skip.offset);
            }
            if offset < skip_to {
                let n = ((skip_to - offset) as usize).min(tokens.len());
                tokens.drain(..n);
                offset += n as u64;
            }
            if tokens.is_empty() {
                continue;
            }
            self.piece = Piece {
                doc,
                offset,
                tokens,
                what: self.feed.what(doc),
            };
            self.at = 0;
            return Ok(true);
        }
    }
}

enum Kind {
    Docs(Box<DocStream>),
    Bin {
        bin: Arc<BinTokens>,
        order: Arc<Vec<usize>>,
    },
}

/// One epoch's batches, in order; [`state`](Self::state) says where it stands.
pub struct TokenEpoch {
    state: TokenState,
    kind: Kind,
    held: Arc<Held>,
    ended: bool,
}

impl TokenEpoch {
    /// The next batch, `None` once what is left does not fill one (the epoch's end).
    pub fn next_batch(&mut self) -> Result<Option<TokenBatch>, TokenError> {
        if self.ended {
            return Ok(None);
        }
        let (b, l) = (self.state.batch_size, self.state.seq_len);
        let mut batch = TokenBatch {
            tokens: Vec::with_capacity(b * (l + 1)),
            positions: Vec::with_capacity(b * (l + 1)),
            rows: 0,
            cols: l + 1,
        };
        let out = match &mut self.kind {
            Kind::Bin { bin, order } => {
                let from = self.state.doc;
                if from + b > order.len() {
                    Ok(false)
                } else {
                    for &w in &order[from..from + b] {
                        bin.window(w, l, &mut batch)?;
                    }
                    self.state.doc += b;
                    Ok(true)
                }
            }
            Kind::Docs(s) => fill_docs(s, b, &mut batch).inspect(|&full| {
                if full {
                    self.state.doc = s.packer.start.doc;
                    self.state.offset = s.packer.start.offset;
                }
            }),
        };
        match out {
            Ok(true) => {
                self.state.batches += 1;
                Ok(Some(batch))
            }
            Ok(false) => {
                self.ended = true;
                Ok(None)
            }
            Err(e) => {
                // An error ends the epoch: its state still says where the last
                // delivered batch left off.
                self.ended = true;
                Err(e)
            }
        }
    }

    /// Where the epoch stands: load it into a loader with the same settings to
    /// continue with the next batch.
    pub fn state(&self) -> &TokenState {
        &self.state
    }

    /// The largest text chunk handed to the tokenizer so far, in bytes.
    pub fn largest_chunk(&self) -> usize {
        self.held.chunk.load(Ordering::Relaxed)
    }

    /// The largest buffer a document reader has held so far, in bytes (a text file's
    /// read buffer; a Parquet cell or JSON line is held whole).
    pub fn largest_buffer(&self) -> usize {
        self.held.buffer.load(Ordering::Relaxed)
    }
}

impl Iterator for TokenEpoch {
    type Item = Result<TokenBatch, TokenError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch().transpose()
    }
}

/// Fills `batch` with `b` windows; false when the documents end first.
fn fill_docs(s: &mut DocStream, b: usize, batch: &mut TokenBatch) -> Result<bool, TokenError> {
    while batch.rows < b {
        if s.at >= s.piece.tokens.len() && !s.next_piece()? {
            return Ok(false);
        }
        if s.packer.fill(&s.piece, &mut s.at)? {
            let last = Packer::last_mark(&s.piece, s.at);
            s.packer.emit(batch, last);
        }
    }
    Ok(true)
}
