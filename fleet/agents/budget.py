"""Applying a run's token budget to what it sends the model (see ``fleet.domain.budget``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleet.agents.models.base import ChatMessage
from fleet.agents.tokens import Tokenizer, message_tokens
from fleet.constants import SHORTENED_RESULT_TOKENS
from fleet.domain.budget import Item, to_shorten


def _calls(msg: ChatMessage) -> list[dict[str, Any]] | None:
    if not msg.tool_calls:
        return None
    return [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in msg.tool_calls]


def _cut(tok: Tokenizer, text: str, total: int) -> str:
    return (
        tok.head(text, SHORTENED_RESULT_TOKENS)
        + f"\n[... shortened by fleet to fit context_tokens: the first {SHORTENED_RESULT_TOKENS}"
        f" of {total} tokens]"
    )


def fit(
    messages: Sequence[ChatMessage], budget: int, tok: Tokenizer
) -> tuple[list[ChatMessage], int, list[dict[str, Any]]]:
    """What to send: the messages with the oldest tool results cut until they fit ``budget``;
    also the tokens sent and a record of each result cut (call id, tool, tokens, kept)."""
    items: list[Item] = []
    texts: list[int] = []
    for msg in messages:
        cost = message_tokens(tok, msg.content, _calls(msg))
        text = tok.count(msg.content) if msg.role == "tool" else 0
        cut = (
            message_tokens(tok, _cut(tok, msg.content, text))
            if msg.role == "tool" and text > SHORTENED_RESULT_TOKENS
            else cost
        )
        items.append(Item(msg.role == "tool", cost, min(cost, cut)))
        texts.append(text)
    chosen = to_shorten(items, budget)
    sent = list(messages)
    record: list[dict[str, Any]] = []
    for index in chosen:
        msg = messages[index]
        sent[index] = msg.model_copy(update={"content": _cut(tok, msg.content, texts[index])})
        record.append(
            {
                "call_id": msg.tool_call_id,
                "tool": msg.name,
                "tokens": texts[index],
                "kept": SHORTENED_RESULT_TOKENS,
            }
        )
    total = sum(item.shortened if i in set(chosen) else item.tokens for i, item in enumerate(items))
    return sent, total, record
