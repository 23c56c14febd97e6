"""FastAPI dependencies: the process runtime and the authenticated caller.

They are ``async def`` on purpose: each is a few attribute reads and one hash, and FastAPI runs a
plain ``def`` dependency on the thread pool, one hop (a thread switch and its GIL hand-offs) per
dependency per request.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from fleet.api.auth import Caller, KeyRing
from fleet.api.intake import Intake
from fleet.runtime import Runtime


async def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


async def intake(request: Request) -> Intake:
    found: Intake = request.app.state.intake
    return found


async def keyring(request: Request) -> KeyRing:
    ring: KeyRing = request.app.state.keyring
    return ring


async def caller(
    ring: Annotated[KeyRing, Depends(keyring)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Caller:
    return ring.authenticate(authorization)


RuntimeDep = Annotated[Runtime, Depends(runtime)]
CallerDep = Annotated[Caller, Depends(caller)]
IntakeDep = Annotated[Intake, Depends(intake)]
