"""The I/O-free core of the Redis outbox, ledger and sinks: Lua scripts, plans, replies.

Every operation is a generator of *plans*: it yields a list of commands (`Eval` or a
command tuple), receives the replies, and returns its result. `_redis.py` runs plans,
one round trip each, with a blocking or an asyncio client. Redis 5.0 commands only.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ._keys import DeliveryKeys, tag_of
from ._outbox import OutboxStats, Settlement, StagedBatch

__all__ = [
    "SCRIPTS",
    "Eval",
    "LedgerCore",
    "OutboxCore",
    "Plan",
    "Script",
    "Step",
    "SinkCore",
    "ended_loop",
    "resp3_refused",
]


@dataclass(frozen=True)
class Script:
    name: str
    source: str
    sha: str


@dataclass(frozen=True)
class Eval:
    """One call of a named Lua script."""

    script: str
    keys: tuple[str, ...]
    args: tuple[str | bytes | int, ...]


Command = Eval | tuple[Any, ...]
Plan = list[Command]
Step = Generator[Plan, list[Any], Any]

# The server's clock. Due times, leases and staging times are kept by it, never by a
# caller's: a caller passes its own `now` with times of its own, which a script moves by the
# difference (`shift`), so processes whose clocks disagree still agree on when a lease ends
# and how long a batch has waited. Effects replication first: a script that reads TIME and
# then writes is refused where Redis 5/6 replicate scripts verbatim.
_CLOCK = """
redis.replicate_commands()
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function ms(value)  -- a decimal string, exact below 2^53
  return string.format('%.0f', value)
end
-- The server's now, and how far it is from the caller's (`shift`).
local function clocks(caller_now)
  local now = server_ms()
  return now, now - tonumber(caller_now)
end
"""

# Applies settlements; shared by the stage and settle scripts. KEYS[1] is the due zset,
# KEYS[2] the stats hash, KEYS[first_key..] the settled batches in ARGV order; `now` is the
# server's clock, from which a retry's delay runs. A commit marks the batch's checkpoint
# stored (its put returned), so that no later drain discards it, even once the checkpoint is
# pruned or its thread deleted. A retry or discard applies only while the batch's lease
# token ('l': its claimer's or its delivering stager's, absent while no one holds it) is the
# settlement's: one from a deliverer whose lease ran out and whose batch was taken over since
# changes nothing. A discard never drops a committed batch, and keeps the batch for
# `TOMBSTONE_MS` marked discarded ('d', out of the due set): a put slower than the grace
# period still returns, and its commit makes the batch due again (the process that staged it
# took its messages as pruned, and stages them no more).
TOMBSTONE_MS = 24 * 3600 * 1000
_SETTLE = (
    _CLOCK
    + f"""
local TOMBSTONE_MS = {TOMBSTONE_MS}
"""
    + """
local function settle(first_arg, first_key, now)
  local k = first_key
  for i = first_arg, #ARGV, 8 do
    local action, id, delay, staged = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local batch = KEYS[k]
    k = k + 1
    if action == 'ack' then
      redis.call('ZREM', KEYS[1], id)
      if redis.call('HDEL', batch, 'd') == 1 then  -- delivered after all, by a lease run out
        redis.call('HINCRBY', KEYS[2], 'discarded', -1)
      end
      if redis.call('DEL', batch) == 1 then redis.call('HINCRBY', KEYS[2], 'delivered', 1) end
    elseif action == 'commit' then  -- its put returned: stored, whoever holds it
      if redis.call('EXISTS', batch) == 1 then
        redis.call('HSET', batch, 'c', '1')
        if redis.call('HDEL', batch, 'd') == 1 then  -- discarded while its put ran: due again
          redis.call('PERSIST', batch)
          redis.call('ZADD', KEYS[1], ms(now + tonumber(delay)), id)
          redis.call('HINCRBY', KEYS[2], 'discarded', -1)
        end
      end
    else
      local f = redis.call('HMGET', batch, 's', 'l', 'c', 'd')
      if f[1] and not f[4] and (f[2] or '') == ARGV[i + 7] then
        if action == 'discard' then
          if f[3] == '1' then  -- committed since the claim: never dropped; due again now
            redis.call('ZADD', KEYS[1], 'XX', ms(now), id)
            redis.call('HDEL', batch, 'l')
          elseif f[1] == staged then
            redis.call('ZREM', KEYS[1], id)
            redis.call('HDEL', batch, 'l')
            redis.call('HSET', batch, 'd', '1')
            redis.call('PEXPIRE', batch, TOMBSTONE_MS)
            redis.call('HINCRBY', KEYS[2], 'discarded', 1)
          end
        else
          redis.call('ZADD', KEYS[1], 'XX', ms(now + tonumber(delay)), id)
          redis.call('HDEL', batch, 'l')  -- waiting now, held by no one
          if ARGV[i + 4] == '1' then
            redis.call('HINCRBY', batch, 'f', 1)
            redis.call('HSET', batch, 'e', ARGV[i + 6])
            redis.call('HINCRBY', KEYS[2], 'failures', 1)
          end
          if ARGV[i + 5] == '1' then redis.call('HSET', batch, 'c', '1') end
        end
      end
    end
  end
end
"""
)

# KEYS: due, stats, batch, settled batches... ARGV: id, now, visible_at, type, payload,
# thread, checkpoint ns, checkpoint id, checkpoint key, the stager's lease token ('' when it
# does not deliver the batch itself), then 8 per settlement. A batch leased to a deliverer
# past `visible_at` stays so, token included; otherwise the stager holds it, under its token
# (a retry's wait included: a put that stored the checkpoint again ends it).
_STAGE = (
    _SETTLE
    + """
local now, shift = clocks(ARGV[2])
-- every batch has 's'; 'l': its holder; 'd': discarded (staged anew now, by a put's retry)
local was = redis.call('HMGET', KEYS[3], 's', 'l', 'd')
local holder = was[2]
redis.call('HSET', KEYS[3], 't', ARGV[4], 'p', ARGV[5], 's', ms(now), 'th', ARGV[6],
  'ns', ARGV[7], 'cp', ARGV[8], 'k', ARGV[9])
if was[3] then
  redis.call('HDEL', KEYS[3], 'd')
  redis.call('PERSIST', KEYS[3])
end
if not was[1] or was[3] then redis.call('HINCRBY', KEYS[2], 'staged', 1) end
local at = tonumber(ARGV[3]) + shift
local due = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]))
if not (holder and due and due > now and due > at) then  -- else leased past `at`: kept
  if ARGV[10] ~= '' then redis.call('HSET', KEYS[3], 'l', ARGV[10])
  elseif holder then redis.call('HDEL', KEYS[3], 'l') end
  redis.call('ZADD', KEYS[1], ms(at), ARGV[1])
end
settle(11, 4, now)
return redis.call('ZCOUNT', KEYS[1], '-inf', ms(now))
"""
)

# KEYS: due, stats, settled batches... ARGV: 8 per settlement.
_SETTLE_ONLY = _SETTLE + "\nsettle(1, 3, server_ms())\nreturn 1\n"

# KEYS: due. ARGV: now, limit, lease_until, batch key prefix, check (1: the checkpoint
# keys live on this server, outside a cluster, so EXISTS answers whether it is stored),
# the claim's lease token, kept with each batch it takes.
# Each row ends with the milliseconds since the batch was staged, by the server's clock.
_CLAIM = (
    _CLOCK
    + """
local now, shift = clocks(ARGV[1])
local lease_until = ms(tonumber(ARGV[3]) + shift)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms(now), 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
for _, id in ipairs(ids) do
  local batch = ARGV[4] .. id
  local f = redis.call('HMGET', batch, 't', 'p', 's', 'f', 'c', 'th', 'ns', 'cp', 'k')
  if not f[1] then
    redis.call('ZREM', KEYS[1], id)
  else
    redis.call('ZADD', KEYS[1], lease_until, id)
    redis.call('HSET', batch, 'l', ARGV[6])
    local committed = ''
    if f[5] == '1' then
      committed = '1'
    elseif ARGV[5] == '1' and f[9] and f[9] ~= '' then
      if redis.call('EXISTS', f[9]) == 1 then
        committed = '1'
        redis.call('HSET', batch, 'c', '1')
      else
        committed = '0'
      end
    end
    local age = math.max(0, now - (tonumber(f[3]) or now))
    out[#out + 1] = {id, f[1], f[2], f[3], f[4] or '0', f[6], f[7], f[8], f[9] or '', committed,
      ms(age)}
  end
end
return out
"""
)

# KEYS: ledger hash, the keys the commands write... ARGV: now, ttl ms (0: none), message
# count, then per message: ledger field, command count, and per command: key index,
# argument count, command name, arguments. A message's commands run only when its field
# was not in the ledger yet, in the same script that records it.
_SINK = """
local i = 4
local applied = {}
for _ = 1, tonumber(ARGV[3]) do
  local field, commands = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  local fresh = redis.call('HSETNX', KEYS[1], field, ARGV[1]) == 1
  for _ = 1, commands do
    local key, count = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    if fresh then
      local command = {ARGV[i + 2], KEYS[key]}
      for a = 1, count do command[#command + 1] = ARGV[i + 2 + a] end
      redis.call(unpack(command))
    end
    i = i + 3 + count
  end
  if fresh then applied[#applied + 1] = field end
end
if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return applied
"""


def _script(name: str, source: str) -> Script:
    return Script(name, source, hashlib.sha1(source.encode("utf-8")).hexdigest())


SCRIPTS: dict[str, Script] = {
    s.name: s
    for s in (
        _script("stage", _STAGE),
        _script("settle", _SETTLE_ONLY),
        _script("claim", _CLAIM),
        _script("sink", _SINK),
    )
}


def _s(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _b(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def _settle_args(
    keys: DeliveryKeys, settlements: Sequence[Settlement]
) -> tuple[list[str], list[Any]]:
    batch_keys: list[str] = []
    args: list[Any] = []
    for s in settlements:
        batch_keys.append(keys.batch(s.batch_id))
        args += [
            s.action,
            s.batch_id,
            s.delay,
            s.staged_at,
            1 if s.failed else 0,
            1 if s.committed else 0,
            s.error[:2000],
            s.lease,
        ]
    return batch_keys, args


def resp3_refused(reply: str, owner: str, protocol: Any, fix: str) -> ValueError | None:
    """The error to raise for the error reply `reply` when it is a server refusing RESP3.

    A client speaking RESP3 opens every connection with ``HELLO 3``, a command Redis 5
    does not have; redis-py raises the server's bare "unknown command `HELLO`" for it.

    Args:
        reply: The error reply.
        owner: Who holds the client, e.g. ``RedisOutbox``.
        protocol: The client's `protocol` setting; None for redis-py's default.
        fix: The client built right, e.g. ``redis.Redis.from_url(url, protocol=2)``.

    Returns:
        A `ValueError` naming the setting and the fix, or None for any other reply.
    """
    if "HELLO" not in reply or "unknown command" not in reply.lower():
        return None
    setting = "protocol=3" if protocol is not None else "protocol=3, redis-py 8's default"
    return ValueError(
        f"{owner}: the client speaks RESP3 ({setting}), which this server does not: Redis 5 "
        f"has no HELLO (it answered {reply!r}); build it with protocol=2, e.g. {fix} "
        "(RESP2 works on every Redis)"
    )


# What asyncio says when a connection opened on one event loop is used on another.
_OTHER_LOOP = ("Event loop is closed", "attached to a different loop", "bound to a different")


def ended_loop(error: str, owner: str) -> RuntimeError | None:
    """The error to raise for the `RuntimeError` text `error` when it is a `redis.asyncio`
    connection used on another event loop than the one that opened it (an ended
    ``asyncio.run``, or a loop running in another thread).

    redis-py drops the connection after that failed command, but the command's work is not
    done: the caller hears why, and how to keep its connections on one loop.

    Args:
        error: The text of the `RuntimeError`.
        owner: Who holds the client, e.g. ``RedisOutbox``.

    Returns:
        A `RuntimeError` naming the cause and the fix, or None for any other error.
    """
    if not any(text in error for text in _OTHER_LOOP):
        return None
    return RuntimeError(
        f"{owner}: its redis.asyncio client holds a connection opened on another event loop "
        f"({error}): a redis.asyncio connection belongs to the loop that opened it (an ended "
        "asyncio.run, or a loop running in another thread). Give each event loop its own "
        "client, or close the client on the loop that used it (await client.aclose()) before "
        "using it on another; what was not delivered stays in the outbox for the next flush "
        "or drain"
    )


class OutboxCore:
    """Plans of `RedisOutbox`.

    Args:
        keys: The key layout.
        cluster: Whether the client is a cluster client: the checkpoint keys are then in
            other slots, so their EXISTS is a separate plan.
        checkpoint_key: ``(thread_id, checkpoint_ns, checkpoint_id) -> key`` whose
            existence on the same server proves the checkpoint is stored, or None.
    """

    def __init__(self, keys: DeliveryKeys, cluster: bool, checkpoint_key: Any = None) -> None:
        self.keys = keys
        self.cluster = cluster
        self.checkpoint_key = checkpoint_key

    def stage(
        self, batch: StagedBatch, now: int, visible_at: int, settle: Sequence[Settlement]
    ) -> Step:
        k = self.keys
        cp_key = (
            self.checkpoint_key(batch.thread_id, batch.checkpoint_ns, batch.checkpoint_id)
            if self.checkpoint_key is not None
            else ""
        )
        settled_keys, settled_args = _settle_args(k, settle)
        args: tuple[Any, ...] = (
            batch.id,
            now,
            visible_at,
            batch.payload[0],
            batch.payload[1],
            batch.thread_id,
            batch.checkpoint_ns,
            batch.checkpoint_id,
            cp_key,
            batch.lease,
            *settled_args,
        )
        (due,) = yield [Eval("stage", (k.due, k.stats, k.batch(batch.id), *settled_keys), args)]
        return int(due)

    def settle(self, settlements: Sequence[Settlement]) -> Step:
        if not settlements:
            return None
        settled_keys, args = _settle_args(self.keys, settlements)
        keys = (self.keys.due, self.keys.stats, *settled_keys)
        yield [Eval("settle", keys, tuple(args))]
        return None

    def claim(self, now: int, lease_until: int, limit: int) -> Step:
        check_here = self.checkpoint_key is not None and not self.cluster
        token = secrets.token_hex(8)
        args = (now, limit, lease_until, self.keys.batch_prefix, 1 if check_here else 0, token)
        (rows,) = yield [Eval("claim", (self.keys.due,), args)]
        batches: list[StagedBatch] = []
        unknown: list[tuple[int, str]] = []
        for row in rows or ():
            (bid, typ, payload, staged, failures, thread, ns, cid, cp_key, committed, age) = row
            state = _s(committed)
            batches.append(
                StagedBatch(
                    id=_s(bid),
                    thread_id=_s(thread),
                    checkpoint_ns=_s(ns),
                    checkpoint_id=_s(cid),
                    payload=(_s(typ), _b(payload)),
                    staged_at=int(_s(staged)),
                    failures=int(_s(failures)),
                    committed=None if state == "" else state == "1",
                    age=int(_s(age)),
                    lease=token,
                )
            )
            if state == "" and self.checkpoint_key is not None and _s(cp_key):
                unknown.append((len(batches) - 1, _s(cp_key)))
        if unknown:
            # On a cluster the checkpoint keys live in their threads' slots.
            found = yield [("EXISTS", key) for _, key in unknown]
            for (index, _), exists in zip(unknown, found, strict=True):
                batches[index] = replace(batches[index], committed=bool(int(exists)))
        return batches

    def stats(self) -> Step:
        backlog, counters = yield [("ZCARD", self.keys.due), ("HGETALL", self.keys.stats)]
        values = {_s(k): int(_s(v)) for k, v in _pairs(counters)}
        return OutboxStats(
            backlog=int(backlog),
            staged=values.get("staged", 0),
            delivered=values.get("delivered", 0),
            failures=values.get("failures", 0),
            discarded=values.get("discarded", 0),
        )


def _pairs(reply: Any) -> list[tuple[Any, Any]]:
    if isinstance(reply, Mapping):
        return list(reply.items())
    flat = list(reply or ())
    return list(zip(flat[::2], flat[1::2], strict=True))


class LedgerCore:
    """Plans of `RedisDeliveryLedger`.

    Args:
        keys: The key layout.
        ttl_ms: Milliseconds a namespace's ledger lives after its last mark; 0 forever.
    """

    def __init__(self, keys: DeliveryKeys, ttl_ms: int) -> None:
        self.keys = keys
        self.ttl_ms = ttl_ms

    def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> Step:
        if not message_ids:
            return set()
        fields = [self.keys.ledger_field(hook_key, i) for i in message_ids]
        (values,) = yield [("HMGET", self.keys.ledger(namespace), *fields)]
        return {i for i, v in zip(message_ids, values, strict=True) if v is not None}

    def mark(self, hook_key: str, namespace: Any, message_ids: Sequence[str], now: int) -> Step:
        if not message_ids:
            return None
        key = self.keys.ledger(namespace)
        args: list[Any] = []
        for i in dict.fromkeys(message_ids):
            args += [self.keys.ledger_field(hook_key, i), now]
        plan: Plan = [("HSET", key, *args)]
        if self.ttl_ms:
            plan.append(("PEXPIRE", key, self.ttl_ms))
        yield plan
        return None


class SinkCore:
    """Plans of `RedisSink`: a message's commands and its ledger mark in one script."""

    def __init__(self, ledger: LedgerCore) -> None:
        self.ledger = ledger

    def apply(
        self,
        hook_key: str,
        namespace: Any,
        commands: Sequence[tuple[str, Sequence[tuple[Any, ...]]]],
        now: int,
    ) -> Step:
        """Runs, per ``(message id, commands)``, the commands of ids not yet in the ledger.

        Returns:
            The ids whose commands ran.
        """
        keys = self.ledger.keys
        ledger_key = keys.ledger(namespace)
        tag = tag_of(ledger_key)
        key_index: dict[str, int] = {ledger_key: 1}
        args: list[Any] = [now, self.ledger.ttl_ms, len(commands)]
        fields: dict[str, str] = {}
        for message_id, cmds in commands:
            field = keys.ledger_field(hook_key, message_id)
            fields[field] = message_id
            args += [field, len(cmds)]
            for cmd in cmds:
                if len(cmd) < 2 or not isinstance(cmd[0], str) or not isinstance(cmd[1], str):
                    raise ValueError(
                        f"sink command {cmd!r} must be (name, key, *args), e.g. "
                        "('HSET', self.key('mem', namespace), field, value)"
                    )
                name, key, *rest = cmd
                if tag_of(key) != tag:
                    raise ValueError(
                        f"sink command {name} writes {key!r}, outside the hash slot of "
                        f"namespace {namespace!r} ({ledger_key!r}); build its key with "
                        "RedisSink.key(kind, namespace) so it commits with the ledger"
                    )
                index = key_index.setdefault(key, len(key_index) + 1)
                args += [index, len(rest), name, *rest]
        (applied,) = yield [Eval("sink", tuple(key_index), tuple(args))]
        return [fields[_s(f)] for f in applied or ()]
