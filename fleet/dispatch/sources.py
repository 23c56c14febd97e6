"""What a run is built from besides its history, and the tools bound to it.

Memory blocks and conversation notes (``fleet.memory``), semantic recall, working memory and
observations (``fleet.recall``): read when a task is claimed (frozen with its context), bound as
tools when its run starts, and kept up to date after it settles (embedding, observing) by
background jobs off the hot path.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fleet.agents import models as model_adapters
from fleet.agents import prompt, tokens
from fleet.agents.models.base import Model
from fleet.agents.tools import Tool, event_wait, followup, pause
from fleet.config import AgentConfig, FleetConfig, Settings
from fleet.dispatch.followups import StoreFollowups
from fleet.dispatch.waits import StoreWaits
from fleet.domain.values import Task, render_parts
from fleet.memory import render
from fleet.memory import tools as memory_tools
from fleet.memory.binding import StoreMemory
from fleet.store import Store

if TYPE_CHECKING:  # recall (numpy, jsonschema) is imported where an agent uses it
    from fleet.recall import embeddings

log = logging.getLogger(__name__)

#: ``jobs(name, conversation_id)``: run a background job (a Celery task, or a local thread).
Jobs = Callable[[str, uuid.UUID], None]


class RunSources:
    def __init__(
        self,
        store: Store,
        config: FleetConfig,
        settings: Settings,
        clock: Callable[[], datetime],
        embedder: embeddings.Embedder | None = None,
    ) -> None:
        self.store = store
        self.config = config
        self.settings = settings
        self.clock = clock
        self._embedder = embedder
        self._models: dict[str, Model] = {}
        #: The fleet's model limits for the observers' calls (the dispatcher's, as it is now).
        self.traffic: Callable[[], model_adapters.Traffic | None] = lambda: None
        #: Set by the runtime: how background jobs run (None: inline, for tests and tools).
        self.jobs: Jobs | None = None

    # -- at the claim: what the prompt shows ---------------------------------------------------

    def memory(self, agent: AgentConfig, task: Task) -> prompt.Memory | None:
        """What the run's prompt shows of memory: attached blocks, the conversation's notes,
        recall (decided once the recent window is known)."""
        if not (
            agent.memory
            or agent.notes
            or agent.recall
            or agent.working_memory
            or agent.observations
        ):
            return None
        namespace = self.config.deployment(task.deployment).namespace
        record: dict[str, Any] = {"namespace": namespace}
        text = ""
        if agent.memory:
            found = self.store.blocks_named(
                namespace, [a.block for a in agent.memory], tenant=task.tenant
            )
            text, record["blocks"] = render.blocks_text(agent.memory, found)
        notes = None
        if agent.notes:
            listed = self.store.list_notes(task.conversation_id, self.clock())
            notes, record["notes"] = render.notes_message(listed, agent.notes_bytes)
        recall = None
        if agent.recall is not None:
            cfg = agent.recall
            from fleet.recall import search

            def recall(already: frozenset[int]) -> tuple[str | None, dict[str, Any]]:
                found = search.recall(
                    self.store,
                    self.embedder,
                    cfg,
                    task,
                    render_parts(task.input),
                    namespace=namespace,
                    already=already,
                )
                return found.text, found.record

        section = ""
        if agent.working_memory is not None:
            from fleet.recall import working

            key = working.key_of(agent.working_memory, task, namespace)
            section, record["working_memory"] = working.render(
                agent.working_memory, self.store.working_memory(key)
            )
        observed = None
        if agent.observations is not None:
            from fleet.recall import observer

            rows = self.store.observations(task.conversation_id)
            ends = [i for r in rows for i in (r.from_message_id, r.to_message_id)]
            observed, record["observations"] = observer.shown(rows, self.store.message_seqs(ends))
        return prompt.Memory(
            blocks=text,
            notes=notes,
            record=record,
            recall=recall,
            working=section,
            observations=observed,
        )

    # -- at the run's start: tools bound to the run -------------------------------------------

    def tools(
        self,
        agent: AgentConfig,
        task: Task,
        run_id: uuid.UUID,
        authorize: Callable[[str], None],
    ) -> list[Tool]:
        """The tools of this run bound to it: memory (blocks, notes, working memory),
        ``schedule_followup``, ``pause`` and ``wait_for_event``."""
        extra: list[Tool] = []
        if any(ref.tool == followup.NAME for ref in agent.tools):
            extra.append(followup.tool(StoreFollowups(self.store, task, self.clock)))
        waits = StoreWaits(self.store, task, self.clock, approval_timeout_s=agent.approval_timeout)
        for ref in agent.tools:
            if ref.tool == pause.NAME:
                extra.append(pause.tool(waits))
            elif ref.tool == event_wait.NAME:
                extra.append(event_wait.tool(waits, ref.events or (), ref.longest_wait))
        namespace = self.config.deployment(task.deployment).namespace
        wm = agent.working_memory
        if wm is not None and not wm.read_only:
            from fleet.recall import working

            extra.append(
                working.update_tool(
                    wm,
                    self.store,
                    key=working.key_of(wm, task, namespace),
                    schema=working.schema_of(wm, self.config.root),
                    run_id=run_id,
                    clock=self.clock,
                    authorize=authorize,
                )
            )
        if agent.observations is not None and agent.observations.tool:
            from fleet.recall import observer

            extra.append(observer.search_tool(self.store, self.embedder, task.conversation_id))
        if not (agent.memory or agent.notes):
            return extra
        port = StoreMemory(
            self.store,
            tenant=task.tenant,
            namespace=self.config.deployment(task.deployment).namespace,
            conversation_id=task.conversation_id,
            run_id=run_id,
            clock=self.clock,
            authorize=authorize,
        )
        update = memory_tools.block_tool(agent.memory, port)
        extra += [update] if update is not None else []
        if agent.notes:
            extra += memory_tools.note_tools(port)
        return extra

    # -- after the settle: background jobs ------------------------------------------------------

    def settled(self, agent: AgentConfig | None, task: Task) -> None:
        """Ask for the conversation's new messages to be embedded and observed (agents with
        recall or observations), off the hot path."""
        if agent is None or (agent.recall is None and agent.observations is None):
            return
        if self.jobs is None:
            self.memorize(task.conversation_id)
            return
        try:
            self.jobs("fleet.memorize", task.conversation_id)
        except Exception:  # a hint: the next settle of the conversation catches up
            log.warning("could not ask to memorize %s", task.conversation_id, exc_info=True)

    def memorize(self, conversation_id: uuid.UUID) -> dict[str, int]:
        """The ``fleet.memorize`` job: embed the conversation's new messages (recall) and
        observe what its history outgrew (observations)."""
        conv = self.store.conversation_ref(conversation_id)
        dep = self.config.deployments.get(conv[0]) if conv is not None else None
        agent = self.config.agents.get(dep.agent) if dep is not None else None
        done = {"embedded": 0, "observer_calls": 0}
        if dep is None or agent is None:
            return done
        from fleet.recall import indexer, observer

        if agent.recall is not None:
            done["embedded"] = indexer.embed_pending(
                self.store,
                self.embedder,
                conversation_id,
                namespace=dep.namespace,
                now=self.clock(),
            )
        if agent.observations is not None:
            done["observer_calls"] = observer.observe(
                self.store,
                self.observer_model(agent),
                agent.observations,
                conversation_id,
                keep_recent=agent.history.max_items,
                tok=tokens.tokenizer(),
                clock=self.clock,
            )
        return done

    def observer_model(self, agent: AgentConfig) -> Model:
        """The observer's model (the agent's own unless ``[observations] model`` names one)."""
        assert agent.observations is not None
        cfg = agent.observations.model or agent.model
        key = f"{agent.name}:observer"
        if key not in self._models:
            self._models[key] = model_adapters.build(cfg, self.settings, self.traffic())
        return self._models[key]

    @property
    def embedder(self) -> embeddings.Embedder:
        if self._embedder is None:
            self._embedder = build_embedder(self.config)
        return self._embedder


def build_embedder(config: FleetConfig) -> embeddings.Embedder:
    """The embedder ``config/fleet.toml``'s ``[embeddings]`` names (local by default)."""
    from fleet.recall import embeddings

    cfg = config.app.embeddings
    if cfg.provider == "local":
        return embeddings.LocalEmbedder()
    from fleet.config import load_settings

    settings = load_settings()
    key = settings.openai_api_key
    assert cfg.model is not None
    return embeddings.OpenAIEmbedder(
        model=cfg.model,
        base_url=cfg.base_url or settings.openai_base_url,
        api_key=key.get_secret_value() if key else None,
        dimensions=cfg.dimensions,
    )
