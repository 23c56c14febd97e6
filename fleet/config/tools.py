"""An agent's ``tools`` and ``[[mcp_servers]]``: built-in and Python tools, MCP servers.

Secrets are never written in these files: MCP servers name the environment variables that hold
them (``env_from``, ``headers_env``).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from fleet.config.base import _ENV_NAME, _TOOL_REF, PositiveDuration, _Strict
from fleet.constants import (
    BUILTIN_TOOL_NAMES,
    DEFAULT_MCP_CONNECT_TIMEOUT_S,
    DEFAULT_MCP_IDLE_TIMEOUT_S,
    EVENT_WAIT_TOOL,
    MAX_MCP_CONCURRENT_CALLS,
    MCP_PYTHON_PLACEHOLDER,
)
from fleet.domain.event_waits import DEFAULT_MAX_TIMEOUT_S
from fleet.domain.event_waits import check_globs as event_globs
from fleet.domain.waits import check_globs


class ToolRef(_Strict):
    """One entry of an agent's ``tools``: a built-in name or ``module:function``, with options."""

    #: A built-in's name or a Python function as ``package.module:function``.
    tool: str
    #: The name the model sees (default: the built-in's or the function's name).
    name: str | None = None
    #: Seconds one call may take (default: the decorator's, else the agent's ``tool_timeout``).
    timeout: PositiveDuration | None = None
    #: ``safe``: a call in flight when its worker died may run again; ``unsafe``: the model is
    #: told the outcome is unknown. Default: the decorator's, else ``unsafe`` (built-ins: safe).
    retry: Literal["safe", "unsafe"] | None = None
    #: ``"required"``: each call waits for a person's approval before it runs (the task goes
    #: ``waiting``, holding no worker; the agent's ``approval_timeout`` bounds the wait).
    approval: Literal["required"] | None = None
    #: ``process``: the (sync, Python) tool runs in a child process of the worker, for work that
    #: holds the CPU; ``thread`` (default): on a thread, for work that waits.
    isolation: Literal["thread", "process"] = "thread"
    #: ``wait_for_event`` only: the event names (or patterns, ``payment.*``) it may wait for.
    events: tuple[str, ...] | None = None
    #: ``wait_for_event`` only: the longest timeout a call may ask for (default 1 day).
    max_timeout: PositiveDuration | None = None

    @field_validator("events")
    @classmethod
    def _event_names(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        return None if v is None else event_globs(v)

    @model_validator(mode="after")
    def _event_wait(self) -> ToolRef:
        if self.tool == EVENT_WAIT_TOOL:
            if self.events is None:
                raise ValueError(
                    f"{EVENT_WAIT_TOOL!r} needs the events it may wait for (events come from "
                    f'outside): {{ tool = "{EVENT_WAIT_TOOL}", events = ["payment.*"], '
                    'max_timeout = "1d" }'
                )
        elif self.events is not None or self.max_timeout is not None:
            raise ValueError(
                f"tool {self.tool!r}: events and max_timeout are for {EVENT_WAIT_TOOL!r} only"
            )
        return self

    @property
    def longest_wait(self) -> float:
        """``wait_for_event``: the longest timeout a call may ask for, in seconds."""
        return self.max_timeout if self.max_timeout is not None else DEFAULT_MAX_TIMEOUT_S

    @field_validator("tool")
    @classmethod
    def _known(cls, v: str) -> str:
        if v in BUILTIN_TOOL_NAMES or _TOOL_REF.match(v):
            return v
        known = ", ".join(sorted(BUILTIN_TOOL_NAMES))
        raise ValueError(
            f"unknown tool {v!r}: name a built-in ({known}) or a Python function as "
            "'package.module:function'"
        )

    @property
    def builtin(self) -> bool:
        return ":" not in self.tool

    @model_validator(mode="after")
    def _isolated_function(self) -> ToolRef:
        if self.isolation == "process" and self.builtin:
            raise ValueError(
                f"tool {self.tool!r}: isolation = 'process' is for Python function tools "
                "('package.module:function'); built-ins run on a thread"
            )
        return self


_MCP_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")
_PROCESS_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Headers the MCP transport sets itself; a config that sets them would break the protocol.
_TRANSPORT_HEADERS = frozenset(
    {"content-type", "accept", "content-length", "host", "mcp-session-id", "mcp-protocol-version"}
)
#: Longest command line or URL a message shows of an MCP server.
_SHOWN_CHARS = 80
#: Headers whose values are secrets: never literal in a file (use ``headers_env``).
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})


def _process_env_name(name: str) -> None:
    """A variable the server process gets must have a name a process environment can hold."""
    if not _PROCESS_ENV_NAME.match(name):
        raise ValueError(f"{name!r} is not an environment variable name")


def _env_source(name: str, source: str, example: str) -> None:
    """``name``'s value comes from the fleet process's variable ``source``."""
    if not _ENV_NAME.match(source):
        raise ValueError(f"{name}: {source!r} must name an environment variable like {example}")


class McpServerConfig(_Strict):
    """One ``[[mcp_servers]]`` entry: an MCP server whose tools the agent gets as ``name.tool``.

    Secrets are never written here: ``env_from`` and ``headers_env`` name environment variables
    of the fleet process that hold them.
    """

    #: Lowercase; the namespace of the server's tools (``github.search_issues``).
    name: str
    #: stdio: the program to start (found on PATH), or ``"{python}"``: the Python interpreter
    #: fleet itself runs on (so ``args = ["-m", "my.server"]`` finds the packages installed
    #: beside fleet, whether or not its virtual environment is activated).
    command: str | None = None
    #: stdio: the program's arguments.
    args: tuple[str, ...] = ()
    #: stdio: literal environment variables for the server (PATH, HOME, ... are inherited).
    env: dict[str, str] = Field(default_factory=dict)
    #: stdio: server variable → fleet process variable holding its value.
    env_from: dict[str, str] = Field(default_factory=dict)
    #: Streamable HTTP: the endpoint (``https://host/mcp``).
    url: str | None = None
    #: HTTP: literal, non-secret headers.
    headers: dict[str, str] = Field(default_factory=dict)
    #: HTTP: header → environment variable holding its value (``Authorization = "FLEET_X"``).
    headers_env: dict[str, str] = Field(default_factory=dict)
    #: Tool names (without the namespace) or glob patterns to keep; empty keeps all.
    include: tuple[str, ...] = ()
    #: Tool names or glob patterns to leave out (applied after ``include``).
    exclude: tuple[str, ...] = ()
    #: Start (or connect), handshake and list tools within this long, or the run fails.
    connect_timeout: PositiveDuration = DEFAULT_MCP_CONNECT_TIMEOUT_S
    #: Seconds one call may take (default: the agent's ``tool_timeout``).
    call_timeout: PositiveDuration | None = None
    #: Retry policy for every tool of the server. Default per tool: ``safe`` when the server
    #: marks it readOnlyHint or idempotentHint, else ``unsafe``.
    retry: Literal["safe", "unsafe"] | None = None
    #: ``run``: started (or connected) for each run and closed when it ends, so nothing the
    #: server keeps (files, a browser, a memory) reaches another conversation. ``worker``: kept
    #: up in the worker process across runs of one tenant, for servers that keep no state
    #: between calls; never shared between tenants.
    lifetime: Literal["run", "worker"] = "run"
    #: ``lifetime = "worker"``: closed after this long with no run using it.
    idle_timeout: PositiveDuration = DEFAULT_MCP_IDLE_TIMEOUT_S
    #: Calls the server takes at once (across the runs sharing a worker-lifetime server);
    #: more wait their turn, within their timeout.
    max_concurrent_calls: int = Field(default=1, ge=1, le=MAX_MCP_CONCURRENT_CALLS)
    #: Globs of the server's tool names (without its namespace, ``["delete_*", "refund"]``)
    #: whose calls wait for a person's approval before they run.
    approval: tuple[str, ...] = ()

    @field_validator("approval")
    @classmethod
    def _approval(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return check_globs(v)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _MCP_NAME.match(v):
            raise ValueError(
                f"{v!r} is not a server name: 1-32 lowercase letters, digits, '_' or '-', "
                "starting with a letter (it prefixes the tool names: 'name.tool')"
            )
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must name a program, e.g. 'npx' or '/usr/bin/my-server'")
        if v is not None and v.startswith("{") and v != MCP_PYTHON_PLACEHOLDER:
            raise ValueError(
                f"{v!r} is no placeholder fleet knows: {MCP_PYTHON_PLACEHOLDER!r} starts fleet's "
                "own Python interpreter; otherwise name a program"
            )
        return v

    @field_validator("url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            parts = urlsplit(v)
            parts.port  # noqa: B018 (a bad port raises)
        except ValueError as exc:
            raise ValueError(f"is not a URL ({exc})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL like 'https://host/mcp'")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            _process_env_name(name)
        return v

    @field_validator("env_from")
    @classmethod
    def _env_from(cls, v: dict[str, str]) -> dict[str, str]:
        for name, source in v.items():
            _process_env_name(name)
            _env_source(name, source, "FLEET_GITHUB_TOKEN")
        return v

    @field_validator("headers", "headers_env")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _HEADER_NAME.match(name):
                raise ValueError(f"{name!r} is not an HTTP header name")
            if name.lower() in _TRANSPORT_HEADERS:
                raise ValueError(f"{name!r} is set by the MCP transport itself; leave it out")
        return v

    @field_validator("headers")
    @classmethod
    def _no_secret_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if name.lower() in _SECRET_HEADERS:
                raise ValueError(
                    f"{name!r} carries a secret: put it in headers_env = {{ {name} = "
                    '"FLEET_..." } and the value in that environment variable'
                )
        return v

    @field_validator("headers_env")
    @classmethod
    def _header_sources(cls, v: dict[str, str]) -> dict[str, str]:
        for name, source in v.items():
            _env_source(name, source, "FLEET_MCP_TOKEN")
        return v

    @field_validator("include", "exclude")
    @classmethod
    def _patterns(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in v:
            if not pattern.strip():
                raise ValueError("an empty tool name or pattern matches nothing")
        return v

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"server {self.name!r}: give exactly one of command (a stdio server) or url "
                "(a streamable HTTP server)"
            )
        wrong = (
            [k for k in ("args", "env", "env_from") if getattr(self, k)]
            if self.url is not None
            else [k for k in ("headers", "headers_env") if getattr(self, k)]
        )
        if wrong:
            kind, other = ("url", "command") if self.url is not None else ("command", "url")
            raise ValueError(
                f"server {self.name!r}: {wrong[0]} is for servers with {other}, and this one "
                f"has {kind}"
            )
        if self.lifetime == "run" and "idle_timeout" in self.model_fields_set:
            raise ValueError(
                f"server {self.name!r}: idle_timeout is for lifetime = 'worker' (a server kept "
                "up across runs); this one is started for each run"
            )
        both = set(self.headers).intersection(self.headers_env) or set(self.env).intersection(
            self.env_from
        )
        if both:
            raise ValueError(
                f"server {self.name!r}: {sorted(both)[0]!r} is set twice (literally and from "
                "the environment)"
            )
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"

    @property
    def program(self) -> str | None:
        """The stdio program as started: ``{python}`` is the interpreter fleet runs on."""
        return sys.executable if self.command == MCP_PYTHON_PLACEHOLDER else self.command

    def secret_sources(self) -> dict[str, str]:
        """What each secret is for → the environment variable holding it."""
        sources = {f"header {h}": var for h, var in self.headers_env.items()}
        sources.update({f"variable {n}": var for n, var in self.env_from.items()})
        return sources

    @property
    def label(self) -> str:
        """How messages name the server: ``MCP server 'github' (stdio: npx -y @x/server)``."""
        if self.command is not None:
            program = self.command  # (the placeholder as written, not quoted)
            if program != MCP_PYTHON_PLACEHOLDER:
                program = shlex.quote(program)
            where = f"stdio: {program} {shlex.join(self.args)}".rstrip()
        else:
            parts = urlsplit(self.url or "")
            host = parts.hostname or ""
            if ":" in host:  # IPv6
                host = f"[{host}]"
            if parts.port is not None:
                host = f"{host}:{parts.port}"
            where = f"http: {parts.scheme}://{host}{parts.path}"  # no credentials, no query
        if len(where) > _SHOWN_CHARS:
            where = where[: _SHOWN_CHARS - 1] + "…"
        return f"MCP server {self.name!r} ({where})"

    def missing_secrets(self, environ: Mapping[str, str]) -> list[str]:
        """One line per environment variable the server needs that is unset or empty."""
        return [
            f"{self.label}: {what} needs environment variable {var}, which is not set"
            for what, var in self.secret_sources().items()
            if not environ.get(var)
        ]
