"""The configuration reference, generated from fleet's pydantic config models.

Every key of every file in ``config/`` and every ``FLEET_*`` variable, with its type, default and
description. Descriptions are the fields' ``Field(description=...)`` or, as most fields have
them, the ``#:`` comments above them in the source (Sphinx's attribute doc comments), read with
the AST; a nested table without either takes its model's docstring.
"""

from __future__ import annotations

import ast
import inspect
import re
import types
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import AfterValidator, BaseModel, BeforeValidator, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from fleet.config import (
    AgentConfig,
    AppConfig,
    CallerConfig,
    DeploymentConfig,
    Settings,
    TriggerConfig,
)
from fleet.config.base import LimitRange, _retention, parse_duration
from fleet.config.schedules import ScheduleConfig
from fleet.config.tenants import TenantConfig
from fleet.constants import LIMITS

#: The page's path in the docs site.
PAGE = "reference/configuration.md"


@dataclass(frozen=True)
class Row:
    """One key: ``model.provider``, ``tools[].tool``, ``reply.headers.<name>.env``."""

    key: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class ConfigFile:
    """A kind of file in ``config/`` and the model that validates it."""

    path: str
    anchor: str
    model: type[BaseModel]
    intro: str


#: Every kind of file ``fleet check`` reads, in the order the page shows them.
FILES: tuple[ConfigFile, ...] = (
    ConfigFile(
        "config/agents/<name>.toml",
        "agents",
        AgentConfig,
        "An agent: instructions, model, tools, memory and limits. See "
        "[Configuration](../configuration.md).",
    ),
    ConfigFile(
        "config/deployments/<name>.toml",
        "deployments",
        DeploymentConfig,
        "A runnable agent: its kind, queue mode, labels and reply delivery. See "
        "[Queue modes](../conversations/queue-modes.md).",
    ),
    ConfigFile(
        "config/triggers/<name>.toml",
        "triggers",
        TriggerConfig,
        "A webhook at `/v1/triggers/<name>`. See [Webhook triggers](../triggers.md).",
    ),
    ConfigFile(
        "config/callers/<name>.toml",
        "callers",
        CallerConfig,
        "A key that may call the API, A2A or a trigger. See "
        "[Callers and keys](../http/callers.md).",
    ),
    ConfigFile(
        "config/tenants/<name>.toml",
        "tenants",
        TenantConfig,
        "A tenant's weight, quotas and budgets (optional). See [Tenants](../http/tenants.md).",
    ),
    ConfigFile(
        "config/schedules/<name>.toml",
        "schedules",
        ScheduleConfig,
        "A cron or an interval that submits a task at each tick. See "
        "[Schedules](../agents/schedules.md).",
    ),
    ConfigFile(
        "config/fleet.toml",
        "fleet-toml",
        AppConfig,
        "What holds for every agent (optional). See [Limits](../configuration.md#limits).",
    ),
)

#: Keys a file may not hold: the name is the file's name.
SKIPPED = frozenset({"name"})


# -- descriptions -----------------------------------------------------------------------------


@cache
def _comments(cls: type) -> dict[str, str]:
    """field name → the ``#:`` comment lines right above its annotation in ``cls``'s body."""
    source = inspect.getsourcefile(cls)
    if source is None:
        return {}
    text = Path(source).read_text()
    lines = text.splitlines()
    found: dict[str, str] = {}
    for node in ast.parse(text).body:
        if not (isinstance(node, ast.ClassDef) and node.name == cls.__name__):
            continue
        for stmt in node.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            above: list[str] = []
            i = stmt.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#:"):
                above.insert(0, lines[i].strip().removeprefix("#:").strip())
                i -= 1
            if above:
                found[stmt.target.id] = " ".join(above)
    return found


def _doc_comment(model: type[BaseModel], field: str) -> str:
    """The ``#:`` comment of ``field`` in the class of ``model``'s MRO that declares it."""
    for cls in model.__mro__:
        if field in vars(cls).get("__annotations__", {}):
            return _comments(cls).get(field, "")
    return ""


def _docstring(cls: type) -> str:
    """The first paragraph of a class's docstring, on one line."""
    doc = inspect.cleandoc(vars(cls).get("__doc__") or "")
    return " ".join(doc.split("\n\n", 1)[0].split())


def _markdown(text: str) -> str:
    """reST-style ````code```` as Markdown, and safe inside a table cell."""
    return re.sub(r"``(.+?)``", r"`\1`", text).replace("|", "\\|")


def description(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    """A field's description: ``Field(description=...)``, else its ``#:`` comment, else the
    docstring of the model it nests."""
    text = info.description or _doc_comment(model, name)
    if not text:
        nested = _models(info.annotation)
        if nested:
            text = _docstring(nested[0])
    return _markdown(text)


# -- types and defaults -----------------------------------------------------------------------


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _members(tp: Any) -> tuple[Any, ...]:
    """The members of a union (``X | None`` too), or the type itself."""
    if get_origin(tp) in (Union, types.UnionType):
        return get_args(tp)
    return (tp,)


def _strip(tp: Any) -> tuple[Any, list[Any]]:
    """``Annotated[X, ...]`` → (X, its metadata)."""
    if get_origin(tp) is Annotated:
        base, *meta = get_args(tp)
        return base, meta
    return tp, []


def _models(tp: Any) -> list[type[BaseModel]]:
    """The models a field's value is, or holds (as list items or table values)."""
    found: list[type[BaseModel]] = []
    for annotated in _members(_strip(tp)[0]):
        member = _strip(annotated)[0]
        if _is_model(member):
            found.append(member)
        elif get_origin(member) in (tuple, list, dict):
            found.extend(m for arg in get_args(member) for m in _models(arg))
    return found


def _range(meta: list[Any]) -> str:
    """``1-100`` from ``ge``/``le`` (and their strict kin) in a field's metadata."""
    low = high = None
    for m in meta:
        if isinstance(m, annotated_types.Ge | annotated_types.Gt):
            low = m.ge if isinstance(m, annotated_types.Ge) else m.gt
        if isinstance(m, annotated_types.Le | annotated_types.Lt):
            high = m.le if isinstance(m, annotated_types.Le) else m.lt
        if isinstance(m, AfterValidator) and isinstance(m.func, LimitRange):
            low, high = 1, m.func.limit.maximum
    if low is None and high is None:
        return ""

    def shown(v: Any) -> str:
        return f"{v:,g}" if isinstance(v, float) else f"{v:,}"

    if high is None:
        return f", at least {shown(low)}"
    if low is None:
        return f", at most {shown(high)}"
    return f", {shown(low)} to {shown(high)}"


def _validator_type(meta: list[Any]) -> str | None:
    """A type named by the validator that parses it (durations)."""
    for m in meta:
        if isinstance(m, BeforeValidator):
            if m.func is parse_duration:
                return "duration"
            if m.func is _retention:
                return f"duration, 1h to {LIMITS['retention_days'].maximum}d"
    return None


def type_name(tp: Any, meta: list[Any] | None = None) -> str:
    """How the page names a field's type: ``integer, 1 to 100``, ``list of strings``…"""
    base, own = _strip(tp)
    meta = [*(meta or []), *own]
    named = _validator_type(meta)
    if named is not None:
        return named
    members = [m for m in _members(base) if m is not type(None)]
    if len(members) > 1:
        return " or ".join(type_name(m) for m in members) + _range(meta)
    (tp,) = members
    tp, inner = _strip(tp)
    if inner:
        return type_name(tp, [*meta, *inner])
    origin = get_origin(tp)
    if origin is Literal:
        return " \\| ".join(f'`"{v}"`' for v in get_args(tp))
    if origin in (tuple, list):
        (item, *_) = get_args(tp)
        return "list" if item is Any else f"list of {_plural(type_name(item))}"
    if origin is dict:
        value = get_args(tp)[1]
        return "table" if value is Any else f"table of {_plural(type_name(value))}"
    simple = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "path"}
    if tp in simple:
        return simple[tp] + _range(meta)
    if tp is SecretStr:
        return "string (secret)"
    if getattr(tp, "__name__", "") == "AwareDatetime":
        return "date-time with offset"
    if _is_model(tp):
        return "table"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def _plural(name: str) -> str:
    if name.startswith("`") or " or " in name or name.startswith(("list", "table of")):
        return name if name.startswith("`") else f"({name})"
    return name + "s" if not name.endswith("s") else name


def _seconds(value: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600)):
        if value >= size and value % size == 0:
            return f"{int(value // size)}{unit}"
    if value < 1 and value * 1000 == int(value * 1000):
        return f"{int(value * 1000)}ms"
    return f"{value:g}s"


def default_text(info: FieldInfo, *, toml: bool = True) -> str:
    """A field's default as a TOML file would write it (``toml=False``: as an environment
    variable would); ``required`` without one."""
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        return "(see below)"
    meta = _strip(info.annotation)[1]
    is_duration = _validator_type([*info.metadata, *meta]) is not None
    shown = _value(value, duration=is_duration)
    if not toml:
        shown = shown.strip('"')
    return f"`{shown}`"


def _value(value: Any, *, duration: bool = False) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and duration:
        return f'"{_seconds(value)}"'
    if isinstance(value, int | float):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, str | Path):
        return f'"{value}"'
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_value(v)}" for k, v in value.items()) + "}"
    return str(value)


# -- rows ---------------------------------------------------------------------------------------


def rows(model: type[BaseModel], prefix: str = "") -> list[Row]:
    """Every key ``model`` accepts, nested tables and arrays of tables included, in order."""
    out: list[Row] = []
    for name, info in model.model_fields.items():
        if not prefix and name in SKIPPED:
            continue
        key = prefix + (info.alias or name)
        out.append(
            Row(
                key=key,
                type=type_name(info.annotation, list(info.metadata)),
                default=default_text(info),
                description=description(model, name, info),
            )
        )
        for nested, shape in _nested(info.annotation):
            sub = {"table": f"{key}.", "list": f"{key}[].", "dict": f"{key}.<name>."}[shape]
            out.extend(rows(nested, sub))
    return out


def _nested(tp: Any) -> list[tuple[type[BaseModel], str]]:
    """(model, how it nests: ``table``, ``list`` of tables, ``dict`` of tables) of a field."""
    found: list[tuple[type[BaseModel], str]] = []
    for annotated in _members(_strip(tp)[0]):
        member = _strip(annotated)[0]
        if _is_model(member):
            found.append((member, "table"))
        elif get_origin(member) in (tuple, list):
            found.extend((m, "list") for m in _models(get_args(member)[0]))
        elif get_origin(member) is dict:
            found.extend((m, "dict") for m in _models(get_args(member)[1]))
    return found


def settings_rows() -> list[Row]:
    """One row per ``FLEET_*`` environment variable."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    return [
        Row(
            key=f"{prefix}{name.upper()}",
            type=type_name(info.annotation, list(info.metadata)),
            default=default_text(info, toml=False),
            description=description(Settings, name, info),
        )
        for name, info in Settings.model_fields.items()
    ]


# -- the page -----------------------------------------------------------------------------------


def _table(first: str, found: list[Row]) -> list[str]:
    lines = [f"| {first} | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{r.key}` | {r.type} | {r.default} | {r.description} |" for r in found]
    return lines


def render() -> str:
    """The whole page, as Markdown."""
    out = [
        "# Configuration reference",
        "",
        "Every key of every file in `config/` and every `FLEET_*` environment variable, with its",
        "type, default and description. This page is generated from the configuration models",
        "when the docs are built, so it always matches the code; "
        "[Configuration](../configuration.md) explains how the files fit together.",
        "",
        "How to read a key: `a.b` is key `b` of table `a` (`[a]` in TOML, or `a = { b = … }`);",
        "`a[].b` is key `b` of each table in the array `a` (`[[a]]`); `<name>` is any name you",
        "choose. Durations take `500ms`, `2s`, `1.5m`, `1h`, `30d` or a number of seconds.",
        "Unknown keys are errors, and a file's name is its object's name (no `name` key).",
        "",
    ]
    for f in FILES:
        heading = f"## `{f.path}` {{ #{f.anchor} }}"
        out += [heading, "", f.intro, "", *_table("key", rows(f.model)), ""]
    out += [
        "## Environment variables { #environment }",
        "",
        "Every setting of a process comes from an environment variable; a bad value fails at "
        "start naming the variable.",
        "",
        *_table("variable", settings_rows()),
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    print(render())
