"""``[reply]`` of a trigger or deployment: where a task's reply goes (see fleet.delivery)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, field_validator

from fleet.config.base import _ENV_NAME, Duration, _env_name, _Strict
from fleet.constants import (
    DEFAULT_DELIVERY_ATTEMPTS,
    DEFAULT_DELIVERY_TIMEOUT_S,
    MAX_DELIVERY_ATTEMPTS,
)
from fleet.domain import delivery as rules

_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
#: Headers fleet sets itself: a config naming them would be ignored or conflict.
_OWN_HEADERS = frozenset({"content-type", "content-length", "idempotency-key", "host"})


class HeaderFromEnv(_Strict):
    """A header whose value is an environment variable's, optionally after a fixed prefix."""

    #: The environment variable holding the header's value.
    env: Annotated[str, _env_name("GITHUB_TOKEN")]
    #: Put before the variable's value, e.g. ``"Bearer "``.
    prefix: str = ""


class ReplyConfig(_Strict):
    """Where the reply of each task goes: an HTTP request rendered from the delivery's fields.

    Fields: ``reply``, ``task_id``, ``conversation``, ``deployment``, ``status`` and
    ``labels.<name>`` (a trigger's labels are read from the request that made the task).
    """

    #: URL template; each field's value is percent-encoded where it lands.
    url: str
    #: The request's method.
    method: Literal["POST", "PUT", "PATCH"] = "POST"
    #: header name → the environment variable holding its value (or ``{env, prefix}``).
    headers: dict[str, str | HeaderFromEnv] = Field(default_factory=dict)
    #: JSON body template (a table; its strings are templates). Default: reply, task, conversation.
    body: dict[str, Any] | None = None
    #: One attempt's limit (connect and answer); past it the attempt is ``unknown``.
    timeout: Duration = DEFAULT_DELIVERY_TIMEOUT_S
    #: Attempts before the delivery ends ``failed`` / ``unknown``.
    attempts: StrictInt = Field(default=DEFAULT_DELIVERY_ATTEMPTS, ge=1, le=MAX_DELIVERY_ATTEMPTS)

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        fields = rules.template_fields(v)
        sample: dict[str, Any] = {f.partition(".")[0]: "x" for f in fields}
        sample["labels"] = {f.partition(".")[2]: "x" for f in fields if f.startswith("labels.")}
        rules.check_url(rules.render(v, sample, url=True))
        for f in fields:
            _known(f)
        return v

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str | HeaderFromEnv]) -> dict[str, str | HeaderFromEnv]:
        for name, source in v.items():
            if not _HEADER.match(name):
                raise ValueError(f"{name!r} is not a header name")
            if name.lower() in _OWN_HEADERS:
                raise ValueError(f"{name} is set by fleet; remove it")
            if isinstance(source, str) and not _ENV_NAME.match(source):
                raise ValueError(
                    f"{name}: give the name of the environment variable holding its value "
                    "(like GITHUB_TOKEN), or {{ env = ..., prefix = ... }}"
                )
        return v

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, v: float) -> float:
        if not 0 < v <= 300:
            raise ValueError("must be more than 0s and at most 300s")
        return v

    @field_validator("body")
    @classmethod
    def _body(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            _check_body(v)
        return v

    def env_names(self) -> dict[str, str]:
        """header name → the environment variable it reads."""
        return {
            name: src if isinstance(src, str) else src.env for name, src in self.headers.items()
        }

    def header_values(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The headers with their values read from the environment (KeyError if one is unset)."""
        env = os.environ if environ is None else environ
        out: dict[str, str] = {}
        for name, src in self.headers.items():
            if isinstance(src, str):
                out[name] = env[src]
            else:
                out[name] = src.prefix + env[src.env]
        return out


_FIELDS = frozenset({"reply", "task_id", "conversation", "deployment", "status"})


def _known(field: str) -> None:
    head, _, rest = field.partition(".")
    if head == "labels" and rest:
        return
    if head in _FIELDS and not rest:
        return
    raise ValueError(
        f"{{{field}}} is not a delivery field; use one of "
        + ", ".join("{" + f + "}" for f in sorted(_FIELDS))
        + " or {labels.<name>}"
    )


def _check_body(value: Any) -> None:
    if isinstance(value, str):
        for f in rules.template_fields(value):
            _known(f)
    elif isinstance(value, dict):
        for v in value.values():
            _check_body(v)
    elif isinstance(value, list):
        for v in value:
            _check_body(v)
