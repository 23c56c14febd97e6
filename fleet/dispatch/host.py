"""What the dispatcher's rooms use of it, as narrow protocols.

Each room of ``fleet.dispatch`` (waits, follow-ups, lifecycle, intake, recovery, shutdown,
execution) is handed the ``Dispatcher`` that holds it, but depends only on the part it uses,
declared here or beside it: so no room imports the manager, not even for its annotations, and
the manager alone sees them all. ``Dispatcher`` satisfies each (mypy checks it where it hands
itself over).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Protocol

from fleet.config import FleetConfig, Settings
from fleet.constants import DEFAULT_TENANT
from fleet.dispatch.hints import Hints
from fleet.domain.values import Admission, Task
from fleet.store import CancelResult, Store


class Clocked(Protocol):
    """The store and the clock: what every room reads."""

    store: Store
    clock: Callable[[], datetime]


class Configured(Clocked, Protocol):
    """The store, the clock, the config and the settings, and the hints a commit sends."""

    config: FleetConfig
    settings: Settings
    hints: Hints


class Waking(Protocol):
    """Wakes a conversation's next task (forced), as a turn of its tenant."""

    def wake_next(self, task: Task, at: datetime | None = None) -> None: ...


class Submitting(Protocol):
    """Admits a submission as any caller would (quotas, order, walls): the sweeper's
    follow-ups, a bulk job's retries."""

    def submit(
        self,
        deployment: str,
        input: str | Sequence[Any],
        *,
        scope: str = "api",
        key: str | None = None,
        labels: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        caller: str | None = None,
        delivery: str | None = None,
        resource_id: str | None = None,
        tenant: str = DEFAULT_TENANT,
        priority: int | None = None,
        gated: bool = False,
    ) -> Admission: ...


class Cancelling(Protocol):
    """Cancels a queued task now, or asks a running one to stop."""

    def cancel(self, task_id: uuid.UUID, *, scope: str | None = None) -> CancelResult: ...


class Stopping(Protocol):
    """Set when this process shuts down: take no new task."""

    stopping: threading.Event
