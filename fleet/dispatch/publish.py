"""Turn tokens pushed straight onto the Redis list a Celery worker consumes.

``send_task`` spends about 2 ms of Python per message (producer pool, retry policy, declare,
signals) for what is one ``LPUSH``; under load that was a third of ``fleet serve``'s CPU. A
token is always the same message, ``fleet.turn()`` with no options, so it is built here in
Celery's task protocol 2 as kombu's Redis transport stores it (priority 0 goes on the list named
after the queue), with a mark where the fair queue's scripts put each token's unique ids
(``fleet.dispatch.fair``). ``tests/integration/test_publish.py`` checks it against what
``send_task`` writes, field by field; a delayed (ETA) wake-up still goes through ``send_task``.
"""

from __future__ import annotations

import base64
import json

from celery import Celery
from celery.utils.nodenames import anon_nodename

#: A token for the fair queue: "some worker should take a turn" (``fleet.dispatch.fair``).
TURN = "fleet.turn"
#: Where a token's unique ids go in ``WakeMessages.turn_template`` (filled in by Redis).
ID_MARK = "@ID@"
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def redis_broker(app: Celery) -> bool:
    """Can wake-ups for ``app`` be pushed directly (a plain Redis broker, or the master its
    sentinels name: kombu's sentinel transport stores messages as the Redis one does)?"""
    url = str(app.conf.broker_url or "")
    options = app.conf.broker_transport_options or {}
    schemes = ("redis://", "rediss://", "unix://", "sentinel://")
    return url.startswith(schemes) and not options.get("global_keyprefix")


class WakeMessages:
    """Encodes ``fleet.turn`` messages for one queue, as one Celery app would send them."""

    def __init__(self, app: Celery, queue: str) -> None:
        self.queue = queue
        self._reply_to = app.thread_oid
        self._origin = anon_nodename()

    def turn_template(self) -> str:
        """A ``fleet.turn`` message (no arguments) whose task id, root id, correlation id and
        delivery tag read ``@ID@``: the fair queue's scripts fill in a unique id per token."""
        return self._message(TURN, [], ID_MARK, ID_MARK)

    def _message(self, name: str, args: list[str], task_id: str, tag: str) -> str:
        body = json.dumps([args, {}, _EMBED]).encode()
        return json.dumps(
            {
                "body": base64.b64encode(body).decode(),
                "content-encoding": "utf-8",
                "content-type": "application/json",
                "headers": {
                    "lang": "py",
                    "task": name,
                    "id": task_id,
                    "shadow": None,
                    "eta": None,
                    "expires": None,
                    "group": None,
                    "group_index": None,
                    "retries": 0,
                    "timelimit": [None, None],
                    "root_id": task_id,
                    "parent_id": None,
                    "argsrepr": repr(args) if args else "()",  # as send_task writes it
                    "kwargsrepr": "{}",
                    "origin": self._origin,
                    "ignore_result": None,
                    "replaced_task_nesting": 0,
                    "stamped_headers": None,
                    "stamps": {},
                },
                "properties": {
                    "correlation_id": task_id,
                    "reply_to": self._reply_to,
                    "delivery_mode": 2,
                    "delivery_info": {"exchange": "", "routing_key": self.queue},
                    "priority": 0,
                    "body_encoding": "base64",
                    "delivery_tag": tag,
                },
            }
        )
