"""Database URLs: libpq's parameters (TLS ones too) survive every conversion, and secrets in
them never show."""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from fleet.domain.redaction import url_without_password
from fleet.store import db

TLS = "sslmode=verify-full&sslrootcert=/etc/my%20certs/ca%2B1.pem&sslcert=/c.pem&sslkey=/c.key"


def test_conninfo_keeps_every_part_exactly() -> None:
    url = db.normalize_url(f"postgresql://fleet:p%20w%40rd@db.example:5433/fleet?{TLS}")
    assert conninfo_to_dict(db.conninfo(url)) == {
        "host": "db.example",
        "port": "5433",
        "user": "fleet",
        "password": "p w@rd",
        "dbname": "fleet",
        "sslmode": "verify-full",
        "sslrootcert": "/etc/my certs/ca+1.pem",
        "sslcert": "/c.pem",
        "sslkey": "/c.key",
    }


def test_a_database_url_keeps_its_tls_parameters_on_another_database() -> None:
    url = db.normalize_url(f"postgresql://fleet@db/postgres?{TLS}").set(database="other")
    again = db.normalize_url(url.render_as_string(hide_password=False))
    assert dict(again.query) == dict(db.normalize_url(f"postgresql://x@y/z?{TLS}").query)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://fleet:hunter2@db/fleet?sslmode=verify-full&sslpassword=s3cret",
        "postgresql://fleet@db/fleet?password=hunter2&sslpassword=s3cret&sslmode=require",
        "rediss://:hunter2@redis:6380/0?ssl_cert_reqs=required",
    ],
)
def test_passwords_in_urls_never_show(url: str) -> None:
    for shown in (url_without_password(url), db.shown(db.make_url(url))):
        assert "hunter2" not in shown and "s3cret" not in shown
        assert "sslpassword" not in url or "sslpassword=" in shown  # masked, not dropped


def test_shown_writes_the_tls_parameters_as_a_user_would() -> None:
    shown = db.shown(db.normalize_url(f"postgresql://fleet:pw@db/fleet?{TLS}"))
    assert shown.startswith("postgresql+psycopg://fleet:[REDACTED]@db/fleet?")
    assert "sslrootcert=/etc/my certs/ca+1.pem" in shown


@pytest.mark.parametrize(
    ("problem", "hinted"),
    [
        ('root certificate file "/x/ca.pem" does not exist', True),
        ('server certificate for "db" does not match host name "x"', True),
        ("server does not support SSL, but SSL was required", True),
        ('pg_hba.conf rejects connection for host "10.0.0.1", no encryption', True),
        ("SSL error: certificate verify failed", True),
        ('invalid sslmode value: "bogus"', True),
        ("connection refused", False),
        ('password authentication failed for user "fleet"', False),
    ],
)
def test_a_tls_failure_says_which_setting_to_check(problem: str, hinted: bool) -> None:
    hint = db.tls_hint(problem)
    assert bool(hint) is hinted
    assert not hint or ("FLEET_DATABASE_URL" in hint and "sslrootcert" in hint)
