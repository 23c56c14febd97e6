"""kombu's Redis transports, with a lost connection's cleanup kept from stopping the worker.

When a worker loses the broker with a task unacknowledged (every running task: acks are late),
Celery closes the connection's transport, then its channel; closing the channel tries once
more to put the unacknowledged messages back, which needs the transport it has just lost, and
kombu (5.7) raises ``AttributeError`` there. That is not a connection error, so Celery's cleanup
lets it through and the worker stops instead of reconnecting (seen on a Sentinel failover). Here
that case is the connection error it is: the cleanup ignores it and the worker reconnects. The
messages it could not put back are wake-ups: the sweeper sends the ones still needed.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError


class _ClosedIsAConnectionError:
    connection: Any

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection is closed")
        return super()._connparams(asynchronous)  # type: ignore[misc]


class Channel(_ClosedIsAConnectionError, kombu_redis.Channel):
    """kombu's Redis channel (see the module's docstring)."""


class SentinelChannel(_ClosedIsAConnectionError, kombu_redis.SentinelChannel):
    """kombu's Sentinel channel (see the module's docstring)."""


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel
