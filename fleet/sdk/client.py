"""The one client of fleet's HTTP API: the SDK's server mode and the CLI's ``--server`` use it.

What it reads off the wire (server-sent events, problem answers and the errors they become)
is ``fleet.sdk.wire``'s; its names are re-exported here. Near 470 lines: one short method per
API operation, in the API's order.

It answers with the same JSON shapes the API sends (:mod:`fleet.views`) and raises the same
errors the store would: a 4xx answer is an :class:`ApiError` that is also the store's error for
it (a 404 a ``NotFound``, a 409 a ``Conflict``...: a ``FleetError``, the CLI exits 2 with its
detail), a 5xx answer or an unreachable server is ``Unavailable`` (the CLI exits 1).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx

from fleet.domain.redaction import url_without_password
from fleet.domain.values import TaskStatus
from fleet.errors import (
    InputError,
    Unavailable,
)
from fleet.sdk.closing import Closing
from fleet.sdk.rights import RightsCalls
from fleet.sdk.wire import _BY_STATUS, ApiError, Event, _problem, parse_sse

#: Longest long-poll one GetTask call asks for (the server caps ``wait`` at 60 s).
MAX_WAIT_S = 60.0
#: Seconds to connect and for answers that do not long-poll.
TIMEOUT_S = 30.0
#: Reset and delete may wait for a run to stop (``cancelRunning``), prune may take a while.
LIFECYCLE_TIMEOUT_S = 120.0


class _Deadline:
    """When a wait ends: ``timeout`` seconds from now, or never (``None``: long-polls go on)."""

    def __init__(self, timeout: float | None) -> None:
        self._at = None if timeout is None else time.monotonic() + timeout

    def left(self) -> float:
        return MAX_WAIT_S if self._at is None else max(0.0, self._at - time.monotonic())

    def over(self) -> bool:
        return self._at is not None and time.monotonic() >= self._at


class FleetClient(RightsCalls, Closing):
    """Talks to ``fleet serve`` at ``base_url`` with an optional bearer API key."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._headers = headers
        self.base_url = base_url.rstrip("/")
        #: The URL as messages show it (a password in it masked).
        self.shown_url = url_without_password(self.base_url)
        try:
            parsed = httpx.URL(self.base_url)
        except httpx.InvalidURL:
            parsed = None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
            raise InputError(
                f"server URL {self.shown_url!r} is not an http(s) URL; "
                "use e.g. --server http://127.0.0.1:8080",
                field="server",
            )
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=TIMEOUT_S, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, *, timeout: float = TIMEOUT_S, **kw: Any) -> Any:
        try:
            response = self._http.request(method, path, timeout=timeout, **kw)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        return self._answer(response, path)

    def _unreachable(self, exc: httpx.HTTPError) -> Unavailable:
        why = str(exc) or type(exc).__name__
        return Unavailable(
            f"cannot reach {self.shown_url}: {why.replace(self.base_url, self.shown_url)}"
        )

    def _answer(self, response: httpx.Response, path: str) -> Any:
        """The answer's JSON, or the error it stands for (4xx ApiError, 5xx Unavailable)."""
        self._raise(response)
        try:
            return response.json()
        except ValueError:
            raise Unavailable(f"{self.shown_url}{path} did not answer with JSON") from None

    def _raise(self, response: httpx.Response) -> None:
        if response.status_code >= 500:
            raise Unavailable(_problem(response)[0])
        if response.status_code == 401 and not self._headers:
            # (the server's "send it as 'Authorization: Bearer <key>'" is for HTTP clients)
            raise ApiError(
                f"{self.shown_url} needs an API key: set FLEET_API_KEY to your caller's key",
                status=401,
                field="FLEET_API_KEY",
            )
        if response.status_code >= 400:
            detail, field = _problem(response)
            kind = _BY_STATUS.get(response.status_code, ApiError)
            raise kind(detail, status=response.status_code, field=field)

    def submit(
        self,
        deployment: str,
        input: str | list[dict[str, Any]],
        *,
        conversation_key: str | None = None,
        labels: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        delivery: str | None = None,
        resource_id: str | None = None,
    ) -> dict[str, Any]:
        """SubmitTask: the admitted task (with ``mergedInto``, ``duplicate``, ``deliveredTo``)."""
        body: dict[str, Any] = {"deployment": deployment, "input": input}
        if conversation_key is not None:
            body["conversationKey"] = conversation_key
        if labels:
            body["labels"] = labels
        if idempotency_key is not None:
            body["idempotencyKey"] = idempotency_key
        if delivery is not None:
            body["delivery"] = delivery
        if resource_id is not None:
            body["resourceId"] = resource_id
        result: dict[str, Any] = self._call("POST", "/v1/tasks", json=body)
        return result

    def get_task(self, task_id: str, *, wait: float = 0.0) -> dict[str, Any]:
        """GetTask, long-polling up to ``wait`` seconds (at most 60) for it to finish."""
        path, params, timeout = self._get_task(task_id, wait)
        result: dict[str, Any] = self._call("GET", path, params=params, timeout=timeout)
        return result

    @staticmethod
    def _get_task(task_id: str, wait: float) -> tuple[str, dict[str, str] | None, float]:
        """GetTask's path, query and read timeout for a long-poll of ``wait`` seconds."""
        wait = min(max(wait, 0.0), MAX_WAIT_S)
        return f"/v1/tasks/{task_id}", {"wait": f"{wait:g}"} if wait else None, TIMEOUT_S + wait

    def wait(self, task_id: str, timeout: float | None) -> dict[str, Any]:
        """The task once finished, or as it is after ``timeout`` seconds (repeated long-polls;
        ``None``: until it finishes)."""
        deadline = _Deadline(timeout)
        while True:
            task = self.get_task(task_id, wait=deadline.left())
            if TaskStatus(task["status"]).terminal or deadline.over():
                return task

    async def wait_async(self, task_id: str, timeout: float | None) -> dict[str, Any]:
        """``wait`` without blocking an event loop (long-polls on an async connection)."""
        deadline = _Deadline(timeout)
        async with httpx.AsyncClient(base_url=self.base_url, headers=self._headers) as http:
            while True:
                path, params, read = self._get_task(task_id, deadline.left())
                try:
                    response = await http.get(path, params=params, timeout=read)
                except httpx.HTTPError as exc:
                    raise self._unreachable(exc) from None
                task: dict[str, Any] = self._answer(response, path)
                if TaskStatus(task["status"]).terminal or deadline.over():
                    return task

    def events(self, task_id: str, timeout: float, *, after: str | None = None) -> Iterator[Event]:
        """StreamTaskEvents until the task's ``end`` or ``timeout``, reconnecting with the last
        event's id whenever the server ends a stream early (its per-connection limit)."""
        deadline = time.monotonic() + timeout
        last = after
        while time.monotonic() < deadline:
            headers = {"Last-Event-ID": last} if last else {}
            left = max(0.1, deadline - time.monotonic())
            try:
                with self._http.stream(
                    "GET",
                    f"/v1/tasks/{task_id}/events",
                    headers=headers,
                    timeout=httpx.Timeout(TIMEOUT_S, read=min(left, 60.0)),
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        self._raise(response)
                    for ev in parse_sse(response.iter_lines()):
                        last = ev.id or last
                        yield ev
                        if ev.kind == "end":
                            return
            except httpx.ReadTimeout:
                continue
            except httpx.HTTPError as exc:
                raise self._unreachable(exc) from None

    def texts(self, task_id: str, timeout: float | None) -> Iterator[dict[str, Any]]:
        """The task's model text as it is written: the data of its ``delta`` events, until it
        ends or ``timeout`` passes."""
        for ev in self.events(task_id, MAX_WAIT_S if timeout is None else timeout):
            if ev.kind == "delta":
                yield ev.data

    def list_tasks(
        self,
        *,
        conversation_key: str | None = None,
        deployment: str | None = None,
        status: str | None = None,
        id_prefix: str | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """ListTasks of the caller's scope, oldest first."""
        params: dict[str, str | int] = {"limit": limit}
        for name, value in (
            ("conversationKey", conversation_key),
            ("deployment", deployment),
            ("status", status),
            ("idPrefix", id_prefix),
        ):
            if value is not None:
                params[name] = value
        tasks: list[dict[str, Any]] = self._call("GET", "/v1/tasks", params=params)["tasks"]
        return tasks

    def cancel(self, task_id: str) -> dict[str, Any]:
        """CancelTask: ``{"effect": cancelled|requested|finished, "task": {...}}``."""
        result: dict[str, Any] = self._call("POST", f"/v1/tasks/{task_id}/cancel")
        return result

    def list_runs(self, task_id: str) -> list[dict[str, Any]]:
        """ListTaskRuns: the task's runs, first attempt first, without their steps."""
        runs: list[dict[str, Any]] = self._call("GET", f"/v1/tasks/{task_id}/runs")["runs"]
        return runs

    def get_run(self, run_id: str, *, messages: bool = False) -> dict[str, Any]:
        """GetRun: the run with its steps (``messages``: also the frozen prompt's messages)."""
        params = {"include": "messages"} if messages else None
        result: dict[str, Any] = self._call("GET", f"/v1/runs/{run_id}", params=params)
        return result

    def messages(
        self, conversation_key: str, deployment: str, *, limit: int = 100
    ) -> dict[str, Any]:
        """ListConversationMessages, oldest first."""
        result: dict[str, Any] = self._call(
            "GET",
            f"/v1/conversations/{quote(conversation_key, safe='')}/messages",
            params={"deployment": deployment, "limit": limit},
        )
        return result

    # -- conversation lifecycle (operator keys) ----------------------------------------------

    def _conversation(self, key: str) -> str:
        return f"/v1/conversations/{quote(key, safe=':')}"

    def list_conversations(
        self, *, deployment: str | None = None, state: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """ListConversations: stuck, running, queued first, then the most recently active."""
        params: dict[str, str | int] = {"limit": limit}
        if deployment is not None:
            params["deployment"] = deployment
        if state is not None:
            params["state"] = state
        found: list[dict[str, Any]] = self._call("GET", "/v1/conversations", params=params)[
            "conversations"
        ]
        return found

    @staticmethod
    def _where(deployment: str, tenant: str | None) -> dict[str, str]:
        params = {"deployment": deployment}
        if tenant is not None:
            params["tenant"] = tenant
        return params

    def get_conversation(
        self, key: str, deployment: str, *, tenant: str | None = None
    ) -> dict[str, Any]:
        """GetConversation (404 for an unknown key; nothing is created)."""
        found: dict[str, Any] = self._call(
            "GET", self._conversation(key), params=self._where(deployment, tenant)
        )
        return found

    def reset_conversation(
        self,
        key: str,
        deployment: str,
        *,
        keep_notes: bool = False,
        cancel_running: bool = False,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """ResetConversation: a new generation (409 while a task runs, unless cancel_running)."""
        found: dict[str, Any] = self._call(
            "POST",
            self._conversation(key) + "/reset",
            params=self._where(deployment, tenant),
            json={"keepNotes": keep_notes, "cancelRunning": cancel_running},
            timeout=LIFECYCLE_TIMEOUT_S,
        )
        return found

    def delete_conversation(
        self, key: str, deployment: str, *, cancel_running: bool = False, tenant: str | None = None
    ) -> dict[str, Any]:
        """DeleteConversation: gone, behind a tombstone (409 while a task runs)."""
        params = self._where(deployment, tenant)
        if cancel_running:
            params["cancelRunning"] = "true"
        found: dict[str, Any] = self._call(
            "DELETE", self._conversation(key), params=params, timeout=LIFECYCLE_TIMEOUT_S
        )
        return found

    def prune_conversations(
        self,
        *,
        deployment: str | None = None,
        older_than: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """PruneConversations: retention and stored caps now (``dry_run`` only counts)."""
        body: dict[str, Any] = {"dryRun": dry_run}
        if deployment is not None:
            body["deployment"] = deployment
        if older_than is not None:
            body["olderThan"] = older_than
        found: dict[str, Any] = self._call(
            "POST", "/v1/conversations:prune", json=body, timeout=LIFECYCLE_TIMEOUT_S
        )
        return found

    # -- workers and tenants (operator keys) ----------------------------------------------------

    def list_workers(self) -> dict[str, Any]:
        """ListWorkers: the fleet's live processes with their releases, runs in flight and free
        slots, and the releases among them."""
        found: dict[str, Any] = self._call("GET", "/v1/workers")
        return found

    def list_tenants(self) -> list[dict[str, Any]]:
        """ListTenants: the tenants the key reaches, with their backlog, tokens and refusals."""
        found: list[dict[str, Any]] = self._call("GET", "/v1/tenants")["tenants"]
        return found

    def get_tenant(self, tenant: str) -> dict[str, Any]:
        """GetTenant (404 for an unknown tenant and for one out of the key's reach alike)."""
        found: dict[str, Any] = self._call("GET", f"/v1/tenants/{quote(tenant, safe='')}")
        return found

    def create_schedule(self, body: dict[str, Any]) -> dict[str, Any]:
        """CreateSchedule: ``body`` as the API takes it (``name``, ``deployment``, ``cron`` or
        ``every``, ``input``, ...); the schedule, its tasks the key's tenant and scope."""
        found: dict[str, Any] = self._call("POST", "/v1/schedules", json=body)
        return found

    def list_schedules(self) -> list[dict[str, Any]]:
        """ListSchedules: the key's scope's schedules with their next tick."""
        found: list[dict[str, Any]] = self._call("GET", "/v1/schedules")["schedules"]
        return found

    def delete_schedule(self, name: str) -> None:
        """DeleteSchedule (404 for one of another scope, 409 for one from config/schedules)."""
        try:
            response = self._http.request("DELETE", f"/v1/schedules/{quote(name, safe='')}")
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from None
        self._raise(response)

    # -- memory blocks (operator keys) ---------------------------------------------------------

    @staticmethod
    def _block_place(namespace: str | None, tenant: str | None) -> dict[str, str]:
        params = {}
        if namespace is not None:
            params["namespace"] = namespace
        if tenant is not None:
            params["tenant"] = tenant
        return params

    def _block(self, block: str) -> str:
        return f"/v1/memory/blocks/{quote(block, safe='')}"

    def list_memory_blocks(
        self, *, namespace: str | None = None, tenant: str | None = None
    ) -> list[dict[str, Any]]:
        """ListMemoryBlocks: a tenant's blocks without their values (``tenant``: the key's own
        when None; ``namespace``: every one the key reaches when None)."""
        found: list[dict[str, Any]] = self._call(
            "GET", "/v1/memory/blocks", params=self._block_place(namespace, tenant)
        )["blocks"]
        return found

    def get_memory_block(
        self, block: str, *, namespace: str = "default", tenant: str | None = None
    ) -> dict[str, Any]:
        """GetMemoryBlock: the block with its value (404 for a missing one)."""
        found: dict[str, Any] = self._call(
            "GET", self._block(block), params=self._block_place(namespace, tenant)
        )
        return found

    def set_memory_block(
        self,
        block: str,
        value: str,
        *,
        namespace: str = "default",
        tenant: str | None = None,
        title: str | None = None,
    ) -> dict[str, Any]:
        """SetMemoryBlock: replace the block's value (creating it); the block at its new
        version."""
        body: dict[str, Any] = {"value": value}
        if title is not None:
            body["title"] = title
        found: dict[str, Any] = self._call(
            "PUT", self._block(block), params=self._block_place(namespace, tenant), json=body
        )
        return found

    def memory_block_versions(
        self, block: str, *, namespace: str = "default", tenant: str | None = None
    ) -> list[dict[str, Any]]:
        """ListMemoryBlockVersions: every version, oldest first, with its author."""
        found: list[dict[str, Any]] = self._call(
            "GET", self._block(block) + "/versions", params=self._block_place(namespace, tenant)
        )["versions"]
        return found

    # -- approvals -------------------------------------------------------------------------------

    def list_approvals(
        self, *, limit: int = 100, task_id_prefix: str | None = None
    ) -> list[dict[str, Any]]:
        """ListApprovals: the caller's approvals waiting for a decision, oldest first (of the
        tasks whose id starts with ``task_id_prefix``, when given)."""
        params: dict[str, str | int] = {"limit": limit}
        if task_id_prefix is not None:
            params["taskIdPrefix"] = task_id_prefix
        found: list[dict[str, Any]] = self._call("GET", "/v1/approvals", params=params)["approvals"]
        return found

    def decide_approval(
        self, task_id: str, approval_id: str, decision: str, *, reason: str | None = None
    ) -> dict[str, Any]:
        """DecideApproval: ``{"approval": {...}, "task": {...}}`` (``decision``: ``approve`` or
        ``reject``; 409 when it was decided already or expired)."""
        body: dict[str, Any] = {"decision": decision}
        if reason is not None:
            body["reason"] = reason
        found: dict[str, Any] = self._call(
            "POST", f"/v1/tasks/{task_id}/approvals/{approval_id}", json=body
        )
        return found

    def bulk(self, request: dict[str, Any]) -> dict[str, Any]:
        """BulkTasks: a dry run's ``{"matched", "sample"}``, or the job (running)."""
        found: dict[str, Any] = self._call("POST", "/v1/tasks:bulk", json=request)
        return found

    def bulk_job(self, job_id: str) -> dict[str, Any]:
        """GetBulkJob: ``{"status", "matched", "done", "failed", "errors", …}``."""
        found: dict[str, Any] = self._call("GET", f"/v1/tasks:bulk/{job_id}")
        return found

    def send_event(
        self,
        event: str,
        key: str,
        data: Any = None,
        *,
        event_id: str | None = None,
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """SendEvent: the runs waiting for ``event`` and ``key`` in this key's tenant and scope
        resume with ``data``; ``event_id`` makes a repeat change nothing (``duplicate``)."""
        body: dict[str, Any] = {"event": event, "key": key, "data": data}
        if event_id is not None:
            body["id"] = event_id
        if tenant is not None:
            body["tenant"] = tenant
        sent: dict[str, Any] = self._call("POST", "/v1/events", json=body)
        return sent


__all__ = ["ApiError", "Event", "FleetClient", "parse_sse"]
