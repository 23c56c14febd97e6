"""Token streaming in a fleet (real PostgreSQL, Redis, a worker process, ``fleet serve``): a
model step's text reaches StreamTaskEvents as ``delta`` events before the step is journaled,
joins to the reply, resumes mid-step with Last-Event-ID (nothing lost, nothing twice), reaches
A2A callers as appended artifact chunks, and stays behind the tenants' walls."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.types import Message, Part, Role, SendMessageRequest, StreamResponse

from fleet.constants import REDACTED
from fleet.sdk.client import Event, FleetClient
from tests.conftest import AGENTS, DEPLOYMENTS
from tests.support.fleet import Fleet, running_fleet, wait_for
from tests.support.intake import A2A, caller_toml, write_intake_config
from tests.support.openai_server import DONE, FakeOpenAI, chunk, sse

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(180)]

#: The provider's key, configured: redacted wherever it would be stored, shown or streamed.
SECRET = "fleet-test-secret-0123456789"
#: Twenty words: the echo model writes its reply a word every 60 ms (~1.4 s a reply).
WORDS = " ".join(f"word{i}" for i in range(20))
KEYS = {
    "alpha": "alpha-key-" + "a" * 24,
    "bravo": "bravo-key-" + "b" * 24,
    "a2a": "a2a-key-" + "c" * 24,
}
ENV = {f"FLEET_TEST_{name.upper()}": key for name, key in KEYS.items()}
CALLERS = {
    "alpha": caller_toml("api", "FLEET_TEST_ALPHA"),
    "bravo": caller_toml("api", "FLEET_TEST_BRAVO"),
    "alpha-a2a": caller_toml("a2a", "FLEET_TEST_A2A") + 'tenant = "alpha"\n',
}


@pytest.fixture
def provider() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def fleet(tmp_path: Path, pg_url: str, redis_url: str, provider: FakeOpenAI) -> Iterator[Fleet]:
    config = write_intake_config(tmp_path / "config", callers=CALLERS)
    agents = config / "agents"
    agents.joinpath("streamer.toml").write_text('[model]\nprovider = "echo"\nstream_ms = 60\n')
    config.joinpath("deployments", "talk.toml").write_text('agent = "streamer"\n')
    # fleet makes this model's retries (it has fallbacks): a stream broken mid-way is retried
    agents.joinpath("flaky.toml").write_text(
        f'[model]\nprovider = "openai"\nname = "m"\nbase_url = "{provider.base_url}"\n'
        'max_retries = 2\nfallbacks = [{ provider = "echo" }]\n'
    )
    config.joinpath("deployments", "flaky.toml").write_text('agent = "flaky"\n')
    assert set(AGENTS) <= {p.stem for p in agents.iterdir()}
    assert set(DEPLOYMENTS) < {p.stem for p in (config / "deployments").iterdir()}
    with running_fleet(
        tmp_path,
        database_url=pg_url,
        redis_url=redis_url,
        config_dir=config,
        sweep_interval=1.0,
        openai_api_key=SECRET,  # a configured secret: the redactor knows it
    ) as fleet:
        fleet.worker("w1", concurrency=1)
        yield fleet
        fleet.kill()  # the test is over: no graceful stop to wait for


@pytest.fixture
def base(fleet: Fleet) -> str:
    return fleet.serve(**ENV)


def client(base: str, who: str = "alpha") -> FleetClient:
    return FleetClient(base, api_key=KEYS[who])


def joined(events: list[Event]) -> str:
    """The text of the deltas, from the last reset on (what a watcher shows)."""
    text = ""
    for ev in events:
        if ev.kind == "delta":
            text = ev.data["text"] if ev.data.get("reset") else text + ev.data["text"]
    return text


def test_deltas_come_before_their_step_and_join_to_the_reply(base: str) -> None:
    with client(base) as c:
        task = c.submit("talk", WORDS)
        events = list(c.events(task["id"], 60))
    kinds = [e.kind for e in events]
    deltas = [e for e in events if e.kind == "delta"]
    assert len(deltas) >= 10, f"the reply came in pieces: {kinds}"
    # the step's text comes before what stands for it: its step event, then the reply (a run
    # whose one step is stored with its settle too: a stream after its deltas reads the step)
    step = kinds.index("step")
    assert kinds[:2] == ["status", "status"] and set(kinds[2:step]) == {"delta"}, kinds
    assert kinds[step:] == ["step", "reply", "status", "end"], kinds
    reply = events[-1].data["task"]["reply"]
    assert joined(events) == reply == f"echo: {WORDS} [history: 0]"
    assert [e.id for e in deltas] == [f"1.1.d{i}" for i in range(1, len(deltas) + 1)]
    assert {e.data["step"] for e in deltas} == {1} and {e.data["attempt"] for e in deltas} == {1}


def test_a_client_resuming_mid_step_loses_nothing_and_gets_nothing_twice(base: str) -> None:
    with client(base) as c:
        task = c.submit("talk", WORDS)
        first: list[Event] = []
        for ev in c.events(task["id"], 60):
            first.append(ev)
            if sum(e.kind == "delta" for e in first) == 3:
                break  # disconnect in the middle of the model step
        assert c.get_task(task["id"])["status"] == "running", "left while it streamed"
        rest = list(c.events(task["id"], 60, after=first[-1].id))
    got = [e.id for e in first + rest]
    assert len(got) == len(set(got)), f"an event came twice: {got}"
    assert joined(first + rest) == rest[-1].data["task"]["reply"]
    assert any(e.kind == "delta" for e in rest), "the rest of the text streamed after resuming"


def test_a_stream_joining_mid_step_first_gets_the_text_so_far(base: str) -> None:
    with client(base) as c:
        task = c.submit("talk", WORDS)
        for ev in c.events(task["id"], 60):
            if ev.kind == "delta" and ev.data["text"].startswith("word5"):
                break
        # a second watcher that starts now, from nothing
        late = list(c.events(task["id"], 60))
    deltas = [e for e in late if e.kind == "delta"]
    assert deltas and deltas[0].id == "1.1.d1", "the text so far came first"
    assert joined(late) == late[-1].data["task"]["reply"]


def test_another_tenant_cannot_follow_the_text(base: str) -> None:
    with client(base) as alpha:
        task = alpha.submit("talk", WORDS)
    r = httpx.get(
        f"{base}/v1/tasks/{task['id']}/events",
        headers={"Authorization": f"Bearer {KEYS['bravo']}"},
        timeout=10,
    )
    assert r.status_code == 404, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert "word" not in r.text


def _request(text: str) -> SendMessageRequest:
    msg = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=[Part(text=text)])
    return SendMessageRequest(message=msg)


@pytest.mark.parametrize("version", ["1.0", "0.3"])
def test_a2a_streams_the_reply_as_appended_artifact_chunks(base: str, version: str) -> None:
    async def go() -> list[StreamResponse]:
        async with A2A(base, "talk", key=KEYS["a2a"], version=version, streaming=True) as caller:
            return [ev async for ev in caller.client.send_message(_request(WORDS))]

    events = asyncio.run(go())
    chunks = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert len(chunks) >= 10, "the reply came in pieces"
    assert not chunks[0].append and all(c.append for c in chunks[1:])
    assert [c.last_chunk for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert {c.artifact.artifact_id for c in chunks} == {chunks[0].artifact.artifact_id}
    text = "".join(c.artifact.parts[0].text for c in chunks)
    assert text == f"echo: {WORDS} [history: 0]", "the last chunk repeats nothing"
    final = events[-1].status_update
    assert final.status.message.parts[0].text == text


def test_a_stream_broken_mid_way_is_retried_and_watchers_start_the_text_again(
    base: str, provider: FakeOpenAI
) -> None:
    """The provider drops the connection after three words; fleet retries the call: watchers get
    a reset, and the text they join is the journaled reply, not the broken start."""
    words = ["Half ", "a ", "thought"]
    provider.stream([sse(chunk({"content": w})) for w in words], ending="drop", gap_s=0.5)
    whole = ["The ", "whole ", "answer."]
    frames = [sse(chunk({"content": w})) for w in whole]
    provider.stream([*frames, sse(chunk({}, "stop")), DONE], gap_s=0.2)
    with client(base) as c:
        task = c.submit("flaky", "go")
        events = list(c.events(task["id"], 60))
    deltas = [e.data for e in events if e.kind == "delta"]
    reply = events[-1].data["task"]["reply"]
    assert reply == "The whole answer."
    assert [d["text"] for d in deltas if not d.get("reset")][:1] == ["Half "], deltas
    resets = [d for d in deltas if d.get("reset")]
    assert len(resets) == 1 and resets[0]["text"] == "The ", deltas
    assert joined(events) == reply
    assert len(provider.requests) == 2, "one retry"


def test_a_cancel_hangs_up_a_model_call_waiting_for_its_first_token(
    base: str, provider: FakeOpenAI
) -> None:
    """The provider answered with its headers and then nothing: the cancel does not wait for a
    first token that may never come; the worker hangs the call up."""
    provider.stream([], ending="hold")
    with client(base) as c:
        task = c.submit("flaky", "think hard")
        wait_for(lambda: len(provider.requests) == 1, 30, what="the model call to start")
        assert c.cancel(task["id"])["effect"] == "requested"
        done = c.wait(task["id"], 30)
    assert done["status"] == "cancelled", done
    assert provider.wait_hangup(5), "the call's connection was closed"
    assert len(provider.requests) == 1, "a stop is no failure to retry"


def test_a_secret_split_over_two_chunks_never_reaches_a_watcher(
    base: str, provider: FakeOpenAI
) -> None:
    """The model writes the configured key across two chunks: no delta holds any of it, and
    the deltas join to the journaled (redacted) reply."""
    said = ["The key is ", SECRET[:9], SECRET[9:] + " and ", "that is all."]
    frames = [sse(chunk({"content": w})) for w in said]
    provider.stream([*frames, sse(chunk({}, "stop")), DONE], gap_s=0.2)
    with client(base) as c:
        task = c.submit("flaky", "tell me")
        events = list(c.events(task["id"], 60))
    deltas = [e.data["text"] for e in events if e.kind == "delta"]
    reply = events[-1].data["task"]["reply"]
    assert reply == f"The key is {REDACTED} and that is all."
    assert len(deltas) >= 2 and joined(events) == reply, deltas
    assert not any(SECRET[:6] in d or SECRET[-6:] in d for d in deltas), deltas
