"""FastAPI dependencies: the process runtime and the authenticated caller."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from fleet.api.auth import Caller, KeyRing
from fleet.runtime import Runtime


def runtime(request: Request) -> Runtime:
    rt: Runtime = request.app.state.runtime
    return rt


def keyring(request: Request) -> KeyRing:
    ring: KeyRing = request.app.state.keyring
    return ring


def caller(
    ring: Annotated[KeyRing, Depends(keyring)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
) -> Caller:
    return ring.authenticate(authorization)


RuntimeDep = Annotated[Runtime, Depends(runtime)]
CallerDep = Annotated[Caller, Depends(caller)]
