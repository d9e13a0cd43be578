//! `stoker-load bench --tokens TOKENIZER DATA`: tokens/s of the token loader
//! (docs/tokens.md) over DATA's texts, reading, tokenizing and packing.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use stoker_loader::tokens::{TokenConfig, TokenLoader, TokenMode};
use stoker_loader::{Mode, Workers};

use crate::bench::Args;

/// What a token bench run measured. Field names are a contract (`--json`).
#[derive(Debug, Serialize)]
pub struct TokenReport {
    pub data: String,
    pub tokenizer: PathBuf,
    pub mode: String,
    pub workers: usize,
    pub seq_len: usize,
    pub batch_size: usize,
    pub epochs: u64,
    pub documents: usize,
    pub batches: u64,
    /// Tokens delivered: batches * batch_size * seq_len (each window's targets).
    pub tokens: u64,
    pub seconds: f64,
    pub tokens_per_s: f64,
}

pub fn measure(a: &Args, tokenizer: &Path) -> anyhow::Result<TokenReport> {
    let data = a
        .data
        .as_ref()
        .context("bench --tokens needs DATA (Parquet, JSON lines, text files or a .bin)")?;
    let workers = match a.workers {
        Workers::Fixed(n) => n,
        _ => anyhow::bail!("bench --tokens takes a number of workers, not auto"),
    };
    let cfg = TokenConfig {
        seq_len: a.seq_len,
        batch_size: a.batch_size,
        text_column: a
            .source
            .open
            .text_column
            .clone()
            .unwrap_or_else(|| "text".into()),
        mode: match a.mode {
            Mode::Sync => TokenMode::Sync,
            _ => TokenMode::Async,
        },
        workers,
        seed: a.seed,
        shuffle: !a.no_shuffle,
        ..TokenConfig::default()
    };
    let text = data.to_string_lossy().into_owned();
    let loader = TokenLoader::open(&text, Some(tokenizer), cfg)?;
    let start = Instant::now();
    let mut batches = 0u64;
    for e in 0..a.epochs {
        for b in loader.epoch(e)? {
            b?;
            batches += 1;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let tokens = batches * (a.batch_size * a.seq_len) as u64;
    Ok(TokenReport {
        data: text,
        tokenizer: tokenizer.to_path_buf(),
        mode: format!("{:?}", loader.config().mode).to_lowercase(),
        workers,
        seq_len: a.seq_len,
        batch_size: a.batch_size,
        epochs: a.epochs,
        documents: loader.documents(),
        batches,
        tokens,
        seconds,
        tokens_per_s: tokens as f64 / seconds.max(1e-9),
    })
}

pub fn run(a: &Args, tokenizer: &Path) -> anyhow::Result<()> {
    let r = measure(a, tokenizer)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "{}: tokenizer {}, mode {}, workers {}, seq_len {}, batch {}, {} epoch(s), {} documents",
        r.data,
        r.tokenizer.display(),
        r.mode,
        r.workers,
        r.seq_len,
        r.batch_size,
        r.epochs,
        r.documents
    );
    println!(
        "{} batches, {} tokens in {:.2} s: {:.0} tokens/s",
        r.batches, r.tokens, r.seconds, r.tokens_per_s
    );
    Ok(())
}
