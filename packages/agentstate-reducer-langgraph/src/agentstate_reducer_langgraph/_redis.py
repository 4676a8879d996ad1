"""Redis-backed durable delivery: `RedisOutbox`, `RedisDeliveryLedger`, `RedisSink`.

Thin shells over the plans of `_redis_core`: the blocking methods run each plan with a
`redis.Redis` (or `RedisCluster`), the ``a``-methods with a `redis.asyncio` client. The
`redis` package is only imported once a client is in use, so it stays an optional extra.
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentstate_reducer import message_identity
from agentstate_reducer._messages import shown  # the reducer's own (pinned <0.7)

from . import _outbox
from ._keys import DeliveryKeys
from ._outbox import OutboxStats, Settlement, StagedBatch
from ._redis_core import (
    SCRIPTS,
    Eval,
    LedgerCore,
    OutboxCore,
    Plan,
    SinkCore,
    Step,
    ended_loop,
    resp3_refused,
)

__all__ = ["RedisDeliveryLedger", "RedisMemoryWriter", "RedisOutbox", "RedisSink"]

DEFAULT_PREFIX = "agentstate"
# Who holds a client, as errors about it name it.
LEDGER = "RedisDeliveryLedger"
ALEDGER = "RedisDeliveryLedger(aclient=...)"
CheckpointKey = Callable[[str, str, str], str]


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _is_async(client: Any) -> bool:
    return type(client).__module__.startswith("redis.asyncio")


def _is_cluster(client: Any) -> bool:
    return type(client).__name__ == "RedisCluster"


def _check_client(client: Any, owner: str, want_async: bool | None) -> None:
    if not hasattr(client, "execute_command"):
        raise TypeError(
            f"{owner} needs a redis client (redis.Redis, redis.cluster.RedisCluster or their "
            f"redis.asyncio twins), got {type(client).__name__} {client!r}"
        )
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    if kwargs.get("decode_responses"):
        raise ValueError(
            f"{owner} stores raw bytes and needs a client with decode_responses=False; "
            "create a separate client for it"
        )
    if want_async is False and _is_async(client):
        raise TypeError(
            f"{owner} needs a blocking redis client (the DeliveryLedger protocol is "
            f"synchronous), got {type(client).__module__}.{type(client).__name__}: pass "
            "redis.Redis.from_url(url, protocol=2), and the asyncio client as aclient="
        )
    if want_async is True and not _is_async(client):
        raise TypeError(
            f"{owner} needs a redis.asyncio client, got {type(client).__module__}."
            f"{type(client).__name__}: pass redis.asyncio.Redis.from_url(url, protocol=2)"
        )


def _settings(client: Any) -> Mapping[str, Any]:
    """The connection settings of a standalone or cluster client, blocking or asyncio."""
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        pool = getattr(client, "nodes_manager", None)
    settings: Mapping[str, Any] = getattr(pool, "connection_kwargs", None) or {}
    return settings


def _speaks_resp3(client: Any) -> bool:
    from redis import connection

    protocol = _settings(client).get("protocol")
    if protocol is None:  # redis-py's default: 2 before 8.0, 3 since
        protocol = getattr(connection, "DEFAULT_RESP_VERSION", 2)
    return str(protocol) == "3"


def _fix(client: Any) -> str:
    """How to build `client` again, speaking RESP2."""
    package = "redis.asyncio" if _is_async(client) else "redis"
    return f"{package}.{type(client).__name__}.from_url(url, protocol=2)"


def _raise_if_resp3_refused(error: Exception, client: Any, owner: str, fix: str = "") -> None:
    """Raises `resp3_refused`'s error when `error` is the server refusing `client`'s RESP3."""
    protocol = _settings(client).get("protocol")
    refused = resp3_refused(str(error), owner, protocol, fix or _fix(client))
    if refused is not None:
        raise refused from error


def _check_resp3(client: Any, aclient: Any) -> None:
    """Refuses a ledger whose `client` or `aclient` speaks RESP3 to a server without HELLO.

    The reducer takes a failed ledger lookup for a miss and only logs it, so such a ledger
    would deliver nothing: the caller hears of it here. It costs one PING for a RESP3
    `client` (whose connection stays in the pool), one HELLO 2 for a RESP3 `aclient` beside
    a RESP2 `client`, and nothing for RESP2 clients. A server out of reach (after the
    client's retries) is left to the first lookup, whose refusal `_drive` words alike for
    the reducer's log.
    """
    from redis import exceptions

    blocking = _speaks_resp3(client)
    asyncio_too = aclient is not None and _speaks_resp3(aclient)
    if not blocking and not asyncio_too:
        return
    if not blocking and _is_cluster(client):
        # RedisCluster sends HELLO nowhere; and redis-py reports a RESP3 cluster client on
        # Redis 5 itself ("Cluster mode is not enabled"), without the server's reply.
        return
    try:
        if blocking:
            client.execute_command("PING")  # its connection opens with HELLO 3
        else:
            client.execute_command("HELLO", 2)  # changes nothing on a RESP2 connection
    except (exceptions.ConnectionError, exceptions.TimeoutError):
        return
    except exceptions.ResponseError as error:
        if not blocking:
            _raise_if_resp3_refused(error, aclient, ALEDGER)
        else:
            also = f", and aclient={_fix(aclient)}" if asyncio_too else ""
            _raise_if_resp3_refused(error, client, LEDGER, _fix(client) + also)
        raise


def _learn_topology(saver: Any) -> None:
    """Lets a blocking plainredis saver built from a URL find out whether it is a cluster.

    It asks the server on first use and then swaps its client; the outbox or ledger must
    ask before its own first command, which may come first (staging precedes the put).
    """
    setup = getattr(saver, "setup", None)
    if setup is not None and not inspect.iscoroutinefunction(setup):
        setup()


async def _alearn_topology(saver: Any) -> None:
    """`_learn_topology` for an `AsyncRedisSaver`."""
    setup = getattr(saver, "asetup", None)
    if setup is not None and inspect.iscoroutinefunction(setup):
        await setup()


def _wire(command: Eval | tuple[Any, ...], fallback: bool) -> tuple[Any, ...]:
    if not isinstance(command, Eval):
        return command
    script = SCRIPTS[command.script]
    head = ("EVAL", script.source) if fallback else ("EVALSHA", script.sha)
    return (*head, len(command.keys), *command.keys, *command.args)


def _run(client: Any, plan: Plan) -> list[Any]:
    """Runs one plan in one round trip (two the first time a server sees a script)."""
    from redis.exceptions import NoScriptError

    if len(plan) == 1:
        try:
            return [client.execute_command(*_wire(plan[0], False))]
        except NoScriptError:
            # Not cached yet (new server, restart, SCRIPT FLUSH): EVAL caches it.
            return [client.execute_command(*_wire(plan[0], True))]
    pipe = client.pipeline(transaction=False)
    for command in plan:
        pipe.execute_command(*_wire(command, True))
    return list(pipe.execute())


async def _arun(client: Any, plan: Plan) -> list[Any]:
    """`_run`, with an asyncio client."""
    from redis.exceptions import NoScriptError

    if len(plan) == 1:
        try:
            return [await client.execute_command(*_wire(plan[0], False))]
        except NoScriptError:
            return [await client.execute_command(*_wire(plan[0], True))]
    pipe = client.pipeline(transaction=False)
    for command in plan:
        pipe.execute_command(*_wire(command, True))
    return list(await pipe.execute())


def _drive(client: Any, steps: Step, owner: str) -> Any:
    """Runs the plans of `steps` with `client`, which `owner` holds; returns their result."""
    from redis.exceptions import ResponseError

    reply: Any = None
    while True:
        try:
            plan = steps.send(reply)
        except StopIteration as stop:
            return stop.value
        try:
            reply = _run(client, plan)
        except ResponseError as error:
            _raise_if_resp3_refused(error, client, owner)
            raise


async def _adrive(client: Any, steps: Step, owner: str) -> Any:
    """`_drive`, with an asyncio client."""
    from redis.exceptions import ResponseError

    reply: Any = None
    while True:
        try:
            plan = steps.send(reply)
        except StopIteration as stop:
            return stop.value
        try:
            reply = await _arun(client, plan)
        except ResponseError as error:
            _raise_if_resp3_refused(error, client, owner)
            raise
        except RuntimeError as error:
            _raise_if_ended_loop(error, owner)
            raise


def _raise_if_ended_loop(error: RuntimeError, owner: str) -> None:
    """Raises `ended_loop`'s error when `error` is a connection of an ended event loop."""
    ended = ended_loop(str(error), owner)
    if ended is not None:
        raise ended from error


async def _aheal_client(client: Any, owner: str) -> RuntimeError | None:
    """Drops the idle connections of the asyncio `client`'s pool that another event loop
    opened (an ended one: each would fail its first command here), then sends a PING.

    Only those: the application may share the client, and its tasks on this loop take
    idle connections of this loop meanwhile. Returns None once the PING went through (or
    failed for any other reason, left to the delivery, which reports it as it always
    did); the `ended_loop` error when it still met a connection of another loop (a
    `RedisCluster` keeps its connections per node, and only this PING checks them; a loop
    still running in another thread keeps using its own). Without this, the reducer only
    logs its failed ledger lookup and keeps the messages: a delivery on a new loop would
    say nothing.
    """
    from redis.exceptions import RedisError

    here = asyncio.get_running_loop()
    pool = getattr(client, "connection_pool", None)
    for conn in list(getattr(pool, "_available_connections", ())):
        reader = getattr(conn, "_reader", None)  # None: not connected, nothing to drop
        if reader is None or getattr(reader, "_loop", here) is here:
            continue
        try:  # dropped, though closing a connection of an ended loop raises
            await conn.disconnect(nowait=True)
        except RuntimeError as failed:
            if ended_loop(str(failed), owner) is None:
                raise
    try:
        await client.execute_command("PING")
    except RedisError:
        return None
    except RuntimeError as failed:
        error = ended_loop(str(failed), owner)
        if error is None:
            raise
        return error
    return None


# The longest ledger ttl, in seconds (about 31 years), far below where PEXPIRE fails: Redis
# refuses a count of milliseconds that overflows once added to its clock, and a script's
# redis.call spells a number of 1e17 (ms) or more with an exponent, not an integer.
MAX_TTL = 10**9


def _ttl_ms(ttl: object) -> int:
    """`RedisDeliveryLedger`'s ttl in milliseconds (0: none), checked: ``ttl=inf`` raised a
    bare OverflowError and ``ttl='3600'`` a bare TypeError, and a ttl Redis refuses was
    taken, after which every ledger write failed and the reducer dropped what it could not
    record once its retry buffer was full."""
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
        raise TypeError(
            f"RedisDeliveryLedger(ttl=...) must be seconds as int or float, or None; got "
            f"{type(ttl).__name__} {ttl!r}: pass e.g. ttl=30 * 24 * 3600"
        )
    if not math.isfinite(ttl) or ttl <= 0:
        raise ValueError(
            f"RedisDeliveryLedger(ttl={ttl!r}) is not a positive number of seconds: pass "
            "e.g. ttl=30 * 24 * 3600, or ttl=None to keep the entries forever"
        )
    if ttl > MAX_TTL:
        raise ValueError(
            f"RedisDeliveryLedger(ttl={ttl!r}) is more than {MAX_TTL:,} seconds (about 31 "
            "years), more than a Redis expiry can say: pass ttl=None to keep the entries "
            "forever"
        )
    return max(1, int(ttl * 1000))


class RedisOutbox:
    """An `Outbox` in Redis 5.0+: a zset of due batches and a hash per batch.

    Staging is one script call; claiming is one script call that leases due batches by
    moving their score to the lease's end. Every key carries the hash tag ``{prefix}``,
    so it works on a cluster too.

    Args:
        client: A `redis.Redis` or `RedisCluster` for `ReducingSaver.put`, or their
            `redis.asyncio` twins for `aput` (the methods of the other style then fail).
            On Redis 5 it must speak RESP2 (`protocol=2`): a RESP3 one raises `ValueError`
            at the first call.
        prefix: The first component of every key.
        checkpoint_key: ``(thread_id, checkpoint_ns, checkpoint_id) -> key`` of a key on the
            same server that exists once the checkpoint is stored; lets a claim tell
            whether a batch is committed without asking the inner saver. `for_saver` sets it.
    """

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = DEFAULT_PREFIX,
        checkpoint_key: CheckpointKey | None = None,
    ) -> None:
        _check_client(client, "RedisOutbox", None)
        if checkpoint_key is not None and not callable(checkpoint_key):
            raise TypeError(
                f"RedisOutbox(checkpoint_key={shown(checkpoint_key)}) must be a function "
                "(thread_id, checkpoint_ns, checkpoint_id) -> key, or None; "
                "RedisOutbox.for_saver(saver) sets it for a plainredis saver"
            )
        self._client = client
        self._saver: Any = None
        self.keys = DeliveryKeys(prefix)
        self.checkpoint_key = checkpoint_key

    @classmethod
    def for_saver(cls, saver: Any, *, prefix: str | None = None) -> RedisOutbox:
        """An outbox on the server of a `langgraph-checkpoint-plainredis` saver.

        It uses the saver's client (`RedisSaver` for `put`, `AsyncRedisSaver` for `aput`)
        and checks whether a batch is committed with one EXISTS on the checkpoint's key,
        inside the claim script outside a cluster.

        Args:
            saver: A plainredis `RedisSaver` or `AsyncRedisSaver`.
            prefix: Key prefix; defaults to the saver's prefix plus ``-reducer``, beside
                (not under) the saver's keys so its tools do not count them as orphans.
        """
        keyspace = getattr(saver, "keyspace", None)
        if keyspace is None or not hasattr(saver, "client") or not hasattr(keyspace, "thread"):
            raise TypeError(
                f"RedisOutbox.for_saver needs a langgraph-checkpoint-plainredis saver, got "
                f"{type(saver).__name__}; for another saver pass a client: "
                "RedisOutbox(redis.Redis.from_url(url))"
            )

        def checkpoint_key(thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> str:
            key: str = keyspace.thread(thread_id).cp(checkpoint_ns, checkpoint_id)
            return key

        outbox = cls(
            saver.client,
            prefix=prefix if prefix is not None else f"{saver.prefix}-reducer",
            checkpoint_key=checkpoint_key,
        )
        outbox._saver = saver
        return outbox

    @property
    def client(self) -> Any:
        """The Redis client; the saver's current one when built by `for_saver`."""
        return self._saver.client if self._saver is not None else self._client

    def _core(self) -> OutboxCore:
        return OutboxCore(self.keys, _is_cluster(self.client), self.checkpoint_key)

    def _learn(self) -> None:
        if self._saver is not None:
            _learn_topology(self._saver)

    async def _alearn(self) -> None:
        if self._saver is not None:
            await _alearn_topology(self._saver)

    def _sync(self, method: str) -> Any:
        client = self.client
        if _is_async(client):
            raise TypeError(
                f"RedisOutbox.{method}() needs a blocking client, but this outbox has "
                f"{type(client).__module__}.{type(client).__name__}: use a{method}() from "
                "async code, or build the outbox with redis.Redis"
            )
        return client

    def _async(self, method: str) -> Any:
        client = self.client
        if not _is_async(client):
            raise TypeError(
                f"RedisOutbox.a{method}() needs a redis.asyncio client, but this outbox has "
                f"{type(client).__module__}.{type(client).__name__}: use {method}() from "
                "sync code, or build the outbox with redis.asyncio.Redis"
            )
        return client

    # -- blocking ------------------------------------------------------------------------

    def stage(
        self,
        batch: StagedBatch,
        *,
        now: int,
        visible_at: int,
        settle: Sequence[Settlement] = (),
    ) -> int:
        """Stores `batch` and applies `settle` in one script call; returns the due count."""
        self._learn()
        client = self._sync("stage")
        steps = self._core().stage(batch, now, visible_at, settle)
        result: int = _drive(client, steps, "RedisOutbox")
        return result

    def claim(self, *, now: int, lease_until: int, limit: int) -> list[StagedBatch]:
        """Leases up to `limit` due batches until `lease_until`."""
        self._learn()
        client = self._sync("claim")
        steps = self._core().claim(now, lease_until, limit)
        result: list[StagedBatch] = _drive(client, steps, "RedisOutbox")
        return result

    def settle(self, settlements: Sequence[Settlement]) -> None:
        """Applies acks, retries and discards in one script call."""
        self._learn()
        _drive(self._sync("settle"), self._core().settle(settlements), "RedisOutbox")

    def stats(self) -> OutboxStats:
        """Backlog and counters, shared by every process."""
        self._learn()
        result: OutboxStats = _drive(self._sync("stats"), self._core().stats(), "RedisOutbox")
        return result

    # -- asyncio -------------------------------------------------------------------------

    async def astage(
        self,
        batch: StagedBatch,
        *,
        now: int,
        visible_at: int,
        settle: Sequence[Settlement] = (),
    ) -> int:
        """`stage`, for asyncio."""
        await self._alearn()
        client = self._async("stage")
        steps = self._core().stage(batch, now, visible_at, settle)
        result: int = await _adrive(client, steps, "RedisOutbox")
        return result

    async def aclaim(self, *, now: int, lease_until: int, limit: int) -> list[StagedBatch]:
        """`claim`, for asyncio."""
        await self._alearn()
        client = self._async("claim")
        steps = self._core().claim(now, lease_until, limit)
        result: list[StagedBatch] = await _adrive(client, steps, "RedisOutbox")
        return result

    async def asettle(self, settlements: Sequence[Settlement]) -> None:
        """`settle`, for asyncio."""
        await self._alearn()
        await _adrive(self._async("settle"), self._core().settle(settlements), "RedisOutbox")

    async def astats(self) -> OutboxStats:
        """`stats`, for asyncio."""
        await self._alearn()
        steps = self._core().stats()
        result: OutboxStats = await _adrive(self._async("stats"), steps, "RedisOutbox")
        return result

    async def _aheal(self) -> RuntimeError | None:
        """Drops the asyncio client's connections of an ended event loop (see
        `_aheal_client`); `DeliveryRunner` asks before it delivers on a new loop."""
        if _is_async(self.client):
            return await _aheal_client(self.client, "RedisOutbox")
        return None

    def __repr__(self) -> str:
        return f"RedisOutbox(prefix={self.keys.prefix!r})"


class RedisDeliveryLedger:
    """A `DeliveryLedger` in Redis 5.0+: one hash per memory namespace.

    Field ``<hook>:<message id>`` of ``<prefix>:ledger:{<namespace>}`` records a delivery,
    so `seen` is one HMGET and `mark` one HSET. One namespace lives in one cluster slot.
    `aseen` and `amark` (the `AsyncDeliveryLedger` side, awaited by `adeliver`) use
    `aclient`; without one they run the blocking calls in a worker thread, so the event
    loop never waits on Redis either way.

    A `client` or `aclient` speaking RESP3 (`protocol=3`, redis-py 8's default) is checked
    when the ledger is built, in one round trip: on Redis 5, which has no HELLO, it raises
    `ValueError` there, since the reducer would only log every failed lookup.

    Args:
        client: A blocking `redis.Redis` or `RedisCluster`, for `put`, `invoke` and
            `Background` hooks.
        aclient: The `redis.asyncio` twin of `client` (same server and database), for
            `aput` and `ainvoke`.
        prefix: The first component of every key.
        ttl: Seconds a namespace's entries live after its last delivery, at most
            `MAX_TTL` (10**9, about 31 years); None keeps them forever. A message re-pruned
            after they expired is delivered again.
    """

    def __init__(
        self,
        client: Any,
        *,
        aclient: Any = None,
        prefix: str = DEFAULT_PREFIX,
        ttl: float | None = None,
    ) -> None:
        _check_client(client, LEDGER, False)
        if aclient is not None:
            _check_client(aclient, ALEDGER, True)
        ttl_ms = _ttl_ms(ttl)
        _check_resp3(client, aclient)
        self.client = client
        self.aclient = aclient
        self.keys = DeliveryKeys(prefix)
        self.ttl = ttl
        self._core = LedgerCore(self.keys, ttl_ms)

    @classmethod
    def for_saver(
        cls,
        saver: Any,
        *,
        aclient: Any = None,
        prefix: str | None = None,
        ttl: float | None = None,
    ) -> RedisDeliveryLedger:
        """A ledger on the server of a blocking plainredis `RedisSaver`, beside its keys."""
        if not hasattr(saver, "client") or not hasattr(saver, "prefix"):
            raise TypeError(
                f"RedisDeliveryLedger.for_saver needs a langgraph-checkpoint-plainredis "
                f"RedisSaver, got {type(saver).__name__}; otherwise pass a client"
            )
        if _is_async(saver.client):
            raise TypeError(
                f"RedisDeliveryLedger.for_saver needs a blocking RedisSaver (the DeliveryLedger "
                f"protocol is synchronous), got {type(saver).__name__}: pass "
                "RedisDeliveryLedger(redis.Redis.from_url(url, protocol=2), "
                "aclient=saver.client) for an AsyncRedisSaver's server"
            )
        _check_client(saver.client, LEDGER, False)
        _learn_topology(saver)
        return cls(
            saver.client,
            aclient=aclient,
            prefix=prefix if prefix is not None else f"{saver.prefix}-reducer",
            ttl=ttl,
        )

    def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        """Return the subset of `message_ids` already delivered to `hook_key` in `namespace`."""
        steps = self._core.seen(hook_key, namespace, message_ids)
        result: set[str] = _drive(self.client, steps, LEDGER)
        return result

    def mark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        """Record `message_ids` as delivered to `hook_key` in `namespace`."""
        steps = self._core.mark(hook_key, namespace, message_ids, _outbox.now_ms())
        _drive(self.client, steps, LEDGER)

    async def aseen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        """`seen` for the event loop: through `aclient`, else in a worker thread."""
        if self.aclient is None:
            return await asyncio.to_thread(self.seen, hook_key, namespace, message_ids)
        steps = self._core.seen(hook_key, namespace, message_ids)
        result: set[str] = await _adrive(self.aclient, steps, ALEDGER)
        return result

    async def amark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        """`mark` for the event loop: through `aclient`, else in a worker thread."""
        if self.aclient is None:
            await asyncio.to_thread(self.mark, hook_key, namespace, message_ids)
            return
        steps = self._core.mark(hook_key, namespace, message_ids, _outbox.now_ms())
        await _adrive(self.aclient, steps, ALEDGER)

    async def _aheal(self) -> RuntimeError | None:
        """Drops `aclient`'s connections of an ended event loop (see `_aheal_client`);
        `DeliveryRunner` asks before it delivers on a new loop."""
        if self.aclient is not None:
            return await _aheal_client(self.aclient, ALEDGER)
        return None

    def key(self, kind: str, namespace: Any) -> str:
        """A key of `kind` in the cluster slot of `namespace`'s ledger."""
        return self.keys.namespaced(kind, namespace)

    def __repr__(self) -> str:
        return f"RedisDeliveryLedger(prefix={self.keys.prefix!r}, ttl={self.ttl!r})"


class RedisSink:
    """An `on_prune` hook whose writes commit with its ledger entries: exactly once.

    Subclass it and implement `commands`. Each message's commands run in one Lua script
    with the ``HSETNX`` of its ledger entry, and only when that entry was absent; so a
    message reaches the sink once per namespace even when a crash, a retry or two
    workers deliver its batch again. Use it with the same `RedisDeliveryLedger` as the
    reducer (`MessageReducer(ledger=...)`).

    Args:
        ledger: The reducer's ledger; the sink writes through its client.
        name: The hook's ledger key; keep it stable across deploys.
    """

    def __init__(self, ledger: RedisDeliveryLedger, *, name: str) -> None:
        if not isinstance(ledger, RedisDeliveryLedger):
            raise TypeError(
                f"{type(self).__name__} commits with a RedisDeliveryLedger, got "
                f"{type(ledger).__name__}; pass the ledger given to MessageReducer(ledger=...)"
            )
        if not isinstance(name, str) or not name:
            raise ValueError(f"{type(self).__name__}(name={name!r}) must be a non-empty string")
        self.ledger = ledger
        self.name = name
        self._core = SinkCore(ledger._core)

    def key(self, kind: str, namespace: Any) -> str:
        """A key of `kind` in the cluster slot of `namespace`: the only keys a sink may write."""
        return self.ledger.key(kind, namespace)

    def commands(self, message: Any, message_id: str, namespace: Any) -> Sequence[tuple[Any, ...]]:
        """The commands storing one message, each ``(name, key, *args)``.

        Args:
            message: The pruned message.
            message_id: Its `message_identity`; use it as the field or member, so a
                message stored twice by hand still lands once.
            namespace: The run's memory namespace; build keys with `key(kind, namespace)`.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement commands()")

    def __call__(self, pruned: list[Any], namespace: Any) -> Any:
        """Stores the messages whose ledger entries are absent; returns their ids.

        On an event loop's thread, with a ledger that has an `aclient`, it returns a
        coroutine instead (the reducer awaits it), so the loop never waits on Redis.
        """
        per_message: dict[str, Sequence[tuple[Any, ...]]] = {}
        for message in pruned:
            identity = message_identity(message)
            if identity not in per_message:
                per_message[identity] = list(self.commands(message, identity, namespace))
        steps = self._core.apply(self.name, namespace, list(per_message.items()), _outbox.now_ms())
        if self.ledger.aclient is not None and _loop_running():
            return _adrive(self.ledger.aclient, steps, ALEDGER)
        applied: list[str] = _drive(self.ledger.client, steps, LEDGER)
        return applied

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class RedisMemoryWriter(RedisSink):
    """A `RedisSink` that keeps every pruned message, exactly once, in Redis.

    Messages of a namespace go to the hash ``<prefix>:mem:{<namespace>}``, one field per
    message identity, serialized with `serde`.

    Args:
        ledger: The reducer's `RedisDeliveryLedger`.
        name: The hook's ledger key.
        serde: Serializer; LangGraph's `JsonPlusSerializer` by default, so LangChain
            messages round-trip.
    """

    KIND = "mem"

    def __init__(
        self, ledger: RedisDeliveryLedger, *, name: str = "redis-memory", serde: Any = None
    ) -> None:
        if serde is not None and not all(
            callable(getattr(serde, method, None)) for method in ("dumps_typed", "loads_typed")
        ):
            # Else every delivery to it failed, and the reducer dropped the messages once
            # its retry buffer was full.
            raise TypeError(
                f"RedisMemoryWriter(serde={shown(serde)}) needs a LangGraph serializer, with "
                "dumps_typed and loads_typed: pass e.g. JsonPlusSerializer(), or None for it"
            )
        super().__init__(ledger, name=name)
        if serde is None:
            from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

            serde = JsonPlusSerializer()
        self.serde = serde

    def commands(self, message: Any, message_id: str, namespace: Any) -> Sequence[tuple[Any, ...]]:
        type_name, data = self.serde.dumps_typed(message)
        value = type_name.encode("utf-8") + b"\x00" + data
        return [("HSET", self.key(self.KIND, namespace), message_id, value)]

    def read(self, namespace: Any) -> dict[str, Any]:
        """Every message stored for `namespace`, by message identity."""
        return self._decode(self.ledger.client.hgetall(self.key(self.KIND, namespace)))

    async def aread(self, namespace: Any) -> dict[str, Any]:
        """`read` through the ledger's `aclient`."""
        if self.ledger.aclient is None:
            raise TypeError(
                "RedisMemoryWriter.aread needs a ledger with an asyncio client: "
                "RedisDeliveryLedger(client, aclient=redis.asyncio.Redis.from_url(url, protocol=2))"
            )
        return self._decode(await self.ledger.aclient.hgetall(self.key(self.KIND, namespace)))

    def _decode(self, raw: dict[Any, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field, value in raw.items():
            type_name, _, data = bytes(value).partition(b"\x00")
            key = field.decode("utf-8") if isinstance(field, bytes) else str(field)
            out[key] = self.serde.loads_typed((type_name.decode("utf-8"), data))
        return out
