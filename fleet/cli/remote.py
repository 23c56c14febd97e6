"""``fleet run`` and ``fleet tasks`` with ``--server``: the SDK's HTTP client, and what only the
CLI asks of it (a module of its own: commands against the store never import the HTTP client)."""

from __future__ import annotations

import uuid

from rich.console import Console

from fleet.cli.live import OnEvent
from fleet.domain.ids import IdPrefix
from fleet.sdk.backends import View
from fleet.sdk.client import FleetClient


class RemoteTasks(FleetClient):
    """Through ``fleet serve``'s HTTP API."""

    def follow(
        self, task_id: str, timeout: float, status: Console, on_event: OnEvent | None = None
    ) -> View:
        if on_event is None:
            with status.status(f"waiting for task {task_id}"):
                return self.wait(task_id, timeout)
        for ev in self.events(task_id, timeout):
            on_event(ev.kind, ev.data)
            if ev.kind == "end":
                final: View = ev.data["task"]
                return final
        return self.get_task(task_id)

    def give_up(self, task_id: str) -> View | None:
        return None  # the server goes on

    def show(self, task_id: uuid.UUID) -> View:
        return self.get_task(str(task_id))

    def find(self, prefix: IdPrefix, limit: int) -> list[str]:
        found = self.list_tasks(id_prefix=prefix.hex, limit=limit)
        return [str(v["id"]) for v in found]
