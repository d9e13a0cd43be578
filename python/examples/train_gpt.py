"""A small GPT-style model trained from stoker.TokenLoader batches (docs/tokens.md).

    python train_gpt.py DATA TOKENIZER [--steps 200] [--seq-len 128] [--batch-size 8]
                        [--d-model 128] [--layers 2] [--heads 4] [--lr 3e-3] [--json]

DATA is anything TokenLoader reads (Parquet, JSON lines, text files, a .bin file).
Each batch's `tokens[:, :-1]` are the inputs and `tokens[:, 1:]` the targets; the
`positions` give each token its place in its document, so the position embedding
restarts after every EOS, and the attention mask keeps a token from attending across
a document boundary. Prints the loss every 10 steps (`--json`: one JSON line at the
end with the first and last loss). Needs torch.
"""

import argparse
import json
import math
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import stoker


class Block(nn.Module):  # type: ignore[misc]  # torch may be absent for mypy
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):  # type: ignore[misc]
    def __init__(self, vocab: int, seq_len: int, d: int, layers: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.heads = heads

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        n, t = tokens.shape
        # A document's position past the window (a long document) is clamped: the
        # embedding table has seq_len rows.
        x = self.tok(tokens) + self.pos(positions.clamp(max=self.pos.num_embeddings - 1))
        # Causal, and within one document: token j is seen by i when j <= i and no
        # document starts in (j, i] (a position of 0 starts one).
        doc = torch.cumsum((positions == 0).long(), dim=1)
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).tril()
        allowed = causal[None] & (doc[:, :, None] == doc[:, None, :])
        mask = (~allowed).repeat_interleave(self.heads, dim=0)
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("data")
    p.add_argument("tokenizer")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    loader = stoker.TokenLoader(a.data, a.tokenizer, seq_len=a.seq_len,
                                batch_size=a.batch_size, seed=a.seed, workers=a.threads)
    vocab = json.load(open(a.tokenizer, encoding="utf-8"))
    size = max(list(vocab["model"]["vocab"].values())
               + [t["id"] for t in vocab.get("added_tokens", [])]) + 1
    model = GPT(size, a.seq_len, a.d_model, a.layers, a.heads)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.1)
    losses, step = [], 0
    while step < a.steps:
        got = False
        for batch in loader:
            got = True
            tokens = torch.from_numpy(batch["tokens"].astype(np.int64))
            positions = torch.from_numpy(batch["positions"].astype(np.int64))
            logits = model(tokens[:, :-1], positions[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, size), tokens[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
            if step % 10 == 0 and not a.json:
                print(f"step {step}: loss {loss.item():.3f} (epoch {loader.epoch})")
            if step >= a.steps:
                break
        if not got:
            sys.exit("the data set holds less than one batch")
    out = {"steps": step, "first_loss": losses[0], "last_loss": losses[-1],
           "uniform_loss": math.log(size)}
    print(json.dumps(out) if a.json else f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")


if __name__ == "__main__":
    main()
