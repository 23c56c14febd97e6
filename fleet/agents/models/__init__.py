"""Model adapters behind one port, built from an agent's ``[model]`` config."""

from __future__ import annotations

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
    assert cfg.name is not None  # checked by ModelConfig
    if cfg.provider == "anthropic":
        # importable: ModelConfig refuses provider "anthropic" when the extra is not installed
        from fleet.agents.models.anthropic import DEFAULT_MAX_TOKENS, AnthropicModel

        key = settings.anthropic_api_key
        return AnthropicModel(
            model=cfg.name,
            base_url=cfg.base_url or settings.anthropic_base_url,
            api_key=key.get_secret_value() if key else None,
            timeout_s=cfg.timeout,
            max_retries=cfg.max_retries,
            max_tokens=cfg.max_tokens or DEFAULT_MAX_TOKENS,
        )
    from fleet.agents.models.openai import OpenAIModel

    key = settings.openai_api_key
    return OpenAIModel(
        model=cfg.name,
        base_url=cfg.base_url or settings.openai_base_url,
        api_key=key.get_secret_value() if key else None,
        timeout_s=cfg.timeout,
        max_retries=cfg.max_retries,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
    )
