"""RFC 9457 problem details: every error is ``application/problem+json`` naming field and reason."""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from fleet.domain.quota import QuotaExceeded
from fleet.errors import FleetError, Unavailable
from fleet.store.db import describe, is_outage

log = logging.getLogger(__name__)

PROBLEM = "application/problem+json"
#: Seconds a client should wait before retrying after a 503.
RETRY_AFTER_S = 5


class ProblemResponse(JSONResponse):
    """A problem body as ASCII JSON: what it quotes back (a field name, a key) may hold text
    that UTF-8 cannot encode, such as a lone surrogate escaped in the request."""

    media_type = PROBLEM

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, allow_nan=False).encode("ascii")


def problem(
    status: int,
    title: str,
    detail: str,
    *,
    field: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if field is not None:
        body["invalidParams"] = [{"name": field, "reason": detail}]
    body.update(extra)
    return ProblemResponse(body, status_code=status, headers=headers)


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def install(app: FastAPI) -> None:
    @app.exception_handler(FleetError)
    async def _fleet(_: Request, exc: FleetError) -> JSONResponse:
        headers = {"Retry-After": str(RETRY_AFTER_S)} if isinstance(exc, Unavailable) else None
        if exc.status == 401:
            headers = {"WWW-Authenticate": "Bearer"}
        if isinstance(exc, QuotaExceeded):
            wait = max(1, math.ceil(exc.retry_after_s))
            return problem(
                exc.status,
                exc.title,
                exc.message,
                field=exc.field,
                headers={"Retry-After": str(wait)},
                quota=exc.quota,
                limit=exc.value,
                retryAfter=wait,
            )
        return problem(exc.status, exc.title, exc.message, field=exc.field, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        broken = next((e for e in errors if e.get("type") == "json_invalid"), None)
        if broken is not None:  # not a JSON document at all: the body, not a field, is wrong
            where = broken.get("ctx", {}).get("error", "invalid JSON")
            return problem(
                400, "Bad request", f"the body is not valid JSON ({where})", field="body"
            )
        params = [
            {"name": _field(tuple(e["loc"])), "reason": str(e["msg"]).removeprefix("Value error, ")}
            for e in errors
        ]
        first = params[0] if params else {"name": "body", "reason": "invalid request"}
        return problem(
            422, "Invalid input", f"{first['name']}: {first['reason']}", invalidParams=params
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return problem(
            exc.status_code,
            str(exc.detail),
            str(exc.detail),
            # FastAPI's 400s are bodies it could not parse (bad encoding, too deep, …)
            field="body" if exc.status_code == 400 else None,
            headers=dict(exc.headers) if exc.headers else None,
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A database or Redis outage that no layer mapped yet is still an outage, not a bug.
        if is_outage(exc):
            return problem(
                503,
                "Service unavailable",
                f"a backing service is unavailable: {describe(exc)}",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "Internal error", "an unexpected error occurred; it was logged")
