"""MCP servers as tool sets: ``[[mcp_servers]]`` in an agent file, connected once per run.

Each configured server is a ``ToolServer``: a run connects it (stdio: starts the command; HTTP:
opens a streamable HTTP session), lists its tools within ``connect_timeout`` and offers each as
a tool named ``<server>.<tool>``. A call's result is its text parts (structured content as JSON
when there is no text), other content summarized in one line; an ``isError`` result is an error
result the model sees. The connection itself lives in ``mcp_session``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import ExitStack, asynccontextmanager, contextmanager
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, TextIO, cast

import httpx2
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client

from fleet.agents.tools.base import RetryPolicy, Tool, ToolContext, ToolError, ToolServerError
from fleet.agents.tools.mcp_session import Gone, Session, SessionError
from fleet.config import McpServerConfig
from fleet.constants import REDACTED

#: How much of a stdio server's stderr a start-up failure quotes (its last lines).
STDERR_TAIL_CHARS = 300


class McpToolServer:
    """One configured MCP server; ``connect`` opens it for a run and yields its tools."""

    def __init__(
        self,
        config: McpServerConfig,
        environ: Mapping[str, str] | None = None,
        *,
        cwd: Path | None = None,
    ) -> None:
        self.config = config
        #: Where a stdio server starts: the config folder (``args = ["-m", "shop.parcels"]``).
        self._cwd = cwd
        self.name = config.name
        self._environ = environ

    @property
    def label(self) -> str:
        return self.config.label

    @contextmanager
    def connect(self, ctx: ToolContext) -> Iterator[Sequence[Tool]]:
        """Start or reach the server, list its tools (bounded), and close it on exit."""
        environ = os.environ if self._environ is None else self._environ
        missing = self.config.missing_secrets(environ)
        if missing:
            raise ToolServerError(missing[0])
        secrets = [environ[var] for var in self.config.secret_sources().values()]
        with ExitStack() as stack:
            errlog: TextIO | None = None
            if self.config.command is not None:  # a stdio server's stderr, quoted on failure
                log_file = stack.enter_context(
                    tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")
                )
                errlog = cast(TextIO, log_file)
            session = Session(lambda: self._client(environ, errlog), self.config.connect_timeout)
            try:
                listed = session.start()
            except SessionError as exc:
                raise ToolServerError(_scrub(self._failure(exc, errlog), secrets)) from None
            stack.callback(session.close)
            yield self._tools(session, listed)

    def _client(self, environ: Mapping[str, str], errlog: TextIO | None) -> Client:
        config = self.config
        if config.command is not None:
            env = dict(config.env)
            env.update({name: environ[var] for name, var in config.env_from.items()})
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=env,
                cwd=str(self._cwd) if self._cwd is not None else None,
            )
            assert errlog is not None
            return Client(stdio_client(params, errlog=errlog), cache=None)
        headers = dict(config.headers)
        headers.update({name: environ[var] for name, var in config.headers_env.items()})
        return Client(_http(config.url or "", headers, config.connect_timeout), cache=None)

    def _failure(self, exc: SessionError, errlog: TextIO | None) -> str:
        if exc.stage == "timeout":
            return (
                f"{self.label}: no answer within {self.config.connect_timeout:g}s "
                "(start, handshake and tool listing: connect_timeout)"
            )
        if exc.stage == "list":
            return f"{self.label}: could not list its tools: {exc}"
        verb = "could not start" if self.config.command is not None else "could not connect"
        text = f"{self.label}: {verb}: {exc}"
        tail = _tail(errlog)
        return f"{text} (its stderr: {tail})" if tail else text

    def _tools(self, session: Session, listed: Sequence[mcp_types.Tool]) -> list[Tool]:
        config = self.config
        offered = [t.name for t in listed]
        for pattern in config.include:
            if not _is_glob(pattern) and pattern not in offered:
                raise ToolServerError(
                    f"{self.label}: include names {pattern!r}, which the server does not offer "
                    f"(it offers: {', '.join(sorted(offered)) or 'no tools'})"
                )
        return [self._tool(session, t) for t in listed if _kept(t.name, config)]

    def _tool(self, session: Session, listed: mcp_types.Tool) -> Tool:
        remote = listed.name
        server = self.name

        async def afn(args: dict[str, Any], ctx: ToolContext) -> str:
            try:
                result = await session.call(remote, args)
            except MCPError as exc:
                if exc.code == mcp_types.CONNECTION_CLOSED:
                    raise ToolError(f"MCP server {server!r} is no longer connected") from None
                raise ToolError(
                    f"MCP server {server!r} refused the call: {exc.message} (code {exc.code})"
                ) from None
            except Gone as exc:
                raise ToolError(f"MCP server {server!r} is no longer connected: {exc}") from None
            text = result_text(result)
            if result.is_error:
                raise ToolError(text or f"MCP server {server!r} reported an error")
            return text

        return Tool(
            name=f"{server}.{remote}",
            description=listed.description or listed.title or "",
            parameters=dict(listed.input_schema),
            afn=afn,
            retry=self.config.retry or _retry_of(listed),
            timeout=self.config.call_timeout,
            origin=f"mcp:{server}",
        )


def _http(url: str, headers: dict[str, str], connect_s: float) -> Transport:
    """The streamable HTTP transport on an HTTP client with the configured headers.

    Reads are unbounded here: calls are bounded by their timeout and closing by the session.
    """

    @asynccontextmanager
    async def streams() -> AsyncIterator[Any]:
        timeout = httpx2.Timeout(connect_s, read=None)
        async with (
            httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
            streamable_http_client(url, http_client=http) as opened,
        ):
            yield opened

    return streams()


def result_text(result: mcp_types.CallToolResult) -> str:
    """What the model sees of a call's result."""
    parts: list[str] = []
    texts = 0
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
            texts += 1
        elif isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
            kind = "image" if isinstance(block, mcp_types.ImageContent) else "audio"
            size = len(block.data) * 3 // 4
            parts.append(f"[{kind}: {block.mime_type}, about {size} bytes, not shown]")
        elif isinstance(block, mcp_types.EmbeddedResource):
            resource = block.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(resource.text)
                texts += 1
            else:
                parts.append(f"[resource: {resource.uri}, {resource.mime_type or 'binary'}]")
        elif isinstance(block, mcp_types.ResourceLink):
            parts.append(f"[resource link: {block.name} {block.uri}]")
        else:
            parts.append(f"[{getattr(block, 'type', type(block).__name__)} content, not shown]")
    if not texts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _retry_of(listed: mcp_types.Tool) -> RetryPolicy:
    hints = listed.annotations
    if hints is not None and (hints.read_only_hint or hints.idempotent_hint):
        return "safe"
    return "unsafe"


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def _kept(name: str, config: McpServerConfig) -> bool:
    if config.include and not any(fnmatchcase(name, p) for p in config.include):
        return False
    return not any(fnmatchcase(name, p) for p in config.exclude)


def _tail(errlog: TextIO | None) -> str:
    if errlog is None:
        return ""
    try:
        errlog.seek(0)
        text = errlog.read()
    except (OSError, ValueError):
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    tail = " | ".join(lines[-3:])
    return tail if len(tail) <= STDERR_TAIL_CHARS else "…" + tail[-STDERR_TAIL_CHARS:]


def _scrub(text: str, secrets: Sequence[str]) -> str:
    """Never let a header or variable value from the environment into a message."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, REDACTED)
    return text


__all__ = ["McpToolServer", "result_text"]
