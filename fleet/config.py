"""Settings from ``FLEET_*`` environment variables and the agents/deployments in ``config/``.

Every failure names the file (or ``environment``), the key and the reason, so a bad value is fixed
where it is written.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import shlex
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from fleet.constants import (
    DEFAULT_DEBOUNCE_S,
    DEFAULT_MCP_CONNECT_TIMEOUT_S,
    DEFAULT_TOOL_TIMEOUT_S,
    LIMITS,
    MAX_CONTEXT_TOKENS,
    MAX_DEBOUNCE_S,
    MIN_CONTEXT_TOKENS,
)
from fleet.errors import ConfigError, NotFound

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}
_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


#: Longest duration any setting takes (a bigger one overflows timers, and is surely a typo).
MAX_DURATION_S = 30 * 24 * 3600.0


def parse_duration(value: Any, maximum: float = MAX_DURATION_S) -> float:
    """Seconds from ``2s``, ``500ms``, ``1.5m``, ``1h``, ``30d`` or a bare number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like '2s' or '500ms', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (m := _DURATION.match(value)):
        seconds = float(m.group(1)) * _UNITS[m.group(2)]
    else:
        raise ValueError(f"expected a duration like '2s' or '500ms', got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a duration must be a finite, non-negative time, got {value!r}")
    if seconds > maximum:
        raise ValueError(f"a duration must be at most {maximum / 86400:g} days, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(parse_duration)]


def _retention(value: Any) -> float:
    lim = LIMITS["retention_days"]
    seconds = parse_duration(value, maximum=lim.maximum * 86400.0)
    if seconds < 3600:
        raise ValueError(f"must be from 1h to {lim.maximum}d, got {value!r}")
    return seconds


#: How long a conversation keeps its messages: ``30d``, ``12h``, at most 365 days.
Retention = Annotated[float, BeforeValidator(_retention)]


def _in_range(name: str) -> Any:
    """A check that a limit is a whole number from 1 to its maximum, naming the range."""
    lim = LIMITS[name]

    def check(v: int) -> int:
        if not 1 <= v <= lim.maximum:
            raise ValueError(f"must be from 1 to {lim.maximum} ({lim.doc}), got {v}")
        return v

    return AfterValidator(check)


HistoryItems = Annotated[StrictInt, _in_range("max_history_items")]
HistoryBytes = Annotated[StrictInt, _in_range("max_history_bytes")]
InputBytes = Annotated[StrictInt, _in_range("max_input_bytes")]
Steps = Annotated[StrictInt, _in_range("max_steps")]
NotesBytes = Annotated[StrictInt, _in_range("notes_bytes")]
StoredMessages = Annotated[StrictInt, _in_range("stored_messages")]


class Settings(BaseSettings):
    """Process settings; each field is also the environment variable ``FLEET_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="FLEET_", extra="ignore", frozen=True)

    #: Folder for the embedded SQLite database and other local state.
    home: Path = Path(".fleet")
    #: SQLAlchemy URL of the store; unset means the embedded SQLite file ``<home>/fleet.db``.
    database_url: str | None = None
    #: Redis URL of the broker and leases; unset means embedded mode (one process, no Redis).
    redis_url: str | None = None
    #: Folder with ``agents/`` and ``deployments/`` TOML files.
    config_dir: Path = Path("config")
    #: Base URL of the OpenAI-compatible endpoint used by ``provider = "openai"`` models.
    openai_base_url: str = "https://api.openai.com/v1"
    #: API key for that endpoint (never stored or logged).
    openai_api_key: SecretStr | None = None
    #: Base URL of the Anthropic Messages API used by ``provider = "anthropic"`` models.
    anthropic_base_url: str = "https://api.anthropic.com"
    #: API key for that endpoint (never stored or logged).
    anthropic_api_key: SecretStr | None = None
    #: Lease time-to-live: a dead worker's conversation is free again after this long.
    lease_ttl: Duration = 10.0
    #: How often the sweeper recovers expired leases and re-sends lost wake-ups.
    sweep_interval: Duration = 5.0
    #: How often a run is tried before its task fails (crash recovery retries).
    max_attempts: int = Field(default=3, ge=1, le=100)
    #: How long one drain may keep a worker on one conversation before yielding to others.
    drain_budget: Duration = 5.0
    #: Log level of fleet's own loggers.
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "WARNING"
    #: Base URL of a ``fleet serve`` the CLI should talk to instead of the store.
    server: str | None = None
    #: API key the CLI sends to ``server``.
    api_key: SecretStr | None = None

    @field_validator("lease_ttl")
    @classmethod
    def _ttl_positive(cls, v: float) -> float:
        if v < 1.0:
            raise ValueError("must be at least 1s so heartbeats can renew it")
        return v

    @field_validator("sweep_interval", "drain_budget")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be greater than zero")
        return v

    @property
    def resolved_database_url(self) -> str:
        """The store URL, defaulting to the embedded SQLite file."""
        return self.database_url or f"sqlite:///{(self.home / 'fleet.db').as_posix()}"

    @property
    def embedded(self) -> bool:
        """True when no Redis is configured: one process runs everything."""
        return not self.redis_url

    def secrets(self) -> tuple[str, ...]:
        """Secret values that redaction must remove wherever they appear."""
        keys = (self.openai_api_key, self.anthropic_api_key, self.api_key)
        values = [s.get_secret_value() for s in keys if s]
        return tuple(v for v in values if v)


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment; a bad value raises ConfigError naming the variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = "FLEET_" + str(err["loc"][0]).upper() if err["loc"] else "FLEET_*"
        raise ConfigError("environment", name, _reason(err)) from None


def _reason(err: Any) -> str:
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    # An unknown key's value is not shown: it may be a secret put in the wrong place; nor is a
    # whole table or array (it may hold one, and the message already names the key).
    if (
        "input" in err
        and err.get("type") not in ("missing", "extra_forbidden")
        and not isinstance(err["input"], dict | list | tuple)
    ):
        shown = repr(err["input"])
        if shown not in msg:
            return f"{msg} (got {shown})"
    return msg


# --------------------------------------------------------------------------------------------
# config/ files


_TYPE_TAG = re.compile(r"(int|float|str|bool|list|tuple|dict)(\[.*\])?|[a-z-]+\[.*\]")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    """Which model an agent talks to."""

    provider: Literal["echo", "openai", "anthropic"] = "echo"
    #: Provider's model name (``gpt-4o-mini``, ``claude-sonnet-4-5``); ignored by echo.
    name: str | None = None
    #: echo only: simulated latency in ms, fixed (``20``) or a random range (``[0, 50]``).
    delay_ms: StrictInt | tuple[StrictInt, StrictInt] = 0
    #: Overrides ``FLEET_OPENAI_BASE_URL`` / ``FLEET_ANTHROPIC_BASE_URL``.
    base_url: str | None = None
    timeout: Duration = 60.0
    #: Retries of 429, 5xx, 529 and timeouts by the provider's SDK (which honours Retry-After).
    max_retries: StrictInt = Field(default=3, ge=0, le=10)
    #: openai only (Anthropic's current API refuses sampling parameters).
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    #: Most tokens one reply may have; unset: the server's default (openai), 4096 (anthropic).
    max_tokens: StrictInt | None = Field(default=None, ge=1, le=1_000_000)

    @field_validator("provider")
    @classmethod
    def _installed(cls, v: str) -> str:
        if v == "anthropic" and importlib.util.find_spec("anthropic") is None:
            raise ValueError(
                "provider 'anthropic' needs the anthropic package, which is not installed: "
                "pip install 'fleet[anthropic]'"
            )
        return v

    @field_validator("delay_ms")
    @classmethod
    def _delay(cls, v: int | tuple[int, int]) -> int | tuple[int, int]:
        low, high = (v, v) if isinstance(v, int) else v
        if low < 0 or high < low:
            raise ValueError(
                "must be a non-negative number of ms or a range [low, high] with low <= high"
            )
        return v

    @model_validator(mode="after")
    def _named(self) -> ModelConfig:
        if self.provider != "echo" and not self.name:
            example = "claude-sonnet-4-5" if self.provider == "anthropic" else "gpt-4o-mini"
            raise ValueError(
                f"provider {self.provider!r} needs name = '<model name>', e.g. '{example}'"
            )
        if self.provider == "anthropic" and self.temperature is not None:
            raise ValueError(
                "temperature: provider 'anthropic' takes none (its Messages API refuses sampling "
                "parameters since version 2026-10-21); remove it"
            )
        return self


def _limit(name: str) -> Any:
    lim = LIMITS[name]
    return Field(default=lim.default, description=lim.doc)


class HistoryConfig(_Strict):
    """How much of a conversation's past a run's context may hold."""

    max_items: HistoryItems = _limit("max_history_items")
    max_bytes: HistoryBytes = _limit("max_history_bytes")


_BLOCK = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


class MemoryAttachment(_Strict):
    """A memory block an agent sees, and what it may do with it."""

    block: str
    #: ``read``: in the prompt only; ``append``: may add to it; ``write``: may also replace it
    #: or edit it in place (the ``memory_update`` tool).
    mode: Literal["read", "append", "write"] = "read"
    #: The heading it gets in the prompt (default: the block's title, else its name).
    label: str | None = None

    @field_validator("block")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _BLOCK.match(v):
            raise ValueError("must be 1-100 lowercase letters, digits, '.', '_' or '-'")
        return v


_TOOL_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_.]*$")


class ToolRef(_Strict):
    """One entry of an agent's ``tools``: a built-in name or ``module:function``, with options."""

    tool: str
    #: The name the model sees (default: the built-in's or the function's name).
    name: str | None = None
    #: Seconds one call may take (default: the decorator's, else the agent's ``tool_timeout``).
    timeout: Duration | None = None
    #: ``safe``: a call in flight when its worker died may run again; ``unsafe``: the model is
    #: told the outcome is unknown. Default: the decorator's, else ``unsafe`` (built-ins: safe).
    retry: Literal["safe", "unsafe"] | None = None

    @field_validator("tool")
    @classmethod
    def _known(cls, v: str) -> str:
        from fleet.agents.tools import BUILTIN_TOOLS

        if v in BUILTIN_TOOLS or _TOOL_REF.match(v):
            return v
        known = ", ".join(sorted(BUILTIN_TOOLS))
        raise ValueError(
            f"unknown tool {v!r}: name a built-in ({known}) or a Python function as "
            "'package.module:function'"
        )

    @field_validator("timeout")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        if v is not None and v <= 0:
            raise ValueError("must be greater than zero")
        return v

    @property
    def builtin(self) -> bool:
        return ":" not in self.tool


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


class McpServerConfig(_Strict):
    """One ``[[mcp_servers]]`` entry: an MCP server whose tools the agent gets as ``name.tool``.

    Secrets are never written here: ``env_from`` and ``headers_env`` name environment variables
    of the fleet process that hold them.
    """

    #: Lowercase; the namespace of the server's tools (``github.search_issues``).
    name: str
    #: stdio: the program to start (found on PATH) and its arguments.
    command: str | None = None
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
    connect_timeout: Duration = DEFAULT_MCP_CONNECT_TIMEOUT_S
    #: Seconds one call may take (default: the agent's ``tool_timeout``).
    call_timeout: Duration | None = None
    #: Retry policy for every tool of the server. Default per tool: ``safe`` when the server
    #: marks it readOnlyHint or idempotentHint, else ``unsafe``.
    retry: Literal["safe", "unsafe"] | None = None

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
            if not _PROCESS_ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return v

    @field_validator("env_from")
    @classmethod
    def _env_from(cls, v: dict[str, str]) -> dict[str, str]:
        for name, source in v.items():
            if not _PROCESS_ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if not _ENV_NAME.match(source):
                raise ValueError(
                    f"{name}: {source!r} must name an environment variable like FLEET_GITHUB_TOKEN"
                )
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
            if not _ENV_NAME.match(source):
                raise ValueError(
                    f"{name}: {source!r} must name an environment variable like FLEET_MCP_TOKEN"
                )
        return v

    @field_validator("include", "exclude")
    @classmethod
    def _patterns(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in v:
            if not pattern.strip():
                raise ValueError("an empty tool name or pattern matches nothing")
        return v

    @field_validator("connect_timeout", "call_timeout")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        if v is not None and v <= 0:
            raise ValueError("must be greater than zero")
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

    def secret_sources(self) -> dict[str, str]:
        """What each secret is for → the environment variable holding it."""
        sources = {f"header {h}": var for h, var in self.headers_env.items()}
        sources.update({f"variable {n}": var for n, var in self.env_from.items()})
        return sources

    @property
    def label(self) -> str:
        """How messages name the server: ``MCP server 'github' (stdio: npx -y @x/server)``."""
        if self.command is not None:
            where = "stdio: " + shlex.join([self.command, *self.args])
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


class AgentConfig(_Strict):
    """Instructions + model + tools + memory settings."""

    name: str
    instructions: str = ""
    model: ModelConfig = ModelConfig()
    tools: tuple[ToolRef, ...] = ()
    #: Seconds a tool call may take unless the tool says otherwise.
    tool_timeout: Duration = DEFAULT_TOOL_TIMEOUT_S
    max_steps: Steps = _limit("max_steps")
    max_input_bytes: InputBytes = _limit("max_input_bytes")
    history: HistoryConfig = HistoryConfig()
    #: Memory blocks of the deployment's namespace this agent sees (and may update).
    memory: tuple[MemoryAttachment, ...] = ()
    #: Conversation notes: the memory_list/get/set/remove tools and notes in the prompt.
    notes: StrictBool = False
    notes_bytes: NotesBytes = _limit("notes_bytes")
    #: How long a conversation of this agent keeps its messages.
    retention: Retention = LIMITS["retention_days"].default * 86400.0
    stored_messages: StoredMessages = _limit("stored_messages")
    #: Tokens the prompt may hold (instructions, history, input; then, inside a run, what it
    #: sends each step). None: only the history's item and byte limits apply.
    context_tokens: StrictInt | None = Field(
        default=None, ge=MIN_CONTEXT_TOKENS, le=MAX_CONTEXT_TOKENS
    )
    #: MCP servers whose tools the agent gets, namespaced ``server.tool``.
    mcp_servers: tuple[McpServerConfig, ...] = ()

    @field_validator("mcp_servers")
    @classmethod
    def _distinct_servers(cls, v: tuple[McpServerConfig, ...]) -> tuple[McpServerConfig, ...]:
        seen: set[str] = set()
        for server in v:
            if server.name in seen:
                raise ValueError(f"two servers are named {server.name!r}; names must differ")
            seen.add(server.name)
        return v

    @field_validator("model", mode="before")
    @classmethod
    def _model_shorthand(cls, v: Any) -> Any:
        return {"provider": v} if isinstance(v, str) else v

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_shorthand(cls, v: Any) -> Any:
        if isinstance(v, list | tuple):
            return [{"tool": item} if isinstance(item, str) else item for item in v]
        return v

    @field_validator("tool_timeout")
    @classmethod
    def _timeout_positive(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be greater than zero")
        return v


class ConversationsConfig(_Strict):
    """What a busy conversation does with a new task."""

    queue_mode: Literal["followup", "collect"] = "followup"
    debounce: Duration = DEFAULT_DEBOUNCE_S

    @field_validator("queue_mode", mode="before")
    @classmethod
    def _not_yet(cls, v: Any) -> Any:
        if v in ("steer", "interrupt"):
            raise ValueError(
                f"queue mode {v!r} is not implemented yet; use 'followup' or 'collect'"
            )
        return v

    @field_validator("debounce")
    @classmethod
    def _bounded(cls, v: float) -> float:
        if v > MAX_DEBOUNCE_S:
            raise ValueError(f"must be at most {MAX_DEBOUNCE_S:g}s")
        return v


class DeploymentConfig(_Strict):
    """A named, runnable agent: kind, queue mode, retry policy."""

    name: str
    agent: str
    kind: Literal["pool", "task", "singleton"] = "pool"
    conversations: ConversationsConfig = ConversationsConfig()
    #: Overrides ``FLEET_MAX_ATTEMPTS`` for this deployment's tasks.
    max_attempts: StrictInt | None = Field(default=None, ge=1, le=100)
    #: Labels copied onto every task of this deployment.
    labels: dict[str, str] = Field(default_factory=dict)
    #: Which memory blocks its agents see: deployments of one namespace share them.
    namespace: str = "default"

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not _NAME.match(v):
            raise ValueError("must be 1-63 lowercase letters, digits, '-' or '_'")
        return v


_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_POINTER = re.compile(r"^(/([^~/]|~[01])*)*$")


class CallerConfig(_Strict):
    """An API caller: where its key comes from (its scope) and which deployments it may use.

    The key itself is never in the file: give its SHA-256 (``fleet keys hash``) or the name of an
    environment variable holding it (hashed when loaded).
    """

    name: str
    #: ``api``, ``a2a`` (scope ``a2a:<caller name>``) or ``webhook:<trigger>``.
    source: str
    key_sha256: str | None = None
    key_env: str | None = None
    #: Deployments this caller may use; ``["*"]`` means all.
    deployments: tuple[str, ...] = ("*",)

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v not in ("api", "a2a") and not re.match(r"^webhook:[a-z0-9][a-z0-9_-]{0,62}$", v):
            raise ValueError("must be 'api', 'a2a' or 'webhook:<trigger name>'")
        return v

    @field_validator("key_sha256")
    @classmethod
    def _hash(cls, v: str | None) -> str | None:
        if v is not None and not _SHA256.match(v):
            raise ValueError("must be 64 lowercase hex characters (see `fleet keys hash`)")
        return v

    @field_validator("key_env")
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        if v is not None and not _ENV_NAME.match(v):
            raise ValueError("must be an environment variable name like FLEET_KEY_OPS")
        return v

    @model_validator(mode="after")
    def _one_key(self) -> CallerConfig:
        if (self.key_sha256 is None) == (self.key_env is None):
            raise ValueError("give exactly one of key_sha256 or key_env")
        return self

    @property
    def scope(self) -> str:
        return f"a2a:{self.name}" if self.source == "a2a" else self.source


class FieldRef(_Strict):
    """Where a trigger reads a value: a request header or a JSON pointer into the body."""

    header: str | None = None
    pointer: str | None = None

    @field_validator("pointer")
    @classmethod
    def _pointer(cls, v: str | None) -> str | None:
        if v is not None and not _POINTER.match(v):
            raise ValueError("must be a JSON pointer like /issue/number (RFC 6901)")
        return v

    @model_validator(mode="after")
    def _one(self) -> FieldRef:
        if (self.header is None) == (self.pointer is None):
            raise ValueError("give exactly one of header or pointer")
        return self


class SignatureConfig(_Strict):
    """HMAC-SHA256 check of a webhook delivery; the secret comes from an environment variable."""

    style: Literal["github", "stripe", "hmac"] = "github"
    secret_env: str
    #: ``hmac`` style: the header carrying the hex digest.
    header: str = "X-Signature-256"
    #: ``stripe`` style: how old a signed timestamp may be.
    tolerance: Duration = 300.0

    @field_validator("secret_env")
    @classmethod
    def _env(cls, v: str) -> str:
        if not _ENV_NAME.match(v):
            raise ValueError("must be an environment variable name like FLEET_GITHUB_SECRET")
        return v


class TriggerConfig(_Strict):
    """A webhook at ``/v1/triggers/<name>`` that turns deliveries into tasks."""

    name: str
    deployment: str
    #: Where the conversation key is; none means a new conversation per delivery.
    conversation_key: FieldRef | None = None
    #: JSON pointer of the input text; ``""`` sends the whole body as a data part.
    input: str = ""
    #: label name → JSON pointer of its value.
    labels: dict[str, str] = Field(default_factory=dict)
    #: Header whose value is the delivery id (idempotency key), e.g. ``X-GitHub-Delivery``.
    idempotency_header: str | None = None
    signature: SignatureConfig | None = None
    #: Without a signature or webhook callers, accept anyone's deliveries (else only when the
    #: server has no callers configured at all).
    public: StrictBool = False

    @field_validator("input")
    @classmethod
    def _input(cls, v: str) -> str:
        if not _POINTER.match(v):
            raise ValueError("must be a JSON pointer like /comment/body, or '' for the whole body")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for name, pointer in v.items():
            if not _POINTER.match(pointer):
                raise ValueError(f"label {name!r}: {pointer!r} is not a JSON pointer")
        return v


class HistoryDefaults(_Strict):
    max_items: HistoryItems | None = None
    max_bytes: HistoryBytes | None = None


class LimitDefaults(_Strict):
    """``[limits]`` of ``config/fleet.toml``: app-wide values an agent file may override."""

    history: HistoryDefaults = HistoryDefaults()
    max_input_bytes: InputBytes | None = None
    max_steps: Steps | None = None
    notes_bytes: NotesBytes | None = None
    retention: Retention | None = None
    stored_messages: StoredMessages | None = None


class AppConfig(_Strict):
    """``config/fleet.toml``: what holds for every agent and deployment."""

    name: str = "fleet"
    limits: LimitDefaults = LimitDefaults()
    #: ``module:function`` deciding who may dispatch into, recall from, or write notes and
    #: memory in a conversation (see fleet.policy); unset: the scope rules alone.
    authorize: str | None = None

    @field_validator("authorize")
    @classmethod
    def _ref(cls, v: str | None) -> str | None:
        if v is not None and not _TOOL_REF.match(v):
            raise ValueError("must name a Python function as 'package.module:function'")
        return v


class FleetConfig(BaseModel):
    """Everything in ``config/``, cross-checked."""

    model_config = ConfigDict(frozen=True)

    root: Path
    agents: dict[str, AgentConfig]
    deployments: dict[str, DeploymentConfig]
    triggers: dict[str, TriggerConfig] = Field(default_factory=dict)
    callers: dict[str, CallerConfig] = Field(default_factory=dict)
    app: AppConfig = AppConfig()

    def deployment(self, name: str) -> DeploymentConfig:
        """The deployment called ``name``; NotFound lists the known ones."""
        try:
            return self.deployments[name]
        except KeyError:
            known = ", ".join(sorted(self.deployments)) or "none"
            raise NotFound(
                f"no deployment named {name!r} in {self.root}/deployments (known: {known})",
                field="deployment",
            ) from None

    def secret_values(self, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
        """Values of the environment variables config names as secrets (MCP headers and
        variables, webhook signing secrets, caller keys): redaction removes them everywhere."""
        env = os.environ if environ is None else environ
        names: list[str] = []
        for agent in self.agents.values():
            for server in agent.mcp_servers:
                names.extend(server.secret_sources().values())
        for trigger in self.triggers.values():
            if trigger.signature is not None:
                names.append(trigger.signature.secret_env)
        names.extend(c.key_env for c in self.callers.values() if c.key_env)
        return tuple(v for v in (env.get(n) for n in names) if v)

    def agent_for(self, deployment: str) -> AgentConfig:
        return self.agents[self.deployment(deployment).agent]


def _load_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "(syntax)", f"not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), "(file)", "is not UTF-8 text; save it as UTF-8") from None
    except OSError as exc:
        raise ConfigError(str(path), "(file)", f"cannot be read: {exc.strerror}") from None


def _validate(model: type[_Strict], path: Path, data: dict[str, Any]) -> Any:
    if "name" in data:
        raise ConfigError(str(path), "name", "the name is the file name; remove this key")
    try:
        return model.model_validate({**data, "name": path.stem})
    except ValidationError as exc:
        err = exc.errors()[0]
        # (a union's member, such as ``int``, is not a key: leave it out of the path)
        key = ".".join(str(p) for p in err["loc"] if not _TYPE_TAG.fullmatch(str(p)))
        key = key or "(top level)"
        raise ConfigError(str(path), key, _reason(err)) from None


def _with_defaults(defaults: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """An agent file's values over the app-wide ones (tables merged key by key)."""
    merged = dict(defaults)
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def load_config(root: Path) -> FleetConfig:
    """Load and cross-check ``root/agents/*.toml`` and ``root/deployments/*.toml``."""
    if not root.is_dir():
        raise ConfigError(str(root), "(folder)", "config folder not found; set FLEET_CONFIG_DIR")
    sections: dict[str, dict[str, Any]] = {}
    kinds: tuple[tuple[str, type[_Strict]], ...] = (
        ("agents", AgentConfig),
        ("deployments", DeploymentConfig),
        ("triggers", TriggerConfig),
        ("callers", CallerConfig),
    )
    app_file = root / "fleet.toml"
    app_data = _load_toml(app_file) if app_file.is_file() else {}
    app: AppConfig = _validate(AppConfig, app_file, app_data)
    # limits set app-wide are what an agent file that names none gets
    defaults = app.limits.model_dump(exclude_unset=True, exclude_defaults=False)
    raw_defaults = app_data.get("limits", {}) if isinstance(app_data.get("limits"), dict) else {}
    for section, model in kinds:
        found: dict[str, Any] = {}
        for path in sorted((root / section).glob("*.toml")):
            if not _NAME.match(path.stem):
                raise ConfigError(
                    str(path), "(file name)", "names are lowercase letters, digits, '-' and '_'"
                )
            data = _load_toml(path)
            if section == "agents" and defaults:
                data = _with_defaults(raw_defaults, data)
            found[path.stem] = _validate(model, path, data)
        sections[section] = found
    agents, deployments = sections["agents"], sections["deployments"]
    for name, dep in deployments.items():
        if dep.agent not in agents:
            known = ", ".join(sorted(agents)) or "none"
            raise ConfigError(
                str(root / "deployments" / f"{name}.toml"),
                "agent",
                f"no agent named {dep.agent!r} in {root}/agents (known: {known})",
            )
        from fleet.domain.labels import validate_labels

        try:
            validate_labels(dep.labels)
        except Exception as exc:
            raise ConfigError(
                str(root / "deployments" / f"{name}.toml"), "labels", str(exc)
            ) from None
    for name, trig in sections["triggers"].items():
        if trig.deployment not in deployments:
            known = ", ".join(sorted(deployments)) or "none"
            raise ConfigError(
                str(root / "triggers" / f"{name}.toml"),
                "deployment",
                f"no deployment named {trig.deployment!r} (known: {known})",
            )
    for name, caller in sections["callers"].items():
        where = str(root / "callers" / f"{name}.toml")
        for dep_name in caller.deployments:
            if dep_name != "*" and dep_name not in deployments:
                raise ConfigError(where, "deployments", f"no deployment named {dep_name!r}")
        if caller.source.startswith("webhook:") and caller.source[8:] not in sections["triggers"]:
            raise ConfigError(where, "source", f"no trigger named {caller.source[8:]!r}")
    return FleetConfig(
        app=app,
        root=root,
        agents=agents,
        deployments=deployments,
        triggers=sections["triggers"],
        callers=sections["callers"],
    )
