"""MCP servers as tool sets: ``[[mcp_servers]]`` in an agent file, connected once per run.

Each configured server is a ``ToolServer``: a run connects it (stdio: starts the command; HTTP:
opens a streamable HTTP session), lists its tools within ``connect_timeout`` and offers each as
a tool named ``<server>.<tool>``. A call's result is its text parts (structured content as JSON
when there is no text), other content summarized in one line; an ``isError`` result is an error
result the model sees. The connection itself lives in ``mcp_session``, a stdio server's process
in ``mcp_process``, and the connections kept across runs (``lifetime = "worker"``) in
``mcp_warm``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, MCPError, StdioServerParameters, stdio_client
from mcp import types as mcp_types
from mcp.client import Transport
from mcp.client.streamable_http import streamable_http_client

from fleet.agents.tools.base import RetryPolicy, Tool, ToolContext, ToolError, ToolServerError
from fleet.agents.tools.mcp_process import StderrTail, guarded
from fleet.agents.tools.mcp_session import Gone, Opened, Session, SessionError
from fleet.config import McpServerConfig
from fleet.constants import REDACTED
from fleet.domain.waits import needs_approval

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
        """Start or reach the server, list its tools (bounded), and close it on exit; or, with
        ``lifetime = "worker"``, take this process's kept connection for the run's tenant."""
        environ = os.environ if self._environ is None else self._environ
        missing = self.config.missing_secrets(environ)
        if missing:
            raise ToolServerError(missing[0])
        if self.config.lifetime == "worker":
            from fleet.agents.tools import mcp_warm

            key = self._key(ctx.tenant, environ)
            with mcp_warm.POOL.lease(key, lambda: self._start(environ), self.config) as kept:
                yield self._tools(kept)
            return
        opened = self._start(environ)
        try:
            yield self._tools(opened)
        finally:
            opened.close()

    def _key(self, tenant: str, environ: Mapping[str, str]) -> tuple[str, ...]:
        """What a kept connection is shared by: one tenant, this exact entry, folder and
        secrets (a digest of their values)."""
        values = sorted((var, environ[var]) for var in self.config.secret_sources().values())
        digest = hashlib.sha256(json.dumps(values).encode()).hexdigest()
        return (tenant, self.config.model_dump_json(), str(self._cwd), digest)

    def _start(self, environ: Mapping[str, str]) -> Opened:
        """Connect and list the tools, or ToolServerError saying why (no secret in it)."""
        secrets = [environ[var] for var in self.config.secret_sources().values()]
        stderr = StderrTail() if self.config.command is not None else None
        session = Session(lambda: self._client(environ, stderr), self.config.connect_timeout)
        try:
            listed = session.start()
        except SessionError as exc:
            message = _scrub(self._failure(exc, stderr), secrets)
            if stderr is not None:
                stderr.close()
            raise ToolServerError(message) from None
        slots = asyncio.Semaphore(self.config.max_concurrent_calls)
        return Opened(session, listed, slots, () if stderr is None else (stderr,))

    def _client(self, environ: Mapping[str, str], stderr: StderrTail | None) -> Client:
        config = self.config
        if config.program is not None:
            env = dict(config.env)
            env.update({name: environ[var] for name, var in config.env_from.items()})
            command, args = guarded(config.program, config.args, env)
            params = StdioServerParameters(
                command=command,
                args=args,
                env=env,
                cwd=str(self._cwd) if self._cwd is not None else None,
            )
            assert stderr is not None
            return Client(stdio_client(params, errlog=stderr.sink), cache=None)
        headers = dict(config.headers)
        headers.update({name: environ[var] for name, var in config.headers_env.items()})
        return Client(_http(config.url or "", headers, config.connect_timeout), cache=None)

    def _failure(self, exc: SessionError, stderr: StderrTail | None) -> str:
        if exc.stage == "timeout":
            return (
                f"{self.label}: no answer within {self.config.connect_timeout:g}s "
                "(start, handshake and tool listing: connect_timeout)"
            )
        if exc.stage == "list":
            return f"{self.label}: could not list its tools: {exc}"
        verb = "could not start" if self.config.command is not None else "could not connect"
        text = f"{self.label}: {verb}: {exc}"
        tail = _tail(stderr.text()) if stderr is not None else ""
        return f"{text} (its stderr: {tail})" if tail else text

    def _tools(self, opened: Opened) -> list[Tool]:
        config = self.config
        offered = [t.name for t in opened.listed]
        for pattern in config.include:
            if not _is_glob(pattern) and pattern not in offered:
                raise ToolServerError(
                    f"{self.label}: include names {pattern!r}, which the server does not offer "
                    f"(it offers: {', '.join(sorted(offered)) or 'no tools'})"
                )
        return [self._tool(opened, t) for t in opened.listed if _kept(t.name, config)]

    def _tool(self, opened: Opened, listed: mcp_types.Tool) -> Tool:
        remote = listed.name
        server = self.name

        async def afn(args: dict[str, Any], ctx: ToolContext) -> str:
            try:
                result = await opened.call(remote, args)
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
            approval=needs_approval(remote, False, self.config.approval),
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


def _tail(text: str) -> str:
    """The last lines of a server's stderr, in one line."""
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
