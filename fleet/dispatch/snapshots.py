"""Runs keep the agent configuration they started with (``fleet.domain.snapshots``).

A new run's frozen context names its agent and the fingerprint of the agent's configuration;
the first run of each configuration in a process keeps its text in the store (with its Python
tools' specs). When a run takes its next step after that configuration changed (it waited, it
was handed back, a process of another release resumed it), it runs with the kept text: the same
instructions, model, tools and limits. A tool it can no longer load fails only a run that calls
it. A context from a release before this (no fingerprint), or a configuration this process
cannot read (a newer release's), runs with the agent as now configured.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from fleet.config import AgentConfig
from fleet.domain.snapshots import fingerprint, settled

log = logging.getLogger("fleet.dispatch.manager")

#: The key of a frozen context that names its agent's configuration.
CONTEXT_KEY = "agent"


class KeptConfigs(Protocol):
    """What of the store this needs."""

    def keep_agent_config(
        self, fingerprint: str, agent: str, config: dict[str, Any], now: datetime
    ) -> None: ...

    def agent_config(self, fingerprint: str) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class Resolved:
    """The agent a run takes its steps with."""

    agent: AgentConfig
    fingerprint: str
    #: Its Python tools' specs when it is a kept configuration other than the current one (a
    #: tool it cannot load is then offered as it was and fails the run that calls it).
    kept_tools: tuple[Mapping[str, Any], ...] | None = None


class Snapshots:
    """Fingerprints, keeps and reads back agent configurations for one process."""

    def __init__(self, store: KeptConfigs, clock: Callable[[], datetime]) -> None:
        self.store = store
        self.clock = clock
        self._fingerprints: dict[int, tuple[AgentConfig, str]] = {}
        self._kept: set[str] = set()
        self._read: dict[str, Resolved | None] = {}
        self._lock = threading.Lock()

    def fingerprint(self, agent: AgentConfig) -> str:
        """The fingerprint of ``agent`` (worked out once per config object)."""
        found = self._fingerprints.get(id(agent))
        if found is None or found[0] is not agent:
            found = (agent, fingerprint(agent.model_dump(mode="json")))
            self._fingerprints[id(agent)] = found
        return found[1]

    def name(self, context: dict[str, Any], agent: AgentConfig) -> None:
        """Name ``agent``'s configuration in a new frozen context."""
        context[CONTEXT_KEY] = {"name": agent.name, "config": self.fingerprint(agent)}

    def resolve(self, context: Mapping[str, Any], current: AgentConfig) -> Resolved:
        """The agent a run with frozen ``context`` runs with: the configuration it started with
        when that is not ``current`` and is kept, else ``current``."""
        now = self.fingerprint(current)
        named = context.get(CONTEXT_KEY)
        started = named.get("config") if isinstance(named, Mapping) else None
        if not isinstance(started, str) or started == now:
            return Resolved(current, now)
        kept = self._kept_config(started)
        return kept if kept is not None else Resolved(current, now)

    def keep(self, resolved: Resolved, tools: Callable[[], list[dict[str, Any]]]) -> None:
        """Keep the configuration of a run's agent, once per process (``tools``: its Python
        tools' specs). A failure is logged: a later resume then runs with the config of then."""
        fp = resolved.fingerprint
        if fp in self._kept or resolved.kept_tools is not None:  # every run after the first
            return
        with self._lock:  # hundreds of runs may start at once: the first one keeps it
            if fp in self._kept or resolved.kept_tools is not None:
                return
            self._kept.add(fp)
        # (settled: a release before this one reads it unless it uses settings new to this one)
        record = {"agent": settled(resolved.agent.model_dump(mode="json")), "tools": tools()}
        try:
            self.store.keep_agent_config(fp, resolved.agent.name, record, self.clock())
        except Exception as exc:
            name = resolved.agent.name
            log.warning("could not keep the configuration of agent %s: %s", name, exc)
            with self._lock:
                self._kept.discard(fp)  # the next run tries again

    def _kept_config(self, fp: str) -> Resolved | None:
        with self._lock:
            if fp in self._read:
                return self._read[fp]
            try:
                record = self.store.agent_config(fp)
            except Exception as exc:  # read again by the run's next attempt
                log.warning("could not read agent configuration %s: %s", fp, exc)
                return None
            resolved = None if record is None else _parsed(fp, record)
            self._read[fp] = resolved
            return resolved


def _parsed(fp: str, record: Mapping[str, Any]) -> Resolved | None:
    dump = record.get("agent")
    try:
        agent = AgentConfig.model_validate(dump)
    except ValidationError as exc:  # a newer release's settings: this one cannot run them
        log.warning(
            "agent configuration %s is not one this release reads (%s): its runs take their "
            "next steps with the agent as configured now",
            fp,
            exc.errors()[0].get("msg", exc),
        )
        return None
    tools = tuple(t for t in record.get("tools") or () if isinstance(t, Mapping))
    return Resolved(agent, fp, kept_tools=tools)
