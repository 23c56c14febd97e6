"""Redis lease: ``SET key token NX PX ttl``; renew and release only while the token matches.

Per conversation two keys on one cluster slot (the braces are a hash tag): the lease and a knock
that a wake-up leaves when it finds the lease taken. Acquire and release are one script each, so
a knock is either seen by the holder's release or made after it (and then its acquire succeeds).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from fleet.constants import KNOCK_KEY, KNOCK_TTL_S, LEASE_KEY, WOKEN_KEY, WOKEN_TTL_S
from fleet.dispatch.lease import Lease, LeaseHandle

# Any attempt consumes the wake-up that caused it, so the "wake-up on its way" mark goes either
# way; a failed attempt leaves a knock for the holder instead.
_ACQUIRE = """
redis.call('del', KEYS[3])
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
redis.call('set', KEYS[2], '1', 'PX', ARGV[3])
return 0
"""
_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  return redis.call('del', KEYS[2])
end
return 0
"""

# A wake-up is needed only if nobody holds the conversation (else: knock) and no earlier
# wake-up is still on its way (its drain deletes the mark when it acquires the lease).
_WAKE = """
if redis.call('exists', KEYS[1]) == 1 then
  redis.call('set', KEYS[2], '1', 'PX', ARGV[2])
  return 0
end
if redis.call('set', KEYS[3], '1', 'NX', 'PX', ARGV[1]) then
  return 1
end
return 0
"""


def same_server(a: Any, b: Any) -> bool:
    """Do two redis-py clients talk to the same server and database? (Clients of a sentinel
    master: the same master name and database; each follows a failover to the same server.)"""
    pa, pb = a.connection_pool, b.connection_pool
    if _master_of(pa) != _master_of(pb):
        return False
    ka, kb = pa.connection_kwargs, pb.connection_kwargs
    fields = ("host", "port", "path", "db")
    return all(ka.get(f) == kb.get(f) for f in fields)


def _master_of(pool: Any) -> tuple[str, frozenset[tuple[Any, Any]]] | None:
    """A sentinel pool's master name and sentinels (None: a pool of one server)."""
    manager = getattr(pool, "sentinel_manager", None)
    if manager is None:
        return None
    addresses = frozenset(
        (
            s.connection_pool.connection_kwargs.get("host"),
            s.connection_pool.connection_kwargs.get("port"),
        )
        for s in manager.sentinels
    )
    return pool.service_name, addresses


def lease_key(conversation_id: uuid.UUID) -> str:
    return LEASE_KEY.format(conversation=conversation_id)


def knock_key(conversation_id: uuid.UUID) -> str:
    return KNOCK_KEY.format(conversation=conversation_id)


def woken_key(conversation_id: uuid.UUID) -> str:
    return WOKEN_KEY.format(conversation=conversation_id)


def lease_keys(conversation_id: uuid.UUID) -> list[str]:
    """The lease, knock and woken keys of a conversation (what the wake-up scripts check)."""
    return [lease_key(conversation_id), knock_key(conversation_id), woken_key(conversation_id)]


_keys = lease_keys


class RedisLease(Lease):
    def __init__(self, client: Any, ttl_s: float) -> None:
        super().__init__(ttl_s)
        self._redis = client
        self._ttl_ms = int(ttl_s * 1000)
        self._acquire = client.register_script(_ACQUIRE)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)
        self._wake = client.register_script(_WAKE)

    def acquire(self, conversation_id: uuid.UUID) -> LeaseHandle | None:
        token = self.new_token()
        keys = _keys(conversation_id)
        if self._acquire(keys=keys, args=[token, self._ttl_ms, int(KNOCK_TTL_S * 1000)]):
            return LeaseHandle(conversation_id, token)
        return None

    def renew(self, handle: LeaseHandle) -> bool:
        key = lease_key(handle.conversation_id)
        return bool(self._renew(keys=[key], args=[handle.token, self._ttl_ms]))

    def renew_many(self, handles: Sequence[LeaseHandle]) -> list[bool]:
        """``renew`` for each, in one round trip."""
        pipe = self._redis.pipeline(transaction=False)
        for handle in handles:
            self._renew(
                keys=[lease_key(handle.conversation_id)],
                args=[handle.token, self._ttl_ms],
                client=pipe,
            )
        return [bool(v) for v in pipe.execute()]

    def release(self, handle: LeaseHandle) -> bool:
        keys = [lease_key(handle.conversation_id), knock_key(handle.conversation_id)]
        return bool(self._release(keys=keys, args=[handle.token]))

    def wake_needed(self, conversation_id: uuid.UUID) -> bool:
        """Should a wake-up be published now? No if the holder was knocked or one is pending."""
        args = [int(WOKEN_TTL_S * 1000), int(KNOCK_TTL_S * 1000)]
        return bool(self._wake(keys=_keys(conversation_id), args=args))

    def wakes_needed(self, conversation_ids: Sequence[uuid.UUID]) -> list[bool]:
        """``wake_needed`` for each, in one round trip (in order: a repeat is a no)."""
        args = [int(WOKEN_TTL_S * 1000), int(KNOCK_TTL_S * 1000)]
        pipe = self._redis.pipeline(transaction=False)
        for conversation_id in conversation_ids:
            self._wake(keys=_keys(conversation_id), args=args, client=pipe)
        return [bool(v) for v in pipe.execute()]

    def forget_wake(self, *conversation_ids: uuid.UUID) -> None:
        """Wake-ups could not be published after all: let the next admission try again."""
        if conversation_ids:
            self._redis.delete(*(woken_key(c) for c in conversation_ids))

    @property
    def client(self) -> Any:
        return self._redis

    def held(self, conversation_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        if not conversation_ids:
            return set()
        values = self._redis.mget([lease_key(c) for c in conversation_ids])
        return {c for c, v in zip(conversation_ids, values, strict=True) if v is not None}
