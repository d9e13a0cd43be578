"""Peers of `stoker-load bench --tokens` (benches/peers/token_compare.sh).

    python token_peers.py make OUT_DIR [--docs N]      texts.parquet + tokenizer.json
    python token_peers.py encode_batch DATA TOKENIZER  the tokenizers library
    python token_peers.py datasets_map DATA TOKENIZER  datasets.map + packing

Each measuring command prints one JSON line: {"peer", "tokens", "seconds",
"tokens_per_s"}; tokens count every document's ids plus one EOS each (what stoker
packs), timed from the Parquet file to the ids (encode_batch) or to packed windows
(datasets.map). Threads: THREADS (default 2) for encode_batch's rayon pool
(RAYON_NUM_THREADS must be set before tokenizers is imported: the script re-runs
itself with it), num_proc=THREADS for datasets.map.
"""

import argparse
import json
import os
import random
import sys
import time

THREADS = int(os.environ.get("THREADS", "2"))


def make(out, docs):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    os.makedirs(out, exist_ok=True)
    rng = random.Random(0)
    syll = ["ka", "to", "ri", "mu", "sen", "lo", "va", "qui", "dre", "pan", "th", "es"]
    words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(5000)]
    texts = []
    for _ in range(docs):
        n = int(rng.lognormvariate(5.5, 1.0)) + 1  # about 250 words, a long tail
        sent = " ".join(rng.choice(words) for _ in range(n))
        texts.append(sent.replace(" ka ", ". Ka ").replace(" to ", ",\nto "))
    pq.write_table(pa.table({"text": texts}), os.path.join(out, "texts.parquet"),
                   row_group_size=1000)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8192, special_tokens=["<|endoftext|>"],
                                  show_progress=False)
    tok.train_from_iterator(texts[:20000], trainer=trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    print(json.dumps({"out": out, "docs": docs,
                      "bytes": sum(len(t.encode()) for t in texts)}))


def texts_of(data):
    import pyarrow.parquet as pq
    return pq.read_table(data, columns=["text"]).column("text").to_pylist()


def encode_batch(data, tokenizer):
    if os.environ.get("RAYON_NUM_THREADS") != str(THREADS):
        os.environ["RAYON_NUM_THREADS"] = str(THREADS)
        os.execv(sys.executable, [sys.executable] + sys.argv)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer)
    start = time.perf_counter()
    texts = texts_of(data)
    n = 0
    for i in range(0, len(texts), 1000):
        for e in tok.encode_batch_fast(texts[i:i + 1000], add_special_tokens=False):
            n += len(e.ids) + 1
    return n, time.perf_counter() - start


def datasets_map(data, tokenizer, seq_len=1024):
    import numpy as np
    from datasets import Dataset
    from tokenizers import Tokenizer

    def encode(batch):
        tok = Tokenizer.from_file(tokenizer)
        eos = tok.token_to_id("<|endoftext|>")
        return {"ids": [e.ids + [eos] for e in
                        tok.encode_batch(batch["text"], add_special_tokens=False)]}

    start = time.perf_counter()
    ds = Dataset.from_parquet(data, keep_in_memory=True)
    ds = ds.map(encode, batched=True, num_proc=THREADS, remove_columns=["text"],
                keep_in_memory=True)
    # Packing as stoker packs: one stream, windows of seq_len + 1 with stride seq_len.
    stream = np.concatenate([np.asarray(x, np.int32) for x in ds["ids"]])
    windows = (len(stream) - 1) // seq_len
    idx = np.arange(windows)[:, None] * seq_len + np.arange(seq_len + 1)[None, :]
    packed = stream[idx]
    return int(len(stream)), time.perf_counter() - start + 0 * packed.size


def main():
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["make", "encode_batch", "datasets_map"])
    p.add_argument("a")
    p.add_argument("b", nargs="?")
    p.add_argument("--docs", type=int, default=100_000)
    args = p.parse_args()
    if args.command == "make":
        make(args.a, args.docs)
        return
    fn = encode_batch if args.command == "encode_batch" else datasets_map
    tokens, seconds = fn(args.a, args.b)
    print(json.dumps({"peer": args.command, "threads": THREADS, "tokens": tokens,
                      "seconds": seconds, "tokens_per_s": tokens / seconds}))


if __name__ == "__main__":
    main()
