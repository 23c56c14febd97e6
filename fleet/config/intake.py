"""``config/deployments``, ``callers``, ``triggers``: what runs, who may call, how work arrives."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from fleet.config.base import (
    _NAME,
    _POINTER,
    Duration,
    TenantRef,
    _env_name,
    _matching,
    _Strict,
)
from fleet.config.reply import ReplyConfig
from fleet.constants import (
    DEFAULT_DEBOUNCE_S,
    DEFAULT_TENANT,
    MAX_DEBOUNCE_S,
    MAX_PRIORITY,
)
from fleet.domain.keys import api_scope
from fleet.domain.tenancy import tenant_name


class ConversationsConfig(_Strict):
    """What a busy conversation does with a new task (see fleet.domain.admission)."""

    #: What a submission does while the conversation is busy: ``followup`` (queue behind),
    #: ``collect`` (merge into the queued task), ``steer`` (into the running run's inbox),
    #: ``interrupt`` (stop the running run, then run).
    queue_mode: Literal["followup", "collect", "steer", "interrupt"] = "followup"
    #: collect: how far each merge moves the task's start out.
    debounce: Duration = DEFAULT_DEBOUNCE_S
    #: collect: a burst's task starts at the latest this long after its first submission
    #: (default: 10 x debounce). Inngest's debounce ``timeout``, Windmill's max debounce delay.
    max_wait: Duration | None = None
    #: collect: submissions one task may hold before a new task starts (unset: no limit).
    max_merged: StrictInt | None = Field(default=None, ge=1, le=10_000)
    #: Tasks a conversation may hold queued at once (unset: no cap).
    max_queued: StrictInt | None = Field(default=None, ge=1, le=10_000)
    #: What a submission over the cap does: reject (429), drop_oldest (cancel the oldest
    #: queued task), merge (fold into the newest queued task).
    on_full: Literal["reject", "drop_oldest", "merge"] = "reject"
    #: interrupt: the stopped run gets one last model turn (no tools) to report what it has.
    report_on_interrupt: StrictBool = True

    @field_validator("debounce")
    @classmethod
    def _bounded(cls, v: float) -> float:
        if v > MAX_DEBOUNCE_S:
            raise ValueError(f"must be at most {MAX_DEBOUNCE_S:g}s")
        return v

    @field_validator("max_wait")
    @classmethod
    def _wait(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v <= MAX_DEBOUNCE_S * 10:
            raise ValueError(f"must be more than 0s and at most {MAX_DEBOUNCE_S * 10:g}s")
        return v

    @property
    def effective_max_wait(self) -> float:
        return self.max_wait if self.max_wait is not None else 10 * self.debounce


class DeploymentConfig(_Strict):
    """A named, runnable agent: kind, queue mode, retry policy."""

    name: str
    #: The agent it runs (a file in ``config/agents``).
    agent: str
    #: ``pool`` or ``task``: a key is one conversation, no key a new one; ``singleton``: the
    #: deployment's one conversation (per tenant), keys ignored.
    kind: Literal["pool", "task", "singleton"] = "pool"
    #: ``[conversations]``: the queue mode and its settings.
    conversations: ConversationsConfig = ConversationsConfig()
    #: Overrides ``FLEET_MAX_ATTEMPTS`` for this deployment's tasks.
    max_attempts: StrictInt | None = Field(default=None, ge=1, le=100)
    #: Labels copied onto every task of this deployment.
    labels: dict[str, str] = Field(default_factory=dict)
    #: Which memory blocks its agents see: deployments of one namespace share them.
    namespace: Annotated[
        str, _matching(_NAME, "must be 1-63 lowercase letters, digits, '-' or '_'")
    ] = "default"
    #: Where replies are delivered (a trigger's own ``[reply]`` replaces it for its tasks).
    reply: ReplyConfig | None = None
    #: Which replies later runs see as history: ``all`` (default, as returned), or only
    #: ``delivered`` ones (a reply whose delivery is not ``sent`` is left out).
    remember: Literal["all", "delivered"] = "all"
    #: Where its tasks stand among their tenant's due work (0-9, higher first; a task's own
    #: ``priority`` wins; unset: 5).
    priority: StrictInt | None = Field(default=None, ge=0, le=MAX_PRIORITY)


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class CallerConfig(TenantRef):
    """An API caller: where its key comes from (its scope), its tenant, and which deployments it
    may use.

    The key itself is never in the file: give its SHA-256 (``fleet keys hash``) or the name of an
    environment variable holding it (hashed when loaded).
    """

    name: str
    #: ``api``, ``a2a`` (scope ``a2a:<caller name>``) or ``webhook:<trigger>``.
    source: str
    #: The SHA-256 hex of the key (``fleet keys hash``); or give ``key_env``.
    key_sha256: (
        Annotated[
            str,
            _matching(_SHA256, "must be 64 lowercase hex characters (see `fleet keys hash`)"),
        ]
        | None
    ) = None
    #: An environment variable holding the key (hashed when loaded); or give ``key_sha256``.
    key_env: Annotated[str, _env_name("FLEET_KEY_OPS")] | None = None
    #: Deployments this caller may use; ``["*"]`` means all.
    deployments: tuple[str, ...] = ("*",)
    #: An operator key: it may sign in to the operator UI (``/ui``) and see every scope's
    #: conversations of its deployments there.
    operator: StrictBool = False
    #: An operator key: the tenants it reaches (``["*"]``: all; unset: its own).
    tenants: tuple[str, ...] | None = None
    #: May export and erase a person's data (``/v1/resources``) of its own tenant, without
    #: being an operator (a privacy team's service, say).
    erase: StrictBool = False
    #: ``"api"``: the shared ``api`` scope of the ``default`` tenant instead of a tenant's own
    #: (``fleet check`` warns: every such caller reads the others' conversations).
    scope: Literal["api"] | None = None

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if v not in ("api", "a2a") and not re.match(r"^webhook:[a-z0-9][a-z0-9_-]{0,62}$", v):
            raise ValueError("must be 'api', 'a2a' or 'webhook:<trigger name>'")
        return v

    @field_validator("tenants")
    @classmethod
    def _tenants(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if v is not None:
            if not v:
                raise ValueError('list at least one tenant, or ["*"] for all')
            for name in v:
                if name != "*":
                    tenant_name(name)
        return v

    @model_validator(mode="after")
    def _one_key(self) -> CallerConfig:
        if (self.key_sha256 is None) == (self.key_env is None):
            raise ValueError("give exactly one of key_sha256 or key_env")
        if self.scope is not None:
            if self.source != "api":
                raise ValueError("scope = 'api' is for callers with source = 'api'")
            if self.tenant is not None:
                raise ValueError(
                    "scope = 'api' is the shared scope of tenant 'default': remove tenant, or "
                    "remove scope to give the caller its tenant's own scope"
                )
        if self.tenants is not None and not self.operator:
            raise ValueError("tenants is for operator keys (operator = true)")
        return self

    @property
    def shared(self) -> bool:
        """Does it use the shared ``api`` scope (``scope = "api"``)?"""
        return self.scope is not None

    @property
    def home(self) -> str:
        """The scope its conversations live in: ``api:<tenant>`` (``api`` for the shared one),
        ``a2a:<caller name>`` or ``webhook:<trigger>``."""
        if self.source == "a2a":
            return f"a2a:{self.name}"
        if self.source == "api":
            return api_scope(self.own_tenant)
        return self.source

    @property
    def own_tenant(self) -> str:
        """Its tenant: the shared scope's (``default``), the one it names, or its own name."""
        if self.shared:
            return DEFAULT_TENANT
        return self.tenant or self.name


class FieldRef(_Strict):
    """Where a trigger reads a value: a request header or a JSON pointer into the body."""

    #: A request header's name (an empty or blank value counts as absent).
    header: str | None = None
    #: A JSON pointer into the body (RFC 6901), like ``/issue/number``.
    pointer: (
        Annotated[str, _matching(_POINTER, "must be a JSON pointer like /issue/number (RFC 6901)")]
        | None
    ) = None

    @model_validator(mode="after")
    def _one(self) -> FieldRef:
        if (self.header is None) == (self.pointer is None):
            raise ValueError("give exactly one of header or pointer")
        return self


class SignatureConfig(_Strict):
    """HMAC-SHA256 check of a webhook delivery; the secret comes from an environment variable."""

    #: ``github`` (``X-Hub-Signature-256``), ``stripe`` (``Stripe-Signature``, signed
    #: timestamps) or ``hmac`` (the hex digest in ``header``).
    style: Literal["github", "stripe", "hmac"] = "github"
    #: The environment variable holding the secret (8 characters at least).
    secret_env: Annotated[str, _env_name("FLEET_GITHUB_SECRET")]
    #: ``hmac`` style: the header carrying the hex digest.
    header: str = "X-Signature-256"
    #: ``stripe`` style: how old a signed timestamp may be.
    tolerance: Duration = 300.0


class TriggerEventConfig(_Strict):
    """``[event]`` of a trigger: each delivery is an event (``wait_for_event``), not a task."""

    #: The event's name (``payment.cleared``), or where it is (``{ pointer = "/type" }``).
    name: str | FieldRef
    #: Where its key is (the order id the waiting runs name): a header or a JSON pointer.
    key: FieldRef
    #: JSON pointer of its data; ``""`` (default): the whole body.
    data: Annotated[
        str,
        _matching(_POINTER, "must be a JSON pointer like /data/object, or '' for the whole body"),
    ] = ""
    #: The scope whose waits it reaches (``api``, ``api:shop``): the conversations the waiting
    #: runs belong to. Default: the trigger's own, ``webhook:<name>``.
    scope: str | None = None


class TriggerConfig(TenantRef):
    """A webhook at ``/v1/triggers/<name>`` that turns deliveries into tasks (or, with
    ``[event]``, into events that waiting runs resume on)."""

    name: str
    #: The deployment its tasks run on (none for an ``[event]`` trigger).
    deployment: str | None = None
    #: ``[event]``: each delivery is an event, not a task.
    event: TriggerEventConfig | None = None
    #: Where the conversation key is; unset means a new conversation per delivery.
    conversation_key: FieldRef | None = None
    #: Where the resource id is (who the delivery is about, e.g. ``/sender/login``).
    resource: FieldRef | None = None
    #: JSON pointer of the input text; ``""`` sends the whole body as a data part.
    input: Annotated[
        str,
        _matching(_POINTER, "must be a JSON pointer like /comment/body, or '' for the whole body"),
    ] = ""
    #: label name → JSON pointer of its value.
    labels: dict[str, str] = Field(default_factory=dict)
    #: Header whose value is the delivery id (idempotency key), e.g. ``X-GitHub-Delivery``.
    idempotency_header: str | None = None
    #: ``[signature]``: how a delivery proves where it came from.
    signature: SignatureConfig | None = None
    #: Without a signature or webhook callers, accept anyone's deliveries (else only when the
    #: server has no callers configured at all).
    public: StrictBool = False
    #: Where the replies of its tasks are delivered (e.g. the GitHub issue's comments URL).
    reply: ReplyConfig | None = None

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for name, pointer in v.items():
            if not _POINTER.match(pointer):
                raise ValueError(f"label {name!r}: {pointer!r} is not a JSON pointer")
        return v

    @model_validator(mode="after")
    def _task_or_event(self) -> TriggerConfig:
        if (self.deployment is None) == (self.event is None):
            raise ValueError(
                "give a deployment (each delivery is a task) or an [event] table (each "
                "delivery is an event waiting runs resume on), not both or neither"
            )
        if self.event is not None and self.reply is not None:
            raise ValueError("an [event] trigger has no replies to deliver: remove [reply]")
        return self

    @property
    def scope(self) -> str:
        """The scope its tasks' conversations live in."""
        return f"webhook:{self.name}"
