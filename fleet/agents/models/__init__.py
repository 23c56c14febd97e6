"""Model adapters behind one port, built from an agent's ``[model]`` config."""

from __future__ import annotations

from fleet.agents.models.base import (
    ChatMessage,
    Model,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
)
from fleet.config import ModelConfig, Settings

__all__ = ["ChatMessage", "Model", "ModelResponse", "ToolCall", "ToolSpec", "Usage", "build"]


def build(cfg: ModelConfig, settings: Settings) -> Model:
    """The adapter an agent's model config names."""
    if cfg.provider == "echo":
        from fleet.agents.models.echo import EchoModel

        return EchoModel(cfg.delay_ms)
    from fleet.agents.models.openai import OpenAIModel

    key = settings.openai_api_key
    assert cfg.name is not None  # checked by ModelConfig
    return OpenAIModel(
        model=cfg.name,
        base_url=cfg.base_url or settings.openai_base_url,
        api_key=key.get_secret_value() if key else None,
        timeout_s=cfg.timeout,
        max_retries=cfg.max_retries,
        temperature=cfg.temperature,
    )
