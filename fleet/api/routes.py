"""The routers the app serves, one module each."""

from __future__ import annotations

from fastapi import FastAPI

from fleet.api import a2a, conversations, events, memory, ops, runs, tasks, tenants, triggers, ui


def include(app: FastAPI) -> None:
    # conversations after tasks: ListConversationMessages' path is more specific than theirs
    for module in (tasks, conversations, memory, tenants, events, runs, ops, triggers, a2a):
        app.include_router(module.router)
    ui.install(app)
