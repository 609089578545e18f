"""o200k_base counters offline: which ones count exactly, and how fast (issue 41.8).

Run: python -m ops.bench.o200k [DATA_DIR]

The reference is tiktoken's own o200k_base definition (pattern, specials) over quicktok's vocabulary,
which tests/unit/test_o200k.py shows is the official file byte for byte (sha256): the official
tokenizer, offline. Each candidate that is installed counts every text of the shared transcripts
(whole files and lines), is checked against the reference, and timed (best of three, one thread).
Candidates: quicktok (the project's dependency), tiktoken itself (the reference; its encode, then
len), and two PyPI packages that ship o200k in a native module, bpe-openai and toktok-rs, when they
are installed (they are not dependencies: `pip install bpe-openai toktok-rs` beside this).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import quicktok
import tiktoken
from tiktoken_ext import openai_public


def reference() -> tiktoken.Encoding:
    counter = quicktok.get_encoding("o200k_base")
    ranks = {counter.decode_single_token_bytes(i): i for i in range(199_998)}
    with mock.patch.object(openai_public, "load_tiktoken_bpe", return_value=ranks):
        return tiktoken.Encoding(**openai_public.o200k_base())


def candidates(ref: tiktoken.Encoding) -> dict[str, Callable[[str], int]]:
    out: dict[str, Callable[[str], int]] = {
        "quicktok": quicktok.get_encoding("o200k_base").count,
        "tiktoken (reference)": lambda t: len(ref.encode_ordinary(t)),
    }
    try:
        import bpe_openai

        bpe = bpe_openai.get_encoding("o200k_base")
        out["bpe-openai"] = lambda t: len(bpe.encode(t))
    except ImportError:
        pass
    try:
        import toktok

        out["toktok-rs"] = lambda t: int(toktok.batch_count([t], "o200k_base")[0])
    except ImportError:
        pass
    return out


def texts(root: Path) -> list[str]:
    out = []
    for path in sorted(p for p in (root / "transcripts").rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        out += [text, *text.splitlines()]
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parents[3] / "shared" / "data"
    corpus = [t.encode("utf-16", "surrogatepass").decode("utf-16", "replace") for t in texts(root)]
    megabytes = sum(len(t.encode()) for t in corpus) / 1e6
    ref = reference()
    expected = [len(ref.encode_ordinary(t)) for t in corpus]
    rows = []
    for name, count in candidates(ref).items():
        wrong = refused = 0
        for t, e in zip(corpus, expected, strict=True):
            try:
                wrong += count(t) != e
            except ValueError:  # bpe-openai: "Input too long to encode safely"
                refused += 1
        if refused:
            rows.append(
                {"counter": name, "texts": len(corpus), "wrong": wrong, "refused": refused, "mb_per_s": 0.0}
            )
            continue
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            for t in corpus:
                count(t)
            best = min(best, time.perf_counter() - started)
        rows.append(
            {
                "counter": name,
                "texts": len(corpus),
                "wrong": wrong,
                "refused": 0,
                "mb_per_s": round(megabytes / best, 1),
            }
        )
    print(f"o200k_base over {megabytes:.1f} MB of shared transcripts ({len(corpus)} texts):")
    for r in rows:
        print(
            f"  {r['counter']:<22} wrong {r['wrong']:>5}  refused {r['refused']:>4}   {r['mb_per_s']:>6} MB/s"
        )
    return {"rows": rows, "megabytes": round(megabytes, 1)}


if __name__ == "__main__":
    main()
