"""A2A push-notification configs: the protocol's messages to and from fleet's store."""

from __future__ import annotations

import uuid

from a2a.types import AuthenticationInfo, TaskPushNotificationConfig

from fleet.domain import delivery as rules
from fleet.errors import InputError

#: Longest token or credentials a caller may have sent back.
MAX_SECRET_CHARS = 4096


def config(task_id: uuid.UUID, params: TaskPushNotificationConfig, owner: str) -> rules.PushConfig:
    """The config ``owner`` (the calling caller) stores; its id defaults to the task's id (as
    the a2a-sdk's stores do). InputError for a URL fleet will not call (the message does not
    repeat credentials)."""
    try:
        url = rules.check_url(params.url)
    except rules.UrlError as exc:
        raise InputError(f"pushNotificationConfig.url: {exc}", field="url") from None
    auth = params.authentication if params.HasField("authentication") else None
    for what, value in (
        ("token", params.token),
        ("credentials", auth.credentials if auth else ""),
    ):
        if len(value) > MAX_SECRET_CHARS:
            raise InputError(f"pushNotificationConfig.{what} is over {MAX_SECRET_CHARS} characters")
    config_id = params.id or str(task_id)
    if len(config_id) > 200:
        raise InputError("pushNotificationConfig.id is over 200 characters", field="id")
    return rules.PushConfig(
        task_id=task_id,
        id=config_id,
        url=url,
        token=params.token or None,
        scheme=(auth.scheme or None) if auth else None,
        credentials=(auth.credentials or None) if auth else None,
        owner=owner,
    )


def to_a2a(cfg: rules.PushConfig) -> TaskPushNotificationConfig:
    out = TaskPushNotificationConfig(id=cfg.id, task_id=str(cfg.task_id), url=cfg.url)
    if cfg.token:
        out.token = cfg.token
    if cfg.scheme:
        out.authentication.CopyFrom(
            AuthenticationInfo(scheme=cfg.scheme, credentials=cfg.credentials or "")
        )
    return out
