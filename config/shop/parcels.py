"""An MCP server with the official SDK: parcel tracking for the `orders` agent.

`config/agents/orders.toml` starts it over stdio (`{python} -m shop.parcels`: fleet's own
interpreter, run in the config folder); its tool reaches the model as `parcels.track`. It keeps
no state between calls, so a worker keeps it up across runs (`lifetime = "worker"`). Any MCP
server works the same way.
"""

from __future__ import annotations

from typing import Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("parcels", instructions="Where the shop's parcels are.", log_level="WARNING")

#: A stand-in for a carrier's tracking API.
_PARCELS = {"1Z999": "in transit: Leipzig hub, delivery expected 2026-12-02"}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))  # a read: safe to retry
def track(carrier: Literal["ups", "dhl"], code: str) -> str:
    """Where a parcel is now, by carrier and tracking code."""
    found = _PARCELS.get(code)
    if found is None:
        raise ToolError(f"{carrier} knows no parcel {code!r}")
    return f"{carrier} {code}: {found}"


if __name__ == "__main__":
    server.run("stdio")
