"""Streaming redaction: what a model reply streamed in chunks costs to redact, against redacting
the whole reply once (``Redactor.text``, what the journal does), measured in the same run.

reply       a 20,000-character reply (prose, code, a JSON config, a few secrets of each kind and a
            PEM block) fed to a ``StreamRedactor`` in 4,000 chunks of 5 characters, then flushed:
            total time, µs per chunk, and the most characters it held at once.
by char     the same reply fed one character at a time (20,000 chunks).
held line   adversarial: one 20,000-character ``Authorization:`` header line, which stays held to
            its end, in 4,000 chunks: each chunk with a space rescans what is held.
Each figure is the best of ``--repeat`` runs; every run checks that the pieces join to
``Redactor.text`` of the whole.
Run: ``python -m bench.stream_redaction [--repeat N]``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from fleet.domain.redaction import Redactor
from fleet.domain.stream_redaction import StreamRedactor

KEY = "sk-" + "Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z"
EXTRA = "deploy-" + "Q9w8E7r6T5y4U3i2"
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join(["MIIEowIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB"] * 25)
    + "\n-----END RSA PRIVATE KEY-----\n"
)
WORDS = ("the", "worker", "claims", "a", "run", "and", "calls", "the", "model", "stores", "it")
PIECES = (
    f"Use the key {KEY} for the call. ",
    f"The deployment secret is {EXTRA}, keep it. ",
    'config = {"api_key": "abc def ghi", "timeout": 30}\n',
    "password: hunter2 and then more prose\n",
    "curl -H 'Authorization: Bearer abcdef0123456789xyz' https://bob:s3cret@example.com/x\n",
    "```python\ndef f(token: str) -> None:\n    return None\n```\n",
)


def reply(size: int, seed: int = 1) -> str:
    """Prose with a secret-bearing piece every few lines and one PEM block, cut to ``size``."""
    rng = random.Random(seed)
    out: list[str] = []
    n = 0
    while n < size:
        if rng.random() < 0.08:
            piece = rng.choice(PIECES)
        elif rng.random() < 0.1:
            piece = "\n"
        else:
            piece = rng.choice(WORDS) + " "
        if n > size // 2 and PEM not in out:
            piece = PEM
        out.append(piece)
        n += len(piece)
    return "".join(out)[:size]


def chunked(text: str, count: int) -> list[str]:
    step = -(-len(text) // count)
    return [text[i : i + step] for i in range(0, len(text), step)]


def best(repeat: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def stream(redactor: Redactor, chunks: list[str], whole: str) -> int:
    """Feed, flush, check the invariant; return the most characters held at once."""
    s = StreamRedactor(redactor)
    pieces, most = [], 0
    for chunk in chunks:
        pieces.append(s.feed(chunk))
        most = max(most, s.held)
    pieces.append(s.flush())
    assert "".join(pieces) == redactor.text(whole)
    return most


def stream_only(redactor: Redactor, chunks: list[str]) -> str:
    s = StreamRedactor(redactor)
    out = [s.feed(chunk) for chunk in chunks]
    out.append(s.flush())
    return "".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    redactor = Redactor([EXTRA])
    text = reply(20_000)
    header = ("Authorization: Basic " + "dXNlcjpwYXNz " * 1_540)[:20_000]
    cases = (
        ("reply", text, chunked(text, 4_000)),
        ("by char", text, list(text)),
        ("held line", header, chunked(header, 4_000)),
    )
    print(
        f"{'case':<10} {'chars':>7} {'chunks':>7} {'stream ms':>10} {'µs/chunk':>9} "
        f"{'whole ms':>9} {'ratio':>6} {'most held':>10}"
    )
    for name, whole, chunks in cases:
        most = stream(redactor, chunks, whole)
        feed = best(args.repeat, lambda c=chunks: stream_only(redactor, c))
        once = best(args.repeat, lambda w=whole: redactor.text(w))
        print(
            f"{name:<10} {len(whole):>7} {len(chunks):>7} {feed * 1e3:>10.2f} "
            f"{feed / len(chunks) * 1e6:>9.2f} {once * 1e3:>9.3f} {feed / once:>6.1f} {most:>10}"
        )


if __name__ == "__main__":
    main()
