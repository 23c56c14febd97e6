"""Conversation keys and scopes: which conversation a task joins, and who may touch it.

A key is scoped by where it came from (``api:<tenant>``, ``webhook:<trigger>``, ``a2a:<caller>``,
``agent:<deployment>`` for delegated tasks) and is shown with its scope
(``api:acme:ticket-4711``); sending that value back continues the conversation. Every scope lies
within one tenant (the conversation's ``tenant``): the API scope names it, the others belong to
the tenant of their trigger, caller or delegating task. The ``default`` tenant's API scope is
plain ``api`` (the open API's, and the shared scope of ``scope = "api"`` callers).
"""

from __future__ import annotations

import re
import uuid
from typing import Literal, NamedTuple

from fleet.constants import DEFAULT_TENANT, MAX_CONVERSATION_KEY_CHARS
from fleet.errors import Forbidden, InputError

#: Scope of the one long-lived conversation of a singleton deployment.
SINGLETON_SCOPE = "deployment"
SINGLETON_KEY = "singleton"
_SCOPE = re.compile(
    r"^(api|api:[a-z0-9][a-z0-9_-]{0,62}|webhook:[A-Za-z0-9._-]{1,64}|a2a:[A-Za-z0-9._@-]{1,128}"
    r"|agent:[A-Za-z0-9._-]{1,100})$"
)
#: No control characters and no lone surrogates (neither can be stored as text).
_KEY = re.compile(r"^[^\x00-\x1f\x7f\ud800-\udfff]+$")

DeploymentKind = Literal["pool", "task", "singleton"]


class ConversationRef(NamedTuple):
    scope: str
    key: str


def api_scope(tenant: str) -> str:
    """The API scope of a tenant's conversations: ``api:<tenant>`` (``api`` for ``default``)."""
    return "api" if tenant == DEFAULT_TENANT else f"api:{tenant}"


def check_scope(scope: str) -> str:
    """A caller scope must be ``api``, ``api:<tenant>``, ``webhook:<trigger>``, ``a2a:<caller>``
    or ``agent:<deployment>`` (delegation)."""
    if not _SCOPE.fullmatch(scope):
        raise InputError(
            f"scope {scope!r} is not one of api, api:<tenant>, webhook:<trigger>, a2a:<caller>, "
            "agent:<deployment>",
            field="scope",
        )
    return scope


def split_scoped(value: str, own: str | None = None) -> tuple[str | None, str]:
    """Split ``api:k``, ``webhook:t:k``, ``a2a:c:k`` into (scope, key); a bare key has no scope.

    ``own`` is the caller's scope: a value that starts with it (``api:acme:k`` for ``api:acme``)
    is read as that scope first. Any other ``api:`` value is plain ``api`` and the rest its key
    (so ``api:bravo:k`` sent by tenant acme is acme's key ``bravo:k``, never bravo's).
    """
    if own is not None and own != "api" and value.startswith(own + ":"):
        return own, value[len(own) + 1 :]
    head, sep, rest = value.partition(":")
    if not sep:
        return None, value
    if head == "api":
        return "api", rest
    if head == SINGLETON_SCOPE:
        return SINGLETON_SCOPE, rest
    if head in ("webhook", "a2a", "agent"):
        name, sep2, key = rest.partition(":")
        if sep2 and name:
            return f"{head}:{name}", key
    return None, value


def resolve(
    kind: DeploymentKind, caller_scope: str, key: str | None, *, new_key: str | None = None
) -> ConversationRef:
    """Which conversation a submission joins (pure; ``new_key`` makes it deterministic in tests).

    - singleton: the deployment's one conversation, whatever the key;
    - pool/task with a key: one conversation per (deployment, scope, key); a key carrying another
      source's scope is refused;
    - pool/task without a key: a new conversation.
    """
    check_scope(caller_scope)
    if kind == "singleton":
        return ConversationRef(SINGLETON_SCOPE, SINGLETON_KEY)
    if key is None or key == "":
        return ConversationRef(caller_scope, new_key or uuid.uuid4().hex)
    scope, bare = split_scoped(key, caller_scope)
    if scope == "api" and is_api(caller_scope):
        scope = caller_scope  # a legacy ``api:k`` from a tenant's caller: its own conversation
    if scope is not None and scope != caller_scope:
        raise Forbidden(
            f"conversation key {key!r} belongs to scope {scope!r}; a {caller_scope!r} caller can "
            "only continue conversations of its own scope",
            field="conversationKey",
        )
    return ConversationRef(caller_scope, check_bare(key, bare))


def blank(key: str) -> bool:
    """Is a conversation key empty or only white space? Never a key: refused like an empty one
    (shown, ``api:   `` would read as ``api:``)."""
    return not key.strip()


#: What to do instead of sending an empty (or blank) conversation key.
BLANK_HINT = "send the conversation's key, or omit it to start a new one"


def check_bare(key: str, bare: str, hint: str = "") -> str:
    """``bare``, the part of ``key`` after its scope, if it is 1 to ``MAX_CONVERSATION_KEY_CHARS``
    characters without control characters, not all white space; else InputError naming ``key``
    (``hint`` ends the message)."""
    if bare and blank(bare):
        raise InputError(
            f"conversation key {key!r} is only white space: {BLANK_HINT}", field="conversationKey"
        )
    if not bare or len(bare) > MAX_CONVERSATION_KEY_CHARS or not _KEY.fullmatch(bare):
        raise InputError(
            f"conversation key {key!r} must be 1-{MAX_CONVERSATION_KEY_CHARS} characters without "
            f"control characters{hint}",
            field="conversationKey",
        )
    return bare


def is_api(scope: str) -> bool:
    """Is it an API scope (``api`` or ``api:<tenant>``)?"""
    return scope == "api" or scope.startswith("api:")


def readable_by(conversation_scope: str, caller_scope: str) -> bool:
    """A caller reads only its own scope's conversations (the singleton's is the deployment's)."""
    return conversation_scope in (caller_scope, SINGLETON_SCOPE)
