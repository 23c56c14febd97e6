"""An agent's ``[model]`` (and its observer's): provider, model name, timeouts, sampling,
fallbacks."""

from __future__ import annotations

import importlib.util
from typing import Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from fleet.config.base import Duration, _Strict


class ModelChoice(_Strict):
    """One model: the agent's own, or one of its ``fallbacks``."""

    #: ``echo`` (offline, deterministic), ``openai`` (any OpenAI-compatible endpoint) or
    #: ``anthropic`` (``pip install 'fleet[anthropic]'``). Each streams its reply's text as it
    #: comes.
    provider: Literal["echo", "openai", "anthropic"] = "echo"
    #: Provider's model name (``gpt-4o-mini``, ``claude-sonnet-4-5``); ignored by echo.
    name: str | None = None
    #: echo only: simulated latency in ms, fixed (``20``) or a random range (``[0, 50]``).
    delay_ms: StrictInt | tuple[StrictInt, StrictInt] = 0
    #: echo only: ms between the words of its streamed reply (``30``: a reply you can watch
    #: being written); 0: no pause.
    stream_ms: StrictInt = 0
    #: Overrides ``FLEET_OPENAI_BASE_URL`` / ``FLEET_ANTHROPIC_BASE_URL``.
    base_url: str | None = None
    #: One attempt's limit: the wait for the reply to begin, and each pause within its stream.
    timeout: Duration = 60.0
    #: Retries of 429, 5xx, 529 and timeouts: by fleet (honouring Retry-After, sharing a
    #: cooldown) when a ``[[model_limits]]`` entry matches the model or it has ``fallbacks``,
    #: else by the provider's SDK.
    max_retries: StrictInt = Field(default=3, ge=0, le=10)
    #: openai only (Anthropic's current API refuses sampling parameters).
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    #: Most tokens one reply may have; unset: the server's default (openai), 4096 (anthropic).
    max_tokens: StrictInt | None = Field(default=None, ge=1, le=1_000_000)

    @field_validator("provider")
    @classmethod
    def _installed(cls, v: str) -> str:
        if v == "anthropic" and importlib.util.find_spec("anthropic") is None:
            raise ValueError(
                "provider 'anthropic' needs the anthropic package, which is not installed: "
                "pip install 'fleet[anthropic]'"
            )
        return v

    @field_validator("delay_ms")
    @classmethod
    def _delay(cls, v: int | tuple[int, int]) -> int | tuple[int, int]:
        low, high = (v, v) if isinstance(v, int) else v
        if low < 0 or high < low:
            raise ValueError(
                "must be a non-negative number of ms or a range [low, high] with low <= high"
            )
        return v

    @field_validator("stream_ms")
    @classmethod
    def _pace(cls, v: int) -> int:
        if v < 0:
            raise ValueError(f"must be a non-negative number of ms between streamed words, got {v}")
        return v

    @property
    def label(self) -> str:
        """``provider:name`` (``openai:gpt-4o-mini``), as model limits and prices match it."""
        return self.provider if self.provider == "echo" else f"{self.provider}:{self.name}"

    @model_validator(mode="after")
    def _named(self) -> ModelChoice:
        if self.provider != "echo" and not self.name:
            example = "claude-sonnet-4-5" if self.provider == "anthropic" else "gpt-4o-mini"
            raise ValueError(
                f"provider {self.provider!r} needs name = '<model name>', e.g. '{example}'"
            )
        if self.provider == "anthropic" and self.temperature is not None:
            raise ValueError(
                "temperature: provider 'anthropic' takes none (its Messages API refuses sampling "
                "parameters since version 2026-10-21); remove it"
            )
        return self


class ModelConfig(ModelChoice):
    """Which model an agent talks to, and which it tries next when that one keeps failing."""

    #: Models tried in order once this one's retries are spent on rate limits, overloads,
    #: server errors or timeouts (never on a request the provider refused as wrong, a 4xx):
    #: ``[{ provider = "anthropic", name = "claude-sonnet-4-5" }]``. Each has its own
    #: ``timeout`` and ``max_retries`` and respects its own model limits and cooldown.
    fallbacks: tuple[ModelChoice, ...] = Field(default=(), max_length=4)

    @property
    def choices(self) -> tuple[ModelChoice, ...]:
        """The model, then its fallbacks."""
        return (self, *self.fallbacks)
