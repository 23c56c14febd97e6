"""What the adapters on the official ``openai`` and ``anthropic`` SDKs share.

Both SDKs are generated alike: a client built from a key, base URL, timeout and retry count; an
``omit`` sentinel that drops a header from a request; one exception hierarchy (timeout, a
connection error, an error status, the SDK's root error); and a ``Stream`` of server-sent events
that closes its HTTP response. :class:`SDKModel` builds the client from fleet's settings alone,
turns those exceptions into readable ModelErrors, and reads a stream into an :class:`Assembly`.
"""

from __future__ import annotations

import functools
import itertools
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, suppress
from typing import Any, ClassVar, Generic, NamedTuple, NotRequired, Protocol, TypedDict, TypeVar

from fleet.agents.models.base import ChatMessage, Listener, Stopped, opened
from fleet.agents.models.failures import Failures, error_kind, excerpt
from fleet.agents.models.hangup import Calls, HungUp, watch
from fleet.domain.model_errors import Verdict, classify
from fleet.errors import ModelError


class _Client(Protocol):
    def close(self) -> None: ...


class Stream(Iterable[Any], Protocol):
    """An SDK's stream: its events, the HTTP response they come on, and ``close``."""

    @property
    def response(self) -> Any: ...

    def close(self) -> None: ...


class Assembly(Protocol):
    """A reply put together from a stream's events, one provider's event shapes."""

    #: What an event should be, for errors: ``a chat completion chunk``.
    what: str
    #: What says the model finished, for errors: ``finish_reason``.
    end: str

    def add(self, event: Any) -> str:
        """Take one event in; the reply text it adds ("" if none). Raises AttributeError,
        TypeError, ... on an event it cannot read."""
        ...

    @property
    def finished(self) -> bool:
        """Whether the model said it finished (a stream without it was cut short)."""
        ...


C = TypeVar("C", bound=_Client)
R = TypeVar("R")

#: The end of a stream (an event may be None: ``data: null``).
_END = object()
#: Errors an assembly raises on an event without what it should have.
_UNREADABLE = (AttributeError, IndexError, KeyError, TypeError, ValueError)
#: The HTTP status each error type (or code) has outside a stream, in Anthropic's and OpenAI's
#: error docs: an error event in a stream that began with 200 is sorted as that status, an
#: unknown type as a server error (the provider accepted the request, then failed).
STREAM_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "api_error": 500,
    "server_error": 500,
    "overloaded_error": 529,
}


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


#: How many SDK clients (HTTP connection pools) one adapter spreads its calls over.
CLIENT_SHARDS = 8


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
        self._connect = functools.partial(
            connect,
            api_key=api_key or "no-key",
            base_url=base_url,
            timeout=timeout_s,
            max_retries=max_retries,
        )
        #: The calls in flight, so a run that must stop hangs its call up (``hangup``).
        self._calls = Calls()
        self._clients: list[C] = [self._new_client()]
        self._turn = itertools.count()
        self._clients_lock = threading.Lock()
        self._headers: dict[str, Any] = {} if api_key else {"Authorization": omit}

    @property
    def _client(self) -> C:
        """One of the adapter's SDK clients, in turn (each made on first use).

        Every SDK client has one HTTP connection pool, and that pool looks over all its
        connections each time a request starts or ends: with hundreds of calls in flight in one
        process that search is quadratic. Spread over ``CLIENT_SHARDS`` clients, each pool
        holds a fraction of the calls.
        """
        i = next(self._turn) % CLIENT_SHARDS
        if i >= len(self._clients):
            with self._clients_lock:
                while len(self._clients) <= i:
                    self._clients.append(self._new_client())
        return self._clients[i]

    def _new_client(self) -> C:
        client = self._connect()
        watch(client, self._calls)
        return client

    def close(self) -> None:
        """Close the SDK's HTTP clients."""
        with self._clients_lock:
            for client in self._clients:
                client.close()

    def _call(
        self, request: Callable[[], Stream], reply: Assembly, listen: Listener | None
    ) -> None:
        """Send ``request`` and read its stream into ``reply`` (:meth:`_send`, :meth:`_read`);
        meanwhile ``listen`` can abort the call, before its response began or after."""
        with self._calls.call() as me:
            try:
                opened(listen, lambda: self._calls.abort(me))
                try:
                    stream = self._send(request)
                except ModelError:
                    if opened(listen, None):  # hung up because the run must stop
                        raise Stopped("the run must stop (the model call was aborted)") from None
                    raise
                self._read(stream, reply, listen, me)
            except HungUp:
                opened(listen, None)
                raise Stopped("the run must stop (the model call was aborted)") from None

    def _send(self, request: Callable[[], R]) -> R:
        """``request()``, with the SDK's failures (after its retries) as ModelErrors."""
        try:
            return request()
        except self.errors.root as exc:
            raise self._failed(exc) from None

    def _failed(self, exc: Any) -> ModelError:
        """The ModelError for one of the SDK's exceptions."""
        errors = self.errors
        if isinstance(exc, errors.timeout):  # a connection error too: first
            error = self._failures.timed_out(exc.request, self.timeout_s)
            return sorted_as(error, classify(timeout=True))
        if isinstance(exc, errors.connection):
            error = self._failures.unreachable(exc.request, exc.__cause__)
            return sorted_as(error, classify(connection=True))
        if isinstance(exc, errors.status):
            return sorted_as(self._failures.rejected(exc.response), verdict_of(exc))
        error = self._failures.error(f"the request failed: {excerpt(str(exc))}")
        return sorted_as(error, classify())

    def _read(self, stream: Stream, reply: Assembly, listen: Listener | None, me: int) -> None:
        """Every event of ``stream`` into ``reply``, its text told to ``listen`` as it comes.

        The SDK's failures on the way are ModelErrors as :meth:`_send` makes them (an error
        event is :meth:`_broke_off`), an event ``reply`` cannot read is :meth:`_unreadable`,
        and a stream that ends before the model finished is a retryable error: nothing half
        put together is returned. Whatever happens the stream is closed, so an exception from
        ``listen.text`` (which passes untouched) ends the call at once.
        """
        with closing(stream):
            opened(listen, lambda: self._hang_up(stream, me))
            try:
                events = iter(stream)
                while (event := self._next(events)) is not _END:
                    try:
                        text = reply.add(event)
                    except _UNREADABLE as exc:
                        raise self._unreadable(reply.what, event, exc) from None
                    if text and listen is not None:
                        listen.text(text)
            except ModelError:
                if opened(listen, None):  # hung up because the run must stop: no failure
                    raise Stopped("the run must stop (the model call was aborted)") from None
                raise
            finally:
                opened(listen, None)
        if not reply.finished:
            error = self._failures.cut_short(stream.response.request, reply.end)
            raise sorted_as(error, classify(connection=True))

    def _hang_up(self, stream: Stream, me: int) -> None:
        """End call ``me`` mid-response: through its watched socket, and through the response's
        own (the one there is when the SDK client could not be watched)."""
        self._calls.abort(me)
        hang_up(stream.response)

    def _next(self, events: Iterator[Any]) -> Any:
        """The stream's next event, ``_END`` after its last."""
        errors = self.errors
        try:
            return next(events, _END)
        except errors.root as exc:
            if isinstance(exc, (errors.timeout, errors.connection)) or (
                isinstance(exc, errors.status) and exc.response.status_code >= 400
            ):
                raise self._failed(exc) from None
            # an error event: Anthropic's is a status error with the stream's 200, OpenAI's
            # a plain API error
            raise self._broke_off(exc) from None
        except ValueError as exc:  # a data line that is not JSON, or not UTF-8
            raise self._failures.not_json(exc) from None

    def _broke_off(self, exc: Any) -> ModelError:
        """The error for an error event in a stream: sorted as its type's HTTP status."""
        body = getattr(exc, "body", None)
        inner = body.get("error") if isinstance(body, dict) else None
        err = inner if isinstance(inner, dict) else body if isinstance(body, dict) else {}
        kinds = [k for k in (err.get("code"), err.get("type")) if isinstance(k, str) and k]
        kind = kinds[0] if kinds else None
        status = next((STREAM_ERROR_STATUS[k] for k in kinds if k in STREAM_ERROR_STATUS), 500)
        message = err.get("message")
        text = excerpt(message if isinstance(message, str) else str(exc))
        error = self._failures.broke_off(exc.request, kind, text, status)
        return sorted_as(error, classify(status=status, error_type=kind))

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


def hang_up(response: Any) -> None:
    """End a response being read on another thread: shut its socket down (a read blocked on
    it returns at once and the SDK raises a connection error)."""
    network = getattr(response, "extensions", {}).get("network_stream")
    sock = network.get_extra_info("socket") if network is not None else None
    if sock is not None:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
