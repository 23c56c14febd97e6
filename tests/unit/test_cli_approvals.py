"""``fleet approvals ls|approve|reject`` on an embedded SQLite store (as the operator) and
against a server's API (``--server``, as the key's caller): what they print, what they change,
bad input as exit 2 with one line, and a tenant's key that cannot list or decide another
tenant's approvals."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from fleet.cli import main
from fleet.domain.values import TaskStatus
from fleet.runtime import Runtime
from tests.support.approvals import KEYS, approvals_runtime, park, pending_ids, resume
from tests.support.inprocess import served

SERVER = "http://fleet.test"


@pytest.fixture
def rt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    runtime = approvals_runtime(tmp_path)
    for name in ("FLEET_DATABASE_URL", "FLEET_REDIS_URL", "FLEET_SERVER", "FLEET_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FLEET_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLEET_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FLEET_TEST_COUNTER", str(tmp_path / "side-effects.txt"))
    yield runtime
    runtime.close()


@pytest.fixture
def api(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The server's API in this process; the CLI's ``--server`` client talks to it."""
    with served(rt, monkeypatch) as client:
        yield client


def fleet(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    printed = capsys.readouterr()
    return code, printed.out, printed.err


def as_(who: str, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """``--server`` arguments with ``who``'s key in ``FLEET_API_KEY``."""
    monkeypatch.setenv("FLEET_API_KEY", KEYS[who])
    return "--server", SERVER


def counted(tmp_path: Path) -> int:
    path = tmp_path / "side-effects.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


# -- against the store, as the operator ----------------------------------------------------------


def test_ls_lists_every_tenants_pending_approvals(rt, api, capsys) -> None:
    assert fleet(capsys, "approvals", "ls") == (
        0,
        "no approvals are waiting for a decision\n",
        "",
    )
    alpha, bravo = park(rt, api, "alpha"), park(rt, api, "bravo")
    code, out, _ = fleet(capsys, "approvals", "ls", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [a["taskId"] for a in listed] == [str(alpha.id), str(bravo.id)]
    assert {(a["tool"], json.dumps(a["arguments"]), a["status"]) for a in listed} == {
        ("count", "{}", "pending")
    }
    code, out, _ = fleet(capsys, "approvals", "ls")
    assert code == 0 and out.splitlines()[:3] == [
        f"task {str(alpha.id)[:8]}  approval {listed[0]['id'][:8]}  tool count",
        f"  requested {listed[0]['requestedAt'][:19].replace('T', ' ')}  "
        f"expires {listed[0]['expiresAt'][:19].replace('T', ' ')}",
        "  arguments {}",
    ]


def test_ls_and_show_print_the_arguments_whole(rt, api, capsys) -> None:
    """However long, a call's arguments show whole: on one line in ``ls`` (a pipe here), as
    indented JSON in ``show``."""
    arguments = {"amount": 1250, "note": "refund for order 1234, " * 8, "to": "acme"}
    task = park(rt, api, "alpha", ask=f"/tool count {json.dumps(arguments)}")
    (approval,) = pending_ids(rt, task)
    code, out, _ = fleet(capsys, "approvals", "ls")
    whole = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    assert code == 0 and f"  arguments {whole}\n" in out, out
    code, out, err = fleet(capsys, "approvals", "show", str(task.id)[:8], approval[:8])
    assert (code, err) == (0, ""), err
    assert out.startswith(f"approval   {approval}\ntask       {task.id}\ntool       count\n")
    shown = out[out.index("arguments\n") + len("arguments\n") :]
    assert json.loads(shown) == arguments
    code, out, _ = fleet(capsys, "approvals", "show", str(task.id), approval, "--json")
    assert code == 0 and json.loads(out)["arguments"] == arguments


def test_approve_by_prefixes_runs_the_call_once_and_names_the_operator(
    rt, api, capsys, tmp_path
) -> None:
    task = park(rt, api, "alpha")
    (approval,) = pending_ids(rt, task)
    shown = fleet(capsys, "tasks", "show", str(task.id))[1]
    assert "waiting" in shown and f"approval      {approval}  count {{}}" in shown
    code, out, err = fleet(
        capsys, "approvals", "approve", str(task.id)[:8], approval[:8], "--reason", "fine"
    )
    assert (code, err) == (0, ""), err
    assert out == (
        f"approval {approval} of task {task.id}: approved by operator; "
        "the call runs once the task resumes\n"
    )
    (decided,) = rt.store.waits_of(task.id)
    assert (decided.status, decided.decided_by, decided.reason) == ("approved", "operator", "fine")
    assert resume(rt, task).status == TaskStatus.SUCCEEDED and counted(tmp_path) == 1


def test_reject_never_runs_the_call(rt, api, capsys, tmp_path) -> None:
    task = park(rt, api, "bravo")
    (approval,) = pending_ids(rt, task)
    code, out, _ = fleet(
        capsys, "approvals", "reject", str(task.id), approval, "--reason", "no", "--json"
    )
    assert code == 0
    answer = json.loads(out)
    assert answer["approval"]["status"] == "rejected" and answer["approval"]["reason"] == "no"
    assert answer["task"]["id"] == str(task.id)
    assert resume(rt, task).status.terminal and counted(tmp_path) == 0


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("nope", str(uuid.uuid4())), "task id 'nope' is not a UUID"),
        (("{task}", "zz"), "approval id 'zz' is not a UUID"),
        ((str(uuid.uuid4()), str(uuid.uuid4())), "no task with id"),
        (("{task}", str(uuid.uuid4())), "has no approval"),
        (("{task}", "abcdef"), "has no pending approval with an id starting 'abcdef'"),
        (("{task}", "{approval}", "--reason", "x" * 501), "at most 500"),
    ],
)
def test_bad_input_exits_2_with_one_line(rt, api, capsys, args, says) -> None:
    task = park(rt, api, "alpha")
    (approval,) = pending_ids(rt, task)
    filled = [a.format(task=task.id, approval=approval) for a in args]
    code, out, err = fleet(capsys, "approvals", "approve", *filled)
    assert (code, out) == (2, "") and err.startswith("fleet: ") and err.count("\n") == 1, err
    assert says in err
    assert pending_ids(rt, task) == [approval]  # nothing changed


def test_a_decision_is_final(rt, api, capsys) -> None:
    task = park(rt, api, "alpha")
    (approval,) = pending_ids(rt, task)
    assert fleet(capsys, "approvals", "reject", str(task.id), approval)[0] == 0
    code, _, err = fleet(capsys, "approvals", "approve", str(task.id), approval)
    assert code == 2 and err == (
        f"fleet: approval {approval} is rejected by operator already: a decision is final\n"
    )
    assert rt.store.waits_of(task.id)[0].status == "rejected"


# -- against a server, with a tenant's key ---------------------------------------------------------


def test_through_the_server_a_key_lists_and_decides_its_own(rt, api, capsys, monkeypatch) -> None:
    mine, theirs = park(rt, api, "alpha"), park(rt, api, "bravo")
    server = as_("alpha", monkeypatch)
    code, out, err = fleet(capsys, *server, "approvals", "ls", "--json")
    assert code == 0, err
    assert [a["taskId"] for a in json.loads(out)] == [str(mine.id)]
    (approval,) = pending_ids(rt, mine)
    code, out, err = fleet(capsys, *server, "approvals", "approve", str(mine.id)[:8], approval[:8])
    assert code == 0, err
    assert out.startswith(f"approval {approval} of task {mine.id}: approved by alpha")
    assert rt.store.waits_of(mine.id)[0].decided_by == "alpha"
    assert len(pending_ids(rt, theirs)) == 1


@pytest.mark.parametrize("who", ["boss", "alpha-ops"])
def test_an_operator_decides_by_short_ids_through_the_server(
    rt, api, capsys, monkeypatch, who
) -> None:
    """The short ids ``approvals ls`` prints work with an operator's key (of a tenant it
    reaches, the task submitted with another key of it)."""
    task = park(rt, api, "alpha")
    (approval,) = pending_ids(rt, task)
    server = as_(who, monkeypatch)
    code, out, _ = fleet(capsys, *server, "approvals", "ls")
    assert code == 0 and f"task {str(task.id)[:8]}  approval {approval[:8]}" in out
    code, out, err = fleet(capsys, *server, "approvals", "show", str(task.id)[:8], approval[:8])
    assert (code, err) == (0, "") and out.startswith(f"approval   {approval}\n"), err
    code, out, err = fleet(capsys, *server, "approvals", "approve", str(task.id)[:8], approval[:8])
    assert (code, err) == (0, ""), err
    assert out.startswith(f"approval {approval} of task {task.id}: approved by {who}")


def test_a_task_prefix_is_ambiguous_only_within_the_keys_reach(
    rt, api, capsys, monkeypatch
) -> None:
    """Alpha's and bravo's tasks share a prefix: alpha's operator (and alpha's key) find
    alpha's alone; the operator of both is told the prefix is ambiguous."""
    shared = "abcdef12"
    with monkeypatch.context() as m:  # every new id starts with the prefix
        m.setattr(uuid, "uuid4", lambda: uuid.UUID(shared + os.urandom(12).hex()))
        alpha, bravo = park(rt, api, "alpha"), park(rt, api, "bravo")
    (approval,) = pending_ids(rt, alpha)
    for who in ("alpha-ops", "alpha"):
        server = as_(who, monkeypatch)
        code, out, err = fleet(capsys, *server, "approvals", "show", shared, approval[:10])
        assert (code, err) == (0, "") and f"task       {alpha.id}\n" in out, err
    code, out, err = fleet(
        capsys, *as_("boss", monkeypatch), "approvals", "reject", shared, approval[:8]
    )
    assert code == 2 and f"task id prefix '{shared}' is ambiguous" in err, err
    assert str(alpha.id) in err and str(bravo.id) in err
    assert len(pending_ids(rt, alpha)) == len(pending_ids(rt, bravo)) == 1


def test_a_tenants_key_cannot_list_or_decide_another_tenants_approvals(
    rt, api, capsys, monkeypatch
) -> None:
    """Bravo's key (and bravo's operator's) names alpha's task and approval: the answer is the
    one a missing task gets (the id swapped), and alpha's approval stays pending."""
    alpha = park(rt, api, "alpha")
    (approval,) = pending_ids(rt, alpha)
    missing = str(uuid.uuid4())
    for who in ("bravo", "bravo-ops"):
        server = as_(who, monkeypatch)
        code, out, _ = fleet(capsys, *server, "approvals", "ls", "--json")
        assert (code, json.loads(out)) == (0, [])
        for decision in ("approve", "reject"):
            theirs = fleet(capsys, *server, "approvals", decision, str(alpha.id), approval)
            nothing = fleet(capsys, *server, "approvals", decision, missing, approval)
            assert nothing[0] == 2 and nothing[2] == f"fleet: no task with id {missing}\n"
            assert (theirs[0], theirs[1], theirs[2].replace(str(alpha.id), missing)) == nothing
            by_prefix = fleet(capsys, *server, "approvals", decision, str(alpha.id)[:8], approval)
            assert by_prefix[0] == 2 and "no task with an id starting" in by_prefix[2]
    assert pending_ids(rt, alpha) == [approval]
    assert rt.store.get_task(alpha.id).status == TaskStatus.WAITING


# -- the SDK's task handle -------------------------------------------------------------------------


def test_a_task_handle_lists_and_decides_its_approvals(tmp_path: Path, monkeypatch) -> None:
    """Embedded: the handle sees its waiting task's approval, approves it (as ``operator``)
    and the task goes on to its reply; a second one, rejected, never runs its call."""
    from fleet import Fleet
    from tests.support.approvals import ASK, write_approvals_config
    from tests.support.fleet import wait_for

    monkeypatch.setenv("FLEET_TEST_COUNTER", str(tmp_path / "side-effects.txt"))
    monkeypatch.delenv("FLEET_REDIS_URL", raising=False)
    monkeypatch.delenv("FLEET_SERVER", raising=False)
    config = write_approvals_config(tmp_path / "config")
    with Fleet(config_dir=config, home=tmp_path / "home") as fleet_:
        for decision, runs in (("approve", 1), ("reject", 1)):
            handle = fleet_.conversation("shop", f"sdk-{decision}").submit(ASK)
            wait_for(lambda h=handle: h.pending_approvals(), 30, what="the task to wait")
            (approval,) = handle.pending_approvals()
            assert approval["tool"] == "count" and approval["status"] == "pending"
            decide = handle.approve if decision == "approve" else handle.reject
            decided = decide(approval["id"], reason="sdk says")
            status = {"approve": "approved", "reject": "rejected"}[decision]
            assert (decided["status"], decided["decidedBy"]) == (status, "operator")
            assert handle.wait(30).startswith("echo: ")
            assert counted(tmp_path) == runs
