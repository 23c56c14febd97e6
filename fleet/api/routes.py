"""The routers the app serves, one module each."""

from __future__ import annotations

from fastapi import FastAPI

from fleet.api import (
    a2a,
    audit,
    bulk,
    conversations,
    events,
    inbound,
    memory,
    ops,
    rights,
    runs,
    schedules,
    tasks,
    tenants,
    triggers,
    ui,
    ui_failures,
    workers,
)


def include(app: FastAPI) -> None:
    # conversations after tasks: ListConversationMessages' path is more specific than theirs
    modules = (
        tasks,
        bulk,
        conversations,
        rights,
        audit,
        memory,
        tenants,
        schedules,
        events,
        inbound,
        runs,
        workers,
        ops,
        triggers,
        a2a,
    )
    for module in modules:
        app.include_router(module.router)
    ui.install(app)
    app.include_router(ui_failures.router)
