"""Working memory: structured state an agent keeps for a conversation or a resource.

Shown in the system message; unless read-only, the ``update_working_memory`` tool merges a
patch (JSON merge patch, RFC 7396) into it, validated against the agent's JSON Schema, or
replaces its text (a template). Each call carries its receipt: a resumed run does not apply the
same patch twice. The state is versioned; two runs racing merge onto the newest version.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from fleet.agents.tools.base import Tool, ToolContext, ToolError
from fleet.config import WorkingMemoryConfig
from fleet.domain.rights import memory_key
from fleet.domain.values import Task
from fleet.errors import ConfigError, FleetError
from fleet.store.recall import RecallStore

#: Characters of working memory shown in the prompt (a larger state is cut, and says so).
MAX_SHOWN_CHARS = 8_000


def key_of(cfg: WorkingMemoryConfig, task: Task, namespace: str) -> str:
    """Where the state lives: per conversation, or per resource within tenant, scope and
    namespace (the ``default`` tenant's keys name no tenant, as before tenants)."""
    if cfg.scope == "resource" and task.resource_id is not None:
        return memory_key(task.tenant, namespace, task.scope, task.resource_id)
    return f"conversation:{task.conversation_id}"


def schema_of(cfg: WorkingMemoryConfig, root: Path) -> dict[str, Any] | None:
    """The JSON Schema the state must satisfy (inline or from ``schema_file``), if any."""
    if cfg.schema_ is not None:
        return cfg.schema_
    if cfg.schema_file is None:
        return None
    path = root / cfg.schema_file
    try:
        schema: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            str(path), "working_memory.schema_file", f"cannot be read: {exc}"
        ) from None
    Draft202012Validator.check_schema(schema)
    return schema


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7396: objects merge key by key, ``null`` removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def render(cfg: WorkingMemoryConfig, state: tuple[Any, int] | None) -> tuple[str, dict[str, Any]]:
    """The system-message section and the provenance record."""
    value, version = state if state is not None else (None, 0)
    if cfg.template is not None:
        text = value if isinstance(value, str) else cfg.template
    else:
        text = json.dumps(value if value is not None else {}, indent=2, sort_keys=True)
    cut = len(text) > MAX_SHOWN_CHARS
    shown = text[:MAX_SHOWN_CHARS] + ("\n[... cut: working memory is longer]" if cut else "")
    how = "read only" if cfg.read_only else "keep it current with update_working_memory"
    section = f"## Working memory (version {version}; {how})\n{shown}"
    return section, {"version": version, "chars": len(shown), "cut": cut, "scope": cfg.scope}


def update_tool(
    cfg: WorkingMemoryConfig,
    store: RecallStore,
    *,
    key: str,
    schema: dict[str, Any] | None,
    run_id: uuid.UUID,
    clock: Callable[[], datetime],
    authorize: Callable[[str], None],
) -> Tool:
    """``update_working_memory`` for one run's state."""
    validator = Draft202012Validator(schema) if schema is not None else None
    template = cfg.template is not None

    def apply(args: dict[str, Any], ctx: ToolContext) -> str:
        try:
            authorize("memory")
        except FleetError as exc:
            raise ToolError(exc.message) from None
        if template:
            text = args.get("text")
            if not isinstance(text, str) or set(args) != {"text"}:
                raise ToolError("give {text: '...'}: the whole new working memory text")
        else:
            patch = args.get("patch")
            if not isinstance(patch, dict) or set(args) != {"patch"}:
                raise ToolError(
                    "give {patch: {...}}: a JSON merge patch (keys set, null removes a key)"
                )
        for _ in range(5):  # another run may write in between: merge onto its version
            current = store.working_memory(key)
            value, version = current if current is not None else (None, 0)
            new = text if template else merge_patch(value, patch)
            if validator is not None:
                errors = sorted(validator.iter_errors(new), key=lambda e: list(e.path))
                if errors:
                    where = "/".join(str(p) for p in errors[0].path) or "(top level)"
                    raise ToolError(
                        f"the patched working memory does not fit its schema at {where}: "
                        f"{errors[0].message}; nothing was changed"
                    )
            made = store.write_working_memory(
                key,
                new,
                version=version,
                receipt=ctx.receipt,
                author=f"run:{run_id}",
                now=clock(),
            )
            if made is not None:
                return f"working memory is now at version {made}"
        raise ToolError("working memory kept changing; read it again and retry")

    if template:
        params: dict[str, Any] = {
            "type": "object",
            "properties": {"text": {"type": "string", "description": "The new text, whole."}},
            "required": ["text"],
            "additionalProperties": False,
        }
    else:
        params = {
            "type": "object",
            "properties": {
                "patch": {
                    "type": "object",
                    "description": "A JSON merge patch: keys to set (objects merge), null to "
                    "remove a key.",
                }
            },
            "required": ["patch"],
            "additionalProperties": False,
        }
    return Tool(
        name="update_working_memory",
        description="Update your working memory (shown in your instructions): what you need to "
        "remember about this " + ("user" if cfg.scope == "resource" else "conversation") + ".",
        parameters=params,
        fn=apply,
        retry="safe",
        origin="fleet:working_memory",
    )
