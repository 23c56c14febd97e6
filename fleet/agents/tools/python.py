"""Python functions as tools: ``module:function`` in an agent's ``tools``.

The argument schema is a pydantic model built from the function's signature (type hints,
defaults) and its docstring (the summary is the description, ``Args:`` or ``:param:`` lines
describe the parameters). Arguments are validated before the call; a validation error goes back
to the model as the tool's result. A parameter annotated ``ToolContext`` receives the run's
context instead of a model argument. ``@fleet.tool(retry="safe", timeout=30)`` sets the options.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable
from typing import Any, TypeVar, get_type_hints, overload

import docstring_parser
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic_core import to_jsonable_python

from fleet.agents.tools.base import RetryPolicy, Tool, ToolContext, ToolError

F = TypeVar("F", bound=Callable[..., Any])

#: Attribute ``@tool`` leaves on a function: the options it was given.
OPTIONS_ATTR = "__fleet_tool__"
#: Tool names the model providers accept (OpenAI and Anthropic allow these characters).
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


class ToolLoadError(Exception):
    """A tool reference cannot become a tool (import failed, not a function, bad signature)."""


@overload
def tool(fn: F, /) -> F: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
) -> Callable[[F], F]: ...


def tool(
    fn: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
) -> F | Callable[[F], F]:
    """Mark a function as a fleet tool and set its options (all optional).

    ``retry="safe"`` says a call that was in flight when its worker died may run again (the
    default, ``unsafe``, tells the model the outcome is unknown instead).
    """
    options = {"name": name, "description": description, "retry": retry, "timeout": timeout}
    if retry not in (None, "safe", "unsafe"):
        raise ValueError(f"retry must be 'safe' or 'unsafe', got {retry!r}")

    def mark(f: F) -> F:
        setattr(f, OPTIONS_ATTR, {k: v for k, v in options.items() if v is not None})
        return f

    return mark(fn) if fn is not None else mark


def resolve(ref: str) -> Callable[..., Any]:
    """Import ``package.module:function`` (the function part may be dotted: ``Class.method``)."""
    module_name, sep, attr = ref.partition(":")
    if not sep or not module_name or not attr:
        raise ToolLoadError(f"{ref!r} is not a tool reference like 'package.module:function'")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as exc:
        raise ToolLoadError(
            f"cannot import module {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ToolLoadError(f"module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise ToolLoadError(f"{ref!r} is not callable (it is a {type(obj).__name__})")
    return obj  # type: ignore[no-any-return]


def from_function(
    fn: Callable[..., Any],
    *,
    origin: str,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
) -> Tool:
    """A tool calling ``fn``; options given here win over the ``@tool`` decorator's."""
    options: dict[str, Any] = getattr(fn, OPTIONS_ATTR, {})
    tool_name = name or options.get("name") or getattr(fn, "__name__", "")
    if not tool_name or not set(tool_name) <= _NAME_CHARS or len(tool_name) > 64:
        raise ToolLoadError(
            f"tool name {tool_name!r} must be 1-64 letters, digits, '_' or '-' (set name=...)"
        )
    doc = docstring_parser.parse(inspect.getdoc(fn) or "")
    described = {p.arg_name: p.description or "" for p in doc.params}
    args_model, context_param = _arguments(fn, tool_name, described)
    description = options.get("description") or "\n\n".join(
        part for part in (doc.short_description, doc.long_description) if part
    )
    schema = args_model.model_json_schema()
    schema.pop("title", None)
    is_async = inspect.iscoroutinefunction(fn)

    def validated(args: dict[str, Any]) -> dict[str, Any]:
        try:
            parsed = args_model.model_validate(args)
        except ValidationError as exc:
            raise ToolError(f"invalid arguments for {tool_name}: {_explain(exc)}") from None
        return {field: getattr(parsed, field) for field in type(parsed).model_fields}

    def with_context(kwargs: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        return {**kwargs, context_param: ctx} if context_param else kwargs

    async def afn(args: dict[str, Any], ctx: ToolContext) -> str:
        return _text(await fn(**with_context(validated(args), ctx)))

    def sync_fn(args: dict[str, Any], ctx: ToolContext) -> str:
        return _text(fn(**with_context(validated(args), ctx)))

    return Tool(
        name=tool_name,
        description=description,
        parameters=schema,
        fn=None if is_async else sync_fn,
        afn=afn if is_async else None,
        retry=retry or options.get("retry", "unsafe"),
        timeout=timeout if timeout is not None else options.get("timeout"),
        origin=origin,
    )


def _arguments(
    fn: Callable[..., Any], tool_name: str, described: dict[str, str]
) -> tuple[type[BaseModel], str | None]:
    """The pydantic model of ``fn``'s model-facing parameters, and its context parameter."""
    try:
        hints = get_type_hints(fn, include_extras=True)
        signature = inspect.signature(fn)
    except Exception as exc:
        raise ToolLoadError(f"cannot read the signature of {tool_name}: {exc}") from None
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in signature.parameters.values():
        annotation = hints.get(param.name, Any)
        if annotation is ToolContext:
            context_param = param.name
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ToolLoadError(
                f"tool {tool_name}: parameter {param.name!r} must be a plain or keyword "
                "parameter (*args, **kwargs and positional-only ones cannot be named by a model)"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (
            annotation,
            Field(default, description=described.get(param.name) or None),
        )
    try:
        model = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(extra="forbid"),
            **fields,
        )
        model.model_json_schema()
    except Exception as exc:
        raise ToolLoadError(
            f"tool {tool_name}: its parameters have no JSON schema ({exc}); use JSON types"
        ) from None
    return model, context_param


def _explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _text(value: Any) -> str:
    """A tool's return value as the text the model sees (JSON for anything but a string)."""
    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable_python(value), ensure_ascii=False)
