"""stoker.TokenLoader: Parquet texts written by pyarrow (row groups of 7), JSON lines,
text files and nanoGPT-style uint16 .bin files, tokenized by a WordLevel
tokenizer.json written here in the Hub's layout (the `tokenizers` package is not
needed). The batches follow the packing rule, are the same in sync and async mode,
resume exactly mid-document through state_dict, and bad input is named."""

import json

import numpy as np
import pytest

import stoker

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

VOCAB = 40


def write_tokenizer(path, eos=True):
    """Word `wN` is id N + 2; 0 is <|endoftext|> (or <pad> without eos), 1 <unk>."""
    vocab = {("<|endoftext|>" if eos else "<pad>"): 0, "<unk>": 1}
    vocab.update({f"w{i}": i + 2 for i in range(VOCAB)})
    added = (
        [{"id": 0, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
          "rstrip": False, "normalized": False, "special": True}]
        if eos else []
    )
    path.write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    }, indent=2))
    return path


def doc_words(d):
    return [(d * 11 + k * 3) % VOCAB for k in range((d * 5 + 2) % 33)]


def text(d):
    return " ".join(f"w{w}" for w in doc_words(d))


def reference(order, seq_len, batch_size):
    """The packing rule: ids and positions of the documents in `order`, each then EOS,
    windows of seq_len + 1 with stride seq_len, whole batches."""
    stream = []
    for d in order:
        ids = [w + 2 for w in doc_words(d)] + [0]
        stream += [(t, p) for p, t in enumerate(ids)]
    windows = [stream[s:s + seq_len + 1]
               for s in range(0, len(stream) - seq_len, seq_len)]
    out = []
    for b in range(len(windows) // batch_size):
        w = windows[b * batch_size:(b + 1) * batch_size]
        out.append((np.array([[t for t, _ in x] for x in w], np.int32),
                    np.array([[p for _, p in x] for x in w], np.int32)))
    return out


@pytest.fixture
def tok(tmp_path):
    return write_tokenizer(tmp_path / "tokenizer.json")


@pytest.fixture
def parquet_docs(tmp_path):
    path = tmp_path / "train.parquet"
    table = pa.table({"id": list(range(60)), "text": [text(d) for d in range(60)]})
    pq.write_table(table, path, row_group_size=7)
    return path


def batches(loader):
    return [(b["tokens"].copy(), b["positions"].copy()) for b in loader]


def test_parquet_batches_follow_the_packing_rule(tok, parquet_docs):
    loader = stoker.TokenLoader(parquet_docs, tok, seq_len=16, batch_size=3,
                                shuffle=False, mode="sync")
    assert loader.eos_id == 0 and loader.documents == 60
    got = batches(loader)
    want = reference(range(60), 16, 3)
    assert len(got) == len(want) > 5
    for (t, p), (wt, wp) in zip(got, want):
        assert t.dtype == np.int32 and t.shape == (3, 17)
        np.testing.assert_array_equal(t, wt)
        np.testing.assert_array_equal(p, wp)


def test_shuffled_batches_are_the_same_in_any_mode(tok, parquet_docs):
    def run(**kw):
        loader = stoker.TokenLoader(parquet_docs, tok, seq_len=8, batch_size=4, seed=3,
                                    chunk_bytes=64, **kw)
        return [batches(loader) for _ in range(2)]  # two epochs
    sync = run(mode="sync")
    assert len(sync[0]) > 5
    for kw in [dict(mode="async", workers=1), dict(mode="async", workers=4)]:
        other = run(**kw)
        for e in range(2):
            assert len(other[e]) == len(sync[e])
            for a, b in zip(other[e], sync[e]):
                np.testing.assert_array_equal(a[0], b[0])
                np.testing.assert_array_equal(a[1], b[1])
    # The epochs' orders differ; plain file order is another one again.
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(sync[0], sync[1]))


def test_state_dict_resumes_mid_document(tok, parquet_docs):
    kw = dict(seq_len=10, batch_size=2, seed=1, chunk_bytes=64)
    whole = batches(stoker.TokenLoader(parquet_docs, tok, **kw))
    loader = stoker.TokenLoader(parquet_docs, tok, **kw)
    it = iter(loader)
    for _ in range(7):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["batches"] == 7 and state["epoch"] == 0
    again = stoker.TokenLoader(parquet_docs, tok, **kw)
    again.load_state_dict(state)
    rest = batches(again)
    assert len(rest) == len(whole) - 7
    for a, b in zip(rest, whole[7:]):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    # After the epoch, the state is the next epoch's start.
    assert again.state_dict()["epoch"] == 1 and again.state_dict()["batches"] == 0
    bad = dict(state, world_size=2)
    with pytest.raises(ValueError, match="world size 2"):
        again.load_state_dict(bad)


def test_jsonl_text_files_and_bin(tmp_path, tok):
    lines = tmp_path / "docs.jsonl"
    lines.write_text("".join(json.dumps({"text": text(d)}) + "\n" for d in range(20)))
    folder = tmp_path / "texts"
    folder.mkdir()
    for d in range(20):
        (folder / f"{d:03}.txt").write_text(text(d))
    want = reference(range(20), 6, 2)
    for data in [lines, folder]:
        got = batches(stoker.TokenLoader(data, tok, seq_len=6, batch_size=2, shuffle=False))
        assert len(got) == len(want)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])
    # The same stream pre-tokenized, as nanoGPT writes train.bin.
    ids = np.concatenate([np.array([w + 2 for w in doc_words(d)] + [0], np.uint16)
                          for d in range(20)])
    ids.tofile(tmp_path / "train.bin")
    got = batches(stoker.TokenLoader(tmp_path / "train.bin", seq_len=6, batch_size=2,
                                     shuffle=False, eos=0, token_dtype="uint16"))
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


def test_bad_input_is_named(tmp_path, tok, parquet_docs):
    broken = tmp_path / "broken.json"
    broken.write_text('{"model": ')
    with pytest.raises(stoker.LoaderError, match="broken.json"):
        stoker.TokenLoader(parquet_docs, broken, seq_len=8)
    with pytest.raises(ValueError, match="argument 'seq_len'"):
        stoker.TokenLoader(parquet_docs, tok, seq_len=0)
    with pytest.raises(stoker.LoaderError, match="eos '</s>'"):
        stoker.TokenLoader(parquet_docs, tok, seq_len=8, eos="</s>")
    no_eos = write_tokenizer(tmp_path / "no-eos.json", eos=False)
    with pytest.raises(stoker.LoaderError, match="no-eos.json.*give eos="):
        stoker.TokenLoader(parquet_docs, no_eos, seq_len=8)
    # With eos given by id, the same tokenizer works.
    assert stoker.TokenLoader(parquet_docs, no_eos, seq_len=8, eos=0).eos_id == 0
    ints = tmp_path / "ints.parquet"
    pq.write_table(pa.table({"text": [1, 2, 3]}), ints)
    with pytest.raises(stoker.LoaderError, match="ints.parquet.*not text"):
        stoker.TokenLoader(ints, tok, seq_len=8)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"w1 w2 \xff w3")
    loader = stoker.TokenLoader(bad, tok, seq_len=2, batch_size=1)
    with pytest.raises(stoker.LoaderError, match=r"bad.txt.*invalid UTF-8 at byte 6"):
        batches(loader)


@pytest.mark.parametrize(
    "kwargs,says",
    [
        (dict(seq_len=0), "argument 'seq_len': must be 1 to 2147483646, not 0"),
        (dict(seq_len=2**31), "argument 'seq_len': must be 1 to 2147483646, not 2147483648"),
        (dict(batch_size=0), "argument 'batch_size': must be at least 1, not 0"),
        (dict(batch_size=2**30), "argument 'batch_size': a batch of 1073741824 windows of 9"),
        (dict(workers=0), "argument 'workers': must be 1 to 256, not 0"),
        (dict(chunk_bytes=63), "argument 'chunk_bytes': must be 64 to 1073741824, not 63"),
        (dict(rank=2, world_size=2), "argument 'rank': "),
        (dict(world_size=0), "argument 'world_size': "),
        (dict(tokenizer=None), "argument 'tokenizer': "),
    ],
)
def test_bad_token_settings_name_their_argument(tok, parquet_docs, kwargs, says):
    """The ranges are the token loader's (TokenConfig's check, in Rust), and its typed
    error names the setting, spelled as TokenLoader's argument."""
    kw = {"tokenizer": tok, "seq_len": 8, **kwargs}
    with pytest.raises(ValueError) as e:
        stoker.TokenLoader(parquet_docs, **kw)
    assert str(e.value).startswith(says), str(e.value)


def test_a_token_mixture_that_never_stops_names_stop(tmp_path, tok):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    for p in (a, b):
        pq.write_table(pa.table({"text": [text(d) for d in range(5)]}), p)
    with pytest.raises(ValueError) as e:
        stoker.TokenLoader([a, b], tok, seq_len=8, stop="never")
    assert str(e.value).startswith("argument 'stop': 'never' is not for token streams"), str(e.value)
    with pytest.raises(ValueError, match="argument 'weights': "):
        stoker.TokenLoader([a, b], tok, seq_len=8, weights=[1.0, -1.0])


def test_a_mixture_of_parquet_sets_keeps_to_the_weights(tmp_path, tok):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    pq.write_table(pa.table({"text": [text(d) for d in range(30)]}), a, row_group_size=7)
    pq.write_table(pa.table({"text": [text(d) for d in range(100, 140)]}), b)
    kw = dict(seq_len=8, batch_size=2, weights=[3.0, 1.0], seed=2)
    sync = batches(stoker.TokenLoader([a, b], tok, mode="sync", **kw))
    both = batches(stoker.TokenLoader([a, b], tok, workers=3, **kw))
    assert len(sync) == len(both) > 5
    for x, y in zip(sync, both):
        np.testing.assert_array_equal(x[0], y[0])
    # Every document once: the ids of both sets, EOS after each.
    n_tokens = sum(len(doc_words(d)) + 1 for d in list(range(30)) + list(range(100, 140)))
    assert len(sync) == (n_tokens - 1) // 8 // 2
    first = batches(stoker.TokenLoader([a, b], tok, stop="first_exhausted", **kw))
    assert len(first) < len(sync)
    with pytest.raises(ValueError, match="stop"):
        stoker.TokenLoader([a, b], tok, stop="never", **kw)


def test_elastic_resume_from_every_ranks_state(tmp_path, tok):
    lines = tmp_path / "docs.jsonl"
    lines.write_text("".join(json.dumps({"text": text(d)}) + "\n" for d in range(50)))
    kw = dict(seq_len=8, batch_size=2, seed=4)
    states = []
    for rank in range(2):
        loader = stoker.TokenLoader(lines, tok, rank=rank, world_size=2, **kw)
        it = iter(loader)
        for _ in range(3):
            next(it)
        states.append(json.loads(json.dumps(loader.state_dict())))
    total = 0
    for rank in range(3):
        loader = stoker.TokenLoader(lines, tok, rank=rank, world_size=3, **kw)
        loader.load_state_dict(states)
        first = next(iter(loader))
        saved = json.loads(json.dumps(loader.state_dict()))
        assert saved["elastic"]["world_size"] == 2 and len(saved["elastic"]["at"]) == 2
        rest = batches(loader)
        # Its own state (elastic) resumes within the new layout.
        again = stoker.TokenLoader(lines, tok, rank=rank, world_size=3, **kw)
        again.load_state_dict(saved)
        again_rest = batches(again)
        assert len(again_rest) == len(rest)
        for a, b in zip(again_rest, rest):
            np.testing.assert_array_equal(a[0], b[0])
        total += 1 + len(rest)
        assert first["tokens"].shape == (2, 9)
    # The three new ranks together deliver about what the two had left.
    n_tokens = sum(len(doc_words(d)) + 1 for d in range(50))
    assert 0 < total * 16 <= n_tokens - 2 * 3 * 16
    with pytest.raises(ValueError, match="no state of rank 1"):
        stoker.TokenLoader(lines, tok, rank=0, world_size=3, **kw).load_state_dict(states[:1])
