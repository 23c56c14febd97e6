"""Request body limits, enforced before a body is parsed or a caller authenticated (413)."""

from __future__ import annotations

import json
from typing import Any

from fleet.constants import MAX_REQUEST_BYTES, MAX_WEBHOOK_BYTES

Scope = dict[str, Any]
Message = dict[str, Any]


def limit_for(path: str) -> int:
    """Webhook deliveries may be larger than API calls (senders do not split them)."""
    return MAX_WEBHOOK_BYTES if path.startswith("/v1/triggers/") else MAX_REQUEST_BYTES


class BodyLimit:
    """ASGI middleware: refuse a body past its limit, by Content-Length or while it streams."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = limit_for(scope["path"])
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await _too_large(send, limit)
            return
        if declared.isdigit() and b"transfer-encoding" not in headers:
            # The server reads exactly the declared length: the body cannot grow past it.
            await self.app(scope, receive, send)
            return
        seen = 0
        refused = False

        async def counted() -> Message:
            # Past the limit: answer 413 now and tell the app the client went away.
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message: Message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    refused = True
                    await _too_large(send, limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded(message: Message) -> None:
            if not refused:  # the app's own answer after a 413 is dropped
                await send(message)

        await self.app(scope, counted, guarded)


async def _too_large(send: Any, limit: int) -> None:
    body = json.dumps(
        {
            "type": "about:blank",
            "title": "Payload too large",
            "status": 413,
            "detail": f"the request body is larger than {limit} bytes; send a smaller one",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/problem+json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
