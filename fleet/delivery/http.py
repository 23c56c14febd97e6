"""One delivery attempt over HTTP: bounded in time and in what is read back."""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

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
    """Send the request once; no redirects are followed (a redirect is a refusal)."""
    started = time.monotonic()

    def took() -> float:
        return round((time.monotonic() - started) * 1000, 1)

    try:
        with (
            httpx.Client(timeout=timeout_s, follow_redirects=False) as client,
            client.stream(
                request.method, request.url, headers=request.headers, content=request.body
            ) as answer,
        ):
            head = b""
            for chunk in answer.iter_bytes():
                head += chunk
                if len(head) >= DELIVERY_ANSWER_CHARS:
                    break
            text = head.decode(errors="replace")[:DELIVERY_ANSWER_CHARS]
            return Sent(rules.classify(answer.status_code), answer.status_code, text, took())
    except httpx.ConnectTimeout:
        return Sent("retry", None, f"no connection within {timeout_s:g}s", took())
    except httpx.TimeoutException:
        return Sent(
            rules.classify(None, timed_out=True),
            None,
            f"no answer within {timeout_s:g}s (the receiver may have it)",
            took(),
        )
    except httpx.HTTPError as exc:
        return Sent(rules.classify(None), None, f"{type(exc).__name__}: {exc}", took())
