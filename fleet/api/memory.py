"""SetMemoryBlock, GetMemoryBlock, ListMemoryBlocks, ListMemoryBlockVersions: memory blocks for
operator keys (``operator = true``), what ``fleet memory set/get/ls/history`` does.

Blocks live in a tenant's namespace (a deployment's ``namespace``, default ``default``; each
tenant has its own). An operator reaches the tenants of its caller file (``tenants``; its own
alone by default) and, bound to some deployments, only their namespaces: another tenant's blocks
answer 404 like missing ones. Every version written here is authored
``operator:<caller>`` (``api`` when the API has no keys). Routes stay thin: the pure edit rules
are ``fleet.domain.blocks`` and the store writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator
from pydantic.alias_generators import to_camel

from fleet.api.auth import ANONYMOUS, Caller, require_operator
from fleet.api.deps import CallerDep, RuntimeDep
from fleet.api.schemas import problem_responses
from fleet.domain import blocks
from fleet.domain.blocks import Edit
from fleet.domain.inputs import unstorable
from fleet.errors import Forbidden, NotFound
from fleet.runtime import Runtime
from fleet.views.memory import block_json, history_json

router = APIRouter(tags=["memory"])

_AUTH = (401, 403, 503)
#: A namespace as a deployment names it (``fleet.config`` checks the same in deployment files).
NAMESPACE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"

BlockName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=100,
        description="The block's name: lowercase letters, digits, '.', '_' or '-'.",
    ),
]
Namespace = Annotated[
    str,
    Query(
        pattern=NAMESPACE_PATTERN,
        description="The block's namespace (a deployment's `namespace`).",
    ),
]
TenantName = Annotated[
    str | None,
    Query(
        pattern=NAMESPACE_PATTERN,
        description="Whose namespace (default: the key's own tenant; operators reach the "
        "tenants their caller file lists).",
    ),
]


class SetBlockRequest(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    value: StrictStr = Field(description="The block's new value (it replaces the old one).")
    title: StrictStr | None = Field(
        default=None, max_length=200, description="Shown to the agent; unchanged if left out."
    )
    description: StrictStr | None = Field(
        default=None, max_length=1000, description="Shown to the agent; unchanged if left out."
    )
    expected_version: StrictInt | None = Field(
        default=None,
        ge=0,
        description="Refuse (409) unless the block is at this version (0: it must not exist yet).",
    )

    @field_validator("value", "title", "description")
    @classmethod
    def _storable(cls, v: str | None) -> str | None:
        why = None if v is None else unstorable(v)
        if why is not None:
            raise ValueError(f"the text {why}")
        return v


@dataclass(frozen=True, slots=True)
class Place:
    """Where an operator's memory call acts: the tenant, the namespace (None: every one the
    key reaches) and the namespaces the key reaches (None: all)."""

    caller: Caller
    tenant: str
    namespace: str | None
    reach: frozenset[str] | None


def _place(rt: Runtime, caller: Caller, namespace: str | None, tenant: str | None) -> Place:
    """Operator keys only (an API without keys is open, as its UI is); the tenant asked about
    (404 beyond the caller's reach, as a missing one) and the namespaces the caller reaches."""
    require_operator(caller)
    chosen = caller.tenant if tenant is None else tenant
    if not caller.reaches(chosen):
        raise NotFound(f"no tenant {chosen!r} among this key's", field="tenant")
    if caller.deployments is None:
        return Place(caller, chosen, namespace, None)
    reach = frozenset(
        d.namespace for name, d in rt.config.deployments.items() if name in caller.deployments
    )
    if namespace is not None and namespace not in reach:
        raise Forbidden(
            f"caller {caller.name!r} may not use namespace {namespace!r} (its deployments use "
            f"{', '.join(sorted(reach)) or 'none'})",
            field="namespace",
        )
    return Place(caller, chosen, namespace, reach)


async def _block_place(
    rt: RuntimeDep, caller: CallerDep, namespace: Namespace = "default", tenant: TenantName = None
) -> Place:
    return _place(rt, caller, namespace, tenant)


async def _list_place(
    rt: RuntimeDep,
    caller: CallerDep,
    namespace: Annotated[
        str | None, Query(pattern=NAMESPACE_PATTERN, description="Only this namespace.")
    ] = None,
    tenant: TenantName = None,
) -> Place:
    return _place(rt, caller, namespace, tenant)


#: One block's place (its namespace, default ``default``) or a listing's (every namespace).
BlockPlace = Annotated[Place, Depends(_block_place)]
ListPlace = Annotated[Place, Depends(_list_place)]


def _author(caller: Caller) -> str:
    return "api" if caller is ANONYMOUS else f"operator:{caller.name}"


def _named(at: Place, block: str) -> str:
    """The block's namespace, once its name is one a block may have."""
    blocks.check_block_name(block)
    assert at.namespace is not None  # (one block's place always names its namespace)
    return at.namespace


def _missing(namespace: str, name: str) -> NotFound:
    return NotFound(f"no memory block {name!r} in namespace {namespace!r}", field="block")


@router.get(
    "/v1/memory/blocks",
    operation_id="ListMemoryBlocks",
    responses=problem_responses(*_AUTH, 404, 422),
    summary="List memory blocks, without their values (operators)",
)
def list_memory_blocks(rt: RuntimeDep, at: ListPlace) -> JSONResponse:
    """Every block of a tenant (of one namespace, or of all the caller reaches), by namespace
    and name."""
    found = rt.store.list_blocks(at.namespace, tenant=at.tenant)
    if at.reach is not None:
        found = [b for b in found if b.namespace in at.reach]
    return JSONResponse({"blocks": [block_json(b, value=False) for b in found]})


@router.get(
    "/v1/memory/blocks/{block}",
    operation_id="GetMemoryBlock",
    responses=problem_responses(*_AUTH, 404, 422),
    summary="Get a memory block's current value (operators)",
)
def get_memory_block(block: BlockName, rt: RuntimeDep, at: BlockPlace) -> JSONResponse:
    namespace = _named(at, block)
    found = rt.store.get_block(namespace, block, tenant=at.tenant)
    if found is None:
        raise _missing(namespace, block)
    return JSONResponse(block_json(found))


@router.put(
    "/v1/memory/blocks/{block}",
    operation_id="SetMemoryBlock",
    responses=problem_responses(*_AUTH, 400, 404, 409, 422),
    summary="Replace a memory block's value, creating it (operators)",
)
def set_memory_block(
    block: BlockName, body: SetBlockRequest, rt: RuntimeDep, at: BlockPlace
) -> JSONResponse:
    """Bumps the version and records it, authored `operator:<caller>`. `expectedVersion`
    refuses (409, naming the current version) if the block moved on; a value past the size
    cap is refused (422) with the sizes."""
    found = rt.store.edit_block(
        _named(at, block),
        block,
        Edit("replace", body.value, expected_version=body.expected_version),
        tenant=at.tenant,
        author=_author(at.caller),
        now=datetime.now(UTC),
        title=body.title,
        description=body.description,
    )
    return JSONResponse(block_json(found))


@router.get(
    "/v1/memory/blocks/{block}/versions",
    operation_id="ListMemoryBlockVersions",
    responses=problem_responses(*_AUTH, 404, 422),
    summary="Every version of a memory block: who wrote it and when (operators)",
)
def list_memory_block_versions(block: BlockName, rt: RuntimeDep, at: BlockPlace) -> JSONResponse:
    """Oldest first; `author` is `user` (the CLI), `operator:<caller>` or `run:<run id>`."""
    namespace = _named(at, block)
    versions = rt.store.block_history(namespace, block, tenant=at.tenant)
    return JSONResponse(history_json(namespace, block, versions))
