"""Which routers the app serves; each lives in its own module."""

from __future__ import annotations

import importlib

from fastapi import FastAPI

#: Router modules, each exposing ``router`` (an ``APIRouter``).
MODULES = ("fleet.api.tasks", "fleet.api.ops", "fleet.api.triggers", "fleet.api.a2a")


def include(app: FastAPI) -> None:
    for name in MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # not written yet
        app.include_router(module.router)
