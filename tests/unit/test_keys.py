"""Conversation keys and scopes: which conversation a submission joins, and who may read it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.constants import MAX_CONVERSATION_KEY_CHARS
from fleet.domain.keys import (
    SINGLETON_KEY,
    SINGLETON_SCOPE,
    ConversationRef,
    check_scope,
    readable_by,
    resolve,
    split_scoped,
)
from fleet.errors import Forbidden, InputError

LONGEST = "k" * MAX_CONVERSATION_KEY_CHARS


@pytest.mark.parametrize(
    "scope",
    [
        "api",
        "webhook:github",
        "webhook:a.b_c-1",
        "webhook:" + "w" * 64,
        "a2a:caller",
        "a2a:bot@example.com",
        "a2a:" + "c" * 128,
        "agent:triage",
        "agent:lead_2",
    ],
)
def test_check_scope_accepts(scope):
    assert check_scope(scope) == scope


@pytest.mark.parametrize(
    "scope",
    [
        "",
        "API",
        "apix",
        "deployment",
        "webhook",
        "webhook:",
        "webhook:a:b",
        "webhook:a b",
        "webhook:" + "w" * 65,
        "a2a:",
        "a2a:" + "c" * 129,
        "a2a:bad/caller",
        "other:x",
        "agent:",
        "agent:a b",
    ],
)
def test_check_scope_refuses(scope):
    with pytest.raises(InputError) as info:
        check_scope(scope)
    assert info.value.field == "scope"
    assert repr(scope) in info.value.message


def test_check_scope_refuses_trailing_newline():
    with pytest.raises(InputError):
        check_scope("api\n")


@pytest.mark.parametrize(
    "value,expected",
    [
        ("ticket-4711", (None, "ticket-4711")),
        ("api:ticket-4711", ("api", "ticket-4711")),
        ("api:", ("api", "")),
        ("api:a:b", ("api", "a:b")),
        ("webhook:github:pr-1", ("webhook:github", "pr-1")),
        ("webhook:github:a:b", ("webhook:github", "a:b")),
        ("webhook:github:", ("webhook:github", "")),
        ("a2a:caller:task-9", ("a2a:caller", "task-9")),
        # no trigger/caller name: not a scoped key, the whole value is the key
        ("webhook:github", (None, "webhook:github")),
        ("webhook::k", (None, "webhook::k")),
        ("a2a:caller", (None, "a2a:caller")),
        # an unknown prefix is part of a bare key
        ("order:42", (None, "order:42")),
        ("", (None, "")),
    ],
)
def test_split_scoped(value, expected):
    assert split_scoped(value) == expected


@pytest.mark.parametrize(
    "kind,caller,key,expected",
    [
        # one conversation per (scope, key); a key carrying the caller's own scope is the same
        ("pool", "api", "ticket-4711", ConversationRef("api", "ticket-4711")),
        ("pool", "api", "api:ticket-4711", ConversationRef("api", "ticket-4711")),
        ("task", "api", "ticket-4711", ConversationRef("api", "ticket-4711")),
        ("pool", "webhook:gh", "pr-1", ConversationRef("webhook:gh", "pr-1")),
        ("pool", "webhook:gh", "webhook:gh:pr-1", ConversationRef("webhook:gh", "pr-1")),
        ("pool", "a2a:bot", "a2a:bot:t", ConversationRef("a2a:bot", "t")),
        ("pool", "api", "order:42", ConversationRef("api", "order:42")),
        ("pool", "api", "api:a:b", ConversationRef("api", "a:b")),
        ("pool", "api", "ünïcödé key", ConversationRef("api", "ünïcödé key")),
        ("pool", "api", LONGEST, ConversationRef("api", LONGEST)),
        ("pool", "api", "api:" + LONGEST, ConversationRef("api", LONGEST)),
        # no key: a new conversation (new_key makes it deterministic)
        ("pool", "api", None, ConversationRef("api", "fresh")),
        ("pool", "api", "", ConversationRef("api", "fresh")),
        ("task", "webhook:gh", None, ConversationRef("webhook:gh", "fresh")),
        # singleton: the deployment's one conversation, whatever the key or caller
        ("singleton", "api", None, ConversationRef(SINGLETON_SCOPE, SINGLETON_KEY)),
        ("singleton", "api", "anything", ConversationRef(SINGLETON_SCOPE, SINGLETON_KEY)),
        ("singleton", "a2a:bot", "webhook:x:y", ConversationRef(SINGLETON_SCOPE, SINGLETON_KEY)),
    ],
)
def test_resolve(kind, caller, key, expected):
    assert resolve(kind, caller, key, new_key="fresh") == expected


def test_resolve_without_key_makes_a_new_conversation_each_time():
    a = resolve("pool", "api", None)
    b = resolve("pool", "api", None)
    assert a.scope == b.scope == "api"
    assert a.key != b.key
    assert len(a.key) == 32


@pytest.mark.parametrize(
    "caller,key",
    [
        ("api", "webhook:gh:pr-1"),
        ("api", "a2a:bot:t"),
        ("webhook:gh", "api:ticket"),
        ("webhook:gh", "webhook:other:pr-1"),
        ("a2a:bot", "a2a:evil:t"),
        ("a2a:bot", "api:x"),
    ],
)
def test_resolve_refuses_other_scopes_key(caller, key):
    with pytest.raises(Forbidden) as info:
        resolve("pool", caller, key)
    assert info.value.field == "conversationKey"
    assert info.value.status == 403
    assert repr(caller) in info.value.message


@pytest.mark.parametrize(
    "key",
    [
        "api:",
        "k" * (MAX_CONVERSATION_KEY_CHARS + 1),
        "api:" + "k" * (MAX_CONVERSATION_KEY_CHARS + 1),
        "tab\there",
        "nul\x00",
        "del\x7f",
        "\nleading",
    ],
)
def test_resolve_refuses_bad_key(key):
    with pytest.raises(InputError) as info:
        resolve("pool", "api", key)
    assert info.value.field == "conversationKey"
    assert str(MAX_CONVERSATION_KEY_CHARS) in info.value.message


@pytest.mark.parametrize(
    ("caller", "key"),
    [
        ("api", "   "),
        ("api", "api:   "),
        ("api:acme", "\u3000"),
        ("api:acme", "api:\u2003"),
        ("a2a:bob", "   "),  # an A2A contextId
        ("webhook:gh", " "),
        ("agent:lead", "  "),  # a delegated conversation (call_agent)
    ],
)
def test_resolve_refuses_a_key_of_white_space_alone(caller, key):
    with pytest.raises(InputError) as info:
        resolve("pool", caller, key)
    assert info.value.field == "conversationKey"
    assert info.value.message.endswith(
        "is only white space: send the conversation's key, or omit it to start a new one"
    )
    with pytest.raises(InputError, match="only white space"):  # its own scope, shown
        resolve("pool", "api:acme", "api:acme: ")


def test_resolve_refuses_trailing_newline_key():
    with pytest.raises(InputError):
        resolve("pool", "api", "ticket\n")


@pytest.mark.parametrize("caller", ["", "nope", "webhook:"])
def test_resolve_checks_caller_scope_first(caller):
    with pytest.raises(InputError) as info:
        resolve("singleton", caller, None)
    assert info.value.field == "scope"


@pytest.mark.parametrize(
    "conversation,caller,expected",
    [
        ("api", "api", True),
        ("webhook:gh", "webhook:gh", True),
        ("a2a:bot", "a2a:bot", True),
        (SINGLETON_SCOPE, "api", True),
        (SINGLETON_SCOPE, "a2a:bot", True),
        ("api", "webhook:gh", False),
        ("webhook:gh", "api", False),
        ("webhook:gh", "webhook:other", False),
        ("a2a:bot", "a2a:evil", False),
    ],
)
def test_readable_by(conversation, caller, expected):
    assert readable_by(conversation, caller) is expected


SCOPES = st.one_of(
    st.just("api"),
    st.from_regex(r"\Awebhook:[A-Za-z0-9._-]{1,64}\Z"),
    st.from_regex(r"\Aa2a:[A-Za-z0-9._@-]{1,128}\Z"),
)
KEYS = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs")),
    min_size=1,
    max_size=MAX_CONVERSATION_KEY_CHARS,
)


@settings(database=None, max_examples=200)
@given(scope=SCOPES, key=KEYS)
def test_shown_key_continues_the_same_conversation(scope, key):
    """Invariant 7: the key a caller gets back (``scope:key``) continues the same conversation."""
    try:
        ref = resolve("pool", scope, key)
    except (Forbidden, InputError):
        return  # the key named another scope, or had an empty key after its scope
    shown = f"{ref.scope}:{ref.key}"
    assert resolve("pool", scope, shown) == ref
    assert readable_by(ref.scope, scope)
