"""An agent's memory sub-configs: attached blocks, ``[recall]``, ``[working_memory]`` and
``[observations]``."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, StrictBool, StrictInt, field_validator, model_validator

from fleet.config.base import _matching, _Strict
from fleet.config.model import ModelConfig

_BLOCK = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


class MemoryAttachment(_Strict):
    """A memory block an agent sees, and what it may do with it."""

    #: The block's name: 1-100 lowercase letters, digits, ``.``, ``_`` or ``-``.
    block: Annotated[
        str, _matching(_BLOCK, "must be 1-100 lowercase letters, digits, '.', '_' or '-'")
    ]
    #: ``read``: in the prompt only; ``append``: may add to it; ``write``: may also replace it
    #: or edit it in place (the ``memory_update`` tool).
    mode: Literal["read", "append", "write"] = "read"
    #: The heading it gets in the prompt (default: the block's title, else its name).
    label: str | None = None


class RecallConfig(_Strict):
    """``[recall]``: semantic recall of older messages by similarity to the input."""

    #: How many hits at most (before each is expanded by its neighbours).
    top_k: StrictInt = Field(default=5, ge=1, le=50)
    #: The least cosine similarity a hit needs (-1 to 1).
    threshold: float = Field(default=0.2, ge=-1.0, le=1.0)
    #: Messages before and after each hit shown with it.
    message_range: StrictInt = Field(default=1, ge=0, le=10)
    #: ``conversation``: this conversation's older messages; ``resource``: also the other
    #: conversations of the submission's ``resourceId`` (same scope and memory namespace).
    scope: Literal["conversation", "resource"] = "conversation"
    #: Conditions on role, created_at and labels.<name>: ``{ role = { eq = "user" } }``; the
    #: operators eq ne gt gte lt lte in nin.
    filter: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: The newest messages searched (bounded, so a search costs the same as history grows).
    max_candidates: StrictInt = Field(default=10_000, ge=1, le=100_000)

    @field_validator("filter")
    @classmethod
    def _filter(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        from fleet.domain.recall import check_filter

        check_filter(v)
        return v


class WorkingMemoryConfig(_Strict):
    """``[working_memory]``: structured state the agent keeps and updates through a tool."""

    #: ``conversation``: one state per conversation; ``resource``: one per ``resourceId``,
    #: shared by its conversations.
    scope: Literal["conversation", "resource"] = "conversation"
    #: A JSON Schema the state must satisfy (inline), or ``schema_file`` (relative to config/).
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    #: A file holding that JSON Schema, relative to the config folder.
    schema_file: str | None = None
    #: Free-form: a text template the agent fills in (instead of a JSON schema).
    template: str | None = None
    #: Shown to the agent, but no update tool.
    read_only: StrictBool = False

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _one_shape(self) -> WorkingMemoryConfig:
        given = [k for k in ("schema_", "schema_file", "template") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError("give at most one of schema, schema_file and template")
        if self.schema_ is not None:
            from jsonschema import Draft202012Validator
            from jsonschema.exceptions import SchemaError

            try:
                Draft202012Validator.check_schema(self.schema_)
            except SchemaError as exc:
                raise ValueError(f"schema is not a valid JSON Schema: {exc.message}") from None
        return self


class ObservationsConfig(_Strict):
    """``[observations]``: older history distilled by a model into observations."""

    #: Once the unobserved history outgrows this many tokens, its oldest part is observed.
    token_threshold: StrictInt = Field(default=4_000, ge=200, le=1_000_000)
    #: Once the observations outgrow this many tokens, they are condensed (reflected).
    reflect_threshold: StrictInt = Field(default=8_000, ge=200, le=1_000_000)
    #: The observer's (and reflector's) model; default: the agent's own.
    model: ModelConfig | None = None
    #: Offer the ``recall_observations`` tool (search the observations).
    tool: StrictBool = False

    @field_validator("model", mode="before")
    @classmethod
    def _model_shorthand(cls, v: Any) -> Any:
        return {"provider": v} if isinstance(v, str) else v
