"""``config/agents/*.toml``: instructions, model, tools, MCP servers, memory and limits."""

from __future__ import annotations

import importlib.util
import re
import shlex
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from fleet.config.base import (
    _ENV_NAME,
    _TOOL_REF,
    Duration,
    HistoryBytes,
    HistoryItems,
    InputBytes,
    NotesBytes,
    Retention,
    Steps,
    StoredMessages,
    _limit,
    _Strict,
)
from fleet.constants import (
    DEFAULT_MCP_CONNECT_TIMEOUT_S,
    DEFAULT_TOOL_TIMEOUT_S,
    LIMITS,
    MAX_CONTEXT_TOKENS,
    MIN_CONTEXT_TOKENS,
)


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


class RecallConfig(_Strict):
    """``[recall]``: semantic recall of older messages by similarity to the input."""

    #: How many hits at most (before each is expanded by its neighbours).
    top_k: StrictInt = Field(default=5, ge=1, le=50)
    #: The least cosine similarity a hit needs (-1 to 1).
    threshold: float = Field(default=0.2, ge=-1.0, le=1.0)
    #: Messages before and after each hit shown with it.
    message_range: StrictInt = Field(default=1, ge=0, le=10)
    #: ``conversation``: this conversation's older messages; ``resource``: also the other
    #: conversations of the submission's ``resourceId`` (same scope and memory namespace).
    scope: Literal["conversation", "resource"] = "conversation"
    #: Conditions on role, created_at and labels.<name>: ``{ role = { eq = "user" } }``; the
    #: operators eq ne gt gte lt lte in nin.
    filter: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: The newest messages searched (bounded, so a search costs the same as history grows).
    max_candidates: StrictInt = Field(default=10_000, ge=1, le=100_000)

    @field_validator("filter")
    @classmethod
    def _filter(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from fleet.domain.recall import check_filter

        check_filter(v)
        return v


class WorkingMemoryConfig(_Strict):
    """``[working_memory]``: structured state the agent keeps and updates through a tool."""

    scope: Literal["conversation", "resource"] = "conversation"
    #: A JSON Schema the state must satisfy (inline), or ``schema_file`` (relative to config/).
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    schema_file: str | None = None
    #: Free-form: a text template the agent fills in (instead of a JSON schema).
    template: str | None = None
    #: Shown to the agent, but no update tool.
    read_only: StrictBool = False

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _one_shape(self) -> WorkingMemoryConfig:
        given = [k for k in ("schema_", "schema_file", "template") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError("give at most one of schema, schema_file and template")
        if self.schema_ is not None:
            from jsonschema import Draft202012Validator
            from jsonschema.exceptions import SchemaError

            try:
                Draft202012Validator.check_schema(self.schema_)
            except SchemaError as exc:
                raise ValueError(f"schema is not a valid JSON Schema: {exc.message}") from None
        return self


class ObservationsConfig(_Strict):
    """``[observations]``: older history distilled by a model into observations."""

    #: Once the unobserved history outgrows this many tokens, its oldest part is observed.
    token_threshold: StrictInt = Field(default=4_000, ge=200, le=1_000_000)
    #: Once the observations outgrow this many tokens, they are condensed (reflected).
    reflect_threshold: StrictInt = Field(default=8_000, ge=200, le=1_000_000)
    #: The observer's (and reflector's) model; default: the agent's own.
    model: ModelConfig | None = None
    #: Offer the ``recall_observations`` tool (search the observations).
    tool: StrictBool = False

    @field_validator("model", mode="before")
    @classmethod
    def _model_shorthand(cls, v: Any) -> Any:
        return {"provider": v} if isinstance(v, str) else v


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
    #: Semantic recall, working memory and observations (none unless configured).
    recall: RecallConfig | None = None
    working_memory: WorkingMemoryConfig | None = None
    observations: ObservationsConfig | None = None
    #: Tokens the prompt may hold (instructions, history, input; then, inside a run, what it
    #: sends each step). None: only the history's item and byte limits apply.
    context_tokens: StrictInt | None = Field(
        default=None, ge=MIN_CONTEXT_TOKENS, le=MAX_CONTEXT_TOKENS
    )
    #: MCP servers whose tools the agent gets, namespaced ``server.tool``.
    mcp_servers: tuple[McpServerConfig, ...] = ()
    #: Deployments this agent may hand work to (``call_agent``, ``start_agent``); none: no tools.
    delegates: tuple[str, ...] = ()

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
