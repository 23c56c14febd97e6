"""The SDK's calls for a person's data: export (JSON lines, streamed) and erasure, of a
resource or one conversation (``FleetClient`` has them; operator keys, or ``erase = true``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from fleet.errors import FleetError

#: Erasure cancels running tasks and waits for them to stop: give it time.
ERASE_TIMEOUT_S = 120.0


class _Client(Protocol):
    """What the calls use of ``FleetClient``."""

    _http: httpx.Client

    def _call(self, method: str, path: str, *, timeout: float, **kw: Any) -> Any: ...

    def _raise(self, response: httpx.Response) -> None: ...

    def _unreachable(self, exc: httpx.HTTPError) -> FleetError: ...


class RightsCalls:
    """Mixed into ``FleetClient``: uses its HTTP client and error mapping."""

    def export_resource(
        self: _Client, resource: str, *, tenant: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """ExportResource: every line held about ``resource`` (its header first)."""
        params = {"tenant": tenant} if tenant else None
        yield from _lines(self, _path(resource) + "/export", params)

    def export_conversation(
        self: _Client, key: str, deployment: str, *, tenant: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """ExportConversation: every line one conversation holds."""
        params = {"deployment": deployment, "conversationKey": key}
        if tenant:
            params["tenant"] = tenant
        yield from _lines(self, "/v1/conversations:export", params)

    def erase_resource(
        self: _Client, resource: str, *, tenant: str | None = None, cancel_running: bool = True
    ) -> dict[str, Any]:
        """EraseResource: counts per kind, and until when new tasks naming it are refused."""
        params = {"cancelRunning": "true" if cancel_running else "false"}
        if tenant:
            params["tenant"] = tenant
        found: dict[str, Any] = self._call(
            "DELETE", _path(resource), params=params, timeout=ERASE_TIMEOUT_S
        )
        return found

    def audit_entries(self: _Client, **filters: Any) -> list[dict[str, Any]]:
        """ListAuditEntries: newest first; filters ``tenant``, ``action``, ``actor``, ``since``,
        ``until`` (ISO times), ``before`` (an entry id), ``limit``."""
        found = self._call("GET", "/v1/audit", params=audit_params(**filters), timeout=30.0)
        return list(found["entries"])

    def erase_conversation(
        self: _Client,
        key: str,
        deployment: str,
        *,
        tenant: str | None = None,
        cancel_running: bool = True,
    ) -> dict[str, Any]:
        """EraseConversation: counts per kind."""
        body: dict[str, Any] = {
            "deployment": deployment,
            "conversationKey": key,
            "cancelRunning": cancel_running,
        }
        if tenant:
            body["tenant"] = tenant
        found: dict[str, Any] = self._call(
            "POST", "/v1/conversations:erase", json=body, timeout=ERASE_TIMEOUT_S
        )
        return found


def audit_params(**filters: Any) -> dict[str, str]:
    """ListAuditEntries' query from keyword filters (None left out)."""
    return {k: str(v) for k, v in filters.items() if v is not None}


def _path(resource: str) -> str:
    return f"/v1/resources/{quote(resource, safe='')}"


def _lines(client: _Client, path: str, params: dict[str, str] | None) -> Iterator[dict[str, Any]]:
    try:
        with client._http.stream("GET", path, params=params) as response:
            if response.status_code >= 400:
                response.read()
                client._raise(response)
            for line in response.iter_lines():
                if line:
                    yield json.loads(line)
    except httpx.HTTPError as exc:
        raise client._unreachable(exc) from None
