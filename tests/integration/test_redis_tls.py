"""Fleet on a TLS-only Redis with an ACL user: a real redis-server started here (certificate from
a test CA, no plain port), the API, a Celery worker and ``fleet check --connect`` through it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from fleet.config import Settings
from fleet.dispatch.redis_target import RedisTarget
from tests.conftest import need
from tests.e2e.test_cli import Cli
from tests.support import outcomes
from tests.support.fleet import fleet_settings, running_fleet, runtime_for, wait_for
from tests.support.redis_servers import TlsRedis, binary, tls_redis
from tests.support.tls import TestCA

pytestmark = [
    pytest.mark.fleet,
    pytest.mark.timeout(120),
]

CONVERSATIONS, PER = 6, 5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsRedis]:
    need("redis-server", None if binary() else "not installed (apt-get install redis-server)")
    with tls_redis(tmp_path_factory.mktemp("redis-tls")) as found:
        yield found


@pytest.fixture
def tls(server: TlsRedis) -> Iterator[TlsRedis]:
    """The server, emptied before and after the test."""
    client = RedisTarget(server.url, ca_file=str(server.ca.cert)).client()
    client.flushdb()
    yield server
    client.flushdb()
    client.close()


def test_only_tls_with_the_user_and_a_trusted_ca_reaches_the_server(tls: TlsRedis) -> None:
    plain = redis.Redis(port=tls.port, password=tls.password, socket_timeout=2)
    with pytest.raises(redis.ConnectionError):
        plain.ping()  # no plain-text port: the TLS port refuses plain Redis
    no_user = RedisTarget(f"rediss://127.0.0.1:{tls.port}/0", ca_file=str(tls.ca.cert))
    with pytest.raises(redis.AuthenticationError):
        no_user.client(socket_timeout=2).ping()  # the default user is off
    assert RedisTarget(tls.url, ca_file=str(tls.ca.cert)).client().ping()


def _check(cli: Cli, **env: str) -> str:
    r = cli("check", "--connect", **env)
    assert "Traceback" not in r.out + r.err, r
    return r.out + r.err


@pytest.fixture
def cli(tmp_path: Path, tls: TlsRedis, pg_url: str, config_dir: Path) -> Cli:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {
        "FLEET_HOME": str(tmp_path / "home"),
        "FLEET_CONFIG_DIR": str(config_dir),
        "FLEET_DATABASE_URL": pg_url,
        "FLEET_REDIS_URL": tls.url,
        "FLEET_REDIS_TLS_CA_FILE": str(tls.ca.cert),
    }
    return Cli(cwd, tmp_path / "home", env)


def test_fleet_check_connect_says_what_is_wrong_and_never_shows_the_password(
    cli: Cli, tls: TlsRedis, tmp_path: Path
) -> None:
    shown = f"rediss://fleet:[REDACTED]@127.0.0.1:{tls.port}/0"
    out = _check(cli)
    assert f"ok    redis: {shown}: reachable" in out.lower() or f"{shown}: reachable" in out, out
    assert tls.password not in out

    wrong = tls.url.replace(tls.password, "not-the-password")
    out = _check(cli, FLEET_REDIS_URL=wrong)
    assert "FAIL  redis:" in out and "check the user and password in FLEET_REDIS_URL" in out, out
    assert "not-the-password" not in out

    other = TestCA(tmp_path / "other-ca")
    out = _check(cli, FLEET_REDIS_TLS_CA_FILE=str(other.cert))
    assert "FAIL  redis:" in out and "CERTIFICATE_VERIFY_FAILED" in out, out
    assert "FLEET_REDIS_TLS_CA_FILE" in out

    plain = tls.url.replace("rediss://", "redis://")
    out = _check(cli, FLEET_REDIS_URL=plain)
    assert "FAIL  redis:" in out and tls.password not in out, out

    missing = tmp_path / "nowhere.pem"
    r = cli("check", "--connect", FLEET_REDIS_TLS_CA_FILE=str(missing))
    assert r.code != 0 and "Traceback" not in r.out + r.err, r
    assert "FLEET_REDIS_TLS_CA_FILE: Path does not point to a file" in r.out + r.err, r


def test_settings_pair_the_sentinel_and_client_certificate_settings(tmp_path: Path) -> None:
    from fleet.config import load_settings
    from fleet.errors import ConfigError

    with pytest.raises(ConfigError, match="FLEET_REDIS_SENTINEL_MASTER: needed"):
        load_settings(redis_sentinels="127.0.0.1:26379")
    with pytest.raises(ConfigError, match=r"FLEET_REDIS_SENTINELS.*host:port"):
        load_settings(redis_sentinels="127.0.0.1", redis_sentinel_master="m")
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="set both or neither"):
        load_settings(redis_url="rediss://h/0", redis_tls_cert_file=cert)
    s = Settings(redis_sentinels="a:1, b:2", redis_sentinel_master="m")
    assert s.redis_sentinels == "a:1, b:2" and not s.embedded


def _submit_all(url: str) -> list[uuid.UUID]:
    def one(conv: int) -> list[uuid.UUID]:
        with httpx.Client(base_url=url, timeout=30) as http:
            ids = []
            for n in range(PER):
                r = http.post(
                    "/v1/tasks",
                    json={"deployment": "chat", "input": f"m{n}", "conversationKey": f"c{conv}"},
                )
                assert r.status_code == 202, r.text
                ids.append(uuid.UUID(r.json()["id"]))
            return ids

    with ThreadPoolExecutor(CONVERSATIONS) as pool:
        return [i for ids in pool.map(one, range(CONVERSATIONS)) for i in ids]


def test_api_and_worker_run_every_task_once_in_order_through_tls_redis(
    tmp_path: Path, tls: TlsRedis, pg_url: str, config_dir: Path
) -> None:
    settings = fleet_settings(tmp_path, pg_url, tls.url, config_dir, **tls.settings())
    with running_fleet(tmp_path, **settings) as fleet:
        fleet.worker("w1", concurrency=2)
        fleet.beat()
        url = fleet.serve()
        ready = httpx.get(f"{url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["checks"]["redis"] == "ok", ready.text
        accepted = _submit_all(url)
        with runtime_for(settings) as rt:
            wait_for(
                lambda: outcomes.finished(rt.store, accepted) == len(accepted),
                60,
                interval=0.2,
                what="every task to finish",
            )
            result = outcomes.outcome(rt.store, accepted)
            # the fair queue's direct pushes and the lease share the TLS server's database
            broker = rt.dispatcher.waker
            assert getattr(broker, "direct", None) is not None
        print(f"\nTLS + ACL Redis: {result.line()}")
        assert (result.lost, result.duplicated, result.out_of_order) == (0, 0, 0), result
        logs = "".join(p.log() for p in fleet.procs)
        assert "rediss://fleet:**@127.0.0.1" in logs  # the Celery banner, its password masked
        assert tls.password not in logs
