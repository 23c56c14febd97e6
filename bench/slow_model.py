"""A fake OpenAI-compatible model that answers every chat completion after ``--delay`` seconds
(a real model's latency), holding any number of requests at once (asyncio), and counts them:
``GET /stats`` gives the requests answered, in flight now, the most in flight at once, and when
the first and the last request came (``first_at``, ``last_at``: ``time.time()``);
``POST /stats`` resets them and sets the pace (``{"delay": 2.0}``; see below for the rest).

A ``stream: true`` request (fleet's adapters stream every call) is answered as OpenAI streams:
``data:`` lines of ``chat.completion.chunk`` objects, the text in ``chunks`` content chunks
``gap`` seconds apart (``chunks`` 0: the whole reply in one), a finish chunk, a usage chunk
when the request asks ``stream_options.include_usage``, then ``data: [DONE]``. With ``chunks``
set, each chunk's text is ``"<i:t> "``: its index and the time it was sent (``time.time()``),
so a client measures each piece's latency without state shared with the model (a word ending
with a space: a streaming redactor has no reason to hold it back). ``phase``: each stream waits
a random fraction of ``gap`` before its first chunk, so many streams do not send in step.
``hold``: requests wait (in flight) until ``POST /release``.
Other requests get the whole reply in one JSON body. A streamed request whose last message is
the user's with a line ``/tool NAME {json}``, NAME among the request's tools, is answered at
once with that tool call (as the offline ``echo`` model reads the line): a run's first step
calls a tool, and its next one waits.

Run: ``python -m bench.slow_model --port P --delay 10`` (``bench.inflight`` and
``bench.streaming`` start it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

state: dict[str, float] = {
    "delay": 10.0,
    "chunks": 0,
    "gap": 0.0,
    "phase": 0,
    "hold": 0,
    "answered": 0,
    "in_flight": 0,
    "peak": 0,
    "first_at": 0.0,
    "last_at": 0.0,
}
#: Set while requests may go on (``hold`` clears it).
released = asyncio.Event()
released.set()
USAGE = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}


def _asked_tool(body: dict[str, Any]) -> tuple[str, str] | None:
    """A ``/tool NAME {json}`` line in the last message when it is the user's and the request
    offers a tool of that name: the call to answer with at once (no delay, no hold)."""
    messages = body.get("messages") or [{}]
    last = messages[-1]
    offered = {t.get("function", {}).get("name") for t in body.get("tools") or []}
    if last.get("role") != "user":
        return None
    for line in str(last.get("content", "")).splitlines():
        command, _, rest = line.strip().partition(" ")
        name, _, args = rest.strip().partition(" ")
        if command == "/tool" and name in offered:
            return name, args.strip() or "{}"
    return None


async def _tool_call(name: str, args: str, model: str) -> AsyncIterator[bytes]:
    head = {"id": "chatcmpl-tool", "object": "chat.completion.chunk", "created": int(time.time())}
    call = {"index": 0, "id": f"call_{time.time_ns()}", "type": "function"}
    call["function"] = {"name": name, "arguments": args}
    for delta, finish in (({"role": "assistant", "tool_calls": [call]}, None), ({}, "tool_calls")):
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        yield _data({**head, "model": model, "choices": [choice]})
    yield _data({**head, "model": model, "choices": [], "usage": USAGE})
    yield b"data: [DONE]\n\n"


async def completion(request: Request) -> Response:
    body: dict[str, Any] = await request.json()
    asked = _asked_tool(body)
    if asked is not None and body.get("stream"):
        return StreamingResponse(
            _tool_call(*asked, str(body.get("model", "slow"))), media_type="text/event-stream"
        )
    state["last_at"] = time.time()
    state["first_at"] = state["first_at"] or state["last_at"]
    state["in_flight"] += 1
    state["peak"] = max(state["peak"], state["in_flight"])
    try:
        await released.wait()
        await asyncio.sleep(state["delay"])
    except BaseException:
        state["in_flight"] -= 1
        raise
    said = str(body.get("messages", [{}])[-1].get("content", ""))[:40]
    reply = f"slow: {said}"
    name = f"chatcmpl-{int(state['answered'] + state['in_flight'])}"
    if body.get("stream"):
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(
            _stream(name, str(body.get("model", "slow")), reply, usage),
            media_type="text/event-stream",
        )
    state["in_flight"] -= 1
    state["answered"] += 1
    return JSONResponse(
        {
            "id": name,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "slow"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "finish_reason": "stop",
                }
            ],
            "usage": USAGE,
        }
    )


def _data(obj: object) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


async def _stream(name: str, model: str, reply: str, usage: bool) -> AsyncIterator[bytes]:
    chunks, gap = int(state["chunks"]), state["gap"]
    head = {"id": name, "object": "chat.completion.chunk", "created": int(time.time())}
    head["model"] = model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _data({**head, "choices": [choice]})

    try:
        if not chunks:
            yield chunk({"role": "assistant", "content": reply})
        else:
            if state["phase"]:
                await asyncio.sleep(random.uniform(0, gap))
            for i in range(chunks):
                if i:
                    await asyncio.sleep(gap)
                delta = {"content": f"<{i}:{time.time():.6f}> "}
                yield chunk({"role": "assistant", **delta} if i == 0 else delta)
        yield chunk({}, "stop")
        if usage:
            yield _data({**head, "choices": [], "usage": USAGE})
        yield b"data: [DONE]\n\n"
        state["answered"] += 1
    finally:
        state["in_flight"] -= 1


async def stats(request: Request) -> JSONResponse:
    if request.method == "POST":
        given = await request.json()
        state.update(
            answered=0,
            peak=state["in_flight"],
            first_at=0.0,
            last_at=0.0,
            delay=float(given.get("delay", 10.0)),
            chunks=int(given.get("chunks", 0)),
            gap=float(given.get("gap", 0.0)),
            phase=int(bool(given.get("phase", False))),
            hold=int(bool(given.get("hold", False))),
        )
        if state["hold"]:
            released.clear()
        else:
            released.set()
    return JSONResponse(state)


async def release(request: Request) -> JSONResponse:
    """The requests held (``hold``) go on, and later ones do not wait."""
    state["hold"] = 0
    released.set()
    return JSONResponse(state)


app = Starlette(
    routes=[
        Route("/v1/chat/completions", completion, methods=["POST"]),
        Route("/stats", stats, methods=["GET", "POST"]),
        Route("/release", release, methods=["POST"]),
    ]
)


class Process:
    """This server in a process of its own on a free port (the benchmarks and tests start it so),
    and what they ask of it: its stats, its pace, the release of held calls."""

    def __init__(self, log: Path | None = None) -> None:
        from tests.support.fleet import wait_for
        from tests.support.serve import free_port

        self.url = f"http://127.0.0.1:{free_port()}"
        self._log = log.open("w") if log is not None else None
        argv = [sys.executable, "-m", "bench.slow_model", "--port", self.url.rsplit(":", 1)[1]]
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        wait_for(self._up, 30, what="the fake model to listen")

    def _up(self) -> bool:
        try:
            return httpx.get(f"{self.url}/stats", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stats(self) -> dict[str, Any]:
        stats: dict[str, Any] = httpx.get(f"{self.url}/stats", timeout=5).json()
        return stats

    def pace(self, **given: Any) -> None:
        """Reset the stats; set the pace (``delay``, ``chunks``, ``gap``, ``phase``, ``hold``)."""
        httpx.post(f"{self.url}/stats", json=given, timeout=5)

    def release(self) -> None:
        httpx.post(f"{self.url}/release", timeout=5)

    def close(self) -> None:
        self.proc.kill()  # (a graceful stop would wait for the calls it holds)
        self.proc.wait(10)
        if self._log is not None:
            self._log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=10.0)
    args = parser.parse_args()
    state["delay"] = args.delay
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()
