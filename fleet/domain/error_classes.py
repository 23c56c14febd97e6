"""Why a task did not succeed, in one word: the error class stored on the task (``errorClass``),
filtered on by bulk actions (``fleet tasks retry --error-class rate_limit``) and grouped by the
UI's failures page. One list, here, for tasks, bulk actions, the UI and metrics.

A run's outcome names its class where the failure is known (the runner: a model's error, the
step limit, the budget; the executor: the config, a tool gone); a task failed or cancelled
elsewhere (its worker lost on its last attempt, a cancel, a drop) gets its class from the
store's statement; ``of_text`` classifies what is left by the error's words.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Literal, get_args

if TYPE_CHECKING:
    from fleet.domain.runs import Outcome

ErrorClass = Literal[
    "rate_limit",
    "timeout",
    "auth",
    "provider_error",
    "model_error",
    "tool_error",
    "budget",
    "step_limit",
    "config",
    "lost",
    "cancelled",
    "internal",
]
#: Every class, in the order the UI lists them.
CLASSES: tuple[ErrorClass, ...] = get_args(ErrorClass)
#: What each class means (the docs, ``--help`` and the UI say it so).
MEANING: dict[str, str] = {
    "rate_limit": "the model's provider refused for rate or capacity (429, no capacity in time)",
    "timeout": "a model call timed out",
    "auth": "the model's provider refused the key (401, 403)",
    "provider_error": "the model's provider failed (5xx, connection)",
    "model_error": "the model's provider refused the request (another 4xx)",
    "tool_error": "a tool could not run (its code is gone)",
    "budget": "the tenant's token budget was spent",
    "step_limit": "the run reached max_steps without a final reply",
    "config": "the agent's configuration could not be used",
    "lost": "its worker was lost on its last attempt",
    "cancelled": "cancelled (by request, a reset or delete, or dropped from a full queue)",
    "internal": "fleet failed (database, internal error)",
}


def check(value: str) -> ErrorClass:
    """An error class as a filter names it; ValueError listing the classes otherwise."""
    for c in CLASSES:
        if value == c:
            return c
    raise ValueError(f"unknown error class {value!r}: one of {', '.join(CLASSES)}")


def of_model(status_code: int | None, message: str) -> ErrorClass:
    """The class of a model call's failure, by its HTTP status (or its words, without one)."""
    if status_code == 429 or "no model capacity" in message:
        return "rate_limit"
    if status_code in (401, 403):
        return "auth"
    if status_code in (408, 504) or "timed out" in message or "timeout" in message.lower():
        return "timeout"
    if status_code is None or status_code >= 500:
        return "provider_error"
    return "model_error"


#: Error words fleet itself writes, and their class (the first that a message starts with).
_PREFIXES: tuple[tuple[str, ErrorClass], ...] = (
    ("cancelled", "cancelled"),
    ("dropped:", "cancelled"),
    ("step limit reached", "step_limit"),
    ("database:", "internal"),
    ("internal error", "internal"),
    ("agent ", "config"),
    ("tool ", "tool_error"),
)


def of_text(status: str, error: str | None) -> ErrorClass | None:
    """The class of a task that ended ``status`` with ``error``, by its words: None for a
    task that succeeded (or has not ended)."""
    if status == "cancelled":
        return "cancelled"
    if status != "failed":
        return None
    text = (error or "").strip()
    for prefix, cls in _PREFIXES:
        if text.startswith(prefix):
            return cls
    if "budget" in text:
        return "budget"
    if text.startswith("model "):
        return of_model(_status_in(text), text)
    if "attempt" in text and ("lost" in text or "gave up" in text):
        return "lost"
    return "internal"


def of_outcome(outcome: Outcome) -> str | None:
    """The class a settle stores: the outcome's own, else its words' (None on success)."""
    if outcome.status.value not in ("failed", "cancelled"):
        return None
    return outcome.error_class or of_text(outcome.status.value, outcome.error)


def _status_in(text: str) -> int | None:
    """An HTTP status a model error's words name (``HTTP 429``, ``status 503``)."""
    words = text.replace(":", " ").replace("(", " ").replace(")", " ").split()
    for before, word in itertools.pairwise(words):
        if before.lower() in ("http", "status") and word.isdigit() and len(word) == 3:
            return int(word)
    return None


__all__ = ["CLASSES", "MEANING", "ErrorClass", "check", "of_model", "of_outcome", "of_text"]
