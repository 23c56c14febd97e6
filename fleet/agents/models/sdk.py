"""What the adapters on the official ``openai`` and ``anthropic`` SDKs share.

Both SDKs are generated alike: a client built from a key, base URL, timeout and retry count; an
``omit`` sentinel that drops a header from a request; and one exception hierarchy (timeout, a
connection error, an error status, the SDK's root error). :class:`SDKModel` builds the client
from fleet's settings alone and turns those exceptions into readable ModelErrors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, NamedTuple, NotRequired, Protocol, TypedDict, TypeVar

from fleet.agents.models.base import ChatMessage
from fleet.agents.models.failures import Failures, error_kind, excerpt
from fleet.domain.model_errors import Verdict, classify
from fleet.errors import ModelError


class _Client(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Client)
R = TypeVar("R")


class SDKErrors(NamedTuple):
    """One SDK's exception classes, in the order they are caught (a timeout is a connection
    error too). Their ``request`` and ``response`` attributes are httpx2 objects."""

    timeout: type[Any]
    connection: type[Any]
    status: type[Any]
    root: type[Any]


class Endpoint(TypedDict):
    """Where and how an adapter calls its provider."""

    model: str
    base_url: str
    api_key: NotRequired[str | None]
    timeout_s: NotRequired[float]
    max_retries: NotRequired[int]


class SDKModel(Generic[C]):
    """An adapter's name, timeout, SDK client, failures and the headers of every request."""

    provider: ClassVar[str]
    #: The setting that holds the API key, named in hints (``FLEET_OPENAI_API_KEY``).
    key_setting: ClassVar[str]
    errors: ClassVar[SDKErrors]

    def __init__(
        self,
        connect: Callable[..., C],
        omit: object,
        *,
        model: str,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.name = f"{self.provider}:{model}"
        self.model = model
        self.timeout_s = timeout_s
        self._failures = Failures(self.name, api_key=api_key, key_setting=self.key_setting)
        # Without a key no Authorization header is sent (local vLLM/Ollama); the SDKs insist on
        # one at construction, so they get a stand-in that every request then omits. An explicit
        # key also keeps the SDK from reading its own OPENAI_*/ANTHROPIC_* variables or profiles:
        # fleet's settings are the one source.
        self._client = connect(
            api_key=api_key or "no-key",
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
        )
        self._headers: dict[str, Any] = {} if api_key else {"Authorization": omit}

    def close(self) -> None:
        """Close the SDK's HTTP client."""
        self._client.close()

    def _send(self, request: Callable[[], R]) -> R:
        """``request()``, with the SDK's failures (after its retries) as ModelErrors."""
        errors = self.errors
        try:
            return request()
        except errors.timeout as exc:
            error = self._failures.timed_out(exc.request, self.timeout_s)
            raise sorted_as(error, classify(timeout=True)) from None
        except errors.connection as exc:
            error = self._failures.unreachable(exc.request, exc.__cause__)
            raise sorted_as(error, classify(connection=True)) from None
        except errors.status as exc:
            raise sorted_as(self._failures.rejected(exc.response), verdict_of(exc)) from None
        except errors.root as exc:
            error = self._failures.error(f"the request failed: {excerpt(str(exc))}")
            raise sorted_as(error, classify()) from None

    def _answered_call(self, m: ChatMessage) -> str:
        """The id of the call a tool message answers."""
        if not m.tool_call_id:
            raise self._failures.error(
                f"tool message for {m.name or 'unnamed tool'!r} has no tool_call_id; "
                "set it to the id of the call it answers"
            )
        return m.tool_call_id

    def _unreadable(self, what: str, body: Any, exc: Exception) -> ModelError:
        """The error for a response body the SDK built but that lacks what ``what`` has."""
        shown = body.model_dump_json() if hasattr(body, "model_dump_json") else ""
        return self._failures.error(
            f"the endpoint returned a body that is not {what} "
            f"({type(exc).__name__}: {exc}): {excerpt(shown or repr(body))}"
        )


def verdict_of(exc: Any) -> Verdict:
    """The verdict on an SDK status error (both SDKs: ``status_code`` and the ``response``)."""
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None) or getattr(response, "status_code", None)
    headers = dict(response.headers.items()) if response is not None else {}
    body = response.text if response is not None else ""
    return classify(status=status, error_type=error_kind(body), headers=headers)


def sorted_as(error: ModelError, verdict: Verdict) -> ModelError:
    """``error`` carrying the verdict: what fleet does about it and what the provider asked."""
    error.action = verdict.action
    error.retryable = verdict.action != "fail"
    error.retry_after_s = verdict.retry_after_s
    return error
