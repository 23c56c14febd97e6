"""A run's prompt, assembled once before its first model step and frozen in the run record."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fleet.agents import tokens
from fleet.agents.models.base import ChatMessage
from fleet.config import AgentConfig
from fleet.domain import context, delivery
from fleet.domain.values import Task, render_parts


def assemble(
    agent: AgentConfig,
    task: Task,
    history_newest_first: tuple[context.Record, ...],
    *,
    more_history: bool,
    tokenizer: tokens.Tokenizer | None = None,
    memory: Memory | None = None,
    remember: str = "all",
) -> dict[str, Any]:
    """The frozen context: the exact messages of the first model step plus their provenance.

    The system message is the instructions and the attached memory blocks; conversation notes
    follow as a user message marked as notes (untrusted data), then the history, then the
    input. With ``context_tokens`` the history gets what the rest leaves of it (counted by
    ``tokenizer``, default the process's). ``remember = "delivered"`` leaves replies whose
    delivery is not ``sent`` out (listed as dropped, ``undelivered``).
    """
    lim = agent.history
    fixed: list[dict[str, str]] = []
    parts = (agent.instructions, *((memory.blocks, memory.working) if memory else ()))
    system = "\n\n".join(p for p in parts if p)
    if system:
        fixed.append({"role": "system", "content": system})
    if memory is not None and memory.notes:
        fixed.append({"role": "user", "content": memory.notes, "kind": NOTES})
    if memory is not None and memory.observations:
        fixed.append({"role": "user", "content": memory.observations, "kind": OBSERVATIONS})
    said = {"role": "user", "content": render_parts(task.input)}
    budget: dict[str, Any] | None = None
    max_tokens: int | None = None
    tok = None
    if agent.context_tokens is not None:
        tok = tokenizer or tokens.tokenizer()
        taken = sum(tokens.message_tokens(tok, m["content"]) for m in (*fixed, said))
        max_tokens = max(0, agent.context_tokens - taken)
        budget = {
            "limits": {"context_tokens": agent.context_tokens, "history_tokens": max_tokens},
            "tokenizer": tok.name,
        }
    counter = tok
    sel = context.select(
        history_newest_first[: lim.max_items + DROPPED_SHOWN],
        max_items=lim.max_items,
        max_bytes=lim.max_bytes,
        more_exist=more_history or len(history_newest_first) > lim.max_items + DROPPED_SHOWN,
        max_tokens=max_tokens,
        cost=None if counter is None else (lambda r: tokens.message_tokens(counter, r.content)),
        keep=None
        if remember == "all"
        else (lambda r: delivery.remembered(r.role, r.delivery, remember)),
    )
    recalled: list[dict[str, str]] = []
    recall_record: dict[str, Any] | None = None
    if memory is not None and memory.recall is not None:
        text, recall_record = memory.recall(frozenset(r.id for r in sel.selected))
        if text:
            recalled.append({"role": "user", "content": text, "kind": RECALLED})
    history = ({"role": r.role, "content": r.content} for r in sel.selected)
    msgs = [*fixed, *recalled, *history, said]
    frozen = {
        "messages": msgs,
        "task_seq": task.seq,
        "submissions": task.submissions,
        **context.provenance(sel, max_items=lim.max_items, max_bytes=lim.max_bytes, tokens=budget),
    }
    if memory is not None:
        frozen["memory"] = memory.record
    if recall_record is not None:
        frozen["recall"] = recall_record
    return frozen


#: Messages past the item limit a claim still reads, so the run can list them as dropped.
DROPPED_SHOWN = 20


def history_reads(max_items: int) -> int:
    """How many newest messages a claim reads for an agent that keeps ``max_items``."""
    return max_items + DROPPED_SHOWN


def messages(frozen: dict[str, Any]) -> list[ChatMessage]:
    """The model messages of a frozen context (a retry replays exactly these)."""
    return [
        ChatMessage(role=m["role"], content=m["content"], name=m.get("kind"))
        for m in frozen["messages"]
    ]


#: ``kind`` (and the message ``name``) of the user message that carries conversation notes.
NOTES = "fleet_notes"
#: ``kind`` of the user message with recalled older messages (semantic recall).
RECALLED = "fleet_recall"
#: ``kind`` of the user message with observations of older history.
OBSERVATIONS = "fleet_observations"


@dataclass(frozen=True)
class Memory:
    """What a run's prompt shows of memory: block sections, the notes message, their record."""

    blocks: str = ""
    notes: str | None = None
    record: dict[str, Any] = field(default_factory=dict)
    #: Working memory's section of the system message.
    working: str = ""
    #: Observations of older history (a user message ahead of the recent window).
    observations: str | None = None
    #: Semantic recall, given the ids the recent window holds: (message or None, record).
    recall: Callable[[frozenset[int]], tuple[str | None, dict[str, Any]]] | None = None
