"""``[reply]`` at load time and when its request is built: a header variable that is not set is
a config error naming the file and ``reply.headers.<Name>``; a rendered body over the cap
(``MAX_DELIVERY_BODY_BYTES``, counted in UTF-8 bytes) is refused, at the cap it is sent."""

from __future__ import annotations

import json
import os
import textwrap
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleet.config import load_config
from fleet.config import secrets as config_secrets
from fleet.config.reply import ReplyConfig
from fleet.constants import MAX_DELIVERY_BODY_BYTES
from fleet.delivery import targets
from fleet.domain import delivery as rules
from fleet.domain.values import Task, TaskStatus, TextPart
from fleet.errors import ConfigError

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
VAR = "FLEET_TEST_REPLY_TOKEN"
AGENT = 'model = "echo"\n'


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("FLEET_"):
            monkeypatch.delenv(name)


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def reply_toml(header: str, source: str) -> str:
    url = "https://example.com/hook/{task_id}"
    return f'[reply]\nurl = "{url}"\nheaders = {{ {header} = {source} }}\n'


# -- header variables ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rel", "head", "header", "source"),
    [
        ("deployments/d.toml", 'agent = "a"\n', "Authorization", f'"{VAR}"'),
        (
            "deployments/d.toml",
            'agent = "a"\n',
            "Authorization",
            f'{{ env = "{VAR}", prefix = "Bearer " }}',
        ),
        ("triggers/t.toml", 'deployment = "d"\npublic = true\n', "X-Api-Key", f'"{VAR}"'),
        (
            "triggers/t.toml",
            'deployment = "d"\npublic = true\n',
            "Authorization",
            f'{{ env = "{VAR}", prefix = "token " }}',
        ),
    ],
)
@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
def test_an_unset_header_variable_names_the_file_and_key(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    rel: str,
    head: str,
    header: str,
    source: str,
    value: str | None,
) -> None:
    if value is not None:
        monkeypatch.setenv(VAR, value)
    files = {"agents/a.toml": AGENT, "deployments/d.toml": 'agent = "a"\n'}
    files[rel] = head + reply_toml(header, source)
    root = write(tmp_path, files)
    with pytest.raises(ConfigError) as info:
        load_config(root)
    err = info.value
    assert err.file == str(root / rel)
    assert err.key == f"reply.headers.{header}"
    assert VAR in err.reason and "not set" in err.reason
    assert str(err) == f"{root / rel}: reply.headers.{header}: {err.reason}"


def test_a_set_header_variable_loads_and_is_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(VAR, "tok-123456")
    files = {
        "agents/a.toml": AGENT,
        "deployments/d.toml": 'agent = "a"\n'
        + reply_toml("Authorization", f'{{ env = "{VAR}", prefix = "Bearer " }}'),
    }
    cfg = load_config(write(tmp_path, files))
    reply = cfg.deployments["d"].reply
    assert reply is not None
    assert reply.header_values() == {"Authorization": "Bearer tok-123456"}
    assert "tok-123456" in config_secrets.values(cfg)


# -- the body cap --------------------------------------------------------------------------------


def task(reply: str) -> Task:
    return Task(
        id=uuid.UUID(int=99),
        deployment="chat",
        conversation_id=uuid.UUID(int=7),
        scope="api",
        key="k",
        seq=1,
        status=TaskStatus.SUCCEEDED,
        input=(TextPart(text="hi"),),
        not_before=T0,
        max_attempts=3,
        attempts=1,
        created_at=T0,
        finished_at=T0,
        result={"reply": reply},
    )


CFG = ReplyConfig(url="https://example.com/hook/{task_id}", body={"b": "{reply}"})
#: ``{"b": "…"}`` around the reply.
FRAME = len(json.dumps({"b": ""}).encode())
CAP = MAX_DELIVERY_BODY_BYTES


def test_the_cap_is_256_kib() -> None:
    assert CAP == 256 * 1024


@pytest.mark.parametrize(
    ("reply", "size"),
    [
        ("x" * (CAP - FRAME - 1), CAP - 1),
        ("x" * (CAP - FRAME), CAP),
        # UTF-8 bytes count, not characters (JSON keeps them as they are)
        ("é" * ((CAP - FRAME) // 2), CAP - (CAP - FRAME) % 2),
    ],
    ids=["below", "at", "at-multibyte"],
)
def test_a_body_up_to_the_cap_is_sent_whole(reply: str, size: int) -> None:
    request = targets.reply_request(CFG, task(reply), "key-1")
    assert len(request.body) == size
    assert json.loads(request.body) == {"b": reply}
    assert request.headers["Idempotency-Key"] == "key-1"


@pytest.mark.parametrize(
    ("reply", "size"),
    [
        ("x" * (CAP - FRAME + 1), CAP + 1),
        ("é" * ((CAP - FRAME) // 2 + 1), FRAME + 2 * ((CAP - FRAME) // 2 + 1)),
        ("x" * (2 * CAP), 2 * CAP + FRAME),
    ],
    ids=["one-over", "multibyte-over", "far-over"],
)
def test_a_body_over_the_cap_is_refused_naming_both_sizes(reply: str, size: int) -> None:
    assert len(reply) <= 2 * CAP and size > CAP
    with pytest.raises(rules.TemplateError) as info:
        targets.reply_request(CFG, task(reply), "key-1")
    assert str(info.value) == f"the body is {size} bytes; a delivery sends at most {CAP}"
    assert reply[:50] not in str(info.value)  # the reply itself is not echoed


def test_the_default_body_is_capped_too() -> None:
    plain = ReplyConfig(url="https://example.com/hook")
    with pytest.raises(rules.TemplateError, match="a delivery sends at most"):
        targets.reply_request(plain, task("x" * CAP), "key-1")
