"""The JSON log formatter: one line per record, the run's fields, redaction, exceptions."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from fleet import logs
from fleet.domain.redaction import Redactor


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("fleet.test_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)
    logger.propagate = True
    logs.redact_with(logs._PATTERNS_ONLY)


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_record_is_one_json_line_with_time_level_logger_message(capture: Any) -> None:
    logger, stream = capture
    logger.info("hello %s", "world")
    (record,) = _lines(stream)
    assert record["message"] == "hello world"
    assert record["level"] == "INFO"
    assert record["logger"] == "fleet.test_logs"
    assert record["time"].endswith("+00:00")
    assert "task_id" not in record


def test_inside_a_context_records_carry_its_fields_and_leave_them_after(capture: Any) -> None:
    logger, stream = capture
    fields = {"task_id": "t", "run_id": "r", "labels": {"team": "search"}}
    with logs.context(**fields):
        logger.warning("inside")
        with logs.context(step=2):
            logger.warning("nested")
        seen: list[dict[str, Any]] = []
        thread = threading.Thread(target=lambda: seen.append(dict(logs.current())))
        thread.start()
        thread.join()
    logger.warning("outside")
    inside, nested, outside = _lines(stream)
    assert {k: inside[k] for k in fields} == fields
    assert nested["step"] == 2 and nested["run_id"] == "r"
    assert "run_id" not in outside
    assert seen == [{}], "a plain thread does not inherit the context"


def test_an_exception_is_one_field_and_the_output_one_line(capture: Any) -> None:
    logger, stream = capture
    try:
        raise ValueError("first\nsecond")
    except ValueError:
        logger.exception("failed")
    assert len(stream.getvalue().splitlines()) == 1
    (record,) = _lines(stream)
    assert record["message"] == "failed"
    assert record["exception"].startswith("Traceback")
    assert "ValueError: first\nsecond" in record["exception"]


def test_secrets_are_redacted_in_messages_extras_and_exceptions(capture: Any) -> None:
    logger, stream = capture
    logs.redact_with(Redactor(("configured-secret-value-123",)))
    logger.warning("key configured-secret-value-123, password=hunter2hunter2")
    logger.warning("extra", extra={"data": {"token": "configured-secret-value-123"}, "obj": object})
    try:
        raise RuntimeError("configured-secret-value-123")
    except RuntimeError:
        logger.exception("boom")
    text = stream.getvalue()
    assert "configured-secret-value-123" not in text and "hunter2" not in text
    message, extra, boom = _lines(stream)
    assert message["message"] == "key [REDACTED], password=[REDACTED]"
    assert extra["data"] == {"token": "[REDACTED]"}
    assert extra["obj"] == str(object)  # not JSON: its text
    assert "[REDACTED]" in boom["exception"]


@pytest.mark.parametrize(
    ("value", "expected"), [("json", "json"), ("JSON", "json"), ("text", "text"), ("", "text")]
)
def test_the_format_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: str
) -> None:
    monkeypatch.setenv("FLEET_LOG_FORMAT", value)
    assert logs.log_format() == expected


def test_a_bad_format_is_a_settings_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fleet.config import load_settings
    from fleet.errors import ConfigError

    monkeypatch.setenv("FLEET_LOG_FORMAT", "xml")
    with pytest.raises(ConfigError, match="FLEET_LOG_FORMAT"):
        load_settings()


def test_configure_redacts_the_settings_secrets_before_any_store_is_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FLEET_OPENAI_API_KEY", "a-configured-key-0123456789")
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    try:
        logs.configure(logging.INFO, "json", stream)
        logging.getLogger("fleet.logs_configured").warning("key a-configured-key-0123456789")
    finally:
        for handler in [h for h in root.handlers if getattr(h, "_fleet", False)]:
            root.removeHandler(handler)
        root.setLevel(level)
        logs.redact_with(logs._PATTERNS_ONLY)
        logging.captureWarnings(False)
    (record,) = _lines(stream)
    assert record["message"] == "key [REDACTED]"


def test_each_finished_task_is_one_line_with_its_fields_and_no_text(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from fleet.config import Settings
    from fleet.runtime import build
    from tests.conftest import write_config

    rt = build(Settings(home=tmp_path / "home", config_dir=write_config(tmp_path / "config")))
    try:
        with caplog.at_level(logging.INFO, logger="fleet.dispatch.manager"):
            ok = rt.dispatcher.submit("chat", "a secret plan", key="k").task
            rt.dispatcher.drain(ok.conversation_id)
            failing = rt.dispatcher.submit("tooly", "/loop current_time", key="f").task
            rt.dispatcher.drain(failing.conversation_id)
    finally:
        rt.close()
    ended = [r for r in caplog.records if getattr(r, "event", "") == "task.finished"]
    fields = [(r.task_id, r.status, r.attempts, r.error_class, r.tenant) for r in ended]  # type: ignore[attr-defined]
    assert fields == [
        (str(ok.id), "succeeded", 1, None, "default"),
        (str(failing.id), "failed", 1, "step_limit", "default"),
    ]
    assert ended[1].getMessage().endswith("(step_limit)")
    assert all("secret plan" not in r.getMessage() for r in caplog.records)
