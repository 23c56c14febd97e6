"""The authorize policy: who may dispatch into, recall from, or write notes and memory in a
conversation.

``authorize = "module:function"`` in ``config/fleet.toml`` names a function of one argument, an
``Access``. It returns ``True`` (or ``None``) to allow, ``False`` to refuse, or raises
``fleet.policy.Refused("why")`` to refuse with a reason. It is called before admission
(``dispatch``: a refusal is a 403), when a run starts or resumes (``recall``: the run fails), and
at each notes or memory tool call (``notes``, ``memory``: the model gets an error result).
Without it, the scope rules alone decide (a caller reaches only its own scope's conversations).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from fleet.errors import ConfigError, Forbidden

if TYPE_CHECKING:
    from fleet.config import FleetConfig

Action = Literal["dispatch", "recall", "notes", "memory"]


class Refused(Exception):
    """Raised by a policy to refuse with a reason the caller (or the model) is shown."""


@dataclass(frozen=True, slots=True)
class Access:
    """One access the policy decides."""

    action: Action
    #: The caller's name (``config/callers``): API, A2A or webhook caller; ``None`` for the
    #: operator's own CLI and an open API (no callers configured).
    caller: str | None
    #: Where the conversation's key comes from: ``api:<tenant>`` (``api`` for ``default``),
    #: ``webhook:<trigger>``, ``a2a:<caller>``.
    scope: str
    deployment: str
    #: The conversation's key as callers see it (``api:ticket-4711``).
    conversation: str
    #: The store's id of the conversation (None before its first admission).
    conversation_id: uuid.UUID | None = None
    #: The memory namespace of the deployment.
    namespace: str = "default"
    #: The tenant whose conversation it is (``default`` with no callers configured).
    tenant: str = "default"


Policy = Callable[[Access], bool | None]


def allow_all(access: Access) -> bool:
    """No policy configured: the scope rules (enforced elsewhere) decide alone."""
    return True


def load(ref: str | None, where: str = "config/fleet.toml") -> Policy:
    """The policy function ``ref`` names (``module:function``), or ``allow_all``."""
    if ref is None:
        return allow_all
    from fleet.agents.tools.python import ToolLoadError, resolve

    try:
        fn = resolve(ref)
    except ToolLoadError as exc:
        raise ConfigError(where, "authorize", str(exc)) from None
    return fn


def of(config: FleetConfig) -> Policy:
    """The policy ``config/fleet.toml`` names, imported with the config folder on the path
    (``fleet check``, every start and the dispatcher import it alike); ConfigError if it
    cannot be, naming the file and ``authorize``."""
    from fleet.agents.tools.toolbox import importable

    importable(config.root)
    return load(config.app.authorize, str(config.root / "fleet.toml"))


def check(policy: Policy, access: Access) -> None:
    """Raise Forbidden (with the policy's reason) unless ``policy`` allows ``access``."""
    what = f"{access.action} in conversation {access.conversation!r}"
    try:
        verdict = policy(access)
    except Refused as exc:
        raise Forbidden(f"not authorized to {what}: {exc}") from None
    except Exception as exc:  # a broken policy refuses: it must never open a door by failing
        raise Forbidden(
            f"not authorized to {what}: the authorize policy failed ({type(exc).__name__}: {exc})"
        ) from None
    if verdict is False:
        raise Forbidden(f"not authorized to {what}")
