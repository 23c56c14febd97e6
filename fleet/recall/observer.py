"""Observations: older history distilled by a model, condensed again as it grows.

After a run settles (a background job), once the conversation's unobserved history — messages
older than its recent window — outgrows ``token_threshold``, the observer distils its oldest part
into an observation over that range of message ids (level 0). Once the observations outgrow
``reflect_threshold``, the reflector condenses those not yet reflected into one reflection over
their whole span (level 1). Both are journaled by range: asking again for a range reads the
stored text instead of calling the model, so the same range always yields the same bytes.

A run's prompt shows them ahead of its recent window (a reflection replacing the observations it
condenses); the provenance lists each with its range.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from fleet.agents.models.base import ChatMessage, Model
from fleet.agents.tokens import Tokenizer
from fleet.agents.tools.base import Tool, ToolContext, ToolError
from fleet.config import ObservationsConfig
from fleet.store.recall import ObservationRow, ObservationStore

#: The observer's instructions.
OBSERVE = (
    "You distil part of a conversation into observations for later: facts stated, decisions "
    "made, preferences, open questions. Write short lines, one per observation; no greeting."
)
#: The reflector's instructions.
REFLECT = (
    "You condense earlier observations of a conversation into fewer, shorter lines, keeping "
    "every fact, decision, preference and open question that still matters."
)
#: What precedes observations in a run's prompt.
OBSERVATIONS_PREAMBLE = "Observations of the earlier conversation (distilled from its messages):"
#: Observer calls one job may make (the rest waits for the next settle).
MAX_CALLS = 4


def _tokens(tok: Tokenizer, texts: Sequence[str]) -> int:
    return sum(tok.count(t) for t in texts)


def observe_range(
    store: ObservationStore,
    model: Model,
    conversation_id: uuid.UUID,
    *,
    generation: int,
    level: int,
    span: tuple[int, int],
    lines: Sequence[str],
    tok: Tokenizer,
    now: datetime,
) -> tuple[ObservationRow, bool]:
    """The observation of ``span`` at ``level``: the journaled one, or a new model call's
    (journaled before it is returned). Also says whether the model was called."""
    found = store.observation_at(conversation_id, generation, level, span)
    if found is not None:
        return found, False
    prompt = [
        ChatMessage(role="system", content=OBSERVE if level == 0 else REFLECT),
        ChatMessage(role="user", content="\n".join(lines)),
    ]
    reply = model.complete(prompt, ())
    text = reply.message.content.strip()
    row = ObservationRow(level, span[0], span[1], text, model.name, tok.count(text))
    return store.save_observation(conversation_id, generation, row, now), True


def observe(
    store: ObservationStore,
    model: Model,
    cfg: ObservationsConfig,
    conversation_id: uuid.UUID,
    *,
    keep_recent: int,
    tok: Tokenizer,
    clock: Callable[[], datetime],
) -> int:
    """Observe (and reflect) what the conversation has outgrown; returns model calls made."""
    calls = 0
    for _ in range(MAX_CALLS):
        existing = store.observations(conversation_id)
        after = max((o.to_message_id for o in existing if o.level == 0), default=0)
        generation, pending = store.unobserved(
            conversation_id, after_id=after, keep_recent=keep_recent
        )
        texts = [f"[#{mid} {role}] {content}" for mid, role, content in pending]
        if _tokens(tok, texts) <= cfg.token_threshold:
            break
        chunk: list[str] = []
        ids: list[int] = []
        for (mid, _, _), line in zip(pending, texts, strict=True):
            chunk.append(line)
            ids.append(mid)
            if _tokens(tok, chunk) >= cfg.token_threshold // 2:
                break
        _, called = observe_range(
            store,
            model,
            conversation_id,
            generation=generation,
            level=0,
            span=(ids[0], ids[-1]),
            lines=chunk,
            tok=tok,
            now=clock(),
        )
        calls += called
    existing = store.observations(conversation_id)
    loose = _unreflected(existing)
    if loose and _tokens(tok, [o.text for o in loose]) > cfg.reflect_threshold:
        span = (loose[0].from_message_id, loose[-1].to_message_id)
        generation, _ = store.unobserved(conversation_id, after_id=span[1], keep_recent=0)
        _, called = observe_range(
            store,
            model,
            conversation_id,
            generation=generation,
            level=1,
            span=span,
            lines=[o.text for o in loose],
            tok=tok,
            now=clock(),
        )
        calls += called
    return calls


def _unreflected(rows: Sequence[ObservationRow]) -> list[ObservationRow]:
    """Level-0 observations no reflection covers, oldest first."""
    reflected = [(r.from_message_id, r.to_message_id) for r in rows if r.level == 1]
    return [
        o
        for o in rows
        if o.level == 0
        and not any(a <= o.from_message_id and o.to_message_id <= b for a, b in reflected)
    ]


def shown(
    rows: Sequence[ObservationRow], seqs: Mapping[int, int | None] | None = None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The prompt's observations message (reflections in place of what they condense) and its
    provenance record; ``seqs`` gives each message's turn, for the range's ``from_seq`` and
    ``to_seq``."""
    reflections = [r for r in rows if r.level == 1]
    use = sorted([*reflections, *_unreflected(rows)], key=lambda r: r.from_message_id)
    seq = seqs or {}
    record = [
        {
            "level": r.level,
            "from_seq": seq.get(r.from_message_id),
            "to_seq": seq.get(r.to_message_id),
            "from_message_id": r.from_message_id,
            "to_message_id": r.to_message_id,
            "tokens": r.tokens,
            "model": r.model,
        }
        for r in use
    ]
    if not use:
        return None, record
    body = "\n".join(f"[messages #{r.from_message_id} to #{r.to_message_id}] {r.text}" for r in use)
    return f"{OBSERVATIONS_PREAMBLE}\n{body}", record


def search_tool(
    store: ObservationStore,
    embedder: Any,
    conversation_id: uuid.UUID,
    *,
    top_k: int = 3,
) -> Tool:
    """``recall_observations``: the observations of this conversation most like a query."""

    def find(args: dict[str, Any], ctx: ToolContext) -> str:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip() or set(args) != {"query"}:
            raise ToolError("give {query: '...'}: what to look for in the observations")
        rows = store.observations(conversation_id)
        if not rows:
            return "no observations yet"
        import numpy as np

        from fleet.domain.recall import best

        vectors = embedder.embed([r.text for r in rows])
        hits = best(embedder.embed([query])[0], np.asarray(vectors), top_k=top_k, threshold=-1)
        return "\n".join(
            f"[messages #{rows[i].from_message_id} to #{rows[i].to_message_id}, score "
            f"{score}] {rows[i].text}"
            for i, score in hits
        )

    return Tool(
        name="recall_observations",
        description="Search the observations of this conversation's earlier history.",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look for."}},
            "required": ["query"],
            "additionalProperties": False,
        },
        fn=find,
        retry="safe",
        origin="fleet:observations",
    )
