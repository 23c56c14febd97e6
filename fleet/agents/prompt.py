"""A run's prompt, assembled once before its first model step and frozen in the run record."""

from __future__ import annotations

from typing import Any

from fleet.agents.models.base import ChatMessage
from fleet.config import AgentConfig
from fleet.domain import context
from fleet.domain.values import Task, render_parts


def assemble(
    agent: AgentConfig,
    task: Task,
    history_newest_first: tuple[context.Record, ...],
    *,
    more_history: bool,
) -> dict[str, Any]:
    """The frozen context: the exact messages of the first model step plus their provenance."""
    lim = agent.history
    sel = context.select(
        history_newest_first,
        max_items=lim.max_items,
        max_bytes=lim.max_bytes,
        more_exist=more_history,
    )
    msgs: list[dict[str, str]] = []
    if agent.instructions:
        msgs.append({"role": "system", "content": agent.instructions})
    msgs.extend({"role": r.role, "content": r.content} for r in sel.selected)
    msgs.append({"role": "user", "content": render_parts(task.input)})
    return {
        "messages": msgs,
        "task_seq": task.seq,
        "submissions": task.submissions,
        **context.provenance(sel, max_items=lim.max_items, max_bytes=lim.max_bytes),
    }


def messages(frozen: dict[str, Any]) -> list[ChatMessage]:
    """The model messages of a frozen context (a retry replays exactly these)."""
    return [ChatMessage(role=m["role"], content=m["content"]) for m in frozen["messages"]]
