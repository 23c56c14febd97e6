"""How settings become Redis clients and Celery's broker settings (no server needed)."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any

import pytest

from fleet.config import Settings
from fleet.dispatch.redis_target import RedisTarget

SENTINELS = (("10.0.0.1", 26379), ("10.0.0.2", 26380))


@pytest.mark.parametrize(
    ("target", "url", "ssl_on", "options"),
    [
        (RedisTarget("redis://h:6379/2"), "redis://h:6379/2", False, {}),
        (
            RedisTarget("rediss://u:pw@h:6380/0", ca_file="/ca.pem"),
            "rediss://u:pw@h:6380/0",
            True,
            {},
        ),
        (
            RedisTarget("redis://:pw@ignored/3", sentinels=SENTINELS, master="m"),
            "sentinel://:pw@10.0.0.1:26379/3;sentinel://:pw@10.0.0.2:26380/3",
            False,
            {"master_name": "m"},
        ),
        (
            RedisTarget("rediss://u:pw@x/0", sentinels=SENTINELS[:1], master="m"),
            "sentinel://u:pw@10.0.0.1:26379/0",
            True,
            {"master_name": "m"},
        ),
    ],
)
def test_celery_broker_settings(
    target: RedisTarget, url: str, ssl_on: bool, options: dict[str, Any]
) -> None:
    conf = target.celery()
    assert conf["broker_url"] == url
    assert (conf["broker_use_ssl"] is not None) == ssl_on
    if ssl_on:
        assert conf["broker_use_ssl"]["ssl_cert_reqs"] == ssl.CERT_REQUIRED
        assert conf["broker_use_ssl"]["ssl_check_hostname"] is True
    for key, value in options.items():
        assert conf["broker_transport_options"][key] == value


def test_sentinels_get_their_own_password_and_the_masters_tls() -> None:
    target = RedisTarget(
        "rediss://u:pw@x/0",
        ca_file="/ca.pem",
        cert_file="/c.pem",
        key_file="/k.pem",
        sentinels=SENTINELS,
        master="m",
        sentinel_password="sentinel-secret",
    )
    sentinel = target.celery()["broker_transport_options"]["sentinel_kwargs"]
    assert sentinel["password"] == "sentinel-secret"
    assert sentinel["ssl"] is True and sentinel["ssl_ca_certs"] == "/ca.pem"
    assert sentinel["ssl_certfile"] == "/c.pem" and sentinel["ssl_keyfile"] == "/k.pem"
    assert "sentinel-secret" not in repr(target) and ":pw@" not in repr(target)


@pytest.mark.parametrize(
    ("target", "shown"),
    [
        (RedisTarget("rediss://fleet:hunter2-pw@h:1/0"), "rediss://fleet:[REDACTED]@h:1/0"),
        (RedisTarget("redis://:hunter2-pw@h:1/0"), "redis://:[REDACTED]@h:1/0"),
        (
            RedisTarget("rediss://:hunter2-pw@x/4", sentinels=SENTINELS, master="m"),
            "master 'm' of sentinels 10.0.0.1:26379,10.0.0.2:26380 (db 4, TLS)",
        ),
    ],
)
def test_where_redis_is_shown_without_the_password(target: RedisTarget, shown: str) -> None:
    assert target.shown == shown


def test_settings_make_the_target_and_redact_the_password(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-")
    assert RedisTarget.of(Settings()) is None  # embedded
    s = Settings(redis_url="rediss://fleet:a-long-password@h:6380/0", redis_tls_ca_file=ca)
    assert RedisTarget.of(s) == RedisTarget(s.redis_url or "", ca_file=str(ca))
    assert "a-long-password" in s.secrets()
    sentinel = Settings(
        redis_sentinels="h1:26379,h2:26380",
        redis_sentinel_master="m",
        redis_sentinel_password="sentinel-password",
    )
    found = RedisTarget.of(sentinel)
    assert found is not None and found.sentinels == (("h1", 26379), ("h2", 26380))
    assert found.url == "redis://localhost:6379/0" and found.master == "m"
    assert "sentinel-password" in sentinel.secrets()


def test_the_sentinel_broker_uses_fleets_transport_whose_closed_cleanup_is_a_connection_error() -> (
    None
):
    from types import SimpleNamespace

    from redis.exceptions import ConnectionError as RedisConnectionError

    from fleet.dispatch import broker_transport

    conf = RedisTarget("redis://x/0", sentinels=SENTINELS, master="m").celery()
    assert conf["broker_transport"] == "fleet.dispatch.broker_transport:SentinelTransport"
    assert RedisTarget("redis://x/0").celery()["broker_transport"] is None  # kombu's own

    class Base:
        def _connparams(self, asynchronous: bool = False) -> dict[str, int]:
            return {"db": 0}

    class Probe(broker_transport._ClosedIsAConnectionError, Base):
        pass

    probe = Probe()
    probe.connection = SimpleNamespace(client=object())
    assert probe._connparams() == {"db": 0}
    probe.connection = SimpleNamespace(client=None)  # Celery closed the transport first
    with pytest.raises(RedisConnectionError):
        probe._connparams()
