"""Model adapter for any OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from fleet.agents.models.base import ChatMessage, ModelResponse, ToolCall, ToolSpec, Usage
from fleet.errors import ModelError

#: Statuses worth trying again: rate limited or a transient server-side failure.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Transport failures worth trying again (timeouts, refused/reset connections).
_RETRY_EXCEPTIONS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)
_EXCERPT_CHARS = 200


class OpenAIModel:
    """Synchronous chat-completions client with retries, backoff and readable errors."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_base_s: float = 0.5,
        backoff_max_s: float = 8.0,
        temperature: float | None = None,
        client: httpx.Client | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.name = f"openai:{model}"
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.temperature = temperature
        self._api_key = api_key
        self._owns_client = client is None
        self._client = client if client is not None else httpx.Client()
        self._sleep = sleep

    def close(self) -> None:
        """Close the HTTP client if this adapter created it."""
        if self._owns_client:
            self._client.close()

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()
    ) -> ModelResponse:
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": [self._message_json(m) for m in messages],
        }
        if tools:
            payload["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in tools
            ]
        if self.temperature is not None:
            payload["temperature"] = self.temperature
        return self._parse(self._post(payload))

    # -- request -----------------------------------------------------------------------

    def _message_json(self, m: ChatMessage) -> dict[str, Any]:
        if m.role == "tool":
            if not m.tool_call_id:
                raise ModelError(
                    f"{self.name}: tool message for {m.name or 'unnamed tool'!r} has no "
                    "tool_call_id; set it to the id of the call it answers"
                )
            return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
        out: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.role == "assistant" and m.tool_calls:
            out["content"] = m.content or None
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
                }
                for c in m.tool_calls
            ]
        return out

    def _post(self, payload: dict[str, Any]) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        attempts = self.max_retries + 1
        for attempt in range(1, attempts + 1):
            retry_after: float | None = None
            try:
                resp = self._client.post(
                    self.url, json=payload, headers=headers, timeout=self.timeout_s
                )
            except _RETRY_EXCEPTIONS as exc:
                if isinstance(exc, httpx.TimeoutException):
                    failure = f"timed out after {self.timeout_s:g} s ({type(exc).__name__})"
                else:
                    failure = f"{type(exc).__name__}: {exc}"
                status: int | None = None
            except httpx.HTTPError as exc:
                raise self._error(
                    f"POST {self.url} failed: {type(exc).__name__}: {exc}; check base_url"
                ) from exc
            else:
                if resp.is_success:
                    return resp
                status = resp.status_code
                if status not in RETRY_STATUSES:
                    raise self._error(
                        f"POST {self.url} was rejected with HTTP {status}: "
                        f"{_error_text(resp)}; {_hint(status)}",
                        status_code=status,
                    )
                failure = f"HTTP {status}: {_error_text(resp)}"
                retry_after = _retry_after(resp)
            if attempt == attempts:
                plural = "s" if attempts != 1 else ""
                raise self._error(
                    f"POST {self.url} failed after {attempts} attempt{plural}: {failure}; "
                    "check that the endpoint is up, or raise max_retries/timeout_s",
                    retryable=True,
                    status_code=status,
                )
            self._sleep(self._delay(attempt, retry_after))
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.backoff_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)

    # -- response ----------------------------------------------------------------------

    def _parse(self, resp: httpx.Response) -> ModelResponse:
        try:
            body = resp.json()
            choice = body["choices"][0]
            msg = choice["message"]
            if not isinstance(msg, dict):
                raise TypeError(f"choices[0].message is {type(msg).__name__}, not an object")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise self._error(
                f"POST {self.url} returned a body that is not a chat completion "
                f"({type(exc).__name__}: {exc}): {_excerpt(resp.text)}"
            ) from exc
        calls = tuple(self._tool_call(i, raw) for i, raw in enumerate(msg.get("tool_calls") or ()))
        usage = body.get("usage") or {}
        return ModelResponse(
            message=ChatMessage(
                role="assistant", content=msg.get("content") or "", tool_calls=calls
            ),
            usage=Usage(
                prompt_tokens=usage.get("prompt_tokens") or 0,
                completion_tokens=usage.get("completion_tokens") or 0,
            ),
            model=body.get("model") or self.model,
            finish_reason=choice.get("finish_reason"),
        )

    def _tool_call(self, index: int, raw: Any) -> ToolCall:
        fn = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(fn, dict):
            raise self._error(f"the model returned a malformed tool call: {_excerpt(str(raw))}")
        name = str(fn.get("name") or "")
        args: Any = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError as exc:
                raise self._error(
                    f"the model returned invalid JSON arguments for tool {name!r} "
                    f"({exc}): {_excerpt(args)}",
                    retryable=True,
                ) from exc
        elif args is None:
            args = {}
        if not isinstance(args, dict):
            raise self._error(
                f"the model returned invalid JSON arguments for tool {name!r}: expected a JSON "
                f"object, got {type(args).__name__}: {_excerpt(json.dumps(args))}",
                retryable=True,
            )
        return ToolCall(id=str(raw.get("id") or f"call_{index}"), name=name, arguments=args)

    def _error(
        self, text: str, *, retryable: bool = False, status_code: int | None = None
    ) -> ModelError:
        if self._api_key:
            text = text.replace(self._api_key, "***")
        return ModelError(f"{self.name}: {text}", retryable=retryable, status_code=status_code)


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _EXCERPT_CHARS else flat[:_EXCERPT_CHARS] + "..."


def _error_text(resp: httpx.Response) -> str:
    """The provider's ``error.message`` when the body has one, else an excerpt of the body."""
    try:
        err = resp.json().get("error")
    except (ValueError, AttributeError):
        err = None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return _excerpt(err["message"])
    if isinstance(err, str):
        return _excerpt(err)
    return _excerpt(resp.text) or "(empty body)"


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        value = float(resp.headers.get("retry-after", ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def _hint(status: int) -> str:
    if status in (401, 403):
        return "check the API key"
    if status == 404:
        return "check base_url and the model name"
    return "fix the request; retrying will not help"
