"""The CLI's ``--server`` client answered by an API app in the test's own process."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from fleet.api.app import create_app
from fleet.runtime import Runtime
from fleet.sdk.client import FleetClient


class InProcess(httpx.BaseTransport):
    """The test client's app answers an httpx client's requests."""

    def __init__(self, client: TestClient) -> None:
        self._client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        r = self._client.request(
            request.method,
            request.url.raw_path.decode(),
            headers=dict(request.headers),
            content=request.read(),
        )
        return httpx.Response(r.status_code, headers=r.headers, content=r.content)


@contextmanager
def served(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The server's API over ``rt``; every ``FleetClient`` made meanwhile talks to it."""
    with TestClient(create_app(rt, run_embedded=False), raise_server_exceptions=False) as client:
        real = FleetClient.__init__
        transport = InProcess(client)

        def in_process(self: FleetClient, base_url: str, api_key: str | None = None, **_: Any):
            real(self, base_url, api_key, transport=transport)

        monkeypatch.setattr(FleetClient, "__init__", in_process)
        yield client
