"""Fleet on Redis Sentinel: a master, a replica and three sentinels (real ``redis-server``
processes on 127.0.0.1), the master SIGKILLed. Clients follow the failover; under load every
accepted task still runs once and in order; a lease the failover lost cannot let its old holder
write (the store's fencing numbers refuse it)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
import redis

from fleet.config import Settings
from fleet.dispatch.leases.redis import RedisLease, lease_key, same_server
from fleet.dispatch.redis_target import RedisTarget
from fleet.domain.runs import TraceRow
from fleet.domain.values import TaskStatus
from fleet.errors import LeaseLost
from tests.conftest import need
from tests.e2e.test_cli import Cli
from tests.integration.test_store import ok, start, sub
from tests.support import failover
from tests.support.fleet import fleet_settings, running_fleet, runtime_for, wait_for
from tests.support.redis_servers import SentinelGroup, binary, sentinel_group

# timing-bound (failure detection, elections): `make test` runs these alone
pytestmark = [
    pytest.mark.fleet,
    pytest.mark.serial,
    pytest.mark.timeout(120),
]


@pytest.fixture
def group(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SentinelGroup]:
    """A plain group; a test parametrized indirectly with ``"tls"`` gets a TLS-only one."""
    need("redis-server", None if binary() else "not installed (apt-get install redis-server)")
    tls = getattr(request, "param", "plain") == "tls"
    with sentinel_group(tmp_path / "redis", tls=tls) as found:
        yield found


def _target(group: SentinelGroup) -> RedisTarget:
    found = RedisTarget.of(Settings(redis_url=group.url, **group.settings()))
    assert found is not None
    return found


def _promoted(group: SentinelGroup) -> None:
    old = group.master.port
    group.fail_over()
    wait_for(lambda: group.master_port() not in (None, old), 30, what="a new master")
    assert group.master_port() == group.replica.port


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False


@pytest.mark.parametrize("group", ["plain", "tls"], indirect=True)
def test_clients_reach_the_master_and_follow_it_through_a_failover(group: SentinelGroup) -> None:
    target = _target(group)
    client = target.client(socket_timeout=2)
    client.set("before", "1")
    assert client.connection_pool.get_master_address() == ("127.0.0.1", group.master.port)
    # the lease, the fair queue and the broker: one master, so wake-ups stay one script
    same, other = (
        target.client(),
        RedisTarget(target.url, sentinels=target.sentinels, master="another").client(),
    )
    assert same_server(client, same)
    assert not same_server(client, other)
    same.close()
    other.close()

    async def async_ping() -> bool:
        aclient = target.async_client(socket_timeout=2)
        try:
            return bool(await aclient.ping())
        finally:
            await aclient.aclose()

    assert asyncio.run(async_ping())
    replica = group.client(group.replica.port, password=group.password)
    wait_for(lambda: replica.get("before"), 10, what="the replica to have the key")
    replica.close()
    _promoted(group)
    wait_for(lambda: _answers(client), 20, what="the client to reach the new master")
    assert client.connection_pool.get_master_address() == ("127.0.0.1", group.replica.port)
    assert client.get("before") == b"1"
    assert asyncio.run(async_ping())
    client.close()
    conf = target.celery()
    assert conf["broker_url"].count("sentinel://") == 3
    assert (conf["broker_use_ssl"] is not None) == (group.ca is not None)
    assert conf["broker_transport_options"]["master_name"] == "fleetmaster"


def test_a_lease_lost_in_the_failover_cannot_let_its_old_holder_write(
    tmp_path: Path, group: SentinelGroup, pg_url: str, config_dir: Path
) -> None:
    """Holder A leases a conversation on the master; replication to the replica is cut first
    (as asynchronous replication loses a write made just before a crash), then the master is
    SIGKILLed. On the new master the lease is gone: the sweeper takes the task back and holder
    B leases and claims it, while A still believes it holds its 30 s lease. Every write A makes
    with its fencing number is refused by the store; B's go through."""
    settings = fleet_settings(
        tmp_path, pg_url, group.url, config_dir, lease_ttl=30.0, **group.settings()
    )
    target = _target(group)
    replica = redis.Redis(port=group.replica.port, password=group.password, socket_timeout=2)
    with runtime_for(settings) as rt:
        store, now = rt.store, datetime.now(UTC)
        task = store.admit(sub("a"), now).task
        conv = task.conversation_id
        # the replica stops receiving the master's writes (it cannot log in again)
        replica.config_set("masterauth", "not-the-password")
        replica.client_kill_filter(_type="master")
        wait_for(
            lambda: replica.info("replication")["master_link_status"] == "down",
            10,
            what="the replica's link to go down",
        )
        lease_a = RedisLease(target.client(), 30.0)
        held_a = lease_a.acquire(conv)
        assert held_a is not None
        old = start(store, conv, now, worker="A")
        assert old is not None and old.task.id == task.id

        _promoted(group)
        replica.config_set("masterauth", group.password)
        new_master = redis.Redis(port=group.replica.port, password=group.password)
        assert new_master.get(lease_key(conv)) is None, "the lease reached the replica"

        def swept() -> bool:
            try:
                return rt.dispatcher.sweep().recovered == 1
            except redis.RedisError:
                return False  # the sweeper's client still finding the new master

        wait_for(swept, 20, what="the sweeper to take the task back")
        held_b = RedisLease(target.client(), 30.0).acquire(conv)
        assert held_b is not None, "B could not lease the conversation on the new master"
        new = start(store, conv, now, worker="B")
        assert new is not None and new.task.fence == old.task.fence + 1

        trace = TraceRow(1, "model", "echo", None, None, None, {}, now, 1.0)
        with pytest.raises(LeaseLost):
            store.checkpoint(old.task, old.run_id, [trace], now)
        with pytest.raises(LeaseLost):
            store.settle(old.task, old.run_id, ok("from the old holder"), now)
        assert not lease_a.renew(held_a)  # A's token is not on the new master either
        store.settle(new.task, new.run_id, ok("from the new holder"), now)
        done = store.get_task(task.id)
        assert done.status == TaskStatus.SUCCEEDED and done.reply == "from the new holder"
        runs = store.runs_of(task.id)
        assert [(r.attempt, r.status) for r in runs] == [(1, "interrupted"), (2, "succeeded")]


@pytest.mark.parametrize("via", ["dispatcher", "api"])
def test_every_accepted_task_runs_once_in_order_when_the_master_is_killed_under_load(
    tmp_path: Path, group: SentinelGroup, pg_url: str, config_dir: Path, via: str
) -> None:
    """Accepted: stored, the submission returned (the dispatcher's submit, or SubmitTask's
    202 through ``fleet serve``)."""
    measured = failover.run(
        tmp_path,
        group,
        pg_url,
        config_dir,
        via_api=via == "api",
        lease_ttl=3.0,
        sweep_interval=1.0,
    )
    print(f"\nsentinel failover under load ({via}):\n  " + "\n  ".join(measured.lines()))
    found = measured.outcome
    assert found.accepted >= 100
    assert (found.lost, found.duplicated, found.out_of_order) == (0, 0, 0), found
    assert measured.leaked == 0, "the Redis password is in a log"


@pytest.mark.parametrize("group", ["plain", "tls"], indirect=True)
def test_the_api_and_a_worker_on_sentinel_answer_readyz_and_run_tasks(
    tmp_path: Path, group: SentinelGroup, pg_url: str, config_dir: Path
) -> None:
    """The API's own Redis clients (the wake-ups published on its event loop, the event hub's
    hint subscriber, ``/readyz``) and ``fleet check --connect`` reach the master through the
    sentinels."""
    settings = fleet_settings(tmp_path, pg_url, group.url, config_dir, **group.settings())
    with running_fleet(tmp_path, **settings) as fleet:
        fleet.worker("w1", concurrency=2)
        url = fleet.serve()
        ready = httpx.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["checks"]["redis"] == "ok", ready.text
        with httpx.Client(base_url=url, timeout=30) as http:
            ids = [
                http.post(
                    "/v1/tasks",
                    json={"deployment": "chat", "input": f"m{n}", "conversationKey": "k"},
                ).json()["id"]
                for n in range(5)
            ]
            # a task event stream: its changes come as hints through the subscriber
            events = http.get(f"/v1/tasks/{ids[-1]}/events", timeout=30)
            assert events.status_code == 200 and "succeeded" in events.text, events.text[-500:]
            done = [http.get(f"/v1/tasks/{i}").json()["status"] for i in ids]
        assert done == ["succeeded"] * 5
        cli = Cli(
            tmp_path, tmp_path / "home", {k: v for k, v in fleet.env.items() if "FLEET_" in k}
        )
        r = cli("check", "--connect")
        assert "ok    redis: master 'fleetmaster' of sentinels" in r.out.lower() or (
            "master 'fleetmaster' of sentinels" in r.out and "reachable" in r.out
        ), r
        assert group.password not in r.out + r.err
        assert all(group.password not in p.log() for p in fleet.procs)
