"""The matrix's combinations: saver factories, servers, and what a test needs to use them.

Imported by the matrix tests (`from combos import ...`; the conftest puts this folder on
`sys.path`, since the workspace runs pytest with `--import-mode=importlib`).
"""

from __future__ import annotations

import inspect
import os
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    Capability,
    DetectedCapabilities,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver
from agentstate_testkit.savers import SyncAsAsync
from agentstate_testkit.servers import ServerError, ServerPool
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver

# -- servers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerSpec:
    """A server of the matrix: a harness kind, or a URL that only the environment gives.

    Attributes:
        label: The name in test ids.
        family: "redis" (Redis and Valkey) or "postgres".
        reports: How the server's version must start (see `server_version`), so that a
            label never names a server it did not run on, whatever URL the environment gave.
        kind: The harness kind that serves it (`server_pool.get`), else None.
        env: Else the variable holding its URL.
    """

    label: str
    family: str
    reports: str
    kind: str | None = None
    env: str | None = None


SERVERS: dict[str, ServerSpec] = {
    spec.label: spec
    for spec in (
        ServerSpec("redis-5", "redis", "redis 5.0.", kind="redis-5"),
        ServerSpec("redis-6", "redis", "redis 6.2.", kind="redis-6"),
        ServerSpec("redis-7", "redis", "redis 7.", kind="redis-7"),
        ServerSpec("redis-8", "redis", "redis 8.", kind="redis-8"),
        ServerSpec("valkey", "redis", "valkey ", kind="valkey"),
        ServerSpec("pg15", "postgres", "postgres 15.", kind="postgres-15"),
        ServerSpec("pg16", "postgres", "postgres 16.", env="AGENTSTATE_POSTGRES16_URL"),
        ServerSpec("pg18", "postgres", "postgres 18.", kind="postgres-18"),
    )
}
# One 3-node cluster joins the matrix, of the Redis most deployments run. The plainredis savers
# ask the server whether it is a cluster, so nothing else changes here.
CLUSTER = "redis-7-cluster"
SERVERS[CLUSTER] = ServerSpec(CLUSTER, "redis", "redis 7.", kind=CLUSTER)
DEFAULT_SERVERS = tuple(label for label, spec in SERVERS.items() if spec.kind is not None)


def selected_servers() -> tuple[str, ...]:
    text = os.environ.get("AGENTSTATE_MATRIX_SERVERS", "")
    labels = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [label for label in labels if label not in SERVERS]
    if unknown:
        raise pytest.UsageError(
            f"AGENTSTATE_MATRIX_SERVERS={text!r}: unknown server {', '.join(unknown)}; "
            f"use a comma list of {', '.join(SERVERS)}"
        )
    return labels or DEFAULT_SERVERS


def server_version(family: str, url: str) -> str:
    """What the server says it is: `redis 7.0.15`, `valkey 8.1.1`, `postgres 15.18`."""
    if family == "postgres":
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("show server_version").fetchone()
        return f"postgres {row[0].split()[0] if row else '?'}"
    client = redis.Redis.from_url(url, protocol=2, decode_responses=True)
    try:
        info = client.info("server")
    finally:
        client.close()
    if "valkey_version" in info or info.get("server_name") == "valkey":
        return f"valkey {info.get('valkey_version', info['redis_version'])}"
    return f"redis {info['redis_version']}"


_CHECKED: dict[tuple[str, str], str] = {}


def server_url(spec: ServerSpec, pool: ServerPool) -> str:
    """The URL of `spec`'s server, checked once to be what the label says.

    A missing or mislabelled server fails the test; it never skips it.
    """
    if spec.kind is not None:
        try:
            url = pool.get(spec.kind)
        except ServerError as error:
            pytest.fail(str(error), pytrace=False)
    else:
        assert spec.env is not None
        url = os.environ.get(spec.env, "")
        if not url:
            pytest.fail(
                f"{spec.label}: set {spec.env} to the URL of a running server, or leave "
                f"{spec.label} out of AGENTSTATE_MATRIX_SERVERS",
                pytrace=False,
            )
    if (spec.label, url) not in _CHECKED:
        _CHECKED[(spec.label, url)] = server_version(spec.family, url)
    reported = _CHECKED[(spec.label, url)]
    if not reported.startswith(spec.reports):
        pytest.fail(
            f"{spec.label}: the server at {url} is {reported}, not {spec.reports.strip()}x; "
            "point this label's URL variable at such a server",
            pytrace=False,
        )
    return url


# -- capabilities --------------------------------------------------------------------------

ALL = frozenset(c.value for c in Capability)
BASE = frozenset(c.value for c in BASE_CAPABILITIES)


def capabilities(saver: Any) -> set[str]:
    """What LangGraph's probe (and so the conformance suite) sees: the async methods."""
    return {c.value for c in DetectedCapabilities.from_instance(saver).detected}


def sync_capabilities(saver: Any) -> set[str]:
    """The same probe on the sync method names."""
    return {
        c.value
        for c in Capability
        if getattr(type(saver), c.value, None) is not getattr(BaseCheckpointSaver, c.value)
    }


def as_async(saver: BaseCheckpointSaver[Any]) -> SyncAsAsync:
    """`SyncAsAsync(saver)`: only the async methods whose sync method `saver` has."""
    return SyncAsAsync(saver)


# -- savers --------------------------------------------------------------------------------


class Place:
    """Where one test keeps its data: a server URL (its own PostgreSQL database), a folder."""

    def __init__(self, url: str | None, folder: Path) -> None:
        self.url, self.folder = url, folder

    def fresh_file(self) -> str:
        return str(self.folder / f"{uuid.uuid4().hex[:12]}.sqlite")

    def fresh_prefix(self) -> str:
        return f"matrix:{uuid.uuid4().hex[:12]}"


async def _maybe(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _newest_tuple(saver: Any, thread: str) -> Any:
    config = {"configurable": {"thread_id": thread}}
    if isinstance(saver, (InMemorySaver, PostgresSaver, SqliteSaver, RedisSaver)):
        return saver.get_tuple(config)
    return await saver.aget_tuple(config)


@asynccontextmanager
async def _memory(place: Place) -> AsyncIterator[InMemorySaver]:
    yield InMemorySaver()


async def _memory_newest(saver: InMemorySaver, thread: str) -> int:
    version = (await _newest_tuple(saver, thread)).checkpoint["channel_versions"]["messages"]
    return len(saver.blobs[(thread, "", "messages", version)][1])


async def _memory_total(saver: InMemorySaver, thread: str) -> int:
    size = sum(
        len(checkpoint[1]) + len(metadata[1])
        for checkpoints in saver.storage.get(thread, {}).values()
        for checkpoint, metadata, _parent in checkpoints.values()
    )
    size += sum(len(blob[1]) for key, blob in saver.blobs.items() if key[0] == thread)
    size += sum(
        len(write[2][1])
        for key, writes in saver.writes.items()
        if key[0] == thread
        for write in writes.values()
    )
    return size


@asynccontextmanager
async def _sqlite_async(place: Place) -> AsyncIterator[AsyncSqliteSaver]:
    async with AsyncSqliteSaver.from_conn_string(place.fresh_file()) as saver:
        await saver.setup()
        yield saver


@asynccontextmanager
async def _sqlite_sync(place: Place) -> AsyncIterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(place.fresh_file()) as saver:
        saver.setup()
        yield saver


async def _sqlite_query(saver: Any, sql: str, *args: Any) -> int:
    if isinstance(saver, SqliteSaver):
        row = saver.conn.execute(sql, args).fetchone()
    else:
        async with saver.conn.execute(sql, args) as cursor:
            row = await cursor.fetchone()
    return int(row[0] or 0)


async def _sqlite_newest(saver: Any, thread: str) -> int:
    # SqliteSaver keeps channel values inside the checkpoint row.
    return await _sqlite_query(
        saver,
        "select length(checkpoint) from checkpoints where thread_id = ? and checkpoint_ns = '' "
        "order by checkpoint_id desc limit 1",
        thread,
    )


async def _sqlite_total(saver: Any, thread: str) -> int:
    rows = await _sqlite_query(
        saver,
        "select sum(length(checkpoint) + length(metadata)) from checkpoints where thread_id = ?",
        thread,
    )
    return rows + await _sqlite_query(
        saver, "select sum(length(value)) from writes where thread_id = ?", thread
    )


@asynccontextmanager
async def _postgres_async(place: Place) -> AsyncIterator[AsyncPostgresSaver]:
    assert place.url
    async with AsyncPostgresSaver.from_conn_string(place.url) as saver:
        await saver.setup()
        yield saver


@asynccontextmanager
async def _postgres_sync(place: Place) -> AsyncIterator[PostgresSaver]:
    assert place.url
    with PostgresSaver.from_conn_string(place.url) as saver:
        saver.setup()
        yield saver


async def _postgres_query(saver: Any, sql: str, *args: Any) -> int:
    cursor = await _maybe(saver.conn.execute(sql, args))
    row = await _maybe(cursor.fetchone())
    return int(row["n"] or 0)


async def _postgres_newest(saver: Any, thread: str) -> int:
    version = (await _newest_tuple(saver, thread)).checkpoint["channel_versions"]["messages"]
    return await _postgres_query(
        saver,
        "select length(blob) as n from checkpoint_blobs where thread_id = %s "
        "and checkpoint_ns = '' and channel = 'messages' and version = %s",
        thread,
        str(version),
    )


async def _postgres_total(saver: Any, thread: str) -> int:
    size = 0
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
        size += await _postgres_query(
            saver,
            f"select sum(pg_column_size(t.*)) as n from {table} t where thread_id = %s",
            thread,
        )
    return size


@asynccontextmanager
async def _plainredis_async(place: Place) -> AsyncIterator[AsyncRedisSaver]:
    async with AsyncRedisSaver(place.url, prefix=place.fresh_prefix()) as saver:
        yield saver


@asynccontextmanager
async def _plainredis_sync(place: Place) -> AsyncIterator[RedisSaver]:
    with RedisSaver(place.url, prefix=place.fresh_prefix()) as saver:
        yield saver


async def _plainredis_newest(saver: Any, thread: str) -> int:
    version = (await _newest_tuple(saver, thread)).checkpoint["channel_versions"]["messages"]
    key = saver.keyspace.thread(thread).blob("", "messages", version)
    return int(await _maybe(saver.client.strlen(key)))


async def _plainredis_total(saver: Any, thread: str) -> int:
    # The bytes the saver wrote (keys, members, fields, values), not MEMORY USAGE: that
    # jumps when Redis re-encodes a growing sorted set or hash, and differs between servers.
    keys = saver.keyspace.thread(thread)
    pattern = f"{keys.prefix}:*{{{keys.component}}}*"
    client = saver.client
    if isinstance(saver, RedisSaver):
        found = list(client.scan_iter(match=pattern, count=1000))
    else:
        found = [key async for key in client.scan_iter(match=pattern, count=1000)]
    size = 0
    for key in found:
        kind = await _maybe(client.type(key))
        if kind == b"string":
            size += int(await _maybe(client.strlen(key)))
        elif kind == b"hash":
            fields = await _maybe(client.hgetall(key))
            size += sum(len(f) + len(v) for f, v in fields.items())
        elif kind == b"zset":
            members = await _maybe(client.zrange(key, 0, -1))
            size += sum(len(m) + 8 for m in members)
        elif kind == b"set":
            size += sum(len(m) for m in await _maybe(client.smembers(key)))
        else:
            raise AssertionError(f"{key!r}: plainredis wrote a {kind!r}, expected no such type")
        size += len(key)
    return size


Opener = Callable[[Place], AbstractAsyncContextManager[Any]]
Meter = Callable[[Any, str], Any]


@dataclass(frozen=True)
class Backend:
    """A saver factory: how to open a fresh saver and how to measure what it stores.

    Attributes:
        name: The factory id, first part of every test id.
        is_async: Whether graphs run on it with `ainvoke` (else `invoke`, in a thread).
        family: The server family it needs ("redis", "postgres"), or None.
        capabilities: What the conformance suite must detect on it (sync savers through
            `as_async`), wrapped or not.
        open: A fresh saver, closed on exit.
        newest_messages_bytes: The stored size of the newest `messages` value of a thread.
        thread_bytes: Everything stored for a thread.
    """

    name: str
    is_async: bool
    family: str | None
    capabilities: frozenset[str]
    open: Opener
    newest_messages_bytes: Meter
    thread_bytes: Meter


PRUNE = frozenset({Capability.PRUNE.value})
BACKENDS: tuple[Backend, ...] = (
    Backend("memory", True, None, BASE, _memory, _memory_newest, _memory_total),
    Backend("sqlite-async", True, None, BASE, _sqlite_async, _sqlite_newest, _sqlite_total),
    Backend("sqlite-sync", False, None, BASE, _sqlite_sync, _sqlite_newest, _sqlite_total),
    Backend(
        "postgres-async",
        True,
        "postgres",
        BASE | PRUNE,
        _postgres_async,
        _postgres_newest,
        _postgres_total,
    ),
    Backend(
        "postgres-sync",
        False,
        "postgres",
        BASE | PRUNE,
        _postgres_sync,
        _postgres_newest,
        _postgres_total,
    ),
    Backend(
        "plainredis-async",
        True,
        "redis",
        ALL,
        _plainredis_async,
        _plainredis_newest,
        _plainredis_total,
    ),
    Backend(
        "plainredis-sync",
        False,
        "redis",
        ALL,
        _plainredis_sync,
        _plainredis_newest,
        _plainredis_total,
    ),
)

WINDOW, KEEP = 6, 4


def window_reducer(delivered: list[Any] | None = None) -> MessageReducer:
    """The reducer of every wrapped combination: a window of 6, cut back to 4.

    Args:
        delivered: Collects what the reducer hands to long-term memory.
    """
    hooks = [] if delivered is None else [lambda pruned, _namespace: delivered.extend(pruned)]
    return MessageReducer(
        config=ReducerConfig(min_messages=KEEP, max_messages=WINDOW, on_prune=hooks)
    )


@dataclass(frozen=True)
class Combo:
    """One combination: a saver factory, wrapped in `ReducingSaver` or not, on one server."""

    backend: Backend
    wrapped: bool
    server: ServerSpec | None

    @property
    def id(self) -> str:
        parts = [self.backend.name, "wrapped" if self.wrapped else "unwrapped"]
        return "-".join(parts + ([self.server.label] if self.server else []))

    @property
    def server_id(self) -> str:
        """The id without the wrapping, e.g. `plainredis-async-redis-5`."""
        return "-".join([self.backend.name] + ([self.server.label] if self.server else []))

    @property
    def is_async(self) -> bool:
        return self.backend.is_async

    @asynccontextmanager
    async def open(
        self, place: Place, *, wrapped: bool | None = None, delivered: list[Any] | None = None
    ) -> AsyncIterator[Any]:
        """A fresh saver of this combination, wrapped unless `wrapped` says otherwise."""
        async with self.backend.open(place) as inner:
            wrap = self.wrapped if wrapped is None else wrapped
            yield ReducingSaver(inner, window_reducer(delivered)) if wrap else inner

    def conformance_factory(self, place: Place) -> Callable[[], AsyncIterator[Any]]:
        """The async generator function `assert_conformance` takes: a fresh saver per call."""

        async def factory() -> AsyncIterator[Any]:
            async with self.open(place) as saver:
                yield saver if self.is_async else as_async(saver)

        return factory


def all_combos() -> list[Combo]:
    chosen = [SERVERS[label] for label in selected_servers()]
    combos = []
    for backend in BACKENDS:
        places = [s for s in chosen if s.family == backend.family] if backend.family else [None]
        for wrapped in (False, True):
            combos += [Combo(backend, wrapped, server) for server in places]
    return combos


# The 200-turn storage curve (unwrapped, wrapped and pruned) runs on these only: one Redis and
# one PostgreSQL, async. Every combination runs the cheaper bound check.
CURVE_COMBOS = (("plainredis-async", "redis-5"), ("postgres-async", "pg18"))


def curve_combos() -> list[Combo]:
    by_name = {backend.name: backend for backend in BACKENDS}
    chosen = selected_servers()
    return [
        Combo(by_name[name], False, SERVERS[label])
        for name, label in CURVE_COMBOS
        if label in chosen
    ]
