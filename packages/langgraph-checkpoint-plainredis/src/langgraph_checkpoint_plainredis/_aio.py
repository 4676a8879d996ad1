"""`AsyncRedisSaver`: the asyncio shell around `SaverCore`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections import OrderedDict
from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import redis.asyncio as aioredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    ClusterError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
)

from ._core import (
    CLUSTER_RETRY_DELAYS,
    Eval,
    Plan,
    SaverCore,
    Scan,
    Shared,
    Step,
    cluster_retries,
    info_refused,
)
from ._shell import (
    check_serde,
    connect_options,
    is_cluster_client,
    validate_client,
    wire_args,
    wrong_side,
)
from ._wire import (
    POOL_ARGS,
    Direct,
    Idle,
    aexchange,
    gives_up,
    pack,
    plain_io,
    reconnects,
)

__all__ = ["AsyncRedisSaver"]

T = TypeVar("T")
_use_sync = functools.partial(
    wrong_side,
    "AsyncRedisSaver",
    other="RedisSaver",
    usage="asynchronous (ainvoke, astream, aget_state)",
)


async def _stale(conn: Any) -> bool:
    """Whether a kept connection has stray bytes or was closed by the server (the pool's
    check before it hands a connection out): it is reconnected before use then."""
    poll = getattr(conn, "can_read", None) or conn.can_read_destructive  # before redis-py 8
    try:
        return bool(await poll())
    except (RedisError, OSError):  # redis-py's ConnectionError and TimeoutError
        return True


def _on_another_loop(conn: Any) -> bool:
    """Whether `conn`'s stream was opened on an event loop other than the running one (a
    saver kept from one `asyncio.run` to the next, say): it cannot be read on this one."""
    reader = getattr(conn, "_reader", None)
    return reader is not None and getattr(reader, "_loop", None) is not asyncio.get_running_loop()


async def _leave_other_loop(conn: Any) -> None:
    """Drops the stream of a connection opened on another event loop, so that its next use
    connects on the running one. When that loop is closed, or not running (it may run
    again, or never), its transport cannot close through it now (redis-py forgets the
    stream all the same): the socket is shut down here, so the server lets the connection
    go, and closed when the transport is collected or its loop runs again."""
    transport = conn._writer.transport
    loop = getattr(conn._reader, "_loop", None)
    with contextlib.suppress(RuntimeError):  # "Event loop is closed"
        await conn.disconnect(nowait=True)
    if loop is None or not loop.is_running():
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


def _kept_elsewhere(client: Any, in_use: bool = False) -> list[Any]:
    """The connections of `client` opened on another event loop than the running one: those
    its pool (a cluster client's: each node's) keeps for the next call and, with `in_use`,
    those lent out."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        opened = [*getattr(pool, "_available_connections", ())]
        if in_use:
            opened += getattr(pool, "_in_use_connections", ())
    else:  # a cluster client: its nodes', and those it was started from (the slot map's)
        manager = getattr(client, "nodes_manager", None)
        nodes = {
            id(node): node
            for table in ("nodes_cache", "startup_nodes")
            for node in getattr(manager, table, {}).values()
        }
        field = "_connections" if in_use else "_free"
        opened = [conn for node in nodes.values() for conn in getattr(node, field, ())]
    return [conn for conn in opened if _on_another_loop(conn)]


# Clients of its own a saver keeps for loops it left that may run again: the most recently
# left. A loop cannot say whether it will run again, and one that is dropped unclosed stays
# alive as long as its client does (the client's connections name it).
_PARKED = 4

Gone = list[tuple[asyncio.AbstractEventLoop, Any]]  # clients let go, each with its loop


def _enter_loop(saver: AsyncRedisSaver, loop: asyncio.AbstractEventLoop) -> Gone:
    """The first call of `saver` on `loop` since it served another. A client of its own
    belongs to the loop it served: that pool's connections and locks are bound to it (a lock
    waited on once stays bound for good), and redis-py's cluster client cannot leave it. So
    each loop gets a client of its own: one that served a loop that may run again (open, not
    running) waits for that loop's next call, parked (`_PARKED` at most); one whose loop has
    closed is let go. Returns the clients let go, for `_let_go`. A client passed in stays
    (its kept connections are opened again on the running loop: `_prepare`).

    A saver whose last call's loop still runs (in another thread) is refused: its pool's
    locks and connections belong to that loop, and sharing them across running loops fails
    or hangs in redis-py."""
    previous = saver._loop
    if previous is not None and previous.is_running():
        raise RuntimeError(
            f"this AsyncRedisSaver is in use on another event loop that is still running "
            f"({previous!r}): its connections belong to that loop. Create one AsyncRedisSaver "
            "per event loop (per thread), or use RedisSaver from several threads."
        )
    gone: Gone = []
    if saver._owns_client and previous is not None:
        parked = saver._parked
        if previous.is_closed():
            gone.append((previous, saver._client))
        else:
            parked[previous] = (saver._client, saver._idle, saver._detect_lock)
        state = parked.pop(loop, None)
        for other in [other for other in parked if other.is_closed()]:
            gone.append((other, parked.pop(other)[0]))
        while len(parked) > _PARKED:  # the least recently left first
            other, (client, _, _) = parked.popitem(last=False)
            gone.append((other, client))
        if state is not None and is_cluster_client(state[0]) == saver._cluster:
            saver._client, saver._idle, saver._detect_lock = state
        else:  # a new loop, or one whose client predates the topology the saver learnt
            if state is not None:
                gone.append((loop, state[0]))
            saver._client = saver._new_client()
            saver._idle = Idle.of(saver._client)
            saver._detect_lock = asyncio.Lock()
        saver._direct = None
        saver._ready = False
    saver._loop = loop
    return gone


async def _let_go(gone: Gone) -> None:
    """Ends the connections of clients a saver let go (see `_enter_loop`): one of the running
    loop is closed; one whose loop runs in another thread is closed on that loop, when it
    gets to it (a call here never waits on another loop); any other cannot close through
    its loop now, so its sockets are shut down here (the server lets the connections go) and
    closed when its loop runs again or the client is collected."""
    running = asyncio.get_running_loop()
    for loop, client in gone:
        if loop is running:
            await client.aclose()
        elif loop.is_running():  # closed when that loop gets to it, not waited for here
            asyncio.run_coroutine_threadsafe(client.aclose(), loop)
        else:
            for conn in _kept_elsewhere(client, in_use=True):
                await _leave_other_loop(conn)


async def _prepare(saver: AsyncRedisSaver) -> None:
    """What every call does first: follow the running event loop, and get ready once."""
    if (loop := asyncio.get_running_loop()) is not saver._loop:
        previous = saver._loop
        await _let_go(_enter_loop(saver, loop))
        if previous is not None and not saver._owns_client:
            # A client passed in keeps its pool: what it kept from the other loop is opened
            # again on this one (as the direct path does per connection; redis-py's own
            # commands failed on such a connection, "Event loop is closed").
            for conn in _kept_elsewhere(saver._client):
                await _leave_other_loop(conn)
    if not saver._ready:
        await saver._get_ready()


async def _from_pool(pool: Any) -> Any:
    """A connection of `pool` for the running event loop: one the pool hands out that was
    opened on another loop is connected again first."""
    conn = await pool.get_connection(*POOL_ARGS)
    if _on_another_loop(conn):
        try:
            await _leave_other_loop(conn)
        except BaseException:
            await pool.release(conn)
            raise
    return conn


async def _exchange(conn: Any, packed: bytes) -> Any:
    """Sends one packed command on `conn` and reads its reply."""
    if plain_io(conn) and conn.is_connected and not conn.health_check_interval:
        return await aexchange(conn, packed)
    await conn.send_packed_command([packed])  # connects, or runs a due health check, first
    return await conn.read_response()


async def _retried(conn: Any, packed: bytes, error: BaseException) -> Any:
    """The rest of a call whose first attempt on `conn` failed with `error`, under the
    connection's retry policy: it is handed that failure first, then retries as usual."""
    first = [error]

    async def attempt() -> Any:
        if first:
            raise first.pop()
        return await _exchange(conn, packed)

    async def fail(error: BaseException, *count: int) -> None:
        await conn.disconnect()  # the retry reconnects; an error it gives up on propagates
        if gives_up(conn, error):
            raise error

    return await conn.retry.call_with_retry(attempt, fail)


class AsyncRedisSaver(SaverCore, BaseCheckpointSaver[str]):
    """LangGraph checkpointer on plain Redis 5.0+, for `ainvoke`, `astream` and `aget_state`.

    Args:
        url: Redis URL, e.g. ``redis://127.0.0.1:6379/0`` (``rediss://`` for TLS).
        client: A `redis.asyncio.Redis` or `redis.asyncio.cluster.RedisCluster` to reuse
            instead; the other connection arguments are ignored and `aclose` leaves it open.
        prefix: Namespace of every key, without a trailing ``:``.
        ttl: Seconds a thread lives after its last write; None keeps it forever.
        serde: Serializer for checkpoints and writes (LangGraph's JsonPlusSerializer
            by default).
        refresh_on_read: Also refresh the TTL of what `aget_tuple` reads.
        compress: zlib-compress channel values of 512 bytes or more when that saves
            an eighth; readers handle both forms whatever this is set to.
        cluster: Whether `url` names a Redis Cluster (or Valkey cluster) node; None asks
            the server (`INFO cluster`) on first use. A passed-in client is a cluster
            client when it is a `RedisCluster`.
        protocol: RESP version for a client built from `url`: 2 works on every
            server from Redis 5; 3 needs Redis 6+.
        index_metadata: Metadata keys (e.g. ``("user_id",)``) whose values each put records
            in a cross-thread index, so that `alist(None, filter=...)` on one of them reads
            only the threads that had that value, newest first, not every thread. A keyspace
            with threads already needs `areindex()` once; see docs/plainredis-search.md.
        **connection_kwargs: Passed to the connection pool (`redis.asyncio`
            `BlockingConnectionPool.from_url`: at most `max_connections=64` connections,
            a call waits up to `timeout=30` s for one); `retry=` replaces the default,
            which reconnects with jittered backoff for a few seconds (every call is idempotent).
    """

    # The connection state, shared with shallow copies of the saver (see `Shared`).
    _client = Shared["aioredis.Redis | RedisCluster"]()
    _known = Shared[bool]()  # whether the topology is known (see _learn_topology)
    _detect_lock = Shared[asyncio.Lock]()
    _idle = Shared["Idle | None"]()
    _direct = Shared["Direct | None"]()
    _loop = Shared["asyncio.AbstractEventLoop | None"]()  # see _enter_loop
    # Clients of its own parked for loops that may run again, with their idle connections
    # and topology locks (see _enter_loop).
    _parked = Shared["OrderedDict[asyncio.AbstractEventLoop, tuple[Any, Any, Any]]"]()

    _SIDE = "AsyncRedisSaver"

    def __init__(
        self,
        url: str | None = None,
        *,
        client: aioredis.Redis | RedisCluster | None = None,
        prefix: str = "lg",
        ttl: float | None = None,
        serde: SerializerProtocol | None = None,
        refresh_on_read: bool = False,
        compress: bool = True,
        cluster: bool | None = None,
        protocol: int = 2,
        index_metadata: Sequence[str] = (),
        **connection_kwargs: Any,
    ) -> None:
        check_serde(serde)
        super().__init__(serde=serde)
        self._init_core(prefix, ttl, refresh_on_read, compress, index_metadata)
        self._url = url or ""
        self._detect_lock = asyncio.Lock()
        self._ready = False  # see _get_ready
        self._loop = None  # see _enter_loop
        self._parked = OrderedDict()
        self._idle = None  # only for a client of our own, with a large pool
        self._direct = None  # see _direct_pool
        if client is not None:
            validate_client(client, "AsyncRedisSaver", "async")
            self._client, self._owns_client = client, False
            self._cluster = is_cluster_client(client)
            self._known = True
        elif url is not None:
            self._connect = connect_options(
                url, protocol, connection_kwargs, "AsyncRedisSaver", cluster
            )
            self._owns_client = True
            self._cluster = bool(cluster)
            self._client = self._new_client()
            self._idle = Idle.of(self._client)
            self._known = cluster is not None
        else:
            raise ValueError(
                "AsyncRedisSaver needs a server: pass url='redis://127.0.0.1:6379/0' "
                "or client=redis.asyncio.Redis(...)"
            )

    def _new_client(self) -> Any:
        if self._cluster:
            return RedisCluster.from_url(self._url, **self._connect)
        # A blocking pool: many concurrent runs wait for a connection (up to `timeout`
        # seconds) instead of failing with MaxConnectionsError past the pool's size.
        options = {"max_connections": 64, "timeout": 30, **self._connect}
        pool = aioredis.BlockingConnectionPool.from_url(self._url, **options)
        return aioredis.Redis.from_pool(pool)  # the client owns the pool: aclose closes it

    async def _learn_topology(self) -> None:
        """Asks the server once whether it is a cluster node, and switches client if so."""
        async with self._detect_lock:
            if self._known:
                return
            try:
                enabled = bool((await self._client.info("cluster")).get("cluster_enabled"))
            except ResponseError as error:  # no INFO for this user, or none at all
                enabled = info_refused(error, self.prefix, self._client_example)
            if enabled:
                await self._release_idle()
                await self._client.aclose()
                self._cluster = True
                self._client = self._new_client()
            self._known = True

    @property
    def client(self) -> Any:
        """The Redis client the saver uses."""
        return self._client

    async def __aenter__(self) -> AsyncRedisSaver:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the connection pool, unless the client was passed in."""
        if not self._owns_client:
            return
        gone: Gone = []
        if self._loop is not None and self._loop is not asyncio.get_running_loop():
            # The client of this loop (parked, see `_enter_loop`) is the one to close here;
            # a saver in use on a loop that still runs elsewhere is refused, as a call is.
            gone = _enter_loop(self, asyncio.get_running_loop())
        # Clients parked for other loops cannot close through this one, whose locks they do
        # not share: they are let go.
        gone += [(loop, client) for loop, (client, _, _) in self._parked.items()]
        self._parked.clear()
        await _let_go(gone)
        await self._release_idle()
        await self._client.aclose()
        # A next call gets ready again: a cluster client reads its slot map again once (it
        # forgets it when closed), before calls run on it at once.
        self._ready = False
        self._direct = None

    async def _release_idle(self) -> None:
        kept = self._idle.drain() if self._idle is not None else []
        for conn in kept:  # only a plain client's pool lends connections to keep
            await self._client.connection_pool.release(conn)  # type: ignore[union-attr]

    async def asetup(self) -> None:
        """Learns whether the server is a cluster node, if `cluster=` was not given, and
        reads a cluster's slot map.

        Optional: the first call does this by itself. The saver needs no schema.
        """
        await _prepare(self)

    async def _get_ready(self) -> None:
        """What the first call does: learn the topology, and have a cluster client read the
        slot map once, before calls run on it concurrently. A fresh `redis.asyncio`
        `RedisCluster` that many commands start on at once fails some of them with
        `AttributeError` (redis-py 8.1: a connection loses its stream while it connects)."""
        if not self._known:
            await self._learn_topology()
        if self._cluster:
            async with self._detect_lock:
                try:
                    await self._client.initialize()  # reads the slot map once; then a no-op
                except RedisClusterException as error:
                    self._raise_translated(error)
                    raise
        if plan := self._ready_plan():
            self._check_ready(await self._run(plan))
        self._ready = True

    # -- running plans -------------------------------------------------------------------

    async def _send(self, plan: Plan, fallback: bool) -> list[Any]:
        if len(plan) == 1 and isinstance(plan[0], Eval):
            pool = self._direct_pool()
            if pool is not None:
                return [await self._call_script(pool, wire_args(plan[0], fallback))]
        # Anything else borrows from the pool itself: kept connections go back to it first.
        if self._idle:
            await self._release_idle()
        if len(plan) == 1 and isinstance(plan[0], Scan):
            return [
                [key async for key in self._client.scan_iter(match=plan[0].pattern, count=1000)]
            ]
        if len(plan) == 1:
            return [await self._client.execute_command(*wire_args(plan[0], fallback))]
        pipe = self._client.pipeline(transaction=False)
        for cmd in plan:
            pipe.execute_command(*wire_args(cmd, fallback))
        return await pipe.execute()

    def _direct_pool(self) -> Any | None:
        """The pool to run a script call on directly, or None (see `_wire.direct_pool`)."""
        direct = self._direct
        if direct is None or not direct.serves(self._client):
            direct = self._direct = Direct(self._client, aioredis.Redis)
        return direct.pool()

    async def _borrow(self, pool: Any, idle: Idle | None) -> Any:
        """A connection for one script call: one `idle` kept (see `_wire.Idle`), else the
        pool's."""
        taken = idle.take() if idle is not None else None
        if taken is not None:
            conn, poll = taken
            try:
                if _on_another_loop(conn):
                    await _leave_other_loop(conn)
                elif reconnects(conn) or (poll and await _stale(conn)):
                    await conn.disconnect()
            except BaseException:  # cancelled, say: the pool must get it back
                await pool.release(conn)
                raise
            return conn
        if idle is None:
            return await _from_pool(pool)
        idle.waiting(+1)
        try:
            return await _from_pool(pool)
        finally:
            idle.waiting(-1)

    async def _call_script(self, pool: Any, args: tuple[Any, ...]) -> Any:
        """`execute_command` for a script call, on a connection of `pool` (see `_wire`).

        The first attempt runs inline; only a failed one goes through the connection's
        retry policy, which sees that failure first, so it retries exactly as it would have.
        """
        packed = pack(args, pool.connection_kwargs.get("encoding_errors", "strict"))
        idle = self._idle  # the pool's: kept if the saver moves to another loop meanwhile
        conn = await self._borrow(pool, idle)
        clean = answered = False
        try:
            try:
                reply = await _exchange(conn, packed)
            except Exception as error:  # the retry policy decides, as before
                reply = await _retried(conn, packed, error)
            clean = True
            return reply
        except ResponseError:
            answered = True  # an error reply, read whole
            raise
        finally:
            try:
                if reconnects(conn):
                    await conn.disconnect()
                elif not (clean or answered):  # its reply may be still to come (see _sync)
                    await conn.disconnect(nowait=True)
            finally:
                if not (clean and idle is not None and idle.keep(conn)):
                    await pool.release(conn)

    async def _run(self, plan: Plan) -> list[Any]:
        if asyncio.get_running_loop() is not self._loop:
            # A call begun on a loop that stopped, and another loop took the saver meanwhile:
            # each round trip runs on the client of its own loop (refused while the other
            # still runs), never on the other loop's.
            await _prepare(self)
        if not self._cluster:
            return await self._run_once(plan)
        for delay in CLUSTER_RETRY_DELAYS:
            try:
                return await self._run_once(plan)
            except (ClusterError, ResponseError) as error:
                if not cluster_retries(error):
                    raise
                await asyncio.sleep(delay)
        return await self._run_once(plan)

    async def _run_once(self, plan: Plan) -> list[Any]:
        try:
            try:
                return await self._send(plan, fallback=False)
            except NoScriptError:
                # The server lost its script cache (restart, SCRIPT FLUSH) or never had
                # one of the plan's scripts: send the sources once; EVAL caches them again.
                # Scripts of the plan it had cached ran, and run again after the others:
                # each is safe to repeat in order (test_delta_history checks every script).
                return await self._send(plan, fallback=True)
        except (ResponseError, RedisClusterException) as exc:  # the latter: see translate_error
            self._raise_translated(exc)
            raise

    async def _drive(self, steps: Generator[Step, list[Any], T]) -> T:
        await _prepare(self)
        reply: Any = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply = await self._run(step) if isinstance(step, list) else None

    # -- BaseCheckpointSaver -------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Returns the checkpoint `config` names (its ``checkpoint_id``, else the newest)."""
        return await self._drive(self._get_steps(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Yields checkpoints newest first; `config=None` walks every thread."""
        await _prepare(self)
        steps = self._list_steps(config, filter=filter, before=before, limit=limit)
        reply: Any = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration:
                return
            if isinstance(step, list):
                reply = await self._run(step)
            else:
                reply = None
                yield step

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Stores a checkpoint and its new channel values atomically, in one round trip."""
        return await self._drive(self._put_steps(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Stores pending writes; the first write per (task, index) wins."""
        await self._drive(self._put_writes_steps(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """Deletes every key of the thread, in every namespace."""
        await self._drive(self._delete_thread_steps(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Deletes the checkpoints (and their writes) written by the given runs."""
        await self._drive(self._delete_for_runs_steps(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every checkpoint, write and blob of one thread to another."""
        await self._drive(self._copy_thread_steps(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keeps only the newest checkpoint per namespace, or deletes the threads."""
        await self._drive(self._prune_steps(thread_ids, strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        """LangGraph's DeltaChannel replay: per channel, the writes since the nearest
        ancestor holding its value, and that value (``seed``). One round trip per 256
        ancestors, where the default reads each ancestor with an `aget_tuple`."""
        return await self._drive(self._delta_history_steps(config, channels))

    async def areindex(self) -> None:
        """Builds the metadata index of this saver's `index_metadata` from every thread and
        marks it complete, so that filtered `alist(None)` calls use it; drops the index of
        any other field. Walks the whole keyspace: run it once, after every writer indexes
        the fields (see docs/plainredis-search.md)."""
        await self._drive(self._reindex_steps())

    # -- the other side ------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        _use_sync("get_tuple")

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        _use_sync("list")

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        _use_sync("put")

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        _use_sync("put_writes")

    def delete_thread(self, thread_id: str) -> None:
        _use_sync("delete_thread")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        _use_sync("delete_for_runs")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        _use_sync("copy_thread")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        _use_sync("prune")

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        _use_sync("get_delta_channel_history")

    def reindex(self) -> None:
        _use_sync("reindex")
