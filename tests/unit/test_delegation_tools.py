"""call_agent and start_agent against a scripted port, and embedded mode end to end (SQLite,
one thread: the waiting call runs the delegated task itself)."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from fleet.agents.tools import executor
from fleet.agents.tools.base import ToolContext
from fleet.agents.tools.delegation import tools
from fleet.config import Settings
from fleet.dispatch.embedded import run_until_done
from fleet.domain.delegation import Delegated, Finished, Refused, Signalled
from fleet.domain.values import Task, TaskStatus
from fleet.runtime import build
from fleet.store import TaskFilter
from tests.conftest import write_config
from tests.support.fleet import wait_for


@dataclass
class ScriptedPort:
    """Delegates to nothing: ``polls`` answers None that many times, then ``ends``."""

    delegates: Sequence[str] = ("helper",)
    polls: int = 0
    ends: Finished | None = None
    refuse: str | None = None
    running: bool = True
    calls: list[tuple[str, str, str, bool]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    signals: list[tuple[str, str, str]] = field(default_factory=list)
    #: False: call_agent waits in place (embedded); True: it parks the run.
    parks: bool = False
    timeout_s: float = 60.0
    #: What ``waited`` says of the call's earlier wait (``expired``, ``done``) or None.
    wait_ended: str | None = None

    def waited(self, call_id: str) -> str | None:
        return self.wait_ended

    def delegate(self, deployment: str, input: str, *, call_id: str, wait: bool) -> Delegated:
        if self.refuse:
            raise Refused(self.refuse)
        self.calls.append((deployment, input, call_id, wait))
        return Delegated("t1", deployment, "agent:lead:x")

    def poll(self, task_id: str) -> Finished | None:
        if self.polls > 0:
            self.polls -= 1
            return None
        return self.ends

    def cancel(self, task_id: str) -> None:
        self.cancelled.append(task_id)

    def signal(self, task_id: str, message: str, *, call_id: str) -> Signalled:
        if self.refuse:
            raise Refused(self.refuse)
        self.signals.append((task_id, message, call_id))
        status = "running" if self.running else "succeeded"
        return Signalled(task_id, "helper", status, delivered=self.running)


def call(
    port: ScriptedPort, name: str, args: dict, *, timeout_s: float = 5.0, ctx=None, watch=None
):
    tool = {t.name: t for t in tools(port, port.delegates)}[name]
    ctx = ctx or ToolContext(task_id="p", run_id="r", call_id="call_1")
    return executor.call(tool, args, ctx, timeout_s=timeout_s, watch=watch or (lambda: False))


def test_call_agent_waits_for_the_result_keyed_by_the_call() -> None:
    port = ScriptedPort(polls=2, ends=Finished("t1", "helper", "succeeded", reply="42"))
    result = call(port, "call_agent", {"deployment": "helper", "input": "sum it"})
    assert result.text == "42" and result.error is None
    assert port.calls == [("helper", "sum it", "call_1", True)]


def test_call_agent_parks_the_run_while_its_delegate_is_unfinished() -> None:
    port = ScriptedPort(polls=1, parks=True, timeout_s=90.0)
    result = call(port, "call_agent", {"deployment": "helper", "input": "sum it"})
    assert result.wait is not None and result.text == ""
    assert (result.wait.kind, result.wait.target_task_id, result.wait.timeout_s) == (
        "delegate",
        "t1",
        90.0,
    )
    # resumed once the delegate ended: the same task (keyed by the call) gives the result
    port.ends = Finished("t1", "helper", "succeeded", reply="42")
    assert call(port, "call_agent", {"deployment": "helper", "input": "sum it"}).text == "42"
    assert [c[2] for c in port.calls] == ["call_1", "call_1"]
    assert port.cancelled == []


def test_call_agent_whose_wait_expired_cancels_the_delegate_and_says_so() -> None:
    port = ScriptedPort(polls=1, parks=True, timeout_s=5.0, wait_ended="expired")
    result = call(port, "call_agent", {"deployment": "helper", "input": "x"})
    assert result.wait is None and port.cancelled == ["t1"]
    assert result.text.startswith("stopped: task t1 did not finish within 5s")


def test_call_agent_stops_and_cancels_the_delegated_task_when_the_run_stops() -> None:
    port = ScriptedPort(polls=10**9)
    ctx = ToolContext(task_id="p", run_id="r", call_id="call_1")
    threading.Timer(0.3, ctx.cancelled.set).start()
    result = call(port, "call_agent", {"deployment": "helper", "input": "x"}, ctx=ctx)
    assert result.text.startswith("stopped: ") and port.cancelled == ["t1"]


def test_call_agent_leaves_the_delegated_task_running_when_the_run_moves_on() -> None:
    """The worker let go of the run (lease lost, or abandoned at shutdown): the resumed
    call_agent waits for the same task, so it must not be cancelled here."""
    port = ScriptedPort(polls=10**9)
    ctx = ToolContext(task_id="p", run_id="r", call_id="call_1")
    threading.Timer(0.3, ctx.lost.set).start()  # what the lease's keeper / stop_runs sets
    result = call(
        port, "call_agent", {"deployment": "helper", "input": "x"}, ctx=ctx, watch=ctx.lost.is_set
    )
    assert result.stopped and port.cancelled == []


def test_call_agent_is_bounded_by_the_tool_timeout() -> None:
    port = ScriptedPort(polls=10**9)
    result = call(port, "call_agent", {"deployment": "helper", "input": "x"}, timeout_s=0.5)
    assert result.error == "timed out after 0.5s"
    assert port.cancelled == ["t1"]  # (the stopped tool cancels what it waited for)


def test_start_agent_returns_at_once() -> None:
    port = ScriptedPort()
    result = call(port, "start_agent", {"deployment": "helper", "input": "x"})
    assert result.text.startswith("started task t1 on 'helper'")
    assert port.calls == [("helper", "x", "call_1", False)]


@pytest.mark.parametrize(
    "args,fragment",
    [
        ({"deployment": "", "input": "x"}, "deployment must be one of helper"),
        ({"deployment": "helper", "input": " "}, "input must be the non-empty text"),
    ],
)
def test_bad_arguments_are_errors_the_model_sees(args, fragment) -> None:
    result = call(ScriptedPort(), "call_agent", args)
    assert fragment in (result.error or "")


def test_signal_agent_delivers_keyed_by_the_call() -> None:
    port = ScriptedPort()
    result = call(port, "signal_agent", {"task_id": "t9", "message": "also x"})
    assert result.error is None and result.text.startswith("delivered to the inbox of task t9")
    assert port.signals == [("t9", "also x", "call_1")]


def test_signal_agent_to_a_task_that_does_not_run_is_an_error_naming_its_status() -> None:
    result = call(ScriptedPort(running=False), "signal_agent", {"task_id": "t9", "message": "x"})
    assert result.error is not None and "task t9 on 'helper' is succeeded" in result.error


@pytest.mark.parametrize(
    "args,fragment",
    [
        ({"task_id": "", "message": "x"}, "task_id must be the id of a running task"),
        ({"task_id": "t9", "message": " "}, "message must be the non-empty text"),
    ],
)
def test_signal_agent_bad_arguments_are_errors_the_model_sees(args, fragment) -> None:
    port = ScriptedPort()
    result = call(port, "signal_agent", args)
    assert fragment in (result.error or "") and port.signals == []


def test_a_refusal_is_an_error_the_model_sees() -> None:
    port = ScriptedPort(refuse="delegation depth limit reached: …")
    result = call(port, "start_agent", {"deployment": "helper", "input": "x"})
    assert result.text == "error: delegation depth limit reached: …"


def test_embedded_call_and_start_run_in_one_thread(tmp_path: Path) -> None:
    config = write_config(
        tmp_path / "config",
        {"boss": 'model = "echo"\ndelegates = ["helper"]\n', "worker": 'model = "echo"\n'},
        {"lead": 'agent = "boss"\n', "helper": 'agent = "worker"\n'},
    )
    rt = build(Settings(home=tmp_path / "home", config_dir=config))
    assert rt.local_waker is not None
    ask = json.dumps({"deployment": "helper", "input": "do x"})
    lead = rt.dispatcher.submit("lead", f"/tool call_agent {ask}", key="k").task
    done = run_until_done(rt.dispatcher, rt.local_waker, lead.id, timeout_s=30)
    assert done.status == TaskStatus.SUCCEEDED, done.error
    outputs = [r.output for r in rt.store.journal(lead.id) if r.kind == "tool"]
    assert outputs == ["echo: do x [history: 0]"]
    ask = json.dumps({"deployment": "helper", "input": "do y"})
    started = rt.dispatcher.submit("lead", f"/tool start_agent {ask}", key="k").task
    run_until_done(rt.dispatcher, rt.local_waker, started.id, timeout_s=30)
    (child,) = [
        t for t in rt.store.list_tasks(TaskFilter(deployment="helper")) if "do y" in str(t.input)
    ]
    run_until_done(rt.dispatcher, rt.local_waker, child.id, timeout_s=30)
    back = [t for t in rt.store.list_tasks(TaskFilter(deployment="lead")) if t.seq == 3]
    assert back and back[0].input[0].text.endswith("Its reply:\necho: do y [history: 0]")  # type: ignore[union-attr]
    rt.close()


def test_a_start_agent_ping_pong_is_refused_at_the_depth_limit(tmp_path: Path) -> None:
    """lead starts helper; helper's result comes back to lead as a new task, whose start_agent
    starts helper again …: with FLEET_MAX_DELEGATION_DEPTH = 2, helper is started twice and the
    second result's start_agent is refused, an error result naming the limit; nothing is
    admitted for it."""
    config = write_config(
        tmp_path / "config",
        {"boss": 'model = "echo"\ndelegates = ["helper"]\n', "worker": 'model = "echo"\n'},
        {"lead": 'agent = "boss"\n', "helper": 'agent = "worker"\n'},
    )
    rt = build(Settings(home=tmp_path / "home", config_dir=config, max_delegation_depth=2))
    assert rt.local_waker is not None
    boss = rt.config.agents["boss"]

    def drain() -> None:
        """Run every task, also those admitted meanwhile (a delegated one, a result)."""
        while open_ := [t for t in rt.store.list_tasks(TaskFilter()) if not t.status.terminal]:
            run_until_done(rt.dispatcher, rt.local_waker, open_[0].id, timeout_s=30)  # type: ignore[arg-type]

    ask = json.dumps({"deployment": "helper", "input": "round 1"})
    rt.dispatcher.submit("lead", f"/tool start_agent {ask}", key="k")
    refusal = None
    for rounds in range(1, 10):  # (one that is never refused fails the test)
        drain()  # helper runs; its result comes back to lead as a new task, which runs too
        lead = rt.store.list_tasks(TaskFilter(deployment="lead"))
        result = max(lead, key=lambda t: t.seq)
        assert result.input[0].text.startswith("[fleet] The task you started on 'helper'")  # type: ignore[union-attr]
        # the result's run plays the ping-pong: start_agent helper again, through the real port
        port = rt.dispatcher.delegations.port(result, boss)
        ctx = ToolContext(task_id=str(result.id), run_id="r", call_id=f"again_{rounds}")
        start = {t.name: t for t in tools(port, port.delegates)}["start_agent"]
        done = executor.call(start, {"deployment": "helper", "input": "again"}, ctx, timeout_s=5)
        if done.error is not None:
            refusal = done.error
            break
    assert rounds == 2, "the ping-pong went on past FLEET_MAX_DELEGATION_DEPTH"
    assert refusal is not None and "FLEET_MAX_DELEGATION_DEPTH = 2" in refusal
    assert "started 2 task(s) in a row from the results" in refusal
    helpers = rt.store.list_tasks(TaskFilter(deployment="helper"))
    assert len(helpers) == 2  # the refused start admitted nothing
    rt.close()


def test_a_call_abandoned_at_shutdown_leaves_the_delegated_task_to_resume(tmp_path: Path) -> None:
    """Embedded, one process: the worker stops while call_agent waits (the waiting thread runs
    the delegated task, which waits too); both runs are abandoned after the grace period and
    handed back. The delegated task waits to resume (the resumed call waits for it): it is
    not cancelled."""
    config = write_config(
        tmp_path / "config",
        {
            "boss": 'model = "echo"\ndelegates = ["slow"]\n',
            "sleeper": 'model = "echo"\ntools = ["wait"]\n',
        },
        {"lead": 'agent = "boss"\n', "slow": 'agent = "sleeper"\n'},
    )
    rt = build(Settings(home=tmp_path / "home", config_dir=config))
    try:
        ask = json.dumps({"deployment": "slow", "input": '/tool wait {"seconds": 60}'})
        lead = rt.dispatcher.submit("lead", f"/tool call_agent {ask}", key="k").task
        drain = threading.Thread(target=rt.dispatcher.drain, args=(lead.conversation_id,))
        drain.start()

        def child_running() -> Task | None:
            found = rt.store.list_tasks(TaskFilter(deployment="slow"))
            return found[0] if found and found[0].status == TaskStatus.RUNNING else None

        child = wait_for(child_running, 30, what="the delegated task to run")
        # The delegated run is mid-step (its wait lasts 60 s): abandoned. The lead is too, unless
        # the delegated task's hand-back ended its call first and it handed itself back at
        # the step boundary: either way both are handed back, neither cancelled.
        assert rt.dispatcher.shut_down(0.2) in (1, 2)
        drain.join(30)
        wait_for(
            lambda: not any(t.name == "fleet-tool-call_agent" for t in threading.enumerate()),
            30,
            what="the call_agent tool to return",
        )
        assert rt.store.get_task(child.id).status == TaskStatus.INTERRUPTED
        assert rt.store.get_task(lead.id).status == TaskStatus.INTERRUPTED
    finally:
        rt.close()


def test_embedded_signal_agent_reaches_the_running_task_once(tmp_path: Path) -> None:
    """Through the real port (SQLite): a task of a delegate gets the message into its run's
    inbox and its next model call answers it; the same tool call again (a retried run) puts no
    second message; a deployment outside ``delegates`` and a finished task are errors."""
    config = write_config(
        tmp_path / "config",
        {
            "boss": 'model = "echo"\ndelegates = ["slow"]\n',
            "sleeper": 'model = "echo"\ntools = ["wait"]\n',
        },
        {"lead": 'agent = "boss"\n', "slow": 'agent = "sleeper"\n', "other": 'agent = "sleeper"\n'},
    )
    rt = build(Settings(home=tmp_path / "home", config_dir=config))
    assert rt.local_waker is not None
    try:
        lead = rt.dispatcher.submit("lead", "hello", key="k").task
        port = rt.dispatcher.delegations.port(lead, rt.config.agents["boss"])
        signal = {t.name: t for t in tools(port, port.delegates)}["signal_agent"]

        def send(task_id: str, call_id: str = "call_1") -> executor.CallResult:
            ctx = ToolContext(task_id=str(lead.id), run_id="r", call_id=call_id)
            args = {"task_id": task_id, "message": "also check x"}
            return executor.call(signal, args, ctx, timeout_s=5)

        child = rt.dispatcher.submit("slow", '/tool wait {"seconds": 3}', key="c").task
        drain = threading.Thread(target=rt.dispatcher.drain, args=(child.conversation_id,))
        drain.start()
        wait_for(
            lambda: rt.store.get_task(child.id).status == TaskStatus.RUNNING,
            30,
            what="the slow task to run",
        )
        first, again = send(str(child.id)), send(str(child.id))
        assert first.error is None and first.text.startswith(
            f"delivered to the inbox of task {child.id}"
        )
        assert again.error is None  # the retried call finds its message: delivered, once
        drain.join(30)
        done = rt.store.get_task(child.id)
        assert done.status == TaskStatus.SUCCEEDED, done.error
        assert done.reply is not None and done.reply.startswith("echo: also check x")
        taken = [r.output for r in rt.store.journal(child.id) if r.kind == "inbox"]
        assert len(taken) == 1 and len(taken[0]) == 1  # type: ignore[arg-type]
        assert len(rt.store.list_tasks(TaskFilter(deployment="slow"))) == 1  # nothing requeued

        finished = send(str(child.id), "call_2")
        assert finished.error is not None and "is succeeded, not running" in finished.error
        stranger = rt.dispatcher.submit("other", "hi", key="o").task
        refused = send(str(stranger.id), "call_3")
        assert refused.error is not None and "(delegates: slow)" in refused.error
        assert "no task with id 'nope'" in (send("nope", "call_4").error or "")
    finally:
        rt.close()
