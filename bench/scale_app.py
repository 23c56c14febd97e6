"""fleet's worker app for bench/scale.py, counting each pool process's PostgreSQL statements.

The same counters as bench/dispatch.py (SQLAlchemy cursor events plus the hot path's driver
statements), installed after the process built its runtime and written to
``$FLEET_BENCH_COUNTS/<pid>.json`` when it shuts down.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from celery.signals import worker_process_init, worker_process_shutdown
from sqlalchemy import event

from fleet.dispatch import tasks
from fleet.dispatch.celery_app import app

__all__ = ["app"]
_counts = {"pg": 0}


@worker_process_init.connect
def _count(**_: Any) -> None:
    rt = tasks.runtime()

    @event.listens_for(rt.store.engine, "before_cursor_execute")
    def _statement(*_a: object) -> None:
        _counts["pg"] += 1

    first = rt.store.first

    def counted(*args: Any, **kwargs: Any) -> Any:
        _counts["pg"] += 1
        return first(*args, **kwargs)

    rt.store.first = counted  # type: ignore[method-assign]


@worker_process_shutdown.connect
def _write(**_: Any) -> None:
    folder = Path(os.environ["FLEET_BENCH_COUNTS"])
    (folder / f"{os.getpid()}.json").write_text(json.dumps(_counts))
