"""One delivery attempt over HTTP: bounded in time and in what is read back.

The whole attempt (connect, send, the answer's head and the start of its body) runs under one
deadline, ``timeout_s`` after it starts: httpx's own timeouts are per read, so a receiver that
drips its answer would otherwise keep the attempt past its claim, and another would send it
again. The answer is classified by its status code; its body is only read for the journal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from fleet.constants import DELIVERY_ANSWER_CHARS
from fleet.delivery.targets import Request
from fleet.domain import delivery as rules


@dataclass(frozen=True, slots=True)
class Sent:
    """What an attempt came to."""

    result: rules.AttemptResult
    http_status: int | None
    #: The start of the receiver's answer, or what went wrong.
    detail: str
    duration_ms: float


def send(request: Request, timeout_s: float) -> Sent:
    """Send the request once, within ``timeout_s`` in all; no redirects are followed (a
    redirect is a refusal). Runs its own event loop (call it from a thread without one)."""
    import anyio  # (with httpx: imported by a process that sends a delivery)

    return anyio.run(_send, request, timeout_s)


async def _send(request: Request, timeout_s: float) -> Sent:
    import anyio
    import httpx

    started = time.monotonic()

    def took() -> float:
        return round((time.monotonic() - started) * 1000, 1)

    status: int | None = None
    head = b""
    try:
        async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=False) as client:
            with anyio.move_on_after(timeout_s) as deadline:
                async with client.stream(
                    request.method, request.url, headers=request.headers, content=request.body
                ) as answer:
                    status = answer.status_code
                    async for chunk in answer.aiter_bytes():
                        head += chunk
                        if len(head) >= DELIVERY_ANSWER_CHARS:
                            break
    except httpx.ConnectTimeout:
        return Sent("retry", None, f"no connection within {timeout_s:g}s", took())
    except httpx.TimeoutException:
        return _no_answer(timeout_s, took())
    except httpx.HTTPError as exc:
        if status is None:
            return Sent(rules.classify(None), None, f"{type(exc).__name__}: {exc}", took())
        # the answer's status came; its body broke off
    text = head.decode(errors="replace")[:DELIVERY_ANSWER_CHARS]
    if status is None:  # the deadline passed before the answer's status line
        return _no_answer(timeout_s, took())
    if deadline.cancelled_caught:
        text += f" … (the answer was cut off at the {timeout_s:g}s deadline)"
    return Sent(rules.classify(status), status, text, took())


def _no_answer(timeout_s: float, took: float) -> Sent:
    return Sent(
        rules.classify(None, timed_out=True),
        None,
        f"no answer within {timeout_s:g}s (the receiver may have it)",
        took,
    )
