"""Baseline for bench/api.py: a trivial FastAPI POST route with a pydantic body, no work."""

from __future__ import annotations

import uuid

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")

    deployment: str
    input: str


def create_app() -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/tasks", status_code=202)
    def submit(body: Body) -> JSONResponse:  # sync, like SubmitTask: runs on the threadpool
        return JSONResponse(
            {"id": str(uuid.uuid4()), "deployment": body.deployment, "status": "queued"},
            status_code=202,
        )

    return app
