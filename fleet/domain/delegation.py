"""Delegation rules: which agent may hand work to which, how deep, and what comes back (pure).

A run delegates with ``call_agent`` (waits for the result within its step) or ``start_agent``
(returns at once; the result comes back later as a task in the caller's conversation). A
delegated task runs in a new conversation of the target deployment, scoped ``agent:<caller>``;
it carries its *chain*, the conversations of the runs that delegated to it (root first), so its
depth (the chain's length) is bounded, and a waiting call into a conversation that is already
waiting up the chain (a singleton calling itself, directly or round a loop) is refused instead
of deadlocking. A started task's result carries the chain too, so a ``start_agent`` ping-pong
between two agents grows it by one a round and ends at the same limit (``round_trips``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from fleet.domain.keys import SINGLETON_KEY, SINGLETON_SCOPE, DeploymentKind

#: ``call``: the caller waits (call_agent); ``start``: it does not, the result is reported back
#: (start_agent); ``result``: the task that reports a started task's result to its caller.
DelegationMode = Literal["call", "start", "result"]

#: Idempotency keys of delegated submissions start with this (a settle looks up the delegation
#: record of a task only when its key does, so other tasks cost nothing).
KEY_PREFIX = "delegate:"
#: The scope prefix of delegated tasks and of the results reported back: ``agent:<deployment>``.
SCOPE_PREFIX = "agent:"
#: Most characters of a delegated task's reply or error quoted back to the caller.
MAX_QUOTED_CHARS = 16_000


class Refused(Exception):
    """The delegation is not allowed; the message says why and what to do (the model sees it)."""

    @property
    def message(self) -> str:
        return str(self.args[0])


def conversation_ref(deployment: str, scope: str, key: str) -> str:
    """A conversation's identity as a chain entry: ``deployment/scope:key``."""
    return f"{deployment}/{scope}:{key}"


def scope_of(deployment: str) -> str:
    """The scope of a task delegated by (or reported back from) ``deployment``."""
    return f"{SCOPE_PREFIX}{deployment}"


def call_key(task_id: str, call_id: str) -> str:
    """The idempotency key of the task one tool call delegates: the same call, also when a
    retried run calls it again, admits one task."""
    return f"{KEY_PREFIX}{task_id}:{call_id}"


def result_key(delegated_task_id: str) -> str:
    """The idempotency key of the task that reports a started task's result back (once)."""
    return f"{KEY_PREFIX}result:{delegated_task_id}"


def is_delegation_key(key: str | None) -> bool:
    return key is not None and key.startswith(KEY_PREFIX)


@dataclass(frozen=True, slots=True)
class Caller:
    """The run that delegates: its deployment, its conversation and the chain it runs in."""

    deployment: str
    scope: str
    key: str
    #: Conversations of the runs that delegated to this one, root first (empty: not delegated).
    chain: tuple[str, ...] = ()

    @property
    def depth(self) -> int:
        return len(self.chain)

    @property
    def conversation(self) -> str:
        return conversation_ref(self.deployment, self.scope, self.key)


def check(
    caller: Caller,
    target: str,
    *,
    delegates: Sequence[str],
    kinds: Mapping[str, DeploymentKind],
    max_depth: int,
    wait: bool,
) -> tuple[str, ...]:
    """The chain of the task ``caller`` may delegate to deployment ``target``; raises Refused.

    Refused: a target the agent's ``delegates`` does not name (or that is not configured), a
    chain deeper than ``max_depth``, and a waiting call into a conversation that is itself
    waiting in the chain (only a singleton's one conversation can be: every other delegated
    task gets a new conversation).
    """
    allowed = ", ".join(delegates) or "none"
    if target not in delegates:
        raise Refused(
            f"deployment {target!r} is not one this agent may delegate to (delegates: {allowed})"
        )
    if target not in kinds:
        raise Refused(f"deployment {target!r} is not configured (delegates: {allowed})")
    chain = (*caller.chain, caller.conversation)
    if len(chain) > max_depth:
        raise Refused(depth_refusal(caller, max_depth))
    if wait and kinds[target] == "singleton":
        own = conversation_ref(target, SINGLETON_SCOPE, SINGLETON_KEY)
        if own in chain:
            whose = "this task's own" if own == caller.conversation else "a caller's"
            raise Refused(
                f"call_agent to {target!r} would wait on {whose} conversation, which is waiting "
                "for this call (a deadlock); use start_agent, or answer here"
            )
    return chain


def round_trips(caller: Caller) -> int:
    """How many hops in a row came back into the caller's own conversation.

    A started task's result is admitted into its caller's conversation with the chain of the
    task it reports, which ends with that very conversation; so in a ``start_agent`` ping-pong
    (A starts B, B's result comes back to A, A starts B again …) every round adds the
    conversation once more at the chain's end, and the depth limit ends the game after
    ``FLEET_MAX_DELEGATION_DEPTH`` rounds.
    """
    trips = 0
    for ref in reversed(caller.chain):
        if ref != caller.conversation:
            break
        trips += 1
    return trips


def depth_refusal(caller: Caller, max_depth: int) -> str:
    """Why a caller at the depth limit may not delegate, naming the limit (round trips of
    ``start_agent`` results count, and are named as such)."""
    limit = f"FLEET_MAX_DELEGATION_DEPTH = {max_depth}"
    trips = round_trips(caller)
    if trips == 0:
        return (
            f"delegation depth limit reached: this task is already {caller.depth} delegation(s) "
            f"deep ({limit}); do the work here instead"
        )
    return (
        f"delegation limit reached: this conversation already started {trips} task(s) in a row "
        f"from the results of tasks it started (each round trip counts as a delegation: "
        f"{caller.depth} of {limit}); answer with the results you have instead of starting "
        "another"
    )


@dataclass(frozen=True, slots=True)
class ReportTo:
    """Where a started task's result goes: the caller's conversation, labels and caller."""

    deployment: str
    scope: str
    key: str
    labels: Mapping[str, str] = field(default_factory=dict)
    caller: str | None = None
    #: The caller's conversation (its id) and generation when it started the task: a result
    #: goes to that conversation as it was, never to a reset or recreated one.
    conversation_id: str = ""
    generation: int | None = None


def report_fate(to: ReportTo, now: tuple[str, int] | None) -> Literal["admit", "drop"]:
    """Admit a started task's result into its caller's conversation, or drop it (logged) when
    that conversation, ``now`` its (id, generation) or None, was deleted or reset since."""
    if now is None:
        return "drop"
    if to.conversation_id and now[0] != to.conversation_id:
        return "drop"  # deleted, and the key started a new conversation
    if to.generation is not None and now[1] != to.generation:
        return "drop"
    return "admit"


@dataclass(frozen=True, slots=True)
class Record:
    """What the store keeps of a delegated task (or of a result reported back)."""

    mode: DelegationMode
    #: The conversations of the runs that delegated, root first (its depth is the length).
    chain: tuple[str, ...]
    parent_task_id: str | None = None
    report_to: ReportTo | None = None
    reported: bool = False


@dataclass(frozen=True, slots=True)
class Delegated:
    """The task a delegation admitted (or found again: the same tool call, retried)."""

    task_id: str
    deployment: str
    #: Its conversation key with scope (``agent:triage:…``).
    conversation: str


@dataclass(frozen=True, slots=True)
class Finished:
    """What a delegated task ended with, as the caller is told."""

    task_id: str
    deployment: str
    status: str
    reply: str | None = None
    error: str | None = None

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded" or (self.status == "superseded" and bool(self.reply))


def _clip(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"… ({len(text) - limit} more characters)"


def call_result(done: Finished) -> str:
    """The tool result ``call_agent`` gives the model: the reply, or why there is none."""
    if done.succeeded:
        return _clip(done.reply or "")
    return (
        f"error: the task {done.task_id} on {done.deployment!r} {done.status}: "
        f"{_clip(done.error or 'no reason given')}"
    )


def result_input(done: Finished, max_bytes: int) -> str:
    """The input of the task that reports a started task's result to its caller (quoting at
    most what fits in ``max_bytes``, the caller's ``max_input_bytes``)."""
    head = f"[fleet] The task you started on {done.deployment!r} (start_agent, task {done.task_id})"
    if done.succeeded:
        head, body = f"{head} finished. Its reply:\n", done.reply or ""
    else:
        head, body = f"{head} {done.status}: ", done.error or "no reason given"
    room = max(0, max_bytes - len(head.encode()) - 64)  # (64: the note that it was cut)
    raw = body.encode()
    if len(raw) > room:
        kept = raw[:room].decode(errors="ignore")
        body = f"{kept}… ({len(body) - len(kept)} more characters)"
    return head + body


def started_result(task_id: str, deployment: str, conversation: str) -> str:
    """The tool result ``start_agent`` gives at once."""
    return (
        f"started task {task_id} on {deployment!r} (conversation {conversation}); its result "
        "will arrive in this conversation as a new message when it ends"
    )
