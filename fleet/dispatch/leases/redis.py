"""Redis lease: ``SET key token NX PX ttl``; renew and release only while the token still matches.

One key per conversation (``fleet:lease:{<id>}``: the hash tag keeps it on one cluster slot).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from fleet.constants import LEASE_KEY
from fleet.dispatch.lease import Lease, LeaseHandle

_RENEW = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
"""


def lease_key(conversation_id: uuid.UUID) -> str:
    return LEASE_KEY.format(conversation=conversation_id)


class RedisLease(Lease):
    def __init__(self, client: Any, ttl_s: float) -> None:
        super().__init__(ttl_s)
        self._redis = client
        self._ttl_ms = int(ttl_s * 1000)
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def acquire(self, conversation_id: uuid.UUID) -> LeaseHandle | None:
        token = self.new_token()
        if self._redis.set(lease_key(conversation_id), token, nx=True, px=self._ttl_ms):
            return LeaseHandle(conversation_id, token)
        return None

    def renew(self, handle: LeaseHandle) -> bool:
        key = lease_key(handle.conversation_id)
        return bool(self._renew(keys=[key], args=[handle.token, self._ttl_ms]))

    def release(self, handle: LeaseHandle) -> None:
        self._release(keys=[lease_key(handle.conversation_id)], args=[handle.token])

    def held(self, conversation_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        if not conversation_ids:
            return set()
        values = self._redis.mget([lease_key(c) for c in conversation_ids])
        return {c for c, v in zip(conversation_ids, values, strict=True) if v is not None}
