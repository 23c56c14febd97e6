"""Model capacity shared by every process of a fleet, in Redis (``fleet.agents.capacity``'s port).

The decision is ``fleet.domain.model_limits``'s, run inside Redis as one script per call, on
Redis's own clock, so every worker sees one set of buckets: per limit a request cell, a token
cell, a cooldown and a sorted set of the places in flight (scored by when a place expires if its
process died holding it). Every key carries one hash tag, so a call's limits are one slot of a
Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fleet.agents.capacity import Wait
from fleet.domain.model_limits import CONCURRENCY_POLL_S, EPSILON_S, Limit

#: A limit's keys: ``fleet:model:{limits}:<match>:<cell>``.
KEY = "fleet:model:{{limits}}:{match}:{cell}"
CELLS = ("req", "tok", "cool", "held")

#: KEYS: 4 per limit (req, tok, cool, held). ARGV: limits, tokens, grant, hold (s), then 5 per
#: limit: request interval, request capacity, token interval, token capacity, max concurrent
#: (0: none). Returns {1} or {0, wait, index of the limit, reason}.
_ACQUIRE = f"""
local t = redis.call('time')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local n, cost, grant, hold = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4])
local function take(key, interval, capacity, c)
  local tat = tonumber(redis.call('get', key) or '0')
  local new = math.max(tat, now) + c * interval
  return new, new - now - math.max(capacity, c) * interval
end
local worst, worst_i, worst_why = 0, 0, ''
local plans = {{}}
for i = 1, n do
  local k, a = (i - 1) * 4, 4 + (i - 1) * 5
  local ri, rc = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local ti, tc, mc = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local wait, why = 0, ''
  local cool = tonumber(redis.call('get', KEYS[k + 3]) or '0')
  if cool - now > {EPSILON_S} then wait, why = cool - now, 'cooldown' end
  local plan = {{}}
  if ri > 0 then
    local new, w = take(KEYS[k + 1], ri, rc, 1)
    plan.req = new
    if w > wait then wait, why = w, 'requests' end
  end
  if ti > 0 and cost > 0 then
    local new, w = take(KEYS[k + 2], ti, tc, cost)
    plan.tok = new
    if w > wait then wait, why = w, 'tokens' end
  end
  if mc > 0 then
    redis.call('zremrangebyscore', KEYS[k + 4], '-inf', now)
    if redis.call('zcard', KEYS[k + 4]) >= mc and {CONCURRENCY_POLL_S} > wait then
      wait, why = {CONCURRENCY_POLL_S}, 'concurrency'
    end
  end
  plans[i] = plan
  if wait > worst then worst, worst_i, worst_why = wait, i, why end
end
if worst > {EPSILON_S} then
  return {{0, string.format('%.6f', worst), worst_i, worst_why}}
end
for i = 1, n do
  local k, a = (i - 1) * 4, 4 + (i - 1) * 5
  local plan = plans[i]
  if plan.req then
    redis.call('set', KEYS[k + 1], string.format('%.6f', plan.req),
      'PX', math.ceil((plan.req - now) * 1000) + 1000)
  end
  if plan.tok then
    redis.call('set', KEYS[k + 2], string.format('%.6f', plan.tok),
      'PX', math.ceil((plan.tok - now) * 1000) + 1000)
  end
  if tonumber(ARGV[a + 5]) > 0 then
    redis.call('zadd', KEYS[k + 4], now + hold, grant)
    redis.call('pexpire', KEYS[k + 4], math.ceil(hold * 1000) + 1000)
  end
end
return {{1}}
"""

#: KEYS: 4 per limit. ARGV: limits, grant, token delta, then 1 per limit: token interval.
_RELEASE = """
local t = redis.call('time')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local n, grant, delta = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
for i = 1, n do
  local k, ti = (i - 1) * 4, tonumber(ARGV[3 + i])
  redis.call('zrem', KEYS[k + 4], grant)
  if ti > 0 and delta ~= 0 then
    local tat = tonumber(redis.call('get', KEYS[k + 2]) or '0')
    local base = tat
    if delta > 0 then base = math.max(tat, now) end
    local new = math.max(base + delta * ti, now)
    redis.call('set', KEYS[k + 2], string.format('%.6f', new),
      'PX', math.ceil((new - now) * 1000) + 1000)
  end
end
return 1
"""

#: KEYS: one cooldown key per limit. ARGV: seconds. A longer cooldown already set stays.
_COOL = """
local t = redis.call('time')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local untl = now + tonumber(ARGV[1])
for i = 1, #KEYS do
  local cur = tonumber(redis.call('get', KEYS[i]) or '0')
  if untl > cur then
    redis.call('set', KEYS[i], string.format('%.6f', untl),
      'PX', math.ceil((untl - now) * 1000) + 1000)
  end
end
return 1
"""


def _keys(limits: Sequence[Limit]) -> list[str]:
    return [KEY.format(match=lim.match, cell=cell) for lim in limits for cell in CELLS]


class RedisCapacity:
    """Capacity for every process that calls the same models through one Redis."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)
        self._cool = client.register_script(_COOL)

    def acquire(
        self, limits: Sequence[Limit], tokens: int, grant: str, hold_s: float
    ) -> Wait | None:
        if not limits:
            return None
        args: list[Any] = [len(limits), tokens, grant, hold_s]
        for lim in limits:
            args += [
                lim.request_interval,
                lim.request_capacity,
                lim.token_interval,
                lim.token_capacity,
                lim.max_concurrent or 0,
            ]
        found = self._acquire(keys=_keys(limits), args=args)
        if int(found[0]):
            return None
        why = found[3].decode() if isinstance(found[3], bytes) else str(found[3])
        return Wait(float(found[1]), limits[int(found[2]) - 1].match, why)

    def release(self, limits: Sequence[Limit], grant: str, token_delta: int) -> None:
        if not limits:
            return
        args: list[Any] = [len(limits), grant, token_delta]
        args += [lim.token_interval for lim in limits]
        self._release(keys=_keys(limits), args=args)

    def cool(self, limits: Sequence[Limit], seconds: float) -> None:
        if not limits:
            return
        keys = [KEY.format(match=lim.match, cell="cool") for lim in limits]
        self._cool(keys=keys, args=[seconds])
