"""A fake OpenAI-compatible model that answers every chat completion after ``--delay`` seconds
(a real model's latency), holding any number of requests at once (asyncio), and counts them:
``GET /stats`` gives the requests answered, in flight now, and the most in flight at once;
``POST /stats`` resets them and sets the delay (``{"delay": 2.0}``).

Run: ``python -m bench.slow_model --port P --delay 10`` (``bench.inflight`` starts it).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

state: dict[str, float] = {"delay": 10.0, "answered": 0, "in_flight": 0, "peak": 0}


async def completion(request: Request) -> JSONResponse:
    body: dict[str, Any] = await request.json()
    state["in_flight"] += 1
    state["peak"] = max(state["peak"], state["in_flight"])
    try:
        await asyncio.sleep(state["delay"])
    finally:
        state["in_flight"] -= 1
    state["answered"] += 1
    said = str(body.get("messages", [{}])[-1].get("content", ""))[:40]
    return JSONResponse(
        {
            "id": f"chatcmpl-{int(state['answered'])}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "slow"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"slow: {said}"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
    )


async def stats(request: Request) -> JSONResponse:
    if request.method == "POST":
        given = await request.json()
        state.update(answered=0, in_flight=0, peak=0, delay=float(given.get("delay", 10.0)))
    return JSONResponse(state)


app = Starlette(
    routes=[
        Route("/v1/chat/completions", completion, methods=["POST"]),
        Route("/stats", stats, methods=["GET", "POST"]),
    ]
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=10.0)
    args = parser.parse_args()
    state["delay"] = args.delay
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", backlog=4096)


if __name__ == "__main__":
    main()
