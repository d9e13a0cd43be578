"""python/examples/train_gpt.py run for real on a small repetitive text set: the
loss must fall well below its start. It needs torch, which the test venv (and CI)
does not install: without it the test skips, saying so."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_tokens import VOCAB, text, write_tokenizer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_gpt.py"


def test_gpt_example_learns(tmp_path):
    try:
        import torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"SKIPPED: torch is not installed ({e}); the GPT example needs it")
    tok = write_tokenizer(tmp_path / "tokenizer.json")
    lines = tmp_path / "docs.jsonl"
    lines.write_text("".join(json.dumps({"text": text(d % 7)}) + "\n" for d in range(400)))
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), str(lines), str(tok), "--steps", "60",
         "--seq-len", "32", "--d-model", "64", "--json"],
        capture_output=True, text=True, timeout=900,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["steps"] == 60 and VOCAB > 0
    assert r["last_loss"] < 0.5 * r["first_loss"], r
