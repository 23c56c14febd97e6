"""Tenants in the pure rules: API scopes per tenant, keys read tenant first, where stored
conversations move, and who belongs to which tenant in config/."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleet.config import load_config
from fleet.domain import lifecycle
from fleet.domain.keys import ConversationRef, api_scope, check_scope, resolve
from fleet.domain.tenancy import Legacy, Move, api_owner, move
from fleet.errors import ConfigError, Forbidden
from tests.conftest import write_config


@pytest.mark.parametrize(
    ("tenant", "scope"), [("default", "api"), ("acme", "api:acme"), ("a-b_1", "api:a-b_1")]
)
def test_each_tenant_has_its_api_scope_and_default_keeps_plain_api(tenant, scope):
    assert api_scope(tenant) == scope
    assert check_scope(scope) == scope


@pytest.mark.parametrize(
    ("caller_scope", "key", "want"),
    [
        # a tenant's caller: bare, scoped, and legacy keys all name its own conversation
        ("api:acme", "t-1", ConversationRef("api:acme", "t-1")),
        ("api:acme", "api:acme:t-1", ConversationRef("api:acme", "t-1")),
        ("api:acme", "api:t-1", ConversationRef("api:acme", "t-1")),
        # another tenant's scoped key is read as a key of one's own, never as theirs
        ("api:acme", "api:bravo:t-1", ConversationRef("api:acme", "bravo:t-1")),
        ("api:bravo", "api:acme:t-1", ConversationRef("api:bravo", "acme:t-1")),
        # the shared scope (default tenant, scope = "api" callers) as before tenants
        ("api", "api:t-1", ConversationRef("api", "t-1")),
        ("api", "api:acme:t-1", ConversationRef("api", "acme:t-1")),
        ("api", "t-1", ConversationRef("api", "t-1")),
    ],
)
def test_keys_are_read_tenant_first_and_never_reach_another_tenant(caller_scope, key, want):
    assert resolve("pool", caller_scope, key) == want


@pytest.mark.parametrize("key", ["webhook:gh:1", "a2a:bob:1", "agent:lead:1"])
def test_another_sources_key_stays_forbidden_for_a_tenants_caller(key):
    with pytest.raises(Forbidden):
        resolve("pool", "api:acme", key)


@pytest.mark.parametrize(
    ("value", "tenants", "own", "want"),
    [
        ("api:acme:k", {"acme"}, "default", "acme"),
        ("api:acme:k", set(), "default", "default"),  # not configured: default's key "acme:k"
        ("api:k", {"acme"}, "default", "default"),
        ("k", {"acme"}, "default", "default"),
        ("api:default:k", {"default"}, "default", "default"),
        ("webhook:gh:1", {"acme"}, "default", None),  # the trigger's tenant decides
        ("agent:lead:1", {"acme"}, "default", None),
        # an operator of tenant acme: a bare key is its own tenant's, as for a caller; a scoped
        # one names the conversation as listings show it (api:k: the shared scope's)
        ("k", {"acme", "bravo"}, "acme", "acme"),
        ("api:acme:k", {"acme", "bravo"}, "acme", "acme"),
        ("api:bravo:k", {"acme", "bravo"}, "acme", "bravo"),  # its reach decides, not this
        ("api:k", {"acme", "bravo"}, "acme", "default"),
        ("webhook:gh:1", {"acme"}, "acme", None),
    ],
)
def test_an_operators_key_names_its_tenant_by_its_api_scope(value, tenants, own, want):
    assert lifecycle.operator_tenant(value, tenants, own) == want


@pytest.mark.parametrize(
    ("value", "tenant", "want"),
    [
        ("api:acme:k", "acme", ConversationRef("api:acme", "k")),
        ("k", "acme", ConversationRef("api:acme", "k")),
        ("api:k", "acme", ConversationRef("api:acme", "k")),
        ("api:k", "default", ConversationRef("api", "k")),
        ("webhook:gh:1", "acme", ConversationRef("webhook:gh", "1")),
    ],
)
def test_operator_refs_in_a_tenant(value, tenant, want):
    assert lifecycle.operator_ref("pool", value, tenant) == want


@pytest.mark.parametrize(
    ("callers", "want"),
    [
        (["acme"], "acme"),
        (["acme", "acme"], "acme"),
        (["acme", "bravo"], None),  # mixed: stays shared
        ([None], None),  # the CLI, or a caller no longer configured
        (["acme", None], None),
        (["default"], None),  # scope = "api" callers: the shared scope is theirs
        ([], None),
    ],
)
def test_a_stored_api_conversation_moves_only_when_one_tenant_made_it(callers, want):
    assert api_owner(callers) == want


TENANTS = {"alpha": "alpha", "bravo": "bravo", "old": None, "shared": "default"}


@pytest.mark.parametrize(
    ("legacy", "scoped", "want"),
    [
        (Legacy("api", frozenset({"alpha"})), "default", Move("alpha", "api:alpha")),
        (Legacy("api", frozenset({"alpha", "bravo"})), "default", None),
        (Legacy("api", frozenset({"alpha", "old"})), "default", None),
        (Legacy("api", frozenset({"shared"})), "default", None),
        (Legacy("api", frozenset()), "default", None),
        (Legacy("webhook:gh"), "gh", Move("gh", "webhook:gh")),
        (Legacy("webhook:gh"), "default", None),  # no callers configured: one tenant
        (Legacy("webhook:gone"), None, None),  # a trigger no longer configured
        (Legacy("a2a:bob"), "bravo", Move("bravo", "a2a:bob")),
        (Legacy("agent:lead", parent_tenant="alpha"), None, Move("alpha", "agent:lead")),
        (Legacy("agent:lead", parent_tenant="default"), None, None),
        (Legacy("agent:lead"), None, None),
        (Legacy("deployment"), None, None),  # singletons were shared: they stay
    ],
)
def test_where_a_stored_conversation_moves(legacy, scoped, want):
    assert move(legacy, TENANTS.get, scoped=scoped) == want


def _callers(config: Path, **files: str) -> None:
    (config / "callers").mkdir(exist_ok=True)
    for name, body in files.items():
        (config / "callers" / f"{name}.toml").write_text(f'{body}\nkey_sha256 = "{"a" * 64}"\n')


def test_callers_are_their_own_tenants_unless_they_name_one(tmp_path):
    config = write_config(tmp_path / "config")
    _callers(
        config,
        alpha='source = "api"',
        acme1='source = "api"\ntenant = "acme"',
        acme2='source = "a2a"\ntenant = "acme"',
        legacy='source = "api"\nscope = "api"',
    )
    (config / "tenants").mkdir()
    (config / "tenants" / "acme.toml").write_text("weight = 3\nmax_running = 2\n")
    loaded = load_config(config)
    assert [loaded.tenant_of_caller(n) for n in ("alpha", "acme1", "acme2", "legacy")] == [
        "alpha",
        "acme",
        "acme",
        "default",
    ]
    assert loaded.callers["alpha"].home == "api:alpha"
    assert loaded.callers["acme2"].home == "a2a:acme2"
    assert loaded.callers["legacy"].home == "api"
    assert loaded.tenant("acme").weight == 3 and loaded.tenant("acme").max_running == 2
    assert loaded.tenant("alpha").weight == 1 and loaded.tenant("alpha").quotas == {}
    assert loaded.tenant_names == ("acme", "alpha", "default")


def test_without_callers_there_is_one_tenant_and_triggers_join_it(tmp_path):
    config = write_config(tmp_path / "config")
    (config / "triggers").mkdir()
    (config / "triggers" / "gh.toml").write_text('deployment = "chat"\npublic = true\n')
    loaded = load_config(config)
    assert loaded.tenant_of_trigger("gh") == "default"
    assert loaded.tenant_names == ("default",)
    _callers(config, app='source = "api"')
    assert load_config(config).tenant_of_trigger("gh") == "gh"


@pytest.mark.parametrize(
    ("files", "key", "says"),
    [
        ({"default": 'source = "api"'}, "(file name)", "tenant 'default' is the open API's"),
        ({"x": 'source = "api"\ntenant = "default"'}, "tenant", "give the caller a tenant"),
        ({"x": 'source = "api"\ntenant = "acme"\nscope = "api"'}, "(top level)", "shared scope"),
        ({"x": 'source = "a2a"\nscope = "api"'}, "(top level)", "source = 'api'"),
        ({"x": 'source = "api"\ntenants = ["*"]'}, "(top level)", "operator keys"),
        ({"x": 'source = "api"\ntenant = "Acme"'}, "tenant", "lowercase"),
        ({"x": 'source = "api"\noperator = true\ntenants = []'}, "tenants", "at least one"),
    ],
)
def test_bad_tenant_settings_name_the_file_and_key(tmp_path, files, key, says):
    config = write_config(tmp_path / "config")
    _callers(config, **files)
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert err.value.key == key and says in err.value.reason, err.value


def test_a_caller_and_a_trigger_sharing_a_name_but_no_tenant_are_an_error(tmp_path):
    config = write_config(tmp_path / "config")
    (config / "triggers").mkdir()
    (config / "triggers" / "gh.toml").write_text('deployment = "chat"\npublic = true\n')
    _callers(config, gh='source = "api"')
    with pytest.raises(ConfigError, match="only because their files share a name"):
        load_config(config)
    _callers(config, gh='source = "api"\ntenant = "gh"')  # said so: one customer
    loaded = load_config(config)
    assert loaded.tenant_of_caller("gh") == loaded.tenant_of_trigger("gh") == "gh"


def test_a_webhook_callers_tenant_is_its_triggers(tmp_path):
    config = write_config(tmp_path / "config")
    (config / "triggers").mkdir()
    (config / "triggers" / "gh.toml").write_text('deployment = "chat"\ntenant = "acme"\n')
    _callers(config, hook='source = "webhook:gh"')
    assert load_config(config).tenant_of_caller("hook") == "acme"
    _callers(config, hook='source = "webhook:gh"\ntenant = "bravo"')
    with pytest.raises(ConfigError, match="its trigger's tenant"):
        load_config(config)


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("weight = 0", "weight"),
        ("weight = 101", "weight"),
        ("max_running = 0", "max_running"),
        ('max_queued_tasks = "many"', "max_queued_tasks"),
        ("tokens_per_day = -1", "tokens_per_day"),
        ("surprise = 1", "surprise"),
    ],
)
def test_bad_tenant_files_name_file_and_key(tmp_path, body, key):
    config = write_config(tmp_path / "config")
    (config / "tenants").mkdir()
    (config / "tenants" / "acme.toml").write_text(body + "\n")
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert err.value.key == key and "acme.toml" in err.value.file
