"""The routers the app serves, one module each."""

from __future__ import annotations

from fastapi import FastAPI

from fleet.api import a2a, events, ops, runs, tasks, triggers, ui


def include(app: FastAPI) -> None:
    for module in (tasks, events, runs, ops, triggers, a2a):
        app.include_router(module.router)
    ui.install(app)
