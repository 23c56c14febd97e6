"""The secrets config/ names (environment variables it reads), and which values it refuses.

Every one of them is redacted from stored text, which only works for values of at least
``MIN_SECRET_CHARS`` characters (redacting shorter strings everywhere would ruin ordinary
text): a shorter one is refused, in ``fleet check`` and at start, naming the file and the key.
An unset one fails ``fleet check``, except a trigger's signing secret: until it is set the trigger
accepts nothing (503), so the check warns, naming what to set, and passes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleet.domain.redaction import MIN_SECRET_CHARS
from fleet.errors import ConfigError

if TYPE_CHECKING:
    from fleet.config.loading import FleetConfig


@dataclass(frozen=True, slots=True)
class Secret:
    """One environment variable config names as holding a secret."""

    #: The config file that names it.
    file: str
    #: Its key in that file (``signature.secret_env``, ``reply.headers.Authorization``).
    key: str
    #: The environment variable.
    env: str
    #: What its value is, for messages.
    holds: str
    #: An MCP server's (an unset one is reported with the server's label instead).
    mcp: bool = False
    #: What holds while it is unset, when that loses nothing (a trigger that accepts nothing
    #: yet): ``fleet check`` then warns instead of failing.
    until_set: str | None = None


def values(config: FleetConfig, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Values of the environment variables config names as secrets (MCP headers and variables,
    webhook signing secrets, caller keys, reply headers): redaction removes them everywhere."""
    env = os.environ if environ is None else environ
    return tuple(v for v in (env.get(s.env) for s in named(config)) if v)


def named(config: FleetConfig) -> list[Secret]:
    """Every secret config names: MCP servers' variables and headers, webhook signing secrets,
    caller keys and ``[reply]`` headers."""
    root = config.root
    found: list[Secret] = []
    for name, agent in sorted(config.agents.items()):
        file = str(root / "agents" / f"{name}.toml")
        for i, server in enumerate(agent.mcp_servers):
            found += [
                Secret(file, f"mcp_servers.{i}.headers_env.{h}", env, "a header's value", mcp=True)
                for h, env in server.headers_env.items()
            ]
            found += [
                Secret(file, f"mcp_servers.{i}.env_from.{v}", env, "a variable's value", mcp=True)
                for v, env in server.env_from.items()
            ]
    for name, trigger in sorted(config.triggers.items()):
        if trigger.signature is not None:
            file = str(root / "triggers" / f"{name}.toml")
            env, holds = trigger.signature.secret_env, "the secret its sender signs with"
            until = "until then the trigger answers 503 and accepts nothing"
            found.append(Secret(file, "signature.secret_env", env, holds, until_set=until))
    for name, caller in sorted(config.callers.items()):
        if caller.key_env:
            file = str(root / "callers" / f"{name}.toml")
            found.append(Secret(file, "key_env", caller.key_env, "the caller's API key"))
    replies = [("deployments", n, d.reply) for n, d in sorted(config.deployments.items())]
    replies += [("triggers", n, t.reply) for n, t in sorted(config.triggers.items())]
    for section, name, reply in replies:
        if reply is not None:
            file = str(root / section / f"{name}.toml")
            found += [
                Secret(file, f"reply.headers.{h}", env, "the header's value")
                for h, env in reply.env_names().items()
            ]
    return found


def unset(config: FleetConfig, environ: Mapping[str, str] | None = None) -> list[ConfigError]:
    """Each secret whose variable is unset or empty and that nothing can do without (MCP
    servers' aside: see ``McpServerConfig.missing_secrets``; triggers': see ``awaited``)."""
    env = os.environ if environ is None else environ
    return [
        ConfigError(s.file, s.key, f"environment variable {s.env} is not set (it holds {s.holds})")
        for s in named(config)
        if not s.mcp and s.until_set is None and not env.get(s.env)
    ]


def awaited(config: FleetConfig, environ: Mapping[str, str] | None = None) -> list[ConfigError]:
    """Each unset secret whose absence loses nothing yet (a trigger's signing secret: the
    trigger refuses every delivery until it is set): what to set, for a warning."""
    env = os.environ if environ is None else environ
    return [
        ConfigError(
            s.file,
            s.key,
            f"environment variable {s.env} is not set: set it to {s.holds}; {s.until_set}",
        )
        for s in named(config)
        if s.until_set is not None and not env.get(s.env)
    ]


def too_short(config: FleetConfig, environ: Mapping[str, str] | None = None) -> list[ConfigError]:
    """Each secret whose value is too short to be redacted (the value is never shown)."""
    env = os.environ if environ is None else environ
    return [
        ConfigError(
            s.file,
            s.key,
            f"environment variable {s.env} holds fewer than {MIN_SECRET_CHARS} characters; "
            "give a longer secret (a shorter one could not be redacted from what fleet stores)",
        )
        for s in named(config)
        if (value := env.get(s.env)) and len(value) < MIN_SECRET_CHARS
    ]
