"""``config/agents/*.toml``: instructions, model, tools, MCP servers, memory and limits.

The sub-configs live by topic: ``model`` (``[model]``), ``tools`` (``tools``,
``[[mcp_servers]]``) and ``memory`` (blocks, ``[recall]``, ``[working_memory]``,
``[observations]``); this module puts them together and re-exports them. ``[limits]`` of
``fleet.toml`` (``LimitDefaults``) gives the same limit fields their app-wide defaults.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, StrictBool, StrictInt, field_validator

from fleet.config.base import (
    HistoryBytes,
    HistoryItems,
    InputBytes,
    NotesBytes,
    PositiveDuration,
    Retention,
    Steps,
    StoredMessages,
    _limit,
    _Strict,
)
from fleet.config.memory import (
    MemoryAttachment,
    ObservationsConfig,
    RecallConfig,
    WorkingMemoryConfig,
)
from fleet.config.model import ModelConfig
from fleet.config.tools import McpServerConfig, ToolRef
from fleet.constants import DEFAULT_TOOL_TIMEOUT_S, LIMITS, MAX_CONTEXT_TOKENS, MIN_CONTEXT_TOKENS
from fleet.domain.waits import DEFAULT_APPROVAL_TIMEOUT_S, DEFAULT_DELEGATE_TIMEOUT_S


class HistoryConfig(_Strict):
    """How much of a conversation's past a run's context may hold."""

    max_items: HistoryItems = _limit("max_history_items")
    max_bytes: HistoryBytes = _limit("max_history_bytes")


class AgentConfig(_Strict):
    """Instructions + model + tools + memory settings."""

    name: str
    #: The system message every run of the agent starts with.
    instructions: str = ""
    #: The model: a provider's name (``model = "echo"``) or a ``[model]`` table.
    model: ModelConfig = ModelConfig()
    #: Built-ins (``current_time``, ``wait``) and Python functions (``package.module:function``),
    #: each a name or a table with options (``{ tool = "…", timeout = "10s" }``).
    tools: tuple[ToolRef, ...] = ()
    #: Seconds a tool call may take unless the tool says otherwise.
    tool_timeout: PositiveDuration = DEFAULT_TOOL_TIMEOUT_S
    #: How long a tool call waits for a person's approval (``approval = "required"``) before
    #: it is refused as ``expired`` and the run goes on.
    approval_timeout: PositiveDuration = DEFAULT_APPROVAL_TIMEOUT_S
    #: How long ``call_agent`` waits for the delegated task (its caller holds no worker
    #: meanwhile) before the delegate is cancelled and the model told.
    delegate_timeout: PositiveDuration = DEFAULT_DELEGATE_TIMEOUT_S
    max_steps: Steps = _limit("max_steps")
    max_input_bytes: InputBytes = _limit("max_input_bytes")
    history: HistoryConfig = HistoryConfig()
    #: Memory blocks of the deployment's namespace this agent sees (and may update).
    memory: tuple[MemoryAttachment, ...] = ()
    #: Conversation notes: the memory_list/get/set/remove tools and notes in the prompt.
    notes: StrictBool = False
    notes_bytes: NotesBytes = _limit("notes_bytes")
    #: How long a conversation of this agent keeps its messages.
    retention: Retention = LIMITS["retention_days"].default * 86400.0
    stored_messages: StoredMessages = _limit("stored_messages")
    #: Semantic recall, working memory and observations (none unless configured).
    recall: RecallConfig | None = None
    working_memory: WorkingMemoryConfig | None = None
    observations: ObservationsConfig | None = None
    #: Tokens the prompt may hold (instructions, history, input; then, inside a run, what it
    #: sends each step). Unset: only the history's item and byte limits apply.
    context_tokens: StrictInt | None = Field(
        default=None, ge=MIN_CONTEXT_TOKENS, le=MAX_CONTEXT_TOKENS
    )
    #: MCP servers whose tools the agent gets, namespaced ``server.tool``.
    mcp_servers: tuple[McpServerConfig, ...] = ()
    #: Deployments this agent may hand work to (``call_agent``, ``start_agent``); none: no tools.
    delegates: tuple[str, ...] = ()

    @field_validator("mcp_servers")
    @classmethod
    def _distinct_servers(cls, v: tuple[McpServerConfig, ...]) -> tuple[McpServerConfig, ...]:
        seen: set[str] = set()
        for server in v:
            if server.name in seen:
                raise ValueError(f"two servers are named {server.name!r}; names must differ")
            seen.add(server.name)
        return v

    @field_validator("model", mode="before")
    @classmethod
    def _model_shorthand(cls, v: Any) -> Any:
        return {"provider": v} if isinstance(v, str) else v

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_shorthand(cls, v: Any) -> Any:
        if isinstance(v, list | tuple):
            return [{"tool": item} if isinstance(item, str) else item for item in v]
        return v


class HistoryDefaults(_Strict):
    """``[limits.history]``: the history limits every agent gets unless it sets its own."""

    #: Default of the agents' ``history.max_items``.
    max_items: HistoryItems | None = None
    #: Default of the agents' ``history.max_bytes``.
    max_bytes: HistoryBytes | None = None


class LimitDefaults(_Strict):
    """``[limits]`` of ``config/fleet.toml``: app-wide values an agent file may override."""

    history: HistoryDefaults = HistoryDefaults()
    #: Default of the agents' ``max_input_bytes``.
    max_input_bytes: InputBytes | None = None
    #: Default of the agents' ``max_steps``.
    max_steps: Steps | None = None
    #: Default of the agents' ``notes_bytes``.
    notes_bytes: NotesBytes | None = None
    #: Default of the agents' ``retention``.
    retention: Retention | None = None
    #: Default of the agents' ``stored_messages``.
    stored_messages: StoredMessages | None = None


__all__ = [
    "AgentConfig",
    "HistoryConfig",
    "McpServerConfig",
    "MemoryAttachment",
    "ModelConfig",
    "ObservationsConfig",
    "RecallConfig",
    "ToolRef",
    "WorkingMemoryConfig",
]
