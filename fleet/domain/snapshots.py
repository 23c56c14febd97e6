"""An agent's configuration as a run started with it: its fingerprint, and what changed since.

A run keeps the configuration of its agent (instructions, model, tools, MCP servers, limits) from
its first claim until it ends: its frozen context names the fingerprint, the store keeps the
text once per fingerprint, and a retry, a resume after a wait or a hand-back to a process of
another release runs with that text. These are the pure parts: the fingerprint of a dumped
``AgentConfig``, the name a configured tool goes by, and the differences ``fleet check`` reports
between what active runs use and what the config now says.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

#: Characters of the SHA-256 hex digest a fingerprint keeps (128 bits).
FINGERPRINT_CHARS = 32


def settled(value: Any) -> Any:
    """A dump without its unset settings (``None``, at any depth): a release that adds an
    optional setting (unset: ``None``, as every optional agent setting defaults) leaves the
    fingerprints and differences of the configurations that do not use it as they were."""
    if isinstance(value, Mapping):
        return {k: settled(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [settled(v) for v in value]
    return value


def fingerprint(dump: Mapping[str, Any]) -> str:
    """The fingerprint of a dumped agent configuration (``AgentConfig.model_dump(mode="json")``):
    the same settings give the same fingerprint in every process and release."""
    text = json.dumps(settled(dump), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_CHARS]


def tool_name(ref: Mapping[str, Any]) -> str:
    """What a configured tool (a dumped ``ToolRef``) is called in messages: its ``name``, else
    its reference (``shop.tools:refund``, ``current_time``)."""
    return str(ref.get("name") or ref.get("tool") or "?")


def _names(items: Any, key: str) -> list[str]:
    return [str(i.get(key) or "?") for i in items or () if isinstance(i, Mapping)]


def _model(dump: Mapping[str, Any]) -> str:
    model = dump.get("model") or {}
    name = model.get("name")
    return f"{model.get('provider', '?')}" + (f" {name}" if name else "")


def changes(old: Mapping[str, Any], new: Mapping[str, Any] | None) -> list[str]:
    """What differs between the configuration runs started with (``old``) and the one now
    configured (``new``; None: the agent is gone), each as a short phrase."""
    if new is None:
        return ["the agent is no longer configured"]
    old, new = settled(old), settled(new)
    found: list[str] = []
    before = [tool_name(t) for t in old.get("tools") or ()]
    after = [tool_name(t) for t in new.get("tools") or ()]
    found += [f"tool {t!r} removed" for t in before if t not in after]
    found += [f"tool {t!r} added" for t in after if t not in before]
    servers_before = _names(old.get("mcp_servers"), "name")
    servers_after = _names(new.get("mcp_servers"), "name")
    found += [f"MCP server {n!r} removed" for n in servers_before if n not in servers_after]
    found += [f"MCP server {n!r} added" for n in servers_after if n not in servers_before]
    if old.get("model") != new.get("model"):
        was, now = _model(old), _model(new)
        found.append(f"model {was} → {now}" if was != now else "model settings changed")
    if old.get("instructions") != new.get("instructions"):
        found.append("instructions changed")
    seen = {"name", "tools", "mcp_servers", "model", "instructions"}
    found += [
        f"{key} changed"
        for key in sorted(set(old) | set(new))
        if key not in seen and old.get(key) != new.get(key)
    ]
    if not found and old != new:  # a tool's or server's options only
        found.append("tool settings changed")
    return found
