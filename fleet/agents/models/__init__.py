"""Model adapters behind one port, built from an agent's ``[model]`` config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleet.agents.models.base import (
    ChatMessage,
    Model,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
    provider_of,
)
from fleet.config import AppConfig, ModelConfig, Settings
from fleet.config.model import ModelChoice
from fleet.domain.model_limits import Limit, matching

if TYPE_CHECKING:
    from pydantic import SecretStr

    from fleet.agents.capacity import Capacity
    from fleet.agents.models.sdk import Endpoint

__all__ = [
    "ChatMessage",
    "Model",
    "ModelResponse",
    "ToolCall",
    "ToolSpec",
    "Traffic",
    "Usage",
    "build",
    "provider_of",
]


@dataclass(frozen=True)
class Traffic:
    """The fleet's model limits (``[[model_limits]]``), where their places are kept, and the
    models' prices (``[prices]``: ``provider:model`` → input, output per million tokens)."""

    limits: Sequence[Limit] = ()
    #: None: a capacity of its own for each model built (tests).
    capacity: Capacity | None = None
    prices: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, app: AppConfig) -> Traffic:
        """``config/fleet.toml``'s limits and prices, their places kept in this process."""
        from fleet.agents.capacity import LocalCapacity

        return cls(
            tuple(limit.limit() for limit in app.model_limits),
            LocalCapacity(),
            {k: (p.input, p.output) for k, p in app.prices.items()},
        )


def build(cfg: ModelConfig, settings: Settings, traffic: Traffic | None = None) -> Model:
    """The model an agent's model config names: its adapter, or, when a model limit matches it
    or it has fallbacks, a managed model over it and its fallbacks (fleet's retries)."""
    limits = tuple(traffic.limits) if traffic is not None else ()
    choices = cfg.choices
    if not cfg.fallbacks and not any(matching(limits, c.label) for c in choices):
        return _adapter(cfg, settings)
    from fleet.agents.capacity import LocalCapacity
    from fleet.agents.models.traffic import Candidate, ManagedModel

    capacity = traffic.capacity if traffic is not None else None
    return ManagedModel(
        [
            Candidate(
                _adapter(c, settings, sdk_retries=False),
                matching(limits, c.label),
                c.max_retries,
                c.timeout,
            )
            for c in choices
        ],
        capacity or LocalCapacity(),
    )


def _adapter(cfg: ModelChoice, settings: Settings, *, sdk_retries: bool = True) -> Model:
    """The adapter of one model; ``sdk_retries`` False: one attempt per call (fleet retries)."""
    if cfg.provider == "echo":
        from fleet.agents.models.echo import EchoModel

        return EchoModel(cfg.delay_ms, stream_ms=cfg.stream_ms)
    if cfg.provider == "anthropic":
        # importable: ModelConfig refuses provider "anthropic" when the extra is not installed
        from fleet.agents.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel

        return AnthropicModel(
            **_endpoint(cfg, settings.anthropic_base_url, settings.anthropic_api_key, sdk_retries),
            max_tokens=cfg.max_tokens or DEFAULT_MAX_TOKENS,
        )
    from fleet.agents.models.openai import OpenAIModel

    return OpenAIModel(
        **_endpoint(cfg, settings.openai_base_url, settings.openai_api_key, sdk_retries),
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
    )


def _endpoint(
    cfg: ModelChoice, base_url: str, key: SecretStr | None, sdk_retries: bool
) -> Endpoint:
    """Where and how an SDK adapter calls its provider: the config's, else the settings' URL."""
    assert cfg.name is not None  # checked by ModelConfig
    return {
        "model": cfg.name,
        "base_url": cfg.base_url or base_url,
        "api_key": key.get_secret_value() if key else None,
        "timeout_s": cfg.timeout,
        "max_retries": cfg.max_retries if sdk_retries else 0,
    }
