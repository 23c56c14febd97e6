"""How the fleet's live processes look: one JSON shape for ``GET /v1/workers`` and ``fleet
workers ls`` (the registry's entries, ``fleet.domain.registry``), and the releases among them."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import Any

from fleet.domain.registry import Entry

View = dict[str, Any]


def workers_json(entries: Iterable[Entry], *, embedded: bool = False) -> View:
    """The processes, and each release with how many of them run it (newest version first)."""
    now = time.time()
    listed = list(entries)
    releases = Counter(e.release for e in listed)
    from fleet.release import version_of

    return {
        "mode": "embedded" if embedded else "fleet",
        "workers": [e.view(now) for e in listed],
        "releases": [
            {"release": name, "processes": count}
            for name, count in sorted(
                releases.items(), key=lambda rc: (version_of(rc[0]), rc[0]), reverse=True
            )
        ],
    }


def read_workers(settings: Any, redis: Any | None, *, this: Entry | None = None) -> View:
    """The live entries of the fleet's registry (``redis``); embedded, ``this`` process alone
    (none when no process serves: a CLI on an embedded store)."""
    if settings.embedded or redis is None:
        return workers_json([this] if this is not None else [], embedded=True)
    from fleet.dispatch.registry import Registry
    from fleet.errors import Unavailable

    try:
        found = Registry(redis).read()
    except Exception as exc:  # Redis down: the fleet's registry cannot be read now
        raise Unavailable(f"the fleet's registry (Redis) cannot be read: {exc}") from exc
    return workers_json(found)
