"""Fair turns in Redis: due conversations wait per tenant; a worker's turn picks the next fairly.

The rules are ``fleet.domain.fairness``'s (stride scheduling across tenants, priority then
arrival inside one, ``max_running`` caps); here they run as Lua scripts on the Redis that holds
the leases, so every API process and worker shares one queue of turns:

- **add** (in the wake-up script): the conversation joins its tenant's sorted set (a member
  once: a second wake-up keeps its place) and, if it was not due yet, one ``fleet.turn``
  message goes onto the Celery queue — a token that some worker process should take a turn;
- **pick** (``fleet.turn``, and again after each drain): the eligible tenant with the lowest
  pass gives up its best conversation, which is held *in flight* until its drain is done;
- **done**: the hold ends and the tenant's running count goes down (in the same script as the
  next pick).

Nothing is lost to a killed worker: a held conversation whose hold expired while nobody holds
its lease goes back where it was (with a token), so the next pick anywhere finds it; a hold
whose lease is still held (a long run) is renewed instead. A token whose worker died is either
redelivered by Celery or missing; a missing one only delays a turn while no worker is busy,
because every worker picks again after each drain (tokens are at least as many as the due
conversations otherwise), and the sweeper's forced wake-ups push a token when none waits.
Keys share one hash tag (``fleet:fair:{<queue>}:…``).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from fleet.constants import FAIR_HOLD_S, FAIR_KEY, LEASE_KEY, MAX_PRIORITY
from fleet.domain.fairness import PRIORITY_SPAN, Turn

#: Shared by the scripts: ARGV[1] key prefix, ARGV[2] the token message with ``@ID@`` where
#: its unique ids go, ARGV[3] this process's id prefix for them.
_LIB = f"""
local P, TEMPLATE, IDS = ARGV[1], ARGV[2], ARGV[3]
local function token(queue)
  local n = redis.call('incr', P .. 'tokens')
  redis.call('lpush', queue, (string.gsub(TEMPLATE, '@ID@', IDS .. n)))
end
local function activate(tenant, weight, cap)
  if not redis.call('zscore', P .. 'tenants', tenant) then
    local saved = tonumber(redis.call('hget', P .. 'pass', tenant) or '0')
    local vt = tonumber(redis.call('get', P .. 'vtime') or '0')
    redis.call('zadd', P .. 'tenants', string.format('%.17g', math.max(saved, vt)), tenant)
    redis.call('hset', P .. 'weight', tenant, weight)
    if tonumber(cap) > 0 then
      redis.call('hset', P .. 'cap', tenant, cap)
    else
      redis.call('hdel', P .. 'cap', tenant)
    end
  end
end
-- a due conversation joins its tenant (a member once); a token goes out if it was not due
-- yet, or when forced (the sweeper's look for lost wake-ups) and no token waits on the queue
local function add(queue, conv, tenant, prio, weight, cap, force)
  local seq = redis.call('incr', P .. 'seq')
  local score = string.format('%.0f', ({MAX_PRIORITY} - tonumber(prio)) * {PRIORITY_SPAN} + seq)
  local added = redis.call('zadd', P .. 't:' .. tenant, 'LT', score, conv)
  if added == 1 then activate(tenant, weight, cap) end
  if added == 1 or (force and redis.call('llen', queue) == 0) then token(queue) end
  return added
end
"""

#: Wake-ups with the lease check (broker and lease on one Redis server). KEYS: the lease,
#: knock and woken keys of each conversation, then the queue list. ARGV after the three of
#: ``_LIB``: the woken and knock TTLs (ms), then per conversation: check ("1"/"0"), id,
#: tenant, priority, weight, cap (0: none). A checked one whose lease is held knocks instead;
#: one with a wake-up on its way is skipped; an unchecked one is forced.
WAKE_FAIR = (
    _LIB
    + """
local n = (#KEYS - 1) / 3
local queue = KEYS[#KEYS]
local sent = {}
for i = 1, n do
  local k, a = (i - 1) * 3, 6 + (i - 1) * 6
  local needed = 1
  if ARGV[a] == '1' then
    if redis.call('exists', KEYS[k + 1]) == 1 then
      redis.call('set', KEYS[k + 2], '1', 'PX', ARGV[5])
      needed = 0
    elseif not redis.call('set', KEYS[k + 3], '1', 'NX', 'PX', ARGV[4]) then
      needed = 0
    end
  end
  if needed == 1 then
    add(queue, ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a] ~= '1')
  end
  sent[i] = needed
end
return sent
"""
)

#: Wake-ups without a lease check (the lease was asked first, or lives elsewhere). KEYS: the
#: queue list. ARGV after ``_LIB``'s: per conversation: force ("1"/"0"), id, tenant, priority,
#: weight, cap.
FAIR_ADD = (
    _LIB
    + """
local out = {}
for i = 0, (#ARGV - 3) / 6 - 1 do
  local a = 4 + i * 6
  out[i + 1] = add(KEYS[1], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5],
                   ARGV[a] == '1')
end
return out
"""
)

#: The next turn. KEYS: the queue list. ARGV after ``_LIB``'s: now (ms), hold (ms), the hold
#: of the turn that is done ("" for none), the lease key's prefix and suffix, "1" to take a
#: turn ("0": only end the one done), and a token due once every current hold has expired.
#: Returns {conversation, tenant, score, hold} or nil. A hold is a turn's own id
#: (``<conversation>#<n>``): a conversation due again while its turn runs may be picked again,
#: and each turn ends once. When nothing is picked while turns are held, the delayed token goes
#: out (one per hold period): a hold whose worker died is looked at even in a fleet gone idle.
PICK = (
    _LIB
    + """
local now, hold = tonumber(ARGV[4]), tonumber(ARGV[5])
local until_ = string.format('%.0f', now + hold)
local function release(id)
  local held = redis.call('hget', P .. 'held', id)
  redis.call('zrem', P .. 'inflight', id)
  redis.call('hdel', P .. 'held', id)
  if not held then return nil end
  local a = string.find(held, '|', 1, true)
  local b = string.find(held, '|', a + 1, true)
  local tenant = string.sub(held, 1, a - 1)
  if tonumber(redis.call('hincrby', P .. 'running', tenant, -1)) <= 0 then
    redis.call('hdel', P .. 'running', tenant)
  end
  return tenant, string.sub(held, a + 1, b - 1), string.sub(held, b + 1)
end
if ARGV[6] ~= '' then release(ARGV[6]) end
-- holds that expired: renewed while the conversation's lease is held (a run goes on), put
-- back where they were otherwise (their worker died before its drain was done)
local expired = redis.call('zrangebyscore', P .. 'inflight', '-inf', ARGV[4], 'LIMIT', 0, 16)
for _, id in ipairs(expired) do
  local conv = string.sub(id, 1, (string.find(id, '#', 1, true) or 0) - 1)
  if redis.call('exists', ARGV[7] .. conv .. ARGV[8]) == 1 then
    redis.call('zadd', P .. 'inflight', until_, id)
  else
    local tenant, score = release(id)
    if tenant then
      if redis.call('zadd', P .. 't:' .. tenant, 'LT', score, conv) == 1 then
        activate(tenant, redis.call('hget', P .. 'weight', tenant) or '1',
                 redis.call('hget', P .. 'cap', tenant) or '0')
        token(KEYS[1])
      end
    end
  end
end
if ARGV[9] ~= '1' then return nil end
local ranked = redis.call('zrange', P .. 'tenants', 0, 63, 'WITHSCORES')
for i = 1, #ranked, 2 do
  local tenant, pass = ranked[i], tonumber(ranked[i + 1])
  local cap = tonumber(redis.call('hget', P .. 'cap', tenant) or '0')
  local running = tonumber(redis.call('hget', P .. 'running', tenant) or '0')
  if cap == 0 or running < cap then
    local set = P .. 't:' .. tenant
    local got = redis.call('zpopmin', set)
    if #got == 0 then
      redis.call('zrem', P .. 'tenants', tenant)
    else
      local conv, score = got[1], got[2]
      local weight = tonumber(redis.call('hget', P .. 'weight', tenant) or '1')
      local after = string.format('%.17g', pass + 1 / weight)
      local vt = tonumber(redis.call('get', P .. 'vtime') or '0')
      if pass > vt then redis.call('set', P .. 'vtime', string.format('%.17g', pass)) end
      if redis.call('zcard', set) == 0 then
        redis.call('zrem', P .. 'tenants', tenant)
        redis.call('hset', P .. 'pass', tenant, after)
      else
        redis.call('zadd', P .. 'tenants', after, tenant)
      end
      redis.call('hincrby', P .. 'running', tenant, 1)
      local id = conv .. '#' .. redis.call('incr', P .. 'holds')
      redis.call('zadd', P .. 'inflight', until_, id)
      redis.call('hset', P .. 'held', id, tenant .. '|' .. score .. '|' .. conv)
      return {conv, tenant, score, id}
    end
  end
end
if redis.call('zcard', P .. 'inflight') > 0 and
   redis.call('set', P .. 'reap', '1', 'NX', 'PX', ARGV[5]) then
  local n = redis.call('incr', P .. 'tokens')
  redis.call('lpush', KEYS[1], (string.gsub(ARGV[10], '@ID@', IDS .. n)))
end
return nil
"""
)


#: Seconds before a turn passed on by a stopping worker is due (a worker that is stopping and
#: takes it again passes it on again: at most once per this, not in a loop).
PASS_ON_S = 1.0

#: One token onto the queue. KEYS[1]: the queue; ARGV: ``_LIB``'s, then the token's message.
PASS_ON = (
    _LIB
    + """
local n = redis.call('incr', P .. 'tokens')
redis.call('lpush', KEYS[1], (string.gsub(ARGV[4], '@ID@', IDS .. n)))
return n
"""
)


class Due(NamedTuple):
    """A wake-up for the fair queue: which conversation, and whose turn it will be."""

    conversation_id: uuid.UUID
    tenant: str
    priority: int
    #: The tenant's weight and ``max_running`` (0: none) as the config says now.
    weight: int = 1
    cap: int = 0


def keys_prefix(queue: str) -> str:
    return FAIR_KEY.format(queue=queue)


def _lease_affixes() -> tuple[str, str]:
    head, _, tail = LEASE_KEY.partition("{{{conversation}}}")
    return head + "{", "}" + tail


def priority_of(score: str | bytes) -> int:
    """The priority an entry's score says (``fleet.domain.fairness.entry_score``)."""
    return MAX_PRIORITY - int(float(score)) // PRIORITY_SPAN


class FairTurns:
    """The fair queue of one Celery queue on one Redis (a redis-py client, sync or asyncio)."""

    def __init__(
        self,
        client: Any,
        queue: str,
        token: str,
        *,
        hold_s: float = FAIR_HOLD_S,
        keys_of: str | None = None,
    ) -> None:
        #: The ``fleet.turn`` message with ``@ID@`` where its unique ids go
        #: (``fleet.dispatch.publish.WakeMessages.turn_template``).
        self.token = token
        self.hold_s = hold_s
        #: The list tokens go onto, and the queue whose turns these are (the same, but for a
        #: publisher parking tokens elsewhere first: the benchmarks' holding queue).
        self.queue = queue
        self.prefix = keys_prefix(keys_of or queue)
        self.ids = f"{os.getpid():x}-{uuid.uuid4().hex[:8]}-"
        self._client = client
        self._pick = client.register_script(PICK)
        self._add = client.register_script(FAIR_ADD)
        self._pass_on = client.register_script(PASS_ON)

    def _head(self) -> list[Any]:
        return [self.prefix, self.token, self.ids]

    def _later(self, at: float) -> str:
        """The token with an ETA of ``at`` (epoch seconds): Celery holds it until then."""
        eta = datetime.fromtimestamp(at, UTC).isoformat()
        return self.token.replace('"eta": null', json.dumps({"eta": eta})[1:-1], 1)

    def wake_args(
        self, items: Sequence[tuple[Due, bool]], lease_keys: Sequence[list[str]]
    ) -> tuple[list[str], list[Any]]:
        """``WAKE_FAIR``'s keys and arguments for (wake-up, check the lease) items."""
        from fleet.constants import KNOCK_TTL_S, WOKEN_TTL_S

        keys = [k for group in lease_keys for k in group]
        args: list[Any] = [*self._head(), int(WOKEN_TTL_S * 1000), int(KNOCK_TTL_S * 1000)]
        for due, check in items:
            args += ["1" if check else "0", *_fields(due)]
        return [*keys, self.queue], args

    def add(self, items: Sequence[tuple[Due, bool]]) -> list[int]:
        """Make conversations due without a lease check (``force``: a token regardless)."""
        args = self._head()
        for due, force in items:
            args += ["1" if force else "0", *_fields(due)]
        return [int(v) for v in self._add(keys=[self.queue], args=args)]

    def pick(
        self,
        done: Turn | None = None,
        *,
        take: bool = True,
        now_ms: int | None = None,
        hold_s: float | None = None,
    ) -> Turn | None:
        """End the turn ``done`` (if given) and (``take``) take the next one, if any is due and
        allowed."""
        head, tail = _lease_affixes()
        now = int(time.time() * 1000) if now_ms is None else now_ms
        held_s = self.hold_s if hold_s is None else hold_s
        ended = "" if done is None or done.hold is None else done.hold
        args = [*self._head(), now, int(held_s * 1000), ended, head, tail]
        args += ["1" if take else "0", self._later(now / 1000 + held_s + 1)]
        found = self._pick(keys=[self.queue], args=args)
        if not found:
            return None
        conv, tenant, score, hold = (v.decode() if isinstance(v, bytes) else v for v in found)
        return Turn(uuid.UUID(conv), tenant, priority_of(score), hold)

    def pass_on(self, after_s: float = PASS_ON_S) -> None:
        """A token due in ``after_s`` seconds, for a turn this process will not take."""
        self._pass_on(keys=[self.queue], args=[*self._head(), self._later(time.time() + after_s)])

    def configure(self, weights: Mapping[str, int], caps: Mapping[str, int | None]) -> None:
        """Write the configured tenants' weights and caps (a worker does at start: a config
        change reaches tenants already due, not only those that become due later)."""
        pipe = self._client.pipeline(transaction=False)
        for name, weight in weights.items():
            pipe.hset(self.prefix + "weight", name, weight)
        for name, cap in caps.items():
            if cap:
                pipe.hset(self.prefix + "cap", name, cap)
            else:
                pipe.hdel(self.prefix + "cap", name)
        pipe.execute()


def _fields(due: Due) -> list[Any]:
    return [str(due.conversation_id), due.tenant, due.priority, due.weight, due.cap or 0]


class SharedTurns:
    """A worker process's view of the fair queue (``Dispatcher.Turns``): writes the
    configured tenants' weights and caps once, before its first pick."""

    def __init__(
        self,
        turns: FairTurns,
        weights: Mapping[str, int],
        caps: Mapping[str, int | None],
    ) -> None:
        self._turns = turns
        self._config: tuple[Mapping[str, int], Mapping[str, int | None]] | None = (weights, caps)

    def pick(self, done: Turn | None = None, *, take: bool = True) -> Turn | None:
        if self._config is not None:
            self._turns.configure(*self._config)
            self._config = None
        return self._turns.pick(done, take=take)

    def pass_on(self) -> None:
        self._turns.pass_on()
