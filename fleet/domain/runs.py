"""What a run produces: its recorded steps and how it ended."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fleet.domain.values import TaskStatus


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One model or tool step of a run, ready to store."""

    step: int
    kind: str
    name: str
    input: Any
    output: Any
    error: str | None
    usage: dict[str, int]
    started_at: datetime
    duration_ms: float


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended, as the store records it."""

    status: TaskStatus
    reply: str | None
    error: str | None
    usage: dict[str, int]
    traces: Sequence[TraceRow] = ()
