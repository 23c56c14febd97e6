"""A real MCP server for tests, written with the official SDK (``mcp.server.mcpserver``).

Run it as fleet would::

    python -m tests.support.mcp_server --stdio [--record DIR]
    python -m tests.support.mcp_server --http --port 8123 [--record DIR]

``--record DIR`` leaves evidence for the test: ``DIR/pid`` (the server's process id),
``DIR/headers.jsonl`` (each HTTP request's headers), ``DIR/started-<tool>`` when ``slow``
begins and ``DIR/cancelled-<tool>`` when a call is cancelled while it runs. ``--hang`` never
answers anything (a server stuck on start-up); ``--crash`` writes a line to stderr and exits 3;
``--linger`` does not exit when its stdin closes (a server only a signal ends).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ToolAnnotations

#: Where evidence goes (``--record``); a one-element list so main() can set it.
RECORD_DIR: list[Path] = []

#: A 1x1 transparent PNG (for the image result).
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)

server = MCPServer("fleet-test", instructions="Tools for fleet's MCP tests.", log_level="WARNING")


def record(name: str, text: str = "") -> None:
    for folder in RECORD_DIR:
        (folder / name).write_text(text)


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
def put(key: str, value: str) -> str:
    """Store a value under a key (idempotent)."""
    return f"stored {key}"


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason (an isError result)."""
    raise ToolError(f"refused: {reason}")


@server.tool()
async def slow(seconds: float, tag: str = "slow") -> str:
    """Wait, then answer; records the start and a cancellation in the record folder."""
    record(f"started-{tag}")
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        record(f"cancelled-{tag}", "cancelled")
        raise
    return f"slept {seconds}s"


@server.tool()
def picture() -> Image:
    """A tiny PNG."""
    return Image(data=PIXEL, format="png")


@server.tool()
def stats() -> CallToolResult:
    """Structured content only, no text part."""
    return CallToolResult(content=[], structured_content={"orders": 3, "open": 1})


@server.tool()
def getenv(name: str) -> str:
    """The server process's environment variable (to prove env reaches a stdio server)."""
    return os.environ.get(name, "<unset>")


def _recording(app: Any) -> Any:
    """ASGI middleware writing every HTTP request's headers to DIR/headers.jsonl."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            for folder in RECORD_DIR:
                with (folder / "headers.jsonl").open("a") as f:
                    f.write(json.dumps(headers) + "\n")
        await app(scope, receive, send)

    return wrapped


def _serve_http(port: int) -> None:
    import uvicorn

    app = _recording(server.streamable_http_app(host="127.0.0.1"))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)


def _hang_http(port: int) -> None:
    import uvicorn

    async def never(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await anyio.sleep_forever()

    uvicorn.run(
        never, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.mcp_server")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--stdio", action="store_true")
    mode.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=8123)
    parser.add_argument("--record", type=Path)
    parser.add_argument("--hang", action="store_true", help="never answer")
    parser.add_argument("--crash", action="store_true", help="exit 3 at once")
    parser.add_argument("--linger", action="store_true", help="outlive a closed stdin")
    args = parser.parse_args(argv)
    if args.record is not None:
        args.record.mkdir(parents=True, exist_ok=True)
        RECORD_DIR.append(args.record)
        record("pid", str(os.getpid()))
    if args.crash:
        print("fleet-test server: cannot open the database (on purpose)", file=sys.stderr)
        sys.exit(3)
    if args.hang:
        if args.http:
            _hang_http(args.port)
        while True:
            time.sleep(3600)
    if args.http:
        _serve_http(args.port)
    else:
        server.run("stdio")
        while args.linger:
            time.sleep(3600)


if __name__ == "__main__":
    main()
