"""``fleet check`` refuses what a start refuses, with the same line, and a refused start
creates nothing: the authorize policy, unset and too short secrets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.e2e.test_cli import SHIPPED_CONFIG, Cli, Result

pytestmark = pytest.mark.timeout(120)


def _config(root: Path, files: dict[str, str]) -> Path:
    """An echo agent ``support`` and its deployment, plus ``files`` (path → text)."""
    write_config(
        root, agents={"support": 'model = "echo"\n'}, deployments={"support": 'agent = "support"\n'}
    )
    for name, body in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(body))
    return root


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    home = tmp_path / "home"
    return Cli(cwd, home, {"FLEET_HOME": str(home)})


def _failures(r: Result) -> list[str]:
    assert "Traceback" not in r.out + r.err, r
    return [line for line in r.out.splitlines() if line.startswith("FAIL")]


def _refused_alike(cli: Cli, config: Path, line: str) -> None:
    """check fails (exit 2) with ``line``; run and serve refuse with it and create nothing."""
    cli.env["FLEET_CONFIG_DIR"] = str(config)
    checked = cli("check")
    assert checked.code == 2, checked
    assert _failures(checked) == [f"FAIL  config: {line}"]
    for args in (("run", "support", "hi"), ("serve", "--port", "1")):
        r = cli(*args)
        assert r.code == 2, r
        assert r.one_error_line() == f"fleet: {line}"
    assert not cli.home.exists(), "a refused start must create nothing"
    assert list(cli.cwd.iterdir()) == []


def test_an_authorize_policy_that_does_not_import_fails_check_as_it_fails_a_start(
    cli: Cli, tmp_path: Path
) -> None:
    config = _config(tmp_path / "config", {"fleet.toml": 'authorize = "nosuch:fn"\n'})
    line = (
        f"{config / 'fleet.toml'}: authorize: cannot import module 'nosuch': "
        "ModuleNotFoundError: No module named 'nosuch'"
    )
    _refused_alike(cli, config, line)


def test_an_authorize_policy_that_imports_passes_check(cli: Cli, tmp_path: Path) -> None:
    config = _config(
        tmp_path / "config",
        {
            "fleet.toml": 'authorize = "policies:allow"\n',
            "policies.py": "def allow(access):\n    return True\n",
        },
    )
    r = cli("check", FLEET_CONFIG_DIR=str(config))
    assert (r.code, _failures(r)) == (0, []), r


TRIGGER = 'deployment = "support"\n[signature]\nsecret_env = "FLEET_TEST_SIGNING_SECRET"\n'
REPLY = (
    'agent = "support"\n[reply]\nurl = "https://example.com/x"\n'
    'headers = { Authorization = "FLEET_TEST_REPLY_TOKEN" }\n'
)


def test_an_unset_reply_header_fails_check_naming_file_key_and_variable(
    cli: Cli, tmp_path: Path
) -> None:
    """A [reply] header's variable: exit 2 naming what to set (a reply would be lost)."""
    reply = _config(tmp_path / "r", {"deployments/support.toml": REPLY})
    r = cli("check", FLEET_CONFIG_DIR=str(reply))
    assert r.code == 2, r
    assert _failures(r) == [
        f"FAIL  config: {reply / 'deployments' / 'support.toml'}: reply.headers.Authorization: "
        "environment variable FLEET_TEST_REPLY_TOKEN is not set (it holds the header's value)"
    ]
    assert not cli.home.exists()


def test_an_unset_signing_secret_is_a_warning_naming_what_to_set(cli: Cli, tmp_path: Path) -> None:
    """A trigger whose secret is unset accepts nothing (503) until it is set: check passes and
    says what to set."""
    trigger = _config(tmp_path / "t", {"triggers/github.toml": TRIGGER})
    r = cli("check", FLEET_CONFIG_DIR=str(trigger))
    assert (r.code, _failures(r)) == (0, []), r
    assert (
        f"warn  triggers: {trigger / 'triggers' / 'github.toml'}: signature.secret_env: "
        "environment variable FLEET_TEST_SIGNING_SECRET is not set: set it to the secret its "
        "sender signs with; until then the trigger answers 503 and accepts nothing"
    ) in r.out.splitlines()
    assert not cli.home.exists()


def test_the_shipped_config_passes_check_in_a_clean_environment(cli: Cli) -> None:
    """A fresh clone's `fleet check` (no FLEET_* variable set) exits 0 and names what to set
    for the example trigger to accept deliveries."""
    r = cli("check", FLEET_CONFIG_DIR=str(SHIPPED_CONFIG))
    assert (r.code, _failures(r)) == (0, []), r
    warned = [line for line in r.out.splitlines() if line.startswith("warn  triggers:")]
    assert len(warned) == 1 and "FLEET_GITHUB_WEBHOOK_SECRET is not set: set it" in warned[0]


@pytest.mark.parametrize(
    ("files", "where", "key", "var"),
    [
        (
            {"triggers/github.toml": TRIGGER},
            "triggers/github.toml",
            "signature.secret_env",
            "FLEET_TEST_SIGNING_SECRET",
        ),
        (
            {"deployments/support.toml": REPLY},
            "deployments/support.toml",
            "reply.headers.Authorization",
            "FLEET_TEST_REPLY_TOKEN",
        ),
    ],
    ids=["trigger", "reply"],
)
def test_a_secret_too_short_to_redact_fails_check_and_start_alike(
    cli: Cli, tmp_path: Path, files: dict[str, str], where: str, key: str, var: str
) -> None:
    config = _config(tmp_path / "config", files)
    cli.env[var] = "whsec"
    line = (
        f"{config / where}: {key}: environment variable {var} holds fewer than 8 characters; "
        "give a longer secret (a shorter one could not be redacted from what fleet stores)"
    )
    _refused_alike(cli, config, line)
    cli.env[var] = "whsec_long_enough"
    r = cli("check")
    assert (r.code, _failures(r)) == (0, []), r


def test_a_short_ui_secret_fails_check_as_other_short_secrets_do(cli: Cli, tmp_path: Path) -> None:
    """FLEET_UI_SECRET signs operator UI sessions: fewer than 32 bytes exit 2 (a start only
    warns, for one release); the value is never shown."""
    config = _config(tmp_path / "config", {})
    cli.env["FLEET_CONFIG_DIR"] = str(config)
    r = cli("check", FLEET_UI_SECRET="short-ui-secret")
    assert r.code == 2, r
    assert _failures(r) == [
        "FAIL  settings: environment: FLEET_UI_SECRET: holds fewer than 32 bytes; give a longer "
        "secret, e.g. `openssl rand -hex 32` (a shorter one could be guessed, and operator UI "
        "sessions forged with it)"
    ]
    assert "short-ui-secret" not in r.out + r.err
    r = cli("check", FLEET_UI_SECRET="s" * 32)
    assert (r.code, _failures(r)) == (0, []), r


def test_a_caller_naming_a_tenant_without_a_file_is_warned_naming_the_ones_that_exist(
    cli: Cli, tmp_path: Path
) -> None:
    """``tenant = "acmee"`` (a typo) while acme and globex have files would make an
    unthrottled tenant: check warns naming the file and the tenants that exist, and passes."""
    files = {
        "tenants/acme.toml": "max_running = 2\n",
        "tenants/globex.toml": "weight = 2\n",
        "callers/acme-app.toml": 'source = "api"\ntenant = "acmee"\nkey_sha256 = "'
        + "a" * 64
        + '"\n',
        "callers/globex-app.toml": 'source = "api"\ntenant = "globex"\nkey_sha256 = "'
        + "b" * 64
        + '"\n',
        "triggers/hooks.toml": 'deployment = "support"\ntenant = "glob"\npublic = true\n',
    }
    config = _config(tmp_path / "config", files)
    r = cli("check", FLEET_CONFIG_DIR=str(config))
    assert (r.code, _failures(r)) == (0, []), r
    warned = [line for line in r.out.splitlines() if "has no file" in line]
    assert warned == [
        f"warn  tenants: {config / 'callers' / 'acme-app.toml'}: tenant: tenant 'acmee' has no "
        f"file in {config / 'tenants'} (tenants with files: acme, globex): it gets weight 1 and "
        "no quotas or budget; fix the name, or add tenants/acmee.toml",
        f"warn  tenants: {config / 'triggers' / 'hooks.toml'}: tenant: tenant 'glob' has no "
        f"file in {config / 'tenants'} (tenants with files: acme, globex): it gets weight 1 and "
        "no quotas or budget; fix the name, or add tenants/glob.toml",
    ]
    # with no tenant files at all, a tenant without one is the normal case: no warning
    for name in ("acme", "globex"):
        (config / "tenants" / f"{name}.toml").unlink()
    r = cli("check", FLEET_CONFIG_DIR=str(config))
    assert r.code == 0 and "has no file" not in r.out, r


def test_every_error_of_every_file_is_reported_by_check_and_by_a_start(
    cli: Cli, tmp_path: Path
) -> None:
    """A tenant file with three bad keys and two broken schedules: five lines, in one run of
    `fleet check` (exit 2) and of a refused start, which creates nothing."""
    config = _config(
        tmp_path / "config",
        {
            "tenants/acme.toml": 'weight = 0\nmax_running = "2"\nquota = 5\n',
            "schedules/a.toml": 'deployment = "support"\ninput = "x"\ncron = "0 8 * * 1-8"\n',
            "schedules/b.toml": 'deployment = "support"\ninput = "x"\nevery = "0.5s"\n',
        },
    )
    cli.env["FLEET_CONFIG_DIR"] = str(config)
    checked = cli("check")
    assert checked.code == 2, checked
    failed = [line.removeprefix("FAIL  config: ") for line in _failures(checked)]
    expected = [
        (config / "tenants" / "acme.toml", "weight"),
        (config / "tenants" / "acme.toml", "max_running"),
        (config / "tenants" / "acme.toml", "quota"),
        (config / "schedules" / "a.toml", "cron"),
        (config / "schedules" / "b.toml", "every"),
    ]
    assert [line.split(": ")[:2] for line in failed] == [[str(f), k] for f, k in expected]
    started = cli("run", "support", "hi")
    assert started.code == 2, started
    assert "Traceback" not in started.err
    assert started.err.splitlines() == [f"fleet: {line}" for line in failed]
    assert not cli.home.exists(), "a refused start must create nothing"


def test_every_refusal_of_a_start_is_reported_at_once(cli: Cli, tmp_path: Path) -> None:
    """An authorize policy that does not import and two secrets too short to redact: check and
    a start both name all three."""
    config = _config(
        tmp_path / "config",
        {
            "fleet.toml": 'authorize = "nosuch:fn"\n',
            "triggers/github.toml": TRIGGER,
            "deployments/support.toml": REPLY,
        },
    )
    cli.env.update(
        FLEET_CONFIG_DIR=str(config),
        FLEET_TEST_SIGNING_SECRET="whsec",
        FLEET_TEST_REPLY_TOKEN="tok",
    )
    checked = cli("check")
    assert checked.code == 2, checked
    lines = [line.removeprefix("FAIL  config: ") for line in _failures(checked)]
    assert [line.split(": ")[1] for line in lines] == [
        "authorize",
        "signature.secret_env",
        "reply.headers.Authorization",
    ]
    started = cli("serve", "--port", "1")
    assert started.code == 2, started
    assert started.err.splitlines() == [f"fleet: {line}" for line in lines]
    assert not cli.home.exists()
