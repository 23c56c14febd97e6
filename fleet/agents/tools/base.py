"""A tool: a name, a JSON schema for its arguments, and a function."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.agents.models.base import ToolSpec


class ToolError(Exception):
    """The call was wrong (bad arguments, refused); the model is told and may try again."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know of the run calling it; ``_meta`` carries the task's labels."""

    task_id: str
    run_id: str
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Set when the run must stop (cancel, lost lease); long tools should poll it.
    should_stop: Callable[[], bool] = lambda: False


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[[dict[str, Any], ToolContext], str]

    @property
    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=self.parameters)

    def __call__(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return self.fn(args, ctx)
