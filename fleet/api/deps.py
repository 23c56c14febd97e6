"""FastAPI dependencies: the process runtime and the authenticated caller.

They are ``async def`` on purpose: each is a few attribute reads and one hash, and FastAPI runs a
plain ``def`` dependency on the thread pool, one hop (a thread switch and its GIL hand-offs) per
dependency per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from fleet.api.auth import Caller, KeyRing
from fleet.api.intake import Intake
from fleet.runtime import Runtime


async def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


async def intake(request: Request) -> Intake:
    found: Intake = request.app.state.intake
    return found


async def caller(request: Request) -> Caller:
    # The Authorization header is read here rather than declared as a parameter: one dependency
    # less to resolve per request (it was hidden from the schema either way).
    ring: KeyRing = request.app.state.keyring
    found = ring.authenticate(request.headers.get("authorization"))
    request.state.caller = found  # who acted, for the audit log (``fleet.api.audit``)
    return found


RuntimeDep = Annotated[Runtime, Depends(runtime)]
CallerDep = Annotated[Caller, Depends(caller)]
IntakeDep = Annotated[Intake, Depends(intake)]
