"""Who may read ``/metrics`` on the API port: it names every tenant with its backlog and tokens.

- ``FLEET_METRICS_TOKEN`` set: a scraper sends ``Authorization: Bearer <token>``; an operator's
  API key is let in too (a person with ``curl``). Anything else: 401 (403 for a key that is no
  operator's), as problem+json.
- ``fleet serve --metrics-port N`` (``FLEET_API_METRICS_PORT``): the metrics are served without a
  key on that port (for the monitoring network), so the API port's ``/metrics`` asks as above.
- Neither: it answers anyone, as before both existed (scrape configs keep working); a keyed API
  logs a warning at start saying what to set.
"""

from __future__ import annotations

import hmac
import logging

from fastapi import Request

from fleet.api.auth import Caller, KeyRing, Unauthorized
from fleet.config import Settings
from fleet.errors import Forbidden

log = logging.getLogger(__name__)


def guarded(settings: Settings) -> bool:
    """Does the API port's ``/metrics`` ask for a token or an operator key?"""
    return settings.metrics_token is not None or settings.api_metrics_port is not None


def check(settings: Settings, ring: KeyRing, authorization: str | None) -> None:
    """Let the request read the API port's ``/metrics``, or raise Unauthorized / Forbidden."""
    if not guarded(settings):
        return
    token = settings.metrics_token
    scheme, _, given = (authorization or "").partition(" ")
    sent = given.strip().encode()
    if token is not None and scheme.lower() == "bearer" and _same(sent, token.get_secret_value()):
        return
    what = "the metrics token (FLEET_METRICS_TOKEN)" if token is not None else None
    if ring.open:  # no operator keys exist: only the token opens it
        raise Unauthorized(_ask(what, settings))
    try:
        caller: Caller = ring.authenticate(authorization)
    except Unauthorized:
        raise Unauthorized(_ask(what, settings)) from None
    if not caller.operator:
        raise Forbidden(
            f"caller {caller.name!r} is not an operator: /metrics on the API port needs "
            f"{what or 'an operator key'}"
        )


def _same(sent: bytes, token: str) -> bool:
    return hmac.compare_digest(sent, token.encode())


def _ask(what: str | None, settings: Settings) -> str:
    ways = " or ".join(w for w in (what, "an operator's API key") if w)
    elsewhere = (
        f"; without a key on port {settings.api_metrics_port}"
        if settings.api_metrics_port is not None
        else ""
    )
    return f"/metrics needs {ways} as 'Authorization: Bearer <…>'{elsewhere}"


async def metrics_guard(request: Request) -> None:
    """The ``/metrics`` route's dependency (see the module)."""
    settings: Settings = request.app.state.runtime.settings
    check(settings, request.app.state.keyring, request.headers.get("authorization"))


def warn_if_open(settings: Settings, ring: KeyRing) -> None:
    """At start: a keyed API whose ``/metrics`` answers anyone says so, once."""
    if not ring.open and not guarded(settings):
        log.warning(
            "/metrics on the API port answers without a key and names every tenant with its "
            "backlog and tokens: set FLEET_METRICS_TOKEN (scrapers send it as a bearer token), "
            "or serve the metrics on a port of their own (fleet serve --metrics-port N)"
        )
