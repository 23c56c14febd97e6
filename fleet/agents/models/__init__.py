"""Model adapters behind one port, built from an agent's ``[model]`` config."""

from __future__ import annotations

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
from fleet.config import ModelConfig, Settings

if TYPE_CHECKING:
    from pydantic import SecretStr

    from fleet.agents.models.sdk import Endpoint

__all__ = [
    "ChatMessage",
    "Model",
    "ModelResponse",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "build",
    "provider_of",
]


def build(cfg: ModelConfig, settings: Settings) -> Model:
    """The adapter an agent's model config names."""
    if cfg.provider == "echo":
        from fleet.agents.models.echo import EchoModel

        return EchoModel(cfg.delay_ms)
    if cfg.provider == "anthropic":
        # importable: ModelConfig refuses provider "anthropic" when the extra is not installed
        from fleet.agents.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel

        return AnthropicModel(
            **_endpoint(cfg, settings.anthropic_base_url, settings.anthropic_api_key),
            max_tokens=cfg.max_tokens or DEFAULT_MAX_TOKENS,
        )
    from fleet.agents.models.openai import OpenAIModel

    return OpenAIModel(
        **_endpoint(cfg, settings.openai_base_url, settings.openai_api_key),
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
    )


def _endpoint(cfg: ModelConfig, base_url: str, key: SecretStr | None) -> Endpoint:
    """Where and how an SDK adapter calls its provider: the config's, else the settings' URL."""
    assert cfg.name is not None  # checked by ModelConfig
    return {
        "model": cfg.name,
        "base_url": cfg.base_url or base_url,
        "api_key": key.get_secret_value() if key else None,
        "timeout_s": cfg.timeout,
        "max_retries": cfg.max_retries,
    }
