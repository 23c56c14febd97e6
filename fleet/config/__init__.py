"""Settings from ``FLEET_*`` environment variables and the agents/deployments in ``config/``.

Every failure names the file (or ``environment``), the key and the reason, so a bad value is fixed
where it is written. ``settings`` holds the environment, ``agents`` (with its ``model``, ``tools``
and ``memory``) and ``intake`` the models of the files in ``config/``, ``loading`` reads and
cross-checks them, ``base`` what they share.
"""

from fleet.config.agents import AgentConfig, HistoryConfig, LimitDefaults
from fleet.config.base import MAX_DURATION_S, Duration, parse_duration
from fleet.config.intake import (
    CallerConfig,
    ConversationsConfig,
    DeploymentConfig,
    FieldRef,
    SignatureConfig,
    TriggerConfig,
)
from fleet.config.loading import (
    AppConfig,
    EmbeddingsConfig,
    FleetConfig,
    load_config,
)
from fleet.config.memory import (
    MemoryAttachment,
    ObservationsConfig,
    RecallConfig,
    WorkingMemoryConfig,
)
from fleet.config.model import ModelConfig
from fleet.config.settings import Settings, load_settings, short_ui_secret
from fleet.config.tools import McpServerConfig, ToolRef

__all__ = [
    "MAX_DURATION_S",
    "AgentConfig",
    "AppConfig",
    "CallerConfig",
    "ConversationsConfig",
    "DeploymentConfig",
    "Duration",
    "EmbeddingsConfig",
    "FieldRef",
    "FleetConfig",
    "HistoryConfig",
    "LimitDefaults",
    "McpServerConfig",
    "MemoryAttachment",
    "ModelConfig",
    "ObservationsConfig",
    "RecallConfig",
    "Settings",
    "SignatureConfig",
    "ToolRef",
    "TriggerConfig",
    "WorkingMemoryConfig",
    "load_config",
    "load_settings",
    "parse_duration",
    "short_ui_secret",
]
