"""Readable ModelErrors from the official SDKs' failures: what, where, what to do; never the key.

The ``openai`` and ``anthropic`` SDKs share one shape (both are generated on httpx2): a status
error carries the final response, a timeout or connection error the request it gave up on, and
every attempt's request says in ``x-stainless-retry-count`` how many retries came before it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from fleet.domain.redaction import url_without_password
from fleet.errors import ModelError

if TYPE_CHECKING:
    import httpx2

#: Longest excerpt of a provider's answer put into an error message.
EXCERPT_CHARS = 200
#: Statuses the SDKs retry and that a later attempt may get past (timeout, lock, rate, server).
_TRANSIENT = frozenset({408, 409, 429})


def excerpt(text: str) -> str:
    """``text`` on one line, cut to EXCERPT_CHARS."""
    flat = " ".join(text.split())
    return flat if len(flat) <= EXCERPT_CHARS else flat[:EXCERPT_CHARS] + "..."


def error_text(body: str) -> str:
    """The provider's ``error.message`` (OpenAI and Anthropic error bodies), else an excerpt."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        parsed = None
    err = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return excerpt(err["message"])
    if isinstance(err, str):
        return excerpt(err)
    return excerpt(body) or "(empty body)"


def error_kind(body: str) -> str | None:
    """The error's ``code`` (OpenAI's ``insufficient_quota``), else its ``type``
    (Anthropic's ``overloaded_error``), from an OpenAI or Anthropic error body."""
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        return None
    err = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(err, dict):
        return None
    for field in ("code", "type"):
        if isinstance(err.get(field), str):
            return str(err[field])
    return None


def transient(status: int) -> bool:
    """Whether trying the same request again later may succeed."""
    return status in _TRANSIENT or status >= 500


class Failures:
    """Builds one adapter's ModelErrors: prefixed with its name, with its API key scrubbed."""

    def __init__(self, name: str, *, api_key: str | None, key_setting: str) -> None:
        self.name = name
        self._api_key = api_key
        #: The setting that holds the key, named in hints (``FLEET_OPENAI_API_KEY``).
        self._key_setting = key_setting

    def error(
        self, text: str, *, retryable: bool = False, status_code: int | None = None
    ) -> ModelError:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return ModelError(f"{self.name}: {text}", retryable=retryable, status_code=status_code)

    def rejected(self, response: httpx2.Response) -> ModelError:
        """The provider answered with an error status (after the SDK's retries, if any)."""
        status = response.status_code
        where = _where(response.request)
        text = error_text(response.text)
        if not transient(status):
            return self.error(
                f"{where} was rejected with HTTP {status}: {text}; {self._hint(status)}",
                status_code=status,
            )
        todo = (
            "the provider is rate limiting: lower the load, or raise model.max_retries"
            if status == 429
            else "check that the endpoint is up, or raise model.max_retries"
        )
        return self.error(
            f"{where} failed {_attempts(response.request)}: HTTP {status}: {text}; {todo}",
            retryable=True,
            status_code=status,
        )

    def timed_out(self, request: httpx2.Request, timeout_s: float) -> ModelError:
        """No answer within the timeout, on every attempt."""
        return self.error(
            f"{_where(request)} timed out after {timeout_s:g} s ({_attempts(request)}); "
            "raise model.timeout, or check that the endpoint is up",
            retryable=True,
        )

    def unreachable(self, request: httpx2.Request, cause: BaseException | None) -> ModelError:
        """The connection failed (refused, reset, DNS) on every attempt."""
        why = f"{type(cause).__name__}: {cause}" if cause is not None else "connection error"
        return self.error(
            f"{_where(request)} failed {_attempts(request)}: {why}; "
            "check base_url and that the server is up",
            retryable=True,
        )

    def broke_off(
        self, request: httpx2.Request, kind: str | None, text: str, status: int
    ) -> ModelError:
        """The provider began its answer, then sent an error event instead of the rest."""
        what = f"{kind}: {text}" if kind else text
        # (the SDK retried only the request: nothing of a stream that began)
        todo = "retrying may help" if transient(status) else self._hint(status)
        return self.error(
            f"{_where(request)} broke off mid-stream: {what}; {todo}",
            retryable=transient(status),
            status_code=status,
        )

    def cut_short(self, request: httpx2.Request, missing: str) -> ModelError:
        """The stream ended cleanly, but before the model said it had finished."""
        return self.error(
            f"{_where(request)}: the stream ended before the model finished (no {missing}): "
            "the connection may have closed early; retrying may help, else check the endpoint "
            "and any proxy in between",
            retryable=True,
        )

    def not_json(self, exc: ValueError) -> ModelError:
        """A stream event whose data is not JSON (or not UTF-8)."""
        doc = getattr(exc, "doc", None)
        shown = f": {excerpt(doc)}" if isinstance(doc, str) else ""
        return self.error(
            f"the endpoint sent a stream event that is not JSON ({type(exc).__name__}: "
            f"{excerpt(str(exc))}){shown}"
        )

    def _hint(self, status: int) -> str:
        if status == 401:
            return f"check the API key ({self._key_setting})"
        if status == 403:
            return f"check that the API key ({self._key_setting}) may use this model"
        if status == 404:
            return "check base_url and the model name"
        return "fix the request; retrying will not help"


def _where(request: httpx2.Request) -> str:
    return f"{request.method} {url_without_password(str(request.url))}"


def _attempts(request: httpx2.Request) -> str:
    """``after N attempts``, read from the SDK's retry-count header of the last attempt."""
    try:
        n = int(request.headers.get("x-stainless-retry-count", "")) + 1
    except ValueError:
        return "after retries"
    return f"after {n} attempt{'s' if n != 1 else ''}"
