//! Token streams: documents from JSON lines, Parquet (the parquet crate's writer, row
//! groups of 7 rows), text files and nanoGPT-style `.bin` files, tokenized by a
//! WordLevel `tokenizer.json` written here as the Hub writes it; the packing rule
//! against a reference built from the words, the same batches in sync and async mode
//! with any worker count, exact resume in the middle of a document, a bounded chunk
//! buffer for a long document, and bad input named.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;
use stoker_loader::tokens::{
    Eos, TokenBatch, TokenConfig, TokenDtype, TokenError, TokenLoader, TokenMode, TokenSetting,
    TokenState,
};
use stoker_loader::Stop;

/// Words `w0` .. `w{VOCAB-1}`: word `wN` is id N + 2 (0 is EOS, 1 unknown).
const VOCAB: usize = 50;

/// A WordLevel tokenizer.json split on whitespace, in the Hub's layout; `eos` adds
/// GPT-2's end-of-text token as id 0.
fn tokenizer(dir: &Path, eos: bool) -> PathBuf {
    let mut vocab = serde_json::Map::new();
    vocab.insert(if eos { "<|endoftext|>" } else { "<pad>" }.into(), 0.into());
    vocab.insert("<unk>".into(), 1.into());
    for i in 0..VOCAB {
        vocab.insert(format!("w{i}"), (i + 2).into());
    }
    let added = if eos {
        serde_json::json!([{"id": 0, "content": "<|endoftext|>", "single_word": false,
            "lstrip": false, "rstrip": false, "normalized": false, "special": true}])
    } else {
        serde_json::json!([])
    };
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    });
    let path = dir.join(if eos { "tokenizer.json" } else { "no-eos.json" });
    std::fs::write(&path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    path
}

/// Document `d`'s word numbers: lengths from 0 to 40 words, a simple pattern.
fn doc_words(d: usize) -> Vec<usize> {
    let n = (d * 7 + 3) % 41;
    (0..n).map(|k| (d * 13 + k * 5) % VOCAB).collect()
}

fn text_of(words: &[usize]) -> String {
    words
        .iter()
        .map(|w| format!("w{w}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn jsonl(dir: &Path, docs: usize) -> PathBuf {
    let path = dir.join("docs.jsonl");
    let mut s = String::new();
    for d in 0..docs {
        s.push_str(&serde_json::json!({"id": d, "text": text_of(&doc_words(d))}).to_string());
        s.push('\n');
    }
    std::fs::write(&path, s).unwrap();
    path
}

fn parquet(dir: &Path, docs: usize) -> PathBuf {
    parquet_of(&dir.join("train.parquet"), 0..docs)
}

/// Documents `ids` (their words are `doc_words(id)`) as a Parquet file at `path`.
fn parquet_of(path: &Path, ids: std::ops::Range<usize>) -> PathBuf {
    let path = path.to_path_buf();
    let docs = ids.len();
    let text: Vec<String> = ids.map(|d| text_of(&doc_words(d))).collect();
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("text", DataType::Utf8, true),
    ]);
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(0..docs as i64)),
        Arc::new(StringArray::from_iter_values(text)),
    ];
    let batch = RecordBatch::try_new(Arc::new(schema.clone()), cols).unwrap();
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(7))
        .build();
    let mut w = ArrowWriter::try_new(
        std::fs::File::create(&path).unwrap(),
        Arc::new(schema),
        Some(props),
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    path
}

fn cfg(seq_len: usize, batch_size: usize) -> TokenConfig {
    TokenConfig {
        seq_len,
        batch_size,
        ..TokenConfig::default()
    }
}

fn all(loader: &TokenLoader, epoch: u64) -> Vec<TokenBatch> {
    loader
        .epoch(epoch)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

/// The packing rule written out: the documents' ids in `order`, each followed by EOS,
/// cut into windows of seq_len + 1 with a stride of seq_len, batch_size at a time.
fn reference(order: &[usize], seq_len: usize, batch_size: usize) -> Vec<(Vec<i32>, Vec<i32>)> {
    let mut stream = Vec::new();
    for &d in order {
        let ids = doc_words(d).into_iter().map(|w| w as i32 + 2).chain([0]);
        stream.extend(ids.enumerate().map(|(p, id)| (id, p as i32)));
    }
    let windows: Vec<&[(i32, i32)]> = (0..)
        .map(|k| k * seq_len)
        .take_while(|s| s + seq_len < stream.len())
        .map(|s| &stream[s..s + seq_len + 1])
        .collect();
    windows
        .chunks_exact(batch_size)
        .map(|b| {
            let flat: Vec<(i32, i32)> = b.iter().flat_map(|w| w.iter().copied()).collect();
            (
                flat.iter().map(|t| t.0).collect(),
                flat.iter().map(|t| t.1).collect(),
            )
        })
        .collect()
}

#[test]
fn jsonl_batches_follow_the_packing_rule() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), true);
    let data = jsonl(dir.path(), 60);
    let loader = TokenLoader::open(
        data.to_str().unwrap(),
        Some(&tok),
        TokenConfig {
            shuffle: false,
            mode: TokenMode::Sync,
            ..cfg(16, 4)
        },
    )
    .unwrap();
    assert_eq!(loader.eos_id(), Some(0));
    let got: Vec<_> = all(&loader, 0)
        .into_iter()
        .map(|b| {
            assert_eq!((b.rows, b.cols), (4, 17));
            (b.tokens, b.positions)
        })
        .collect();
    let order: Vec<usize> = (0..60).collect();
    let want = reference(&order, 16, 4);
    assert!(want.len() > 3);
    assert_eq!(got, want);
}

#[test]
fn parquet_batches_are_the_same_in_any_mode_and_follow_the_epoch_order() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), true);
    let data = parquet(dir.path(), 80);
    let open = |mode, workers| {
        TokenLoader::open(
            data.to_str().unwrap(),
            Some(&tok),
            TokenConfig {
                mode,
                workers,
                seed: 9,
                // Small chunks: a document spans several, which the workers encode
                // out of order.
                chunk_bytes: 64,
                ahead: 5,
                ..cfg(12, 3)
            },
        )
        .unwrap()
    };
    let sync = open(TokenMode::Sync, 1);
    for epoch in 0..2 {
        let order = sync.order(epoch);
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..80).collect::<Vec<_>>());
        let want = reference(&order, 12, 3);
        let got: Vec<_> = all(&sync, epoch)
            .into_iter()
            .map(|b| (b.tokens, b.positions))
            .collect();
        assert_eq!(got, want, "epoch {epoch}");
        for w in [1, 3] {
            let a: Vec<_> = all(&open(TokenMode::Async, w), epoch)
                .into_iter()
                .map(|b| (b.tokens, b.positions))
                .collect();
            assert_eq!(a, want, "async with {w} workers, epoch {epoch}");
        }
    }
    assert_ne!(sync.order(0), sync.order(1));
}

#[test]
fn ranks_share_the_documents_and_each_packs_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), true);
    let data = jsonl(dir.path(), 41);
    let mut seen = Vec::new();
    for rank in 0..2 {
        let loader = TokenLoader::open(
            data.to_str().unwrap(),
            Some(&tok),
            TokenConfig {
                rank,
                world_size: 2,
                seed: 3,
                ..cfg(8, 2)
            },
        )
        .unwrap();
        let order = loader.order(0);
        let got: Vec<_> = all(&loader, 0)
            .into_iter()
            .map(|b| (b.tokens, b.positions))
            .collect();
        assert_eq!(got, reference(&order, 8, 2), "rank {rank}");
        seen.extend(order);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..41).collect::<Vec<_>>());
}

#[test]
fn a_resume_mid_document_delivers_the_batches_an_uninterrupted_run_does() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), true);
    let data = parquet(dir.path(), 50);
    let c = TokenConfig {
        seed: 5,
        chunk_bytes: 64,
        workers: 2,
        ..cfg(10, 2)
    };
    let loader = TokenLoader::open(data.to_str().unwrap(), Some(&tok), c.clone()).unwrap();
    let whole = all(&loader, 1);
    let mut mid_document = 0;
    for k in 1..whole.len() {
        let mut first = loader.epoch(1).unwrap();
        for _ in 0..k {
            first.next_batch().unwrap().unwrap();
        }
        // Through JSON, as a checkpoint would carry it.
        let saved = serde_json::to_string(first.state()).unwrap();
        drop(first);
        let state: TokenState = serde_json::from_str(&saved).unwrap();
        assert_eq!(state.batches, k as u64);
        mid_document += usize::from(state.offset > 0);
        let again = TokenLoader::open(data.to_str().unwrap(), Some(&tok), c.clone()).unwrap();
        let rest = again
            .resume(&state)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert_eq!(rest, whole[k..], "resumed after {k} batches");
    }
    assert!(
        mid_document > 3,
        "only {mid_document} states stood mid-document"
    );
    // Another world size is refused, naming what differs.
    let mut state = loader.epoch(1).unwrap().state().clone();
    state.world_size = 2;
    let err = loader.resume(&state).err().unwrap().to_string();
    assert!(err.contains("world size 2"), "{err}");
}

#[test]
fn a_long_text_file_streams_through_a_fixed_chunk_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), true);
    let docs = dir.path().join("books");
    std::fs::create_dir(&docs).unwrap();
    // One document of 8 MiB (about 2.3 million words) and a short one.
    let mut long = String::with_capacity(8 << 20);
    let mut words = 0usize;
    while long.len() < 8 << 20 {
        long.push_str(&format!("w{} ", words % VOCAB));
        if words % 17 == 16 {
            long.push('\n');
        }
        words += 1;
    }
    std::fs::write(docs.join("a.txt"), &long).unwrap();
    std::fs::write(docs.join("b.txt"), "w1 w2 w3").unwrap();
    let chunk = 4096;
    let loader = TokenLoader::open(
        docs.to_str().unwrap(),
        Some(&tok),
        TokenConfig {
            shuffle: false,
            chunk_bytes: chunk,
            ..cfg(1000, 4)
        },
    )
    .unwrap();
    let mut epoch = loader.epoch(0).unwrap();
    let mut batches = 0;
    let mut last_positions = 0;
    while let Some(b) = epoch.next_batch().unwrap() {
        batches += 1;
        last_positions = *b.positions.last().unwrap();
    }
    // The stream: the long file's words, EOS, 3 words, EOS; whole batches of 4 windows.
    let stream = words + 1 + 4;
    assert_eq!(batches, (stream - 1) / 1000 / 4);
    assert_eq!(last_positions as usize, batches * 4 * 1000);
    assert!(epoch.largest_chunk() <= chunk, "{}", epoch.largest_chunk());
    assert!(
        epoch.largest_buffer() <= 2 * chunk + 1,
        "the read buffer grew to {}",
        epoch.largest_buffer()
    );
}

#[test]
fn bin_files_are_one_stream_with_positions_from_the_last_eos() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("train.bin");
    // Documents of 5, 0 and 9 tokens, each followed by EOS 7, as uint16 (nanoGPT).
    let ids: Vec<u16> = [vec![1, 2, 3, 4, 5, 7], vec![7], vec![9; 9], vec![7]].concat();
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(&path, bytes).unwrap();
    let loader = TokenLoader::open(
        path.to_str().unwrap(),
        None,
        TokenConfig {
            shuffle: false,
            eos: Some(Eos::Id(7)),
            token_dtype: TokenDtype::U16,
            ..cfg(4, 2)
        },
    )
    .unwrap();
    assert_eq!(loader.documents(), 4);
    let b = all(&loader, 0);
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].tokens, vec![1, 2, 3, 4, 5, 5, 7, 7, 9, 9]);
    assert_eq!(b[0].positions, vec![0, 1, 2, 3, 4, 4, 5, 0, 0, 1]);
    assert_eq!(b[1].positions, vec![1, 2, 3, 4, 5, 5, 6, 7, 8, 9]);
    // Shuffled: the same windows in another order, resumable.
    let shuffled = TokenLoader::open(
        path.to_str().unwrap(),
        None,
        TokenConfig {
            eos: Some(Eos::Id(7)),
            seed: 1,
            ..cfg(4, 1)
        },
    )
    .unwrap();
    let whole = all(&shuffled, 0);
    let mut e = shuffled.epoch(0).unwrap();
    e.next_batch().unwrap();
    let rest: Vec<_> = shuffled
        .resume(e.state())
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rest, whole[1..]);
}

#[test]
fn bad_input_is_an_error_naming_the_file_and_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), true);
    let data = jsonl(dir.path(), 5);
    let err = |r: Result<TokenLoader, TokenError>| r.err().expect("an error").to_string();
    let open = |data: &Path, tok: &Path, c: TokenConfig| {
        TokenLoader::open(data.to_str().unwrap(), Some(tok), c)
    };

    let broken = dir.path().join("broken.json");
    std::fs::write(&broken, "{\"model\": ").unwrap();
    let m = err(open(&data, &broken, cfg(8, 2)));
    assert!(m.contains("broken.json") && m.contains("tokenizer"), "{m}");

    let m = err(open(&data, &tok, cfg(0, 2)));
    assert!(
        m.starts_with("seq_len: must be 1 to 2147483646, not 0"),
        "{m}"
    );
    // A setting's error names its field, for each front end to spell its way.
    for (c, want) in [
        (cfg(0, 2), TokenSetting::SeqLen),
        (cfg(8, 0), TokenSetting::BatchSize),
        (
            TokenConfig {
                chunk_bytes: 1 << 40,
                ..cfg(8, 2)
            },
            TokenSetting::ChunkBytes,
        ),
        (
            TokenConfig {
                rank: 2,
                world_size: 2,
                ..cfg(8, 2)
            },
            TokenSetting::Rank,
        ),
    ] {
        match open(&data, &tok, c).err() {
            Some(TokenError::Setting { setting, .. }) => assert_eq!(setting, want),
            other => panic!("{want}: {other:?}"),
        }
    }

    let m = err(open(
        &data,
        &tok,
        TokenConfig {
            eos: Some(Eos::Token("</s>".into())),
            ..cfg(8, 2)
        },
    ));
    assert!(
        m.contains("tokenizer.json") && m.contains("eos '</s>'"),
        "{m}"
    );
    let m = err(open(
        &data,
        &tok,
        TokenConfig {
            eos: Some(Eos::Id(999)),
            ..cfg(8, 2)
        },
    ));
    assert!(m.contains("eos id 999"), "{m}");

    let no_eos = tokenizer(dir.path(), false);
    let m = err(open(&data, &no_eos, cfg(8, 2)));
    assert!(m.contains("no-eos.json") && m.contains("give eos="), "{m}");

    // A JSON line whose text is a number, and a Parquet text column of integers.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"text\": \"w1 w2\"}\n\n{\"text\": 5}\n").unwrap();
    let loader = open(
        &bad,
        &tok,
        TokenConfig {
            shuffle: false,
            ..cfg(2, 1)
        },
    )
    .unwrap();
    let m = loader
        .epoch(0)
        .unwrap()
        .find_map(Result::err)
        .expect("an error")
        .to_string();
    assert!(
        m.contains("bad.jsonl line 3") && m.contains("a number, not a string"),
        "{m}"
    );

    let pq = dir.path().join("ints.parquet");
    let schema = Schema::new(vec![Field::new("text", DataType::Int64, false)]);
    let batch = RecordBatch::try_new(
        Arc::new(schema.clone()),
        vec![Arc::new(Int64Array::from(vec![1, 2])) as ArrayRef],
    )
    .unwrap();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(&pq).unwrap(), Arc::new(schema), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let m = err(open(&pq, &tok, cfg(8, 2)));
    assert!(m.contains("ints.parquet") && m.contains("not text"), "{m}");

    // Invalid UTF-8 in a text file: an error with the byte offset, not replaced.
    let txt = dir.path().join("texts");
    std::fs::create_dir(&txt).unwrap();
    std::fs::write(txt.join("a.txt"), b"w1 w2 \xc3\x28 w3").unwrap();
    let loader = open(&txt, &tok, cfg(2, 1)).unwrap();
    let m = loader
        .epoch(0)
        .unwrap()
        .find_map(Result::err)
        .expect("an error")
        .to_string();
    assert!(
        m.contains("a.txt") && m.contains("invalid UTF-8 at byte 6"),
        "{m}"
    );
}

#[test]
fn a_mixture_draws_documents_by_weight_and_packs_them_by_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), true);
    let a = parquet_of(&dir.path().join("a.parquet"), 0..30);
    let b = parquet_of(&dir.path().join("b.parquet"), 100..140);
    let data = [
        a.to_str().unwrap().to_string(),
        b.to_str().unwrap().to_string(),
    ];
    // Mixture index g: a's row g below 30, else b's row g - 30 (document 100 + that).
    let doc = |g: usize| if g < 30 { g } else { 100 + g - 30 };
    let open = |mode, stop| {
        TokenLoader::open_many(
            &data,
            Some(&tok),
            TokenConfig {
                weights: Some(vec![3.0, 1.0]),
                stop,
                mode,
                seed: 2,
                ..cfg(8, 2)
            },
        )
        .unwrap()
    };
    let all_docs = open(TokenMode::Sync, Stop::AllExhausted);
    let order = all_docs.order(0);
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..70).collect::<Vec<_>>());
    // 3 to 1: of the first 20 draws, 15 from a (an evenly spread sequence).
    let from_a = order[..20].iter().filter(|&&g| g < 30).count();
    assert!((14..=16).contains(&from_a), "{from_a} of 20 from a");
    let docs: Vec<usize> = order.iter().map(|&g| doc(g)).collect();
    let want = reference(&docs, 8, 2);
    let got: Vec<_> = all(&open(TokenMode::Async, Stop::AllExhausted), 0)
        .into_iter()
        .map(|b| (b.tokens, b.positions))
        .collect();
    assert_eq!(got, want);
    // first_exhausted: the epoch ends when a runs out (at about 40 draws).
    let first = open(TokenMode::Sync, Stop::FirstExhausted).order(0);
    assert!(first.len() < 70 && first.iter().filter(|&&g| g < 30).count() == 30);
    // A mixture of other formats is refused, naming the data set.
    let lines = jsonl(dir.path(), 3);
    let err = TokenLoader::open_many(
        &[data[0].clone(), lines.to_str().unwrap().to_string()],
        Some(&tok),
        cfg(8, 2),
    )
    .err()
    .unwrap()
    .to_string();
    assert!(
        err.contains("docs.jsonl") && err.contains("Parquet"),
        "{err}"
    );
}

/// The packing rule over documents each started at a token: (document, first token).
fn reference_from(docs: &[(usize, u64)], seq_len: usize, batch_size: usize) -> Vec<TokenBatch> {
    let mut stream = Vec::new();
    for &(d, from) in docs {
        let ids = doc_words(d).into_iter().map(|w| w as i32 + 2).chain([0]);
        stream.extend(
            ids.enumerate()
                .skip(from as usize)
                .map(|(p, id)| (id, p as i32)),
        );
    }
    let windows: Vec<&[(i32, i32)]> = (0..)
        .map(|k| k * seq_len)
        .take_while(|s| s + seq_len < stream.len())
        .map(|s| &stream[s..s + seq_len + 1])
        .collect();
    windows
        .chunks_exact(batch_size)
        .map(|b| TokenBatch {
            tokens: b.iter().flat_map(|w| w.iter().map(|t| t.0)).collect(),
            positions: b.iter().flat_map(|w| w.iter().map(|t| t.1)).collect(),
            rows: batch_size,
            cols: seq_len + 1,
        })
        .collect()
}

#[test]
fn an_elastic_resume_deals_the_rest_and_goes_on_with_partly_read_documents() {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path(), true);
    let data = jsonl(dir.path(), 50);
    let open = |rank, world| {
        TokenLoader::open(
            data.to_str().unwrap(),
            Some(&tok),
            TokenConfig {
                rank,
                world_size: world,
                seed: 4,
                ..cfg(8, 2)
            },
        )
        .unwrap()
    };
    // Two ranks take 3 batches each, then stop.
    let mut states = Vec::new();
    let mut started = Vec::new();
    for rank in 0..2 {
        let l = open(rank, 2);
        let mut e = l.epoch(0).unwrap();
        for _ in 0..3 {
            e.next_batch().unwrap().unwrap();
        }
        let s = e.state().clone();
        let order = l.order(0);
        // Documents this rank finished, and the one it stood in.
        started.extend(order[..s.doc].iter().map(|&g| (g, u64::MAX)));
        started.push((order[s.doc], s.offset));
        states.push(s);
    }
    assert!(states.iter().any(|s| s.offset > 0), "{states:?}");
    // Three ranks take over: every document no rank finished, once, the partly read
    // ones from where their rank stood; each rank's batches follow the packing rule.
    let mut dealt = Vec::new();
    for rank in 0..3 {
        let l = open(rank, 3);
        let mut e = l.resume_elastic(&states).unwrap();
        let docs = l.documents_of(e.state());
        let want = reference_from(&docs, 8, 2);
        let mut got = Vec::new();
        while let Some(b) = e.next_batch().unwrap() {
            got.push(b);
            if got.len() == 2 {
                // A resume within the new layout goes on exactly.
                let saved: TokenState =
                    serde_json::from_str(&serde_json::to_string(e.state()).unwrap()).unwrap();
                let rest: Vec<_> = l.resume(&saved).unwrap().collect::<Result<_, _>>().unwrap();
                assert_eq!(rest, want[2..], "rank {rank} resumed in the new layout");
            }
        }
        assert_eq!(got, want, "rank {rank}");
        dealt.extend(docs);
    }
    let mut seen: Vec<usize> = dealt.iter().map(|d| d.0).collect();
    seen.extend(started.iter().filter(|s| s.1 == u64::MAX).map(|s| s.0));
    seen.sort_unstable();
    assert_eq!(seen, (0..50).collect::<Vec<_>>());
    for (g, offset) in started.iter().filter(|s| s.1 != u64::MAX) {
        assert!(
            dealt.contains(&(*g, *offset)),
            "document {g} from token {offset}"
        );
    }
    // A missing rank is an error naming it.
    let err = open(0, 3)
        .resume_elastic(&states[..1])
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("no state of rank 1"), "{err}");
}
