"""A schedule as the API, the CLI and the UI show it (one JSON shape)."""

from __future__ import annotations

from typing import Any

from fleet.domain.schedules import Record
from fleet.views import iso


def schedule_json(rec: Record) -> dict[str, Any]:
    """A stored schedule: its settings, whose it is, and where its ticks stand."""
    spec = rec.spec
    return {
        "name": rec.name,
        "deployment": spec.get("deployment"),
        "conversation": spec.get("conversation"),
        "cron": spec.get("cron"),
        "every": spec.get("every"),
        "timezone": spec.get("timezone", "UTC"),
        "input": spec.get("input"),
        "overlap": spec.get("overlap", "skip"),
        "catchUp": spec.get("catch_up", "latest"),
        "endAt": spec.get("end_at"),
        "source": rec.source,
        "caller": rec.caller,
        "scope": rec.scope,
        "tenant": rec.tenant,
        "nextTick": iso(rec.next_tick),
        "lastTick": iso(rec.last_tick),
        "state": rec.state,
        "lastTaskId": None if rec.last_task_id is None else str(rec.last_task_id),
        "fired": rec.fired,
        "skipped": rec.skipped,
        "note": rec.note,
        "createdAt": iso(rec.created_at),
    }


def when_text(view: dict[str, Any]) -> str:
    """``cron 0 8 * * 1-5 Europe/Berlin`` or ``every 15m``, for tables."""
    if view.get("cron"):
        zone = view.get("timezone") or "UTC"
        return f"cron {view['cron']}" + ("" if zone == "UTC" else f" {zone}")
    seconds = float(view.get("every") or 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"every {seconds / size:g}{unit}"
    return f"every {seconds:g}s"
