"""`RedisSaver`: the blocking shell around `SaverCore`."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import AsyncIterator, Generator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import redis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from redis.cluster import RedisCluster
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
    gives_up,
    pack,
    plain_io,
    read_reply,
    reconnects,
    send_raw,
)

__all__ = ["RedisSaver", "close_client"]

T = TypeVar("T")
_use_async = functools.partial(
    wrong_side,
    "RedisSaver",
    other="AsyncRedisSaver",
    usage="blocking (invoke, stream, get_state)",
)


def _stale(conn: Any) -> bool:
    """Whether a kept connection has stray bytes or was closed by the server (the pool's
    check before it hands a connection out): it is reconnected before use then."""
    try:
        return bool(conn.can_read())
    except (RedisError, OSError):  # redis-py's ConnectionError and TimeoutError
        return True


def _exchange(conn: Any, packed: bytes) -> Any:
    """Sends one packed command on `conn` and reads its reply."""
    if plain_io(conn) and not conn.health_check_interval:  # health checks: redis-py's
        if conn._sock is None:
            conn.send_packed_command([packed])  # connects first
        else:
            send_raw(conn, packed)
        return read_reply(conn)
    conn.send_packed_command([packed])
    return conn.read_response()


def _give_back(pool: Any, conn: Any) -> None:
    """Returns a borrowed connection to the pool: every path that gives one back goes
    through here."""
    pool.release(conn)


def _retried(conn: Any, packed: bytes, error: BaseException) -> Any:
    """The rest of a call whose first attempt on `conn` failed with `error`, under the
    connection's retry policy: it is handed that failure first, then retries as usual."""
    first = [error]

    def attempt() -> Any:
        if first:
            raise first.pop()
        return _exchange(conn, packed)

    def fail(error: BaseException, *count: int) -> None:
        conn.disconnect()  # the retry reconnects; an error it gives up on propagates
        if gives_up(conn, error):
            raise error

    return conn.retry.call_with_retry(attempt, fail)


def close_client(client: redis.Redis | RedisCluster) -> None:
    """Closes a blocking client; a `RedisCluster` also disconnects its nodes' pools, which its
    own close leaves connected until they are collected."""
    client.close()
    if isinstance(client, RedisCluster):
        for node in client.get_nodes():  # type: ignore[no-untyped-call]
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()


class RedisSaver(SaverCore, BaseCheckpointSaver[str]):
    """LangGraph checkpointer on plain Redis 5.0+, for `invoke`, `stream` and `get_state`.

    Args:
        url: Redis URL, e.g. ``redis://127.0.0.1:6379/0`` (``rediss://`` for TLS).
        client: A `redis.Redis` or `redis.cluster.RedisCluster` to reuse instead; the other
            connection arguments are ignored and `close` leaves it open.
        prefix: Namespace of every key, without a trailing ``:``.
        ttl: Seconds a thread lives after its last write; None keeps it forever.
        serde: Serializer for checkpoints and writes (LangGraph's JsonPlusSerializer
            by default).
        refresh_on_read: Also refresh the TTL of what `get_tuple` reads.
        compress: zlib-compress channel values of 512 bytes or more when that saves
            an eighth; readers handle both forms whatever this is set to.
        cluster: Whether `url` names a Redis Cluster (or Valkey cluster) node; None asks
            the server (`INFO cluster`) on first use. A passed-in client is a cluster
            client when it is a `RedisCluster`.
        protocol: RESP version for a client built from `url`: 2 works on every
            server from Redis 5; 3 needs Redis 6+.
        index_metadata: Metadata keys (e.g. ``("user_id",)``) whose values each put records
            in a cross-thread index, so that `list(None, filter=...)` on one of them reads
            only the threads that had that value, newest first, not every thread. A keyspace
            with threads already needs `reindex()` once; see docs/plainredis-search.md.
        **connection_kwargs: Passed to `redis.Redis.from_url`; `retry=` replaces the
            default, which reconnects with jittered backoff for a few seconds (every call
            is idempotent).
    """

    # The connection state, shared with shallow copies of the saver (see `Shared`).
    _client = Shared["redis.Redis | RedisCluster"]()
    _known = Shared[bool]()  # whether the topology is known (see _learn_topology)
    _detect_lock = Shared[threading.Lock]()
    _idle = Shared["Idle | None"]()
    _direct = Shared["Direct | None"]()

    _SIDE = "RedisSaver"

    def __init__(
        self,
        url: str | None = None,
        *,
        client: redis.Redis | RedisCluster | None = None,
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
        self._detect_lock = threading.Lock()
        self._ready = False  # see _get_ready
        self._idle = None  # only for a client of our own, with a large pool
        self._direct = None  # see _direct_pool
        if client is not None:
            validate_client(client, "RedisSaver", "sync")
            self._client, self._owns_client = client, False
            self._cluster = is_cluster_client(client)
            self._known = True
        elif url is not None:
            self._connect = connect_options(url, protocol, connection_kwargs, "RedisSaver", cluster)
            self._owns_client = True
            self._cluster = bool(cluster)
            self._client = self._new_client()
            self._idle = Idle.of(self._client)
            self._known = cluster is not None
        else:
            raise ValueError(
                "RedisSaver needs a server: pass url='redis://127.0.0.1:6379/0' "
                "or client=redis.Redis(...)"
            )

    def _new_client(self) -> Any:
        if not self._cluster:
            return redis.Redis.from_url(self._url, **self._connect)
        try:  # redis-py's blocking cluster client reads the topology as it is built
            return RedisCluster.from_url(self._url, **self._connect)
        except RedisClusterException as error:
            self._raise_translated(error)
            raise

    def _learn_topology(self) -> None:
        """Asks the server once whether it is a cluster node, and switches client if so."""
        with self._detect_lock:
            if self._known:
                return
            try:
                enabled = bool(self._client.info("cluster").get("cluster_enabled"))
            except ResponseError as error:  # no INFO for this user, or none at all
                enabled = info_refused(error, self.prefix, self._client_example)
            if enabled:
                self._release_idle()
                self._client.close()
                self._cluster = True
                self._client = self._new_client()
            self._known = True

    @property
    def client(self) -> Any:
        """The Redis client the saver uses."""
        return self._client

    def __enter__(self) -> RedisSaver:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connection pool, unless the client was passed in."""
        if self._owns_client:
            self._release_idle()
            close_client(self._client)

    def _release_idle(self) -> None:
        kept = self._idle.drain() if self._idle is not None else []
        for conn in kept:  # only a plain client's pool lends connections to keep
            _give_back(self._client.connection_pool, conn)  # type: ignore[union-attr]

    def setup(self) -> None:
        """Learns whether the server is a cluster node, if `cluster=` was not given.

        Optional: the first call does this by itself, and a saver that made a call already
        does nothing more. The saver needs no schema.
        """
        if not self._ready:
            self._get_ready()

    def _get_ready(self) -> None:
        """What the first call does: learn the topology (a cluster client reads the slot map
        when it is built)."""
        if not self._known:
            self._learn_topology()
        if plan := self._ready_plan():
            self._check_ready(self._run(plan))
        self._ready = True

    # -- running plans -------------------------------------------------------------------

    def _send(self, plan: Plan, fallback: bool) -> list[Any]:
        if len(plan) == 1 and isinstance(plan[0], Eval):
            pool = self._direct_pool()
            if pool is not None:
                return [self._call_script(pool, wire_args(plan[0], fallback))]
        # Anything else borrows from the pool itself: kept connections go back to it first.
        if self._idle:
            self._release_idle()
        if len(plan) == 1 and isinstance(plan[0], Scan):
            return [list(self._client.scan_iter(match=plan[0].pattern, count=1000))]
        if len(plan) == 1:
            return [self._client.execute_command(*wire_args(plan[0], fallback))]  # type: ignore[no-untyped-call]
        pipe = self._client.pipeline(transaction=False)
        for cmd in plan:
            pipe.execute_command(*wire_args(cmd, fallback))
        return pipe.execute()

    def _direct_pool(self) -> Any | None:
        """The pool to run a script call on directly, or None (see `_wire.direct_pool`)."""
        direct = self._direct
        if direct is None or not direct.serves(self._client):
            direct = self._direct = Direct(self._client, redis.Redis)
        return direct.pool()

    def _borrow(self, pool: Any) -> Any:
        """A connection for one script call: a kept one (see `_wire.Idle`), else the pool's."""
        idle = self._idle
        taken = idle.take() if idle is not None else None
        if taken is not None:
            conn, poll = taken
            try:
                if reconnects(conn) or (poll and _stale(conn)):
                    conn.disconnect()
            except BaseException:
                _give_back(pool, conn)
                raise
            return conn
        if idle is None:
            return pool.get_connection(*POOL_ARGS)
        idle.waiting(+1)
        try:
            return pool.get_connection(*POOL_ARGS)
        finally:
            idle.waiting(-1)

    def _call_script(self, pool: Any, args: tuple[Any, ...]) -> Any:
        """`execute_command` for a script call, on a connection of `pool` (see `_wire`).

        The first attempt runs inline; only a failed one goes through the connection's
        retry policy, which sees that failure first, so it retries exactly as it would have.
        """
        packed = pack(args, pool.connection_kwargs.get("encoding_errors", "strict"))
        conn = self._borrow(pool)
        clean = answered = False
        try:
            try:
                reply = _exchange(conn, packed)
            except Exception as error:  # the retry policy decides, as before
                reply = _retried(conn, packed, error)
            clean = True
            return reply
        except ResponseError:
            answered = True  # an error reply, read whole
            raise
        finally:
            try:
                # Anything else that stopped the call (a signal handler's exception between
                # the send and the read, say) may leave its reply to come: the next call
                # on the connection would read it as its own.
                if reconnects(conn) or not (clean or answered):
                    conn.disconnect()
            finally:
                if not (clean and self._idle is not None and self._idle.keep(conn)):
                    _give_back(pool, conn)

    def _run(self, plan: Plan) -> list[Any]:
        if not self._cluster:
            return self._run_once(plan)
        for delay in CLUSTER_RETRY_DELAYS:
            try:
                return self._run_once(plan)
            except (ClusterError, ResponseError) as error:
                if not cluster_retries(error):
                    raise
                time.sleep(delay)
        return self._run_once(plan)

    def _run_once(self, plan: Plan) -> list[Any]:
        try:
            try:
                return self._send(plan, fallback=False)
            except NoScriptError:
                # The server lost its script cache (restart, SCRIPT FLUSH) or never had
                # one of the plan's scripts: send the sources once; EVAL caches them again.
                # Scripts of the plan it had cached ran, and run again after the others:
                # each is safe to repeat in order (test_delta_history checks every script).
                return self._send(plan, fallback=True)
        except (ResponseError, RedisClusterException) as exc:  # the latter: see translate_error
            self._raise_translated(exc)
            raise

    def _drive(self, steps: Generator[Step, list[Any], T]) -> T:
        if not self._ready:
            self._get_ready()
        reply: Any = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply = self._run(step) if isinstance(step, list) else None

    # -- BaseCheckpointSaver -------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Returns the checkpoint `config` names (its ``checkpoint_id``, else the newest)."""
        return self._drive(self._get_steps(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Yields checkpoints newest first; `config=None` walks every thread."""
        if not self._ready:
            self._get_ready()
        steps = self._list_steps(config, filter=filter, before=before, limit=limit)
        reply: Any = None
        while True:
            try:
                step = steps.send(reply)
            except StopIteration:
                return
            if isinstance(step, list):
                reply = self._run(step)
            else:
                reply = None
                yield step

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Stores a checkpoint and its new channel values atomically, in one round trip."""
        return self._drive(self._put_steps(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Stores pending writes; the first write per (task, index) wins."""
        self._drive(self._put_writes_steps(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Deletes every key of the thread, in every namespace."""
        self._drive(self._delete_thread_steps(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Deletes the checkpoints (and their writes) written by the given runs."""
        self._drive(self._delete_for_runs_steps(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copies every checkpoint, write and blob of one thread to another."""
        self._drive(self._copy_thread_steps(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keeps only the newest checkpoint per namespace, or deletes the threads."""
        self._drive(self._prune_steps(thread_ids, strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        """LangGraph's DeltaChannel replay: per channel, the writes since the nearest
        ancestor holding its value, and that value (``seed``). One round trip per 256
        ancestors, where the default reads each ancestor with a `get_tuple`."""
        return self._drive(self._delta_history_steps(config, channels))

    def reindex(self) -> None:
        """Builds the metadata index of this saver's `index_metadata` from every thread and
        marks it complete, so that filtered `list(None)` calls use it; drops the index of
        any other field. Walks the whole keyspace: run it once, after every writer indexes
        the fields (see docs/plainredis-search.md)."""
        self._drive(self._reindex_steps())

    # -- the other side ------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        _use_async("aget_tuple")

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        _use_async("alist")
        yield  # pragma: no cover

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        _use_async("aput")

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        _use_async("aput_writes")

    async def adelete_thread(self, thread_id: str) -> None:
        _use_async("adelete_thread")

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        _use_async("adelete_for_runs")

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        _use_async("acopy_thread")

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        _use_async("aprune")

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        _use_async("aget_delta_channel_history")

    async def areindex(self) -> None:
        _use_async("areindex")
