"""Python functions as tools: schema from hints and docstring, validation, sync/async, options."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

import pytest

from fleet.agents.tools import ToolContext, ToolLoadError, executor, toolbox
from fleet.agents.tools.python import from_function, resolve
from fleet.config import load_config
from fleet.config import secrets as config_secrets
from fleet.errors import ConfigError
from tests.conftest import write_config


class Thing:
    """Not a JSON type."""


def ctx() -> ToolContext:
    return ToolContext(task_id="t1", run_id="r1")


def tool_of(ref: str, **kw):
    return from_function(resolve(ref), origin=ref, **kw)


def call(tool, args, timeout: float = 5.0):
    return executor.call(tool, args, ctx(), timeout_s=timeout)


def test_schema_comes_from_type_hints_and_the_docstring():
    t = tool_of("tests.support.shop_tools:lookup_order")
    assert t.name == "lookup_order"
    assert t.description == "Look up an order by its number."
    assert t.parameters == {
        "type": "object",
        "properties": {
            "order_id": {
                "type": "integer",
                "title": "Order Id",
                "description": "The order number, e.g. 1234.",
            },
            "verbose": {
                "type": "boolean",
                "title": "Verbose",
                "default": False,
                "description": "Include the line items.",
            },
        },
        "required": ["order_id"],
        "additionalProperties": False,
    }
    assert (t.retry, t.timeout, t.origin) == (
        "unsafe",
        None,
        "tests.support.shop_tools:lookup_order",
    )


def test_a_context_parameter_is_injected_not_asked_of_the_model():
    t = tool_of("tests.support.shop_tools:stubborn")
    assert set(t.parameters["properties"]) == {"seconds"}
    assert call(t, {"seconds": 0}).text == "finished"


def test_decorator_options_and_config_overrides():
    t = tool_of("tests.support.shop_tools:track")
    assert (t.retry, t.timeout) == ("safe", 5)
    assert t.parameters["properties"]["carrier"] == {
        "enum": ["ups", "dhl"],
        "title": "Carrier",
        "type": "string",
    }
    over = tool_of("tests.support.shop_tools:track", retry="unsafe", timeout=1.5, name="where")
    assert (over.name, over.retry, over.timeout) == ("where", "unsafe", 1.5)
    assert tool_of("tests.support.shop_tools:slow").name == "slow_wait"


@pytest.mark.parametrize(
    ("ref", "args", "text"),
    [
        ("lookup_order", {"order_id": 7}, '{"order": 7, "status": "shipped"}'),
        ("lookup_order", {"order_id": "7"}, '{"order": 7, "status": "shipped"}'),
        (
            "lookup_order",
            {"order_id": 7, "verbose": True},
            '{"order": 7, "status": "shipped", "items": ["book"]}',
        ),
        ("track", {"carrier": "ups", "code": "1Z9"}, "ups:1Z9 is in transit"),
    ],
)
def test_valid_calls_sync_and_async(ref, args, text):
    result = call(tool_of(f"tests.support.shop_tools:{ref}"), args)
    assert (result.text, result.error) == (text, None)


@pytest.mark.parametrize(
    ("ref", "args", "expected"),
    [
        ("lookup_order", {}, "order_id: Field required"),
        ("lookup_order", {"order_id": "seven"}, "order_id: Input should be a valid integer"),
        (
            "lookup_order",
            {"order_id": 1, "colour": "red"},
            "colour: Extra inputs are not permitted",
        ),
        ("track", {"carrier": "fedex", "code": "1Z9"}, "carrier: Input should be 'ups' or 'dhl'"),
        ("track", {"carrier": "ups", "code": "1"}, "code: String should have at least 3"),
    ],
)
def test_arguments_the_schema_refuses_go_back_to_the_model(ref, args, expected):
    result = call(tool_of(f"tests.support.shop_tools:{ref}"), args)
    assert result.error is not None and expected in result.error
    assert result.text.startswith(f"error: invalid arguments for {ref}: ")
    assert not result.stopped


def test_an_exception_becomes_an_error_result():
    result = call(tool_of("tests.support.shop_tools:lookup_order"), {"order_id": 404})
    assert result.error == "LookupError: no order 404"
    assert result.text == "error: the tool raised LookupError: no order 404"


def test_timeouts_cancel_async_tools_and_tell_sync_tools_to_stop():
    slow = tool_of("tests.support.shop_tools:slow")
    result = call(slow, {"seconds": 30}, timeout=0.3)
    assert (result.error, result.stopped) == ("timed out after 0.3s", False)
    c = ctx()
    result = executor.call(
        tool_of("tests.support.shop_tools:stubborn"), {"seconds": 30}, c, timeout_s=0.3
    )
    assert result.error == "timed out after 0.3s"
    assert c.cancelled.is_set()


def test_a_stop_reaches_a_running_tool_within_a_poll():
    polls = {"n": 0}

    def watch() -> bool:
        polls["n"] += 1
        return polls["n"] >= 3

    c = ctx()
    result = executor.call(
        tool_of("tests.support.shop_tools:stubborn"),
        {"seconds": 30},
        c,
        timeout_s=60,
        watch=watch,
    )
    assert result.stopped
    assert c.cancelled.is_set()
    result = executor.call(
        tool_of("tests.support.shop_tools:slow"),
        {"seconds": 30},
        ctx(),
        timeout_s=60,
        watch=lambda: True,
    )
    assert result.stopped


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nope.nothing:fn", "cannot import module 'nope.nothing': ModuleNotFoundError"),
        ("tests.support.shop_tools:missing", "has no attribute 'missing'"),
        ("tests.support.shop_tools:fleet", "is not callable"),
        ("no_colon", "is not a tool reference"),
    ],
)
def test_references_that_do_not_resolve(ref, message):
    with pytest.raises(ToolLoadError, match=message):
        resolve(ref)


def test_signatures_a_model_cannot_call_are_refused():
    def star(*args: int) -> str:
        return ""

    def unschematic(x: Thing) -> str:
        return ""

    with pytest.raises(ToolLoadError, match=r"\*args"):
        from_function(star, origin="x:star")
    with pytest.raises(ToolLoadError, match="no JSON schema"):
        from_function(unschematic, origin="x:unschematic")
    with pytest.raises(ToolLoadError, match="must be 1-64 letters"):
        from_function(star, origin="x:star", name="has space")


def agent_config(tmp_path: Path, tools: str, extra: str = ""):
    root = write_config(
        tmp_path / "config",
        agents={"a": f'model = "echo"\ntools = {tools}\n{extra}'},
        deployments={"d": 'agent = "a"\n'},
    )
    return load_config(root)


def test_an_agent_file_names_builtins_functions_and_options(tmp_path: Path):
    cfg = agent_config(
        tmp_path,
        '["current_time", "tests.support.shop_tools:lookup_order", '
        '{ tool = "tests.support.shop_tools:track", name = "where", timeout = "2s", '
        'retry = "unsafe" }, { tool = "wait", timeout = "10s" }]',
        'tool_timeout = "20s"\n',
    )
    box = toolbox.build(cfg.agents["a"], cfg.root)
    assert list(box.static) == ["current_time", "lookup_order", "where", "wait"]
    assert box.static["where"].retry == "unsafe"
    assert box.timeout_of(box.static["where"]) == 2.0
    assert box.timeout_of(box.static["lookup_order"]) == 20.0
    assert box.timeout_of(box.static["wait"]) == 10.0
    assert box.static["current_time"].retry == "safe"


def test_tools_next_to_the_config_are_importable(tmp_path: Path):
    root = tmp_path / "config"
    (root / "acme").mkdir(parents=True)
    (root / "acme" / "__init__.py").write_text("")
    (root / "acme" / "tools_here.py").write_text(
        textwrap.dedent(
            '''
            def ping(host: str) -> str:
                """Ping a host."""
                return f"pong from {host}"
            '''
        )
    )
    cfg = agent_config(tmp_path, '["acme.tools_here:ping"]')
    box = toolbox.build(cfg.agents["a"], cfg.root)
    assert call(box.static["ping"], {"host": "h"}).text == "pong from h"


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ('["tests.support.shop_tools:nothing"]', "tools[0] (tests.support.shop_tools:nothing)"),
        ('["current_time", "current_time"]', "a second tool named 'current_time'"),
        # fleet's own tools' names are taken (delegation, memory, notes, recall)
        (
            '[{ tool = "tests.support.shop_tools:lookup_order", name = "call_agent" }]',
            "tools[0] (tests.support.shop_tools:lookup_order): the name 'call_agent' is one of "
            "fleet's own tools",
        ),
        ('["wait", { tool = "wait", name = "start_agent" }]', "tools[1] (wait): the name"),
        ('[{ tool = "current_time", name = "memory_get" }]', "'memory_get' is one of fleet's"),
    ],
)
def test_tool_errors_name_the_entry(tmp_path: Path, tools, message):
    cfg = agent_config(tmp_path, tools)
    with pytest.raises(ToolLoadError, match=re.escape(message)):
        toolbox.build(cfg.agents["a"], cfg.root)


@pytest.mark.parametrize(
    ("tools", "key", "message"),
    [
        ('["shell"]', "tools.0.tool", "unknown tool 'shell'"),
        ('[{ tool = "wait", retry = "maybe" }]', "tools.0.retry", "'safe' or 'unsafe'"),
        ('[{ tool = "wait", timeout = "0s" }]', "tools.0.timeout", "greater than zero"),
        ('[{ tool = "wait", colour = 1 }]', "tools.0.colour", "Extra inputs"),
    ],
)
def test_bad_tool_entries_are_config_errors(tmp_path: Path, tools, key, message):
    with pytest.raises(ConfigError) as info:
        agent_config(tmp_path, tools)
    assert info.value.key == key
    assert message in info.value.reason


def test_a_replaced_builtin_keeps_its_function(tmp_path: Path):
    cfg = agent_config(tmp_path, '[{ tool = "wait", name = "pause" }]')
    box = toolbox.build(cfg.agents["a"], cfg.root)
    pause = box.static["pause"]
    assert dataclasses.replace(pause, name="wait").fn is pause.fn
    assert call(pause, {"seconds": 0}).text == "waited 0s"


def test_two_tools_that_would_reach_the_model_under_one_name_are_refused(tmp_path: Path):
    from fleet.agents.tools.base import ToolServerError

    cfg = agent_config(tmp_path, '["current_time"]')
    box = toolbox.build(cfg.agents["a"], cfg.root)
    clash = dataclasses.replace(box.static["current_time"], name="srv.clock")
    other = dataclasses.replace(box.static["current_time"], name="srv__clock")
    with (
        pytest.raises(ToolServerError, match="reach the model under one name"),
        box.opened(ctx(), extra=[clash, other]),
    ):
        pass


def test_config_secrets_are_collected_for_redaction(tmp_path: Path):
    root = write_config(
        tmp_path / "config",
        agents={
            "a": 'model = "echo"\n[[mcp_servers]]\nname = "gh"\nurl = "http://127.0.0.1:9/mcp"\n'
            'headers_env = { Authorization = "FLEET_T_GH" }\n'
        },
        deployments={"d": 'agent = "a"\n'},
    )
    cfg = load_config(root)
    assert config_secrets.values(cfg, {"FLEET_T_GH": "Bearer ghp_secret", "OTHER": "x"}) == (
        "Bearer ghp_secret",
    )
    assert config_secrets.values(cfg, {}) == ()


def test_fleet_tool_names_are_the_tools_fleet_binds_to_runs():
    """The reserved names are exactly the names of the tools fleet adds to a run itself."""
    import uuid
    from datetime import UTC, datetime

    from fleet.agents.tools import delegation
    from fleet.config import MemoryAttachment
    from fleet.config.agents import WorkingMemoryConfig
    from fleet.constants import FLEET_TOOL_NAMES
    from fleet.memory import tools as memory_tools
    from fleet.recall import observer, working

    names = set(delegation.NAMES)
    names |= {t.name for t in memory_tools.note_tools(None)}  # type: ignore[arg-type]
    block = memory_tools.block_tool([MemoryAttachment(block="b", mode="write")], None)  # type: ignore[arg-type]
    assert block is not None
    names.add(block.name)
    names.add(observer.search_tool(None, None, uuid.uuid4()).name)  # type: ignore[arg-type]
    state = working.update_tool(
        WorkingMemoryConfig(),
        None,  # type: ignore[arg-type]
        key="k",
        schema=None,
        run_id=uuid.uuid4(),
        clock=lambda: datetime.now(UTC),
        authorize=lambda _: None,
    )
    names.add(state.name)
    assert names == FLEET_TOOL_NAMES


def test_builtin_tool_names_are_the_builtin_tools():
    """Config validation knows the built-ins by name (fleet.constants) without importing them;
    ``schedule_followup`` and ``pause`` are bound to each run instead (fleet.dispatch.sources)."""
    from fleet.agents.tools.builtin import BUILTIN_TOOLS
    from fleet.constants import BUILTIN_TOOL_NAMES, RUN_BOUND_TOOLS

    assert set(BUILTIN_TOOLS) | RUN_BOUND_TOOLS == BUILTIN_TOOL_NAMES
