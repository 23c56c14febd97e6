"""The live processes of a fleet, as each registers itself: pure shapes and rules.

Every worker, API and beat process of a fleet keeps an entry in Redis (``fleet.dispatch.registry``)
and renews it well within its time to live; an entry not renewed in time belongs to a process
that is gone. ``fleet workers ls``, ``GET /v1/workers``, ``fleet migrate --contract`` (which
refuses while a process of an older release lives) and the metrics read the same entries.

An entry is stored as JSON with a shape version (``v``): a release reads the entries of the
release before it and after it, ignoring fields it does not know.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Role = Literal["worker", "api", "beat", "embedded"]
ROLES: tuple[Role, ...] = ("worker", "api", "beat", "embedded")

#: The entry's shape version (raise it when a field changes meaning; add fields freely).
SHAPE = 1


@dataclass(frozen=True, slots=True)
class Entry:
    """One live process."""

    role: str
    host: str
    pid: int
    #: ``0.2.0+3f1c2a9b0d4e``: version plus build (``fleet.release``).
    release: str
    #: The newest schema revision this release knows (what ``migrate --contract`` checks).
    schema: str
    started_at: float
    #: When the process last renewed its entry (Unix seconds), and until when it holds.
    seen_at: float
    expires_at: float
    #: Runs this process holds now, and how many more it could take.
    runs_in_flight: int = 0
    free_slots: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """``worker@host:1234``: unique among live processes."""
        return f"{self.role}@{self.host}:{self.pid}"

    def alive(self, now: float) -> bool:
        return self.expires_at > now

    def dump(self) -> str:
        return json.dumps({"v": SHAPE, **asdict(self)}, separators=(",", ":"))

    def view(self, now: float) -> dict[str, Any]:
        """The JSON shape the API and the CLI show (camelCase, ages in seconds)."""
        return {
            "id": self.id,
            "role": self.role,
            "host": self.host,
            "pid": self.pid,
            "release": self.release,
            "schema": self.schema,
            "runsInFlight": self.runs_in_flight,
            "freeSlots": self.free_slots,
            "upSeconds": round(max(0.0, now - self.started_at), 1),
            "seenSecondsAgo": round(max(0.0, now - self.seen_at), 1),
        }


_FIELDS = {f.name for f in fields(Entry)}


def load(raw: str | bytes) -> Entry | None:
    """An entry written by this release or another (unknown fields dropped); None when it is
    not one (a broken or foreign value is skipped, never fatal to a listing)."""
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            return None
        return Entry(**{k: v for k, v in data.items() if k in _FIELDS})
    except (TypeError, ValueError):
        return None


def live(entries: list[Entry], now: float) -> list[Entry]:
    """The entries still held, in a stable order (role, host, pid)."""
    return sorted((e for e in entries if e.alive(now)), key=lambda e: (e.role, e.host, e.pid))
