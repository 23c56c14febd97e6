"""An ASGI client's side of one streaming request, for tests that call an app directly."""

from __future__ import annotations

import asyncio
from typing import Any


class StreamClient:
    """``receive`` gives the request (no body), then waits for ``gone`` and reports the
    disconnect; ``send`` keeps every message in ``sent``."""

    def __init__(self, gone: asyncio.Event | None = None) -> None:
        self.gone = gone if gone is not None else asyncio.Event()
        self.sent: list[dict[str, Any]] = []
        self._requested = False

    async def receive(self) -> dict[str, Any]:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)
