"""The a2a-sdk side of the A2A routes (``fleet.api.a2a``): the JSON-RPC dispatcher and the
agent card. Imported on a route's first call, so a process that serves no A2A request never
loads the SDK (its protobuf types and JSON-RPC machinery: some 17 MB).
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from fastapi import Request

from fleet.api import a2a_handler
from fleet.config import DeploymentConfig
from fleet.runtime import Runtime
from fleet.version import __version__

__all__ = ["agent_card", "agent_card_to_dict", "dispatcher"]

_BEARER = "bearer"


class _ContextBuilder(DefaultServerCallContextBuilder):
    """Carries the caller and deployment our route resolved into the SDK's call context."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[a2a_handler.CALLER] = request.state.a2a_caller
        context.state[a2a_handler.DEPLOYMENT] = request.state.a2a_deployment
        context.state[a2a_handler.GATED] = getattr(request.state, "a2a_gated", False)
        return context


def dispatcher(request: Request) -> JsonRpcDispatcher:
    """One SDK dispatcher per app, made on first use (the runtime exists only after start-up)."""
    found: JsonRpcDispatcher | None = getattr(request.app.state, "a2a_dispatcher", None)
    if found is None:
        rt: Runtime = request.app.state.runtime
        found = JsonRpcDispatcher(
            a2a_handler.FleetRequestHandler(rt, request.app.state.event_hub),
            context_builder=_ContextBuilder(),
            enable_v0_3_compat=True,
        )
        request.app.state.a2a_dispatcher = found
    return found


def agent_card(dep: DeploymentConfig, rpc_url: str, *, secured: bool) -> AgentCard:
    """The card of one deployment: both protocol versions on one JSON-RPC URL, streaming."""
    card = AgentCard(
        name=dep.name,
        description=f"fleet deployment {dep.name!r} ({dep.kind}): send it a message; "
        "send the returned contextId again to continue the conversation.",
        version=__version__,
        supported_interfaces=[
            AgentInterface(url=rpc_url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=rpc_url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id=dep.name,
                name=dep.name,
                description=f"Runs the {dep.agent!r} agent; labels via metadata "
                '"fleet.labels", a blocking wait of up to 60 s via "fleet.wait". A task '
                "input-required asks for a tool approval: answer it (same taskId) with a data "
                'part {"approval": id, "decision": "approve" | "reject", "reason": "..."}.',
                tags=["fleet", dep.kind],
            )
        ],
    )
    if secured:
        card.security_schemes[_BEARER].CopyFrom(
            SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="Bearer", description="A fleet API key of a caller with source 'a2a'."
                )
            )
        )
        card.security_requirements.append(SecurityRequirement(schemes={_BEARER: StringList()}))
    return card
