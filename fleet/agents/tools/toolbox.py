"""An agent's tools: built-ins and Python functions resolved once, tool servers opened per run."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleet.agents.tools.base import Tool, ToolContext, ToolGone, ToolServer, ToolServerError
from fleet.agents.tools.builtin import BUILTIN_TOOLS
from fleet.agents.tools.python import ToolLoadError, from_function, resolve
from fleet.constants import FLEET_TOOL_NAMES, RUN_BOUND_TOOLS

if TYPE_CHECKING:
    from fleet.agents.tools.mcp import McpToolServer
    from fleet.config import AgentConfig


@dataclasses.dataclass(frozen=True)
class Toolbox:
    """The tools one agent may use."""

    static: Mapping[str, Tool]
    servers: Sequence[ToolServer] = ()
    #: Seconds a call may take when its tool names no timeout.
    default_timeout: float = 60.0

    def timeout_of(self, tool: Tool) -> float:
        return tool.timeout if tool.timeout is not None else self.default_timeout

    @contextmanager
    def opened(self, ctx: ToolContext, *, extra: Sequence[Tool] = ()) -> Iterator[dict[str, Tool]]:
        """Every tool for one run: the static ones, ``extra`` (bound to this run, such as the
        memory tools) and each server's, connected until exit."""
        tools = dict(self.static)
        for tool in extra:
            if tool.name in tools:
                raise ToolServerError(
                    f"the agent's tool {tool.name!r} has the name of a fleet tool; rename it"
                )
            tools[tool.name] = tool
        with ExitStack() as stack:
            for server in self.servers:
                for tool in stack.enter_context(server.connect(ctx)):
                    if tool.name in tools:
                        raise ToolServerError(
                            f"tool server {server.name!r} offers {tool.name!r}, which another "
                            "tool of the agent already has"
                        )
                    tools[tool.name] = tool
            _distinct_on_the_wire(tools)
            yield tools


def reserved(where: str, name: str) -> str:
    """Why a tool may not be called ``name``: fleet gives runs a tool of that name."""
    return (
        f"{where}: the name {name!r} is one of fleet's own tools "
        f"({', '.join(sorted(FLEET_TOOL_NAMES))}); give it another name (name = '...')"
    )


def importable(config_root: Path) -> None:
    """Let ``module:function`` references find modules in the config folder and the cwd."""
    for folder in (str(config_root.resolve()), str(Path.cwd())):
        if folder not in sys.path:
            sys.path.insert(0, folder)


def build(
    agent: AgentConfig, config_root: Path, *, kept: Sequence[Mapping[str, Any]] | None = None
) -> Toolbox:
    """Resolve an agent's tools and MCP servers (imports Python tools); ToolLoadError names one.

    ``kept``: the agent is a configuration runs started with (``fleet.domain.snapshots``), with
    its Python tools' specs as they were (``specs``). A tool of it this process cannot load is
    then ``gone``, not an error: only a run that calls it fails."""
    importable(config_root)
    static: dict[str, Tool] = {}
    for i, ref in enumerate(agent.tools):
        where = f"tools[{i}] ({ref.tool})"
        if ref.tool in RUN_BOUND_TOOLS:  # bound to each run (fleet.dispatch.sources)
            continue
        try:
            if ref.builtin:
                tool = BUILTIN_TOOLS[ref.tool]
                tool = dataclasses.replace(
                    tool,
                    name=ref.name or tool.name,
                    retry=ref.retry or tool.retry,
                    timeout=ref.timeout if ref.timeout is not None else tool.timeout,
                    approval=ref.approval == "required",
                )
            else:
                tool = from_function(
                    resolve(ref.tool),
                    origin=ref.tool,
                    name=ref.name,
                    retry=ref.retry,
                    timeout=ref.timeout,
                )
                if ref.approval == "required":
                    tool = dataclasses.replace(tool, approval=True)
                if ref.isolation == "process":
                    if tool.afn is not None:
                        raise ToolLoadError(
                            f"{ref.tool!r} is async: it waits without holding the worker, so "
                            "isolation = 'process' is for sync tools; leave it out"
                        )
                    tool = dataclasses.replace(tool, isolation="process")
        except ToolLoadError as exc:
            if kept is None or ref.builtin:
                raise ToolLoadError(f"{where}: {exc}") from None
            tool = gone(ref.tool, ref.name, str(exc), kept, approval=ref.approval == "required")
        if tool.name in FLEET_TOOL_NAMES:
            raise ToolLoadError(reserved(where, tool.name))
        if tool.name in static:
            raise ToolLoadError(
                f"{where}: a second tool named {tool.name!r} (give one of them name = '...')"
            )
        static[tool.name] = tool
    return Toolbox(
        static=static, servers=tool_servers(agent, config_root), default_timeout=agent.tool_timeout
    )


def specs(box: Toolbox) -> list[dict[str, Any]]:
    """What a configuration keeps of its Python tools (``gone`` offers it if one is missing):
    each one's reference, name, description and parameters as the model saw them."""
    return [
        {"tool": t.origin, "name": t.name, "description": t.description, "parameters": t.parameters}
        for t in box.static.values()
        if t.origin != "builtin"
    ]


def gone(
    origin: str,
    name: str | None,
    why: str,
    kept: Sequence[Mapping[str, Any]],
    *,
    approval: bool = False,
) -> Tool:
    """A tool of a run's configuration whose code this process cannot load: offered to the model
    as the run first saw it (``kept``), it fails the run that calls it (``ToolGone``)."""
    spec = next(
        (k for k in kept if k.get("tool") == origin and (name is None or k.get("name") == name)),
        {},
    )
    called = str(spec.get("name") or name or origin.rpartition(":")[2].rpartition(".")[2])
    message = (
        f"tool {called!r} ({origin}) is gone: this release cannot load it ({why}); the run "
        "started with it in its agent's configuration and called it. Restore the tool, or "
        "submit the work again to run with the agent's current configuration"
    )

    def fail(args: dict[str, Any], ctx: ToolContext) -> str:
        raise ToolGone(message)

    return Tool(
        name=called,
        description=str(spec.get("description") or f"{origin} (no longer available)"),
        parameters=dict(spec.get("parameters") or {"type": "object", "properties": {}}),
        fn=fail,
        retry="safe",
        origin=origin,
        approval=approval,
    )


def tool_servers(agent: AgentConfig, config_root: Path) -> tuple[McpToolServer, ...]:
    """The agent's MCP servers as a run starts them: stdio ones in the config folder (so
    ``args = ["-m", "shop.parcels"]`` finds ``config/shop``). ``fleet check --connect`` too."""
    if not agent.mcp_servers:  # (the MCP SDK is imported only by agents that use it)
        return ()
    from fleet.agents.tools.mcp import McpToolServer

    return tuple(McpToolServer(server, cwd=config_root) for server in agent.mcp_servers)


def close_kept() -> None:
    """Close this process's MCP connections kept across runs (``lifetime = "worker"``): the
    worker process or embedded runtime is closing. (Imports the MCP SDK only if one was kept.)"""
    warm = sys.modules.get("fleet.agents.tools.mcp_warm")
    if warm is not None:
        warm.close_all()


def _distinct_on_the_wire(tools: Mapping[str, Tool]) -> None:
    """Two tools must not reach a model under one name (``a.b`` and ``a__b`` would)."""
    from fleet.agents.models.base import wire_name

    seen: dict[str, str] = {}
    for name in tools:
        other = seen.setdefault(wire_name(name), name)
        if other != name:
            raise ToolServerError(
                f"tools {other!r} and {name!r} reach the model under one name "
                f"({wire_name(name)!r}); rename one (name = '...' or an MCP include/exclude)"
            )
