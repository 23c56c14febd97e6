"""A user's own tools: plain typed Python functions (fleet builds their schema from the hints).

`config/agents/support.toml` names them as `shop.tools:lookup_order`; fleet puts the config
folder on the import path, so this package needs no installing.
"""

from __future__ import annotations

from typing import Literal

import fleet

#: A stand-in for the shop's order database.
_ORDERS = {
    1234: {"status": "shipped", "carrier": "ups", "eta": "2026-12-02"},
    4711: {"status": "processing", "carrier": None, "eta": None},
}


@fleet.tool(retry="safe")  # a read: running it again after a lost worker is harmless
def lookup_order(order_id: int) -> dict[str, object]:
    """Look up an order's status, carrier and expected delivery date.

    Args:
        order_id: The order number the customer gave, e.g. 1234.
    """
    order = _ORDERS.get(order_id)
    if order is None:
        raise fleet.ToolError(f"no order {order_id}; ask the customer to check the number")
    return {"order": order_id, **order}


def request_refund(order_id: int, reason: Literal["late", "damaged", "other"]) -> str:
    """Ask the shop to refund an order (a side effect: not retried if a worker is lost mid-call).

    Args:
        order_id: The order to refund.
        reason: Why the customer wants the refund.
    """
    if order_id not in _ORDERS:
        raise fleet.ToolError(f"no order {order_id}")
    return f"refund for order {order_id} requested ({reason})"
