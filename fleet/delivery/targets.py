"""Where a task's reply goes, and the HTTP request one delivery sends."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleet.config import FleetConfig
from fleet.config.reply import ReplyConfig
from fleet.constants import MAX_DELIVERY_BODY_BYTES
from fleet.domain import delivery as rules
from fleet.domain.values import Task, TaskStatus

#: Task outcomes that stored a reply.
REPLIED = frozenset({TaskStatus.SUCCEEDED, TaskStatus.SUPERSEDED})
#: The header carrying the caller's push-notification token back (A2A).
A2A_TOKEN_HEADER = "X-A2A-Notification-Token"


@dataclass(frozen=True, slots=True)
class Request:
    """One attempt's HTTP request: the same every attempt (same ``Idempotency-Key``)."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes


def reply_config(config: FleetConfig, task: Task) -> tuple[str, ReplyConfig] | None:
    """The ``[reply]`` for a task: its trigger's (``webhook:<name>`` scope) or else its
    deployment's, with the target name (``reply:triggers/github``)."""
    if task.scope.startswith("webhook:"):
        trig = config.triggers.get(task.scope.removeprefix("webhook:"))
        if trig is not None and trig.reply is not None:
            return f"reply:triggers/{trig.name}", trig.reply
    dep = config.deployments.get(task.deployment)
    if dep is not None and dep.reply is not None:
        return f"reply:deployments/{dep.name}", dep.reply
    return None


def reply_targets(config: FleetConfig, task: Task, status: TaskStatus) -> list[rules.Target]:
    """Where a task that ended ``status`` sends from its configuration: its ``[reply]``, only
    with a reply. (A2A push configs are the store's: ``Store.open_deliveries(push=True)``
    journals them with the final state, whatever it is.)"""
    found = reply_config(config, task)
    if found is not None and status in REPLIED:
        return [rules.Target(found[0], "reply", found[1].attempts)]
    return []


def fields(task: Task) -> dict[str, Any]:
    """What templates may name: ``{reply}``, ``{task_id}``, ``{conversation}``, ``{deployment}``,
    ``{status}`` and ``{labels.<name>}``."""
    return {
        "reply": task.reply,
        "task_id": str(task.id),
        "conversation": task.conversation,
        "deployment": task.deployment,
        "status": task.status.value,
        "labels": dict(task.labels),
    }


def _json_body(value: Any) -> bytes:
    body = json.dumps(value, ensure_ascii=False).encode()
    if len(body) > MAX_DELIVERY_BODY_BYTES:
        raise rules.TemplateError(
            f"the body is {len(body)} bytes; a delivery sends at most {MAX_DELIVERY_BODY_BYTES}"
        )
    return body


def reply_request(
    cfg: ReplyConfig, task: Task, key: str, environ: Mapping[str, str] | None = None
) -> Request:
    """The request of a ``[reply]`` (TemplateError, UrlError, or KeyError for an unset
    header variable)."""
    values = fields(task)
    url = rules.check_url(rules.render(cfg.url, values, url=True))
    body = _json_body(rules.render_body(cfg.body or rules.DEFAULT_BODY, values))
    headers = {
        **cfg.header_values(environ),
        "Content-Type": "application/json",
        "Idempotency-Key": key,
    }
    return Request(cfg.method, url, headers, body)


def push_request(push: rules.PushConfig, task_json: dict[str, Any], key: str) -> Request:
    """An A2A push notification: a StreamResponse with the task, the caller's token sent back
    (``X-A2A-Notification-Token``) and its authentication as ``Authorization``."""
    url = rules.check_url(push.url)
    headers = {"Content-Type": "application/json", "Idempotency-Key": key}
    if push.token:
        headers[A2A_TOKEN_HEADER] = push.token
    if push.scheme and push.credentials:
        headers["Authorization"] = f"{push.scheme} {push.credentials}"
    return Request("POST", url, headers, _json_body({"task": task_json}))
