"""Our Redis savers against InMemorySaver, SqliteSaver and PostgresSaver, side by side.

Run: `uv run --frozen python bench/bench_savers.py [--quick]`. Prints one Markdown table
per section, writes the same Markdown to `bench/results/savers.md`, the numbers to
`bench/results/savers.json` and plots to `chat.png`, `ops.png` and `scale.png` there;
progress goes to stderr. Every saver of the chat-turn and per-op sections also runs
wrapped in `ReducingSaver` (a window of `WINDOW_MIN`-`WINDOW_MAX` messages, no hooks).
Targets (a report, never asserted), for our savers unwrapped:

- a chat turn of ours takes at most 1.5x InMemorySaver's, in the same calling style;
- every per-op latency of ours is below PostgresSaver's (on PostgreSQL as installed);
- a 50-turn thread takes at most 0.75x the MEMORY USAGE of 0.1.0's JSON+base64 format
  (0.1.0 runs from its own venv, `.cache/bench/v010-venv`; skipped when it cannot be built);
- get/list on a thread beside 100,000 other threads stays within 1.2x of beside 10.

Sync savers are timed through `SyncCalls`, a thin async adapter that calls the blocking
method directly, so both calling styles share one procedure; it adds under a microsecond.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import json
import math
import os
import platform
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import aiosqlite
import psycopg
import redis
import redis.asyncio
from _floor import PingingMemorySaver
from _progress import Bar
from _results import RESULTS
from _v010_probe import chat_graph, delete_prefix, keyspace_size, run_thread, thread_config
from _v010_probe import human_message as human
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    copy_checkpoint,
    empty_checkpoint,
)
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from psycopg.rows import dict_row

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver
from agentstate_testkit import servers
from agentstate_testkit.savers import RoundTrips, counting_async_client, counting_client
from agentstate_testkit.servers import ServerPool
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver

BENCH = Path(__file__).resolve().parent
PROBE = BENCH / "_v010_probe.py"
V010_VENV = BENCH.parent / ".cache" / "bench" / "v010-venv"
REDIS_KINDS = ("redis-5", "redis-7", "redis-8", "valkey")
POSTGRES_KIND = "postgres-15"
# PostgreSQL as installed (Debian's package, the official image): a commit returns once its
# WAL is on disk. The reference PostgresSaver runs on such a server; the test harness's own
# (fsync and synchronous_commit off, faster and not crash-safe) is timed beside it.
PG_AS_INSTALLED = ("-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on")
POSTGRES_FAST = f"{POSTGRES_KIND} fsync off"
FAST_SUFFIX = ", fsync off"
SCALE_KIND = "redis-7"
OPS = ("put", "put_writes", "get latest", "get by id", "list 10", "delete_thread")
WARMUP_CALLS = 5
WINDOW_MIN, WINDOW_MAX = 6, 10  # past 10 messages, ReducingSaver keeps at most the last 6
FILL_CONCURRENCY = 32  # puts in flight while writing the other threads of the scale section
PINGS = 200
FLOOR_LABEL = "InMemorySaver + PING"  # PingingMemorySaver: the round trips alone
RAW_FLOOR_LABEL = "InMemorySaver + raw PING"  # the same on a plain socket, no redis-py

TARGET_CHAT = 1.5
TARGET_OPS = 1.0
TARGET_BYTES = 0.75
TARGET_SCALE = 1.2


@dataclass(frozen=True)
class Settings:
    chat_threads: int
    chat_turns: int
    repeats: int
    op_turns: int  # turns of each per-op thread; a turn writes 3 checkpoints
    op_threads: int  # per-op threads replayed into each saver: put, put_writes, delete samples
    op_calls: int  # timed calls per read op
    bytes_turns: int
    others_small: int
    others_large: int  # other threads beside the read one on SCALE_KIND
    others_rest: int  # ... and on the other Redis kinds
    scale_calls: int
    long_checkpoints: int


FULL = Settings(
    chat_threads=20,
    chat_turns=10,
    repeats=3,
    op_turns=17,
    op_threads=20,
    op_calls=300,
    bytes_turns=50,
    others_small=10,
    others_large=100_000,
    others_rest=100_000,
    scale_calls=300,
    long_checkpoints=50_000,
)
QUICK = Settings(
    chat_threads=5,
    chat_turns=4,
    repeats=1,
    op_turns=17,
    op_threads=3,
    op_calls=50,
    bytes_turns=50,
    others_small=10,
    others_large=5_000,
    others_rest=2_000,
    scale_calls=100,
    long_checkpoints=5_000,
)

_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[bench {time.perf_counter() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


# -- statistics and formatting ---------------------------------------------------------------


def p95(samples: Sequence[int]) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def summary(samples: Sequence[int]) -> dict[str, float]:
    """Median and p95 in microseconds."""
    return {
        "median_us": statistics.median(samples) / 1e3,
        "p95_us": p95(samples) / 1e3,
        "n": len(samples),
    }


def us(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def ms(value_us: float) -> str:
    return f"{value_us / 1e3:.2f}"


def ratio(value: float) -> str:
    return f"{value:.2f}×"


def size(n: float) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def verdict(value: float, target: float) -> str:
    return "yes" if value <= target else "**no**"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(headers) + " |"]
    lines.append("|" + "|".join([":---"] + ["---:"] * (len(headers) - 1)) + "|")
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


# -- a recorded chat thread, replayed into every saver ---------------------------------------


@dataclass(frozen=True)
class Put:
    configurable: dict[str, Any]
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: ChannelVersions


@dataclass(frozen=True)
class Writes:
    configurable: dict[str, Any]
    writes: list[tuple[str, Any]]
    task_id: str
    task_path: str


def _configurable(config: RunnableConfig) -> dict[str, Any]:
    keys = ("checkpoint_ns", "checkpoint_id", "checkpoint_map")
    return {k: v for k, v in config["configurable"].items() if k in keys}


class Recorder(InMemorySaver):
    """Remembers every put and put_writes a graph makes, to replay them elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[Put | Writes] = []

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        event = Put(_configurable(config), copy.deepcopy(checkpoint), dict(metadata), new_versions)
        self.events.append(event)
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        event = Writes(_configurable(config), copy.deepcopy(list(writes)), task_id, task_path)
        self.events.append(event)
        super().put_writes(config, writes, task_id, task_path)


@dataclass(frozen=True)
class Trace:
    events: list[Put | Writes]
    turn_ends: list[int]  # len(events) after each turn

    def first_turns(self, turns: int) -> list[Put | Writes]:
        return self.events[: self.turn_ends[turns - 1]]


def record_trace(turns: int) -> Trace:
    recorder = Recorder()
    graph = chat_graph(recorder)
    ends = []
    for turn in range(turns):
        graph.invoke({"messages": [human(0, turn)]}, thread_config("trace"))
        ends.append(len(recorder.events))
    return Trace(recorder.events, ends)


# -- one calling surface for sync and async savers -------------------------------------------


class Calls(Protocol):
    saver: BaseCheckpointSaver[Any]

    async def put(
        self, config: RunnableConfig, cp: Checkpoint, md: CheckpointMetadata, nv: ChannelVersions
    ) -> RunnableConfig: ...

    async def put_writes(
        self, config: RunnableConfig, writes: list[tuple[str, Any]], task_id: str, path: str
    ) -> None: ...

    async def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None: ...

    async def list_checkpoints(
        self, config: RunnableConfig, limit: int | None
    ) -> list[CheckpointTuple]: ...

    async def delete_thread(self, thread_id: str) -> None: ...

    async def turn(self, message: HumanMessage, config: RunnableConfig) -> None: ...


class SyncCalls:
    """Calls a blocking saver's methods, and `graph.invoke`, on the event loop's thread."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver
        self.graph = chat_graph(saver)

    async def put(
        self, config: RunnableConfig, cp: Checkpoint, md: CheckpointMetadata, nv: ChannelVersions
    ) -> RunnableConfig:
        return self.saver.put(config, cp, md, nv)

    async def put_writes(
        self, config: RunnableConfig, writes: list[tuple[str, Any]], task_id: str, path: str
    ) -> None:
        self.saver.put_writes(config, writes, task_id, path)

    async def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.saver.get_tuple(config)

    async def list_checkpoints(
        self, config: RunnableConfig, limit: int | None
    ) -> list[CheckpointTuple]:
        return list(self.saver.list(config, limit=limit))

    async def delete_thread(self, thread_id: str) -> None:
        self.saver.delete_thread(thread_id)

    async def turn(self, message: HumanMessage, config: RunnableConfig) -> None:
        self.graph.invoke({"messages": [message]}, config)


class AsyncCalls:
    """Awaits an async saver's `a*` methods, and `graph.ainvoke` with an async node."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver
        self.graph = chat_graph(saver, asynchronous=True)

    async def put(
        self, config: RunnableConfig, cp: Checkpoint, md: CheckpointMetadata, nv: ChannelVersions
    ) -> RunnableConfig:
        return await self.saver.aput(config, cp, md, nv)

    async def put_writes(
        self, config: RunnableConfig, writes: list[tuple[str, Any]], task_id: str, path: str
    ) -> None:
        await self.saver.aput_writes(config, writes, task_id, path)

    async def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.saver.aget_tuple(config)

    async def list_checkpoints(
        self, config: RunnableConfig, limit: int | None
    ) -> list[CheckpointTuple]:
        return [item async for item in self.saver.alist(config, limit=limit)]

    async def delete_thread(self, thread_id: str) -> None:
        await self.saver.adelete_thread(thread_id)

    async def turn(self, message: HumanMessage, config: RunnableConfig) -> None:
        await self.graph.ainvoke({"messages": [message]}, config)


async def timed(call: Awaitable[Any], cpu: list[int] | None = None) -> int:
    """Wall ns of `call`; with `cpu`, also appends the CPU ns this thread spent in it."""
    started, used = time.perf_counter_ns(), time.thread_time_ns()
    await call
    if cpu is not None:
        cpu.append(time.thread_time_ns() - used)
    return time.perf_counter_ns() - started


def send(calls: Calls, event: Put | Writes, thread_id: str) -> Awaitable[Any]:
    """The call that replays `event` on `thread_id` (its arguments copied, as a graph does)."""
    config: RunnableConfig = {"configurable": {**event.configurable, "thread_id": thread_id}}
    if isinstance(event, Put):
        return calls.put(
            config, copy_checkpoint(event.checkpoint), dict(event.metadata), event.new_versions
        )
    return calls.put_writes(config, list(event.writes), event.task_id, event.task_path)


async def replay(calls: Calls, events: Sequence[Put | Writes], thread_id: str) -> None:
    for event in events:
        await send(calls, event, thread_id)


@dataclass
class Subject:
    label: str
    family: str  # memory, sqlite, postgres, postgres-fast, ours or floor (PingingMemorySaver)
    server: str
    style: str  # sync (invoke) or async (ainvoke)
    calls: Calls
    wrapped: bool = False  # in ReducingSaver


def window_reducer() -> MessageReducer:
    """The reducer of every wrapped saver: no hooks, so a cut costs only the cut itself."""
    return MessageReducer(config=ReducerConfig(min_messages=WINDOW_MIN, max_messages=WINDOW_MAX))


def with_wrapped(subjects: list[Subject]) -> list[Subject]:
    """Each subject followed by itself wrapped in ReducingSaver (same inner saver)."""
    paired = []
    for subject in subjects:
        wrapper = ReducingSaver(subject.calls.saver, window_reducer())
        calls: Calls = SyncCalls(wrapper) if subject.style == "sync" else AsyncCalls(wrapper)
        twin = Subject(subject.label, subject.family, subject.server, subject.style, calls, True)
        paired += [subject, twin]
    return paired


# -- servers and savers ----------------------------------------------------------------------


def pg_options(schema: str) -> dict[str, Any]:
    return {
        "autocommit": True,
        "prepare_threshold": 0,
        "row_factory": dict_row,
        "options": f"-c search_path={schema}",
    }


def pg_schema(url: str, schema: str, *, drop: bool = False) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        sql = f"DROP SCHEMA IF EXISTS {schema} CASCADE" if drop else f"CREATE SCHEMA {schema}"
        conn.execute(sql)  # type: ignore[arg-type]


async def open_subjects(
    stack: AsyncExitStack, urls: dict[str, str], run: str, tmp: Path
) -> list[Subject]:
    """Every saver in both styles, each unwrapped then wrapped; Postgres tables in schema `run`."""
    memory = InMemorySaver()
    sqlite_conn = sqlite3.connect(tmp / "sync.sqlite", check_same_thread=False)
    stack.callback(sqlite_conn.close)
    subjects = [
        Subject("InMemorySaver", "memory", "-", "sync", SyncCalls(memory)),
        Subject("SqliteSaver", "sqlite", "file", "sync", SyncCalls(SqliteSaver(sqlite_conn))),
    ]
    for family, kind, suffix in postgres_servers(urls):
        pg_conn = psycopg.connect(urls[kind], **pg_options(run))
        stack.callback(pg_conn.close)
        postgres = PostgresSaver(pg_conn)  # type: ignore[arg-type]
        postgres.setup()
        subjects.append(
            Subject(f"PostgresSaver{suffix}", family, kind, "sync", SyncCalls(postgres))
        )
    for kind in REDIS_KINDS:
        saver = RedisSaver(urls[kind], prefix=f"{run}:main")
        stack.callback(saver.close)
        subjects.append(Subject(f"RedisSaver {kind}", "ours", kind, "sync", SyncCalls(saver)))

    asqlite_conn = await aiosqlite.connect(tmp / "async.sqlite")
    stack.push_async_callback(asqlite_conn.close)
    subjects += [
        Subject("InMemorySaver", "memory", "-", "async", AsyncCalls(memory)),
        Subject(
            "AsyncSqliteSaver",
            "sqlite",
            "file",
            "async",
            AsyncCalls(AsyncSqliteSaver(asqlite_conn)),
        ),
    ]
    for family, kind, suffix in postgres_servers(urls):
        apg_conn = await psycopg.AsyncConnection.connect(urls[kind], **pg_options(run))
        stack.push_async_callback(apg_conn.close)
        apostgres = AsyncPostgresSaver(apg_conn)  # type: ignore[arg-type]
        await apostgres.setup()
        label = f"AsyncPostgresSaver{suffix}"
        subjects.append(Subject(label, family, kind, "async", AsyncCalls(apostgres)))
    for kind in REDIS_KINDS:
        asaver = AsyncRedisSaver(urls[kind], prefix=f"{run}:main")
        stack.push_async_callback(asaver.aclose)
        label = f"AsyncRedisSaver {kind}"
        subjects.append(Subject(label, "ours", kind, "async", AsyncCalls(asaver)))
    floors = []
    for label, raw in ((FLOOR_LABEL, False), (RAW_FLOOR_LABEL, True)):
        floor = PingingMemorySaver(urls[SCALE_KIND], raw=raw)
        stack.push_async_callback(floor.aclose)
        floors += [
            Subject(label, "floor", SCALE_KIND, style, calls)
            for style, calls in (("sync", SyncCalls(floor)), ("async", AsyncCalls(floor)))
        ]
    return with_wrapped(subjects) + floors


def postgres_servers(urls: dict[str, str]) -> list[tuple[str, str, str]]:
    """(family, kind, label suffix) of each PostgreSQL server: the reference first."""
    found = [("postgres", POSTGRES_KIND, "")]
    if POSTGRES_FAST in urls:
        found.append(("postgres-fast", POSTGRES_FAST, FAST_SUFFIX))
    return found


def postgres_durability(conn: psycopg.Connection[Any]) -> str:
    """How the server commits, e.g. ``fsync on, synchronous_commit on``."""
    values = [
        f"{name} {row[0] if (row := conn.execute(f'SHOW {name}').fetchone()) else '?'}"
        for name in ("fsync", "synchronous_commit")
    ]
    return ", ".join(values)


def redis_allocators(urls: dict[str, str]) -> dict[str, str]:
    """Each Redis kind's `mem_allocator` (``libc``, ``jemalloc-5.3.0``, ...)."""
    allocators = {}
    for kind in REDIS_KINDS:
        client = redis.Redis.from_url(urls[kind], protocol=2)
        allocators[kind] = str(client.info("memory").get("mem_allocator", "?"))
        client.close()
    return allocators


def server_versions(urls: dict[str, str], allocators: dict[str, str]) -> dict[str, str]:
    versions = {}
    for kind in REDIS_KINDS:
        client = redis.Redis.from_url(urls[kind], protocol=2)
        info = client.info("server")
        version = str(info.get("valkey_version") or info["redis_version"])
        allocator = allocators[kind]
        versions[kind] = f"{version} ({'libc malloc' if allocator == 'libc' else allocator})"
        client.close()
    for _, kind, _ in postgres_servers(urls):
        with psycopg.connect(urls[kind]) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            how = postgres_durability(conn)
        version = str(row[0]) if row else "?"
        versions[kind] = (
            f"{version[:-1]}, {how})" if version.endswith(")") else f"{version} ({how})"
        )
    return versions


def _median_us(call: Callable[[], Any], times: int) -> float:
    for _ in range(WARMUP_CALLS):
        call()
    samples = []
    for _ in range(times):
        started = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - started)
    return statistics.median(samples) / 1e3


def socket_ping_us(url: str) -> float | None:
    """Median µs of a raw `PING` on a socket of its own; None when the URL needs AUTH or TLS."""
    parts = urlsplit(url)
    if parts.scheme != "redis" or parts.password:
        return None
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def ping() -> None:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                reply += sock.recv(64)

        return _median_us(ping, PINGS)


def loopback_round_trips(urls: dict[str, str]) -> dict[str, dict[str, float]]:
    """Median µs of one round trip to each server: latency ratios depend on it.

    Redis: `PING` through redis-py and on a raw socket; PostgreSQL: `SELECT 1` via psycopg.
    """
    rtts: dict[str, dict[str, float]] = {}
    for kind in REDIS_KINDS:
        client = redis.Redis.from_url(urls[kind], protocol=2)
        rtts[kind] = {"redis-py PING": _median_us(client.ping, PINGS)}
        client.close()
        raw = socket_ping_us(urls[kind])
        if raw is not None:
            rtts[kind]["socket PING"] = raw
    for _, kind, _ in postgres_servers(urls):
        with psycopg.connect(urls[kind], autocommit=True) as conn:
            select = _median_us(lambda: conn.execute("SELECT 1"), PINGS)
        rtts[kind] = {"psycopg SELECT 1": select}
    return rtts


def pinned_round_trips(url: str) -> dict[str, float]:
    """Raw `PING` µs with this process and the server pinned to the same CPU, then to two.

    The scheduler decides where a server runs, and moves it, which is why the round trips
    above differ between kinds and runs. Empty on one CPU, without CPU pinning, or when
    the server is not a local process this user may pin.
    """
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if len(allowed) < 2 or urlsplit(url).hostname not in ("127.0.0.1", "localhost"):
        return {}
    client = redis.Redis.from_url(url, protocol=2)
    try:
        pid = int(client.info("server")["process_id"])
    finally:
        client.close()
    try:
        server_cpus = os.sched_getaffinity(pid)
    except OSError:
        return {}
    first, second = sorted(allowed)[:2]
    out: dict[str, float] = {}
    try:
        for label, server_cpu in (("same CPU", first), ("two CPUs", second)):
            os.sched_setaffinity(pid, {server_cpu})
            os.sched_setaffinity(0, {first})
            rtt = socket_ping_us(url)
            if rtt is None:
                return {}
            out[label] = rtt
    except OSError:
        return {}
    finally:
        os.sched_setaffinity(0, allowed)
        with contextlib.suppress(OSError):
            os.sched_setaffinity(pid, server_cpus)
    return out


def baseline(subjects: list[Subject], family: str, style: str) -> Subject:
    """The unwrapped saver of `family` in `style`: every ratio is to an unwrapped saver."""
    return next(s for s in subjects if s.family == family and s.style == style and not s.wrapped)


# -- 1. chat turn ----------------------------------------------------------------------------


async def bench_chat(subjects: list[Subject], s: Settings, run: str) -> list[dict[str, Any]]:
    """Every saver takes each turn in turn, so load from elsewhere hits them all alike."""
    for n, subject in enumerate(subjects):
        for turn in range(2):  # connections, scripts and tables warm up here
            await subject.calls.turn(human(0, turn), thread_config(f"{run}-warm-{n}"))
    medians: list[list[float]] = [[] for _ in subjects]
    p95s: list[list[float]] = [[] for _ in subjects]
    total = s.repeats * s.chat_turns * s.chat_threads * len(subjects)
    with Bar(f"chat: {len(subjects)} savers, {s.repeats} repeats", total) as bar:
        for repeat in range(s.repeats):
            samples: list[list[int]] = [[] for _ in subjects]
            gc.collect()
            for turn in range(s.chat_turns):
                for i in range(s.chat_threads):
                    message = human(i, turn)
                    for n in rotated(len(subjects), turn * s.chat_threads + i):
                        config = thread_config(f"{run}-chat-{n}-{repeat}-{i}")
                        samples[n].append(await timed(subjects[n].calls.turn(message, config)))
                    bar.advance(len(subjects))
            for n, got in enumerate(samples):
                medians[n].append(statistics.median(got) / 1e3)
                p95s[n].append(p95(got) / 1e3)
    median = [statistics.median(m) for m in medians]
    rows = []
    for n, subject in enumerate(subjects):
        base = median[subjects.index(baseline(subjects, "memory", subject.style))]
        bare = median[n - 1] if subject.wrapped else median[n]  # with_wrapped pairs them
        rows.append(
            {
                "saver": subject.label,
                "wrapped": subject.wrapped,
                "style": subject.style,
                "family": subject.family,
                "median_us": median[n],
                "p95_us": statistics.median(p95s[n]),
                "ratio_to_memory": median[n] / base,
                "p95_to_memory": statistics.median(p95s[n]) / base,
                "ratio_to_unwrapped": median[n] / bare,
            }
        )
    return rows


def wrapping(row: dict[str, Any]) -> str:
    return "ReducingSaver" if row["wrapped"] else "—"


def call_name(style: str) -> str:
    return "invoke" if style == "sync" else "ainvoke"


def render_v010_chat(v010: dict[str, Any]) -> str:
    """0.1.0's chat turn against InMemorySaver, timed in 0.1.0's own venv."""
    chat = v010.get("chat")
    if not chat:
        return ""
    return (
        f"plainredis 0.1.0 on {SCALE_KIND}, timed the same way in its own venv against an "
        "InMemorySaver there: "
        + "; ".join(
            f"`{call_name(style)}` {ms(chat[style]['v010_us'])} ms, "
            f"{ratio(chat[style]['ratio'])} InMemorySaver's {ms(chat[style]['memory_us'])} ms"
            for style in ("sync", "async")
        )
        + "."
    )


def render_chat(rows: list[dict[str, Any]], s: Settings) -> str:
    head = (
        f"## 1. Chat turn\n\n{s.chat_threads} threads × {s.chat_turns} turns per saver, median "
        f"of {s.repeats} repeats; ratio to unwrapped InMemorySaver in the same style (target "
        f"≤ {TARGET_CHAT}× for ours unwrapped). Wrapped: in `ReducingSaver` with a window of "
        f"{WINDOW_MIN}–{WINDOW_MAX} messages and no hooks, so threads are cut from turn "
        f"{WINDOW_MAX // 2 + 1} on; × unwrapped compares a wrapped saver with its inner saver. "
        "Below 1× means the cut costs less than it saves: a wrapped thread loads and stores "
        f"fewer messages each turn. {FLOOR_LABEL}: InMemorySaver that also sends one redis-py "
        f"`PING` to {SCALE_KIND} per call, the round trips of a one-round-trip-per-call saver "
        f"and nothing else. {RAW_FLOOR_LABEL}: the same `PING` written to a plain socket, "
        "without any client library: on this machine, no saver that makes one round trip per "
        "call can be faster, whatever client it uses."
    )
    body = [
        [
            r["saver"],
            wrapping(r),
            call_name(r["style"]),
            ms(r["median_us"]),
            ms(r["p95_us"]),
            ratio(r["ratio_to_memory"]),
            ratio(r["ratio_to_unwrapped"]) if r["wrapped"] else "",
            verdict(r["ratio_to_memory"], TARGET_CHAT)
            if r["family"] == "ours" and not r["wrapped"]
            else "",
        ]
        for r in rows
    ]
    headers = ["saver", "wrapped in", "call", "median ms", "p95 ms", "× InMemory"]
    headers += ["× unwrapped", "target met"]
    return head + "\n\n" + table(headers, body) + "\n\n![chat turn](chat.png)"


# -- 2. per-op latency -----------------------------------------------------------------------


Reader = Callable[[int], Awaitable[Any]]


async def readers(calls: Calls, thread_id: str) -> dict[str, Reader]:
    """The read ops on one thread; call `i` of "get by id" reads the i-th newest of 50."""
    latest = thread_config(thread_id)
    by_id = [t.config for t in await calls.list_checkpoints(latest, 50)]
    return {
        "get latest": lambda i: calls.get_tuple(latest),
        "get by id": lambda i: calls.get_tuple(by_id[i % len(by_id)]),
        "list 1": lambda i: calls.list_checkpoints(latest, 1),
        "list 10": lambda i: calls.list_checkpoints(latest, 10),
    }


async def interleaved(
    sides: list[dict[str, Reader]],
    ops: Sequence[str],
    calls: int,
    label: str,
    cpu: list[dict[str, list[int]]] | None = None,
) -> list[dict[str, list[int]]]:
    """Times `calls` calls of each op on every side, alternating sides call by call (with
    `cpu`, one dict per side, also the thread CPU of each call)."""
    samples: list[dict[str, list[int]]] = [{op: [] for op in ops} for _ in sides]
    with Bar(label, len(ops) * calls * len(sides)) as bar:
        for op in ops:
            for side in sides:
                for i in range(WARMUP_CALLS):
                    await side[op](i)
            gc.collect()
            for i in range(calls):
                for k in rotated(len(sides), i):
                    used = cpu[k].setdefault(op, []) if cpu is not None else None
                    samples[k][op].append(await timed(sides[k][op](i), used))
                bar.advance(len(sides))
    return samples


def rotated(count: int, shift: int) -> list[int]:
    """0..count-1 starting at `shift`, so no one goes first every time."""
    return [(shift + k) % count for k in range(count)]


async def bench_ops(
    subjects: list[Subject], trace: Trace, s: Settings, run: str
) -> list[dict[str, Any]]:
    """Replays the trace into fresh threads (put, put_writes), reads one, deletes them all.

    Each call goes to every saver before the next, as in `bench_chat`. Also records each
    call's CPU time in this thread: for a sync saver, all the client does for the call.
    """
    samples: list[dict[str, list[int]]] = [{op: [] for op in OPS} for _ in subjects]
    cpu: list[dict[str, list[int]]] = [{op: [] for op in OPS} for _ in subjects]

    def thread(n: int, i: int) -> str:
        return f"{run}-ops-{n}-{i}"

    total = s.op_threads * len(trace.events) * len(subjects)
    with Bar(f"per-op: {s.op_threads} threads into {len(subjects)} savers", total) as bar:
        for i in range(s.op_threads):
            for e, event in enumerate(trace.events):
                op = "put" if isinstance(event, Put) else "put_writes"
                for n in rotated(len(subjects), e):
                    call = send(subjects[n].calls, event, thread(n, i))
                    samples[n][op].append(await timed(call, cpu[n][op]))
                bar.advance(len(subjects))
    sides = [await readers(subject.calls, thread(n, 0)) for n, subject in enumerate(subjects)]
    reads = [op for op in OPS if op in sides[0]]
    label = f"per-op: {s.op_calls} calls of each read"
    for n, got in enumerate(await interleaved(sides, reads, s.op_calls, label, cpu)):
        samples[n].update(got)
    for i in range(s.op_threads):
        for n in rotated(len(subjects), i):
            call = subjects[n].calls.delete_thread(thread(n, i))
            samples[n]["delete_thread"].append(await timed(call, cpu[n]["delete_thread"]))
    measured = [
        {op: {**summary(got[op]), "cpu_us": statistics.median(used[op]) / 1e3} for op in OPS}
        for got, used in zip(samples, cpu, strict=True)
    ]
    rows = []
    has_fast = any(s.family == "postgres-fast" for s in subjects)
    for n, subject in enumerate(subjects):
        postgres = measured[subjects.index(baseline(subjects, "postgres", subject.style))]
        memory = measured[subjects.index(baseline(subjects, "memory", subject.style))]
        fast = (
            measured[subjects.index(baseline(subjects, "postgres-fast", subject.style))]
            if has_fast
            else None
        )
        ops = {
            op: {
                **stats,
                "ratio_to_postgres": stats["median_us"] / postgres[op]["median_us"],
                "ratio_to_memory": stats["median_us"] / memory[op]["median_us"],
                **(
                    {"ratio_to_fast_postgres": stats["median_us"] / fast[op]["median_us"]}
                    if fast
                    else {}
                ),
            }
            for op, stats in measured[n].items()
        }
        rows.append(
            {
                "saver": subject.label,
                "wrapped": subject.wrapped,
                "style": subject.style,
                "family": subject.family,
                "ops": ops,
            }
        )
    return rows


def allocator_note(allocators: dict[str, str]) -> str:
    """Why delete_thread differs between servers: it frees memory, so the allocator counts."""
    libc = [kind for kind, allocator in allocators.items() if allocator == "libc"]
    if not libc:
        return ""
    others = [kind for kind, allocator in allocators.items() if allocator != "libc"]
    return (
        f" `delete_thread` frees every key of the thread on the server, so its time depends "
        f"on the server's memory allocator: {spoken(libc)} here "
        f"{'is a build' if len(libc) == 1 else 'are builds'} with libc malloc (the PyPI "
        "wheels the test harness provisions), where freeing costs more than under the "
        "jemalloc of a packaged Redis" + (f" ({spoken(others)} here)." if others else ".")
    )


def postgres_note(rows: list[dict[str, Any]]) -> str:
    """Which PostgreSQL the ratios are to, and how it commits."""
    if not any(r["family"] == "postgres-fast" for r in rows):
        return (
            " PostgresSaver runs on the server the environment names, as it is configured "
            "(its fsync and synchronous_commit are in the header)."
        )
    return (
        " PostgresSaver runs on PostgreSQL as installed: fsync and synchronous_commit on, so "
        "a commit returns once its WAL is on disk (Redis runs as installed too: without AOF "
        f"a write is acknowledged from memory). PostgresSaver{FAST_SUFFIX} runs on the test "
        "harness's server, which skips that wait (faster, and not crash-safe); the summary "
        "gives our worst ratio to it."
    )


def spoken(names: Sequence[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def render_ops(
    rows: list[dict[str, Any]], s: Settings, trace: dict[str, int], allocators: dict[str, str]
) -> str:
    parts = [
        f"## 2. Per-op latency\n\nMedian µs; in brackets the ratio to unwrapped PostgresSaver "
        f"in the same style (target < {TARGET_OPS:.0f}× for ours unwrapped), then a table of "
        f"ratios to unwrapped InMemorySaver. A recorded {s.op_turns}-turn chat thread "
        f"({trace['puts']} checkpoints, {trace['put_writes']} put_writes) is replayed into "
        f"{s.op_threads} threads per saver; reads: {s.op_calls} calls on one of them. A wrapped "
        f"saver stores the thread's messages cut to its window ({WINDOW_MIN}–{WINDOW_MAX}), so "
        "its puts write and its reads load less than the unwrapped saver's."
        + postgres_note(rows)
        + allocator_note(allocators),
        "![per-op latency](ops.png)",
    ]
    for style in ("sync", "async"):
        body = []
        memory = []
        for r in (r for r in rows if r["style"] == style):
            cells = []
            for op in OPS:
                stats = r["ops"][op]
                cell = f"{us(stats['median_us'])} ({stats['ratio_to_postgres']:.2f})"
                ours = r["family"] == "ours" and not r["wrapped"]
                if ours and stats["ratio_to_postgres"] >= TARGET_OPS:
                    cell = f"**{cell}**"
                cells.append(cell)
            body.append([r["saver"], wrapping(r), *cells])
            memory.append(
                [r["saver"], wrapping(r), *(ratio(r["ops"][op]["ratio_to_memory"]) for op in OPS)]
            )
        headers = ["saver", "wrapped in", *OPS]
        parts.append(f"### {style}: µs (× PostgresSaver)\n\n" + table(headers, body))
        parts.append(f"### {style}: × InMemorySaver\n\n" + table(headers, memory))
    parts.append(render_cpu(rows))
    return "\n\n".join(parts)


def render_cpu(rows: list[dict[str, Any]]) -> str:
    """The client's share of each sync call: CPU time of the calling thread."""

    def cell(stats: dict[str, float]) -> str:
        return f"{us(stats['cpu_us'])} ({stats['cpu_us'] / stats['median_us']:.0%})"

    body = [
        [r["saver"], wrapping(r), *(cell(r["ops"][op]) for op in OPS)]
        for r in rows
        if r["style"] == "sync"
    ]
    return (
        "### sync: client CPU µs per call (share of the median latency)\n\n"
        "CPU time of the calling thread during each call of the runs above, median; kernel "
        "time of its syscalls included. A sync saver does all its client work in that "
        "thread, so the rest of its latency is waiting: for the server, the network and "
        "the wake-ups on either side. (Async savers are left out: their work is spread over "
        "the event loop, and aiosqlite's over a worker thread.)\n\n"
        + table(["saver", "wrapped in", *OPS], body)
    )


# -- 3. round trips and stored bytes ---------------------------------------------------------


async def count_ops(
    calls: Calls, counter: RoundTrips, trace: Trace, thread_id: str
) -> dict[str, Any]:
    """Round trips and commands of each op, over a replayed thread and one chat turn.

    Chat turns on another thread first open the connections a turn needs, so connection
    setup (CLIENT SETINFO) is rarely counted; a turn that runs more calls at once than ever
    before can still open one.
    """
    for turn in range(3):
        await calls.turn(human(1, turn), thread_config(f"{thread_id}-warm"))
    counts: dict[str, list[tuple[int, int]]] = {op: [] for op in (*OPS, "chat turn")}
    names: dict[str, set[str]] = {op: set() for op in counts}

    async def count(op: str, call: Awaitable[Any]) -> None:
        with counter.measure():
            await call
        counts[op].append((counter.round_trips, len(counter.commands)))
        names[op].update(_name(c[0]) for c in counter.commands)

    for event in trace.events:
        op = "put" if isinstance(event, Put) else "put_writes"
        await count(op, send(calls, event, thread_id))
    latest = thread_config(thread_id)
    by_id = [t.config for t in await calls.list_checkpoints(latest, None)]
    for i in range(3):
        await count("get latest", calls.get_tuple(latest))
        await count("get by id", calls.get_tuple(by_id[i * 7 % len(by_id)]))
        await count("list 10", calls.list_checkpoints(latest, 10))
    for turn in range(len(trace.turn_ends), len(trace.turn_ends) + 3):
        await count("chat turn", calls.turn(human(0, turn), latest))
    await count("delete_thread", calls.delete_thread(thread_id))
    await calls.delete_thread(f"{thread_id}-warm")
    return {
        op: {
            "round_trips": [min(c[0] for c in got), max(c[0] for c in got)],
            # None where the counter saw fewer commands than round trips: see the note.
            "commands": [min(c[1] for c in got), max(c[1] for c in got)]
            if all(c[1] >= c[0] for c in got)
            else None,
            "command_names": sorted(names[op]),
        }
        for op, got in counts.items()
    }


def _name(arg: Any) -> str:
    return (arg.decode() if isinstance(arg, bytes) else str(arg)).upper()


async def bench_round_trips(urls: dict[str, str], trace: Trace, run: str) -> list[dict[str, Any]]:
    rows = []
    for kind in REDIS_KINDS:
        progress(f"round trips: {kind}")
        client, counter = counting_client(urls[kind])
        saver = RedisSaver(client=client, prefix=f"{run}:rt")
        for wrapped in (False, True):
            calls = SyncCalls(ReducingSaver(saver, window_reducer()) if wrapped else saver)
            ops = await count_ops(calls, counter, trace, f"rt-sync-{wrapped}")
            rows.append({"saver": f"RedisSaver {kind}", "wrapped": wrapped, "ops": ops})
        client.close()
        aclient, acounter = counting_async_client(urls[kind])
        asaver = AsyncRedisSaver(client=aclient, prefix=f"{run}:rt")
        for wrapped in (False, True):
            acalls = AsyncCalls(ReducingSaver(asaver, window_reducer()) if wrapped else asaver)
            ops = await count_ops(acalls, acounter, trace, f"rt-async-{wrapped}")
            rows.append({"saver": f"AsyncRedisSaver {kind}", "wrapped": wrapped, "ops": ops})
        await aclient.aclose()
    return rows


def render_round_trips(rows: list[dict[str, Any]]) -> str:
    def span(pair: list[int] | None) -> str:
        if pair is None:
            return "?"
        return str(pair[0]) if pair[0] == pair[1] else f"{pair[0]}–{pair[1]}"

    ops = (*OPS, "chat turn")
    body = [
        [
            r["saver"],
            wrapping(r),
            *(
                f"{span(r['ops'][op]['round_trips'])} / {span(r['ops'][op]['commands'])}"
                for op in ops
            ),
        ]
        for r in rows
    ]
    named = next(r for r in rows if all(r["ops"][op]["commands"] for op in ops))
    names = "; ".join(f"{op}: {' '.join(named['ops'][op]['command_names'])}" for op in ops)
    unknown = any(r["ops"][op]["commands"] is None for r in rows for op in ops)
    return (
        "## 3a. Round trips / commands per op (counting client)\n\n"
        "Min–max over the replayed thread (put, put_writes) or 3 calls (reads, chat turn).\n\n"
        + table(["saver", "wrapped in", *ops], body)
        + f"\n\nCommands sent ({named['saver']}): {names}. "
        + ("`?`: the counting client saw fewer commands than round trips. " if unknown else "")
        + "A blocking chat turn runs writes on worker threads, so now and then it opens one more "
        "pooled connection, whose handshake adds 2 round trips to that turn's count."
    )


def memory_saver_bytes(saver: InMemorySaver) -> int:
    """Serialized bytes InMemorySaver holds: checkpoints, metadata, blobs and writes."""
    total = 0
    for namespaces in saver.storage.values():
        for checkpoints in namespaces.values():
            for (_, cp), (_, md), _ in checkpoints.values():
                total += len(cp) + len(md)
    total += sum(len(data) for _, data in saver.blobs.values())
    for stored in saver.writes.values():
        total += sum(len(value[1]) for _, _, value, _ in stored.values())
    return total


def sqlite_bytes(path: Path, turns: int, thread_id: str) -> dict[str, Any]:
    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()

        def file_size() -> int:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            wal = path.with_name(path.name + "-wal")
            return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

        before = file_size()
        run_thread(saver, thread_id, turns)
        rows = conn.execute(
            "SELECT (SELECT coalesce(sum(length(checkpoint) + length(metadata)), 0)"
            " FROM checkpoints) + (SELECT coalesce(sum(length(value)), 0) FROM writes)"
        ).fetchone()
        return {"stored_bytes": file_size() - before, "raw_bytes": rows[0]}
    finally:
        conn.close()


def postgres_bytes(url: str, schema: str, turns: int, thread_id: str) -> dict[str, Any]:
    pg_schema(url, schema)
    tables = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")
    relations = " + ".join(f"pg_total_relation_size('{t}')" for t in tables)
    rows_sql = " + ".join(
        f"(SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM {t} t)" for t in tables
    )
    with psycopg.connect(url, **pg_options(schema)) as conn:
        saver = PostgresSaver(conn)  # type: ignore[arg-type]
        saver.setup()
        before = conn.execute(f"SELECT {relations} AS n").fetchone()["n"]  # type: ignore[index]
        run_thread(saver, thread_id, turns)
        after = conn.execute(f"SELECT {relations} AS n").fetchone()["n"]  # type: ignore[index]
        raw = conn.execute(f"SELECT {rows_sql} AS n").fetchone()["n"]  # type: ignore[index]
    return {"stored_bytes": int(after) - int(before), "raw_bytes": int(raw)}


async def bench_bytes(
    urls: dict[str, str], s: Settings, run: str, tmp: Path, thread_id: str
) -> list[dict[str, Any]]:
    progress(f"bytes: one {s.bytes_turns}-turn thread per saver")
    memory = InMemorySaver()
    run_thread(memory, thread_id, s.bytes_turns)
    rows: list[dict[str, Any]] = [
        {
            "saver": "InMemorySaver",
            "server": "-",
            "measured_as": "serialized payload",
            "stored_bytes": memory_saver_bytes(memory),
            "raw_bytes": memory_saver_bytes(memory),
        },
        {
            "saver": "SqliteSaver",
            "server": "file",
            "measured_as": "db+wal file growth",
            **sqlite_bytes(tmp / "bytes.sqlite", s.bytes_turns, thread_id),
        },
        {
            "saver": "PostgresSaver",
            "server": POSTGRES_KIND,
            "measured_as": "pg_total_relation_size growth",
            **postgres_bytes(urls[POSTGRES_KIND], f"{run}_bytes", s.bytes_turns, thread_id),
        },
    ]
    for kind in REDIS_KINDS:
        prefix = f"{run}:ours"  # as long as 0.1.0's "{run}:v010", so key names cost the same
        with RedisSaver(urls[kind], prefix=prefix) as saver:
            run_thread(saver, thread_id, s.bytes_turns)
            sizes = keyspace_size(saver.client, prefix)
            delete_prefix(saver.client, prefix)
        rows.append(
            {
                "saver": "RedisSaver",
                "server": kind,
                "measured_as": "MEMORY USAGE",
                "stored_bytes": sizes["memory_usage"],
                "raw_bytes": sizes["raw_bytes"],
                "keys": sizes["keys"],
                "families": sizes["families"],
            }
        )
    return rows


# -- 4. 0.1.0 --------------------------------------------------------------------------------


def v010_requirements() -> list[str]:
    """0.1.0 with our langgraph, langchain-core and redis, so only the saver differs."""
    pins = ("langgraph", "langgraph-checkpoint", "langchain-core", "redis")
    return ["langgraph-checkpoint-plainredis==0.1.0"] + [
        f"{name}=={metadata.version(name)}" for name in pins
    ]


def v010_python() -> tuple[Path | None, str]:
    """The 0.1.0 venv's python, built once; or None and why it could not be built."""
    python = V010_VENV / "bin" / "python"
    marker = V010_VENV / "bench-requirements.json"
    wanted = v010_requirements()
    if marker.exists() and json.loads(marker.read_text()) == wanted and python.exists():
        return python, "cached"
    progress(f"0.1.0: building {V010_VENV} ({' '.join(wanted)})")
    shutil.rmtree(V010_VENV, ignore_errors=True)
    steps = [
        [sys.executable, "-m", "venv", str(V010_VENV)],
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *wanted],
    ]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=900, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            return None, f"`{' '.join(step[:4])}` failed: {error}"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return None, f"`{' '.join(step[:4])}` exited {done.returncode}: {' '.join(tail)}"
    marker.write_text(json.dumps(wanted))
    return python, "built"


def bench_v010(
    urls: dict[str, str], s: Settings, run: str, thread_id: str, ours: list[dict[str, Any]]
) -> dict[str, Any]:
    python, how = v010_python()
    if python is None:
        progress(f"0.1.0: skipped ({how})")
        return {"skipped": how}
    progress(f"0.1.0: {s.bytes_turns}-turn thread on {', '.join(REDIS_KINDS)} (venv {how})")
    kind_urls = [urls[kind] for kind in REDIS_KINDS]
    argv = [str(python), str(PROBE), "--prefix", f"{run}:v010", "--thread", thread_id]
    argv += ["--turns", str(s.bytes_turns), "--chat-url", urls[SCALE_KIND]]
    argv += ["--chat-threads", str(s.chat_threads), "--chat-turns", str(s.chat_turns), *kind_urls]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, env=env)
    if done.returncode != 0:
        reason = f"probe exited {done.returncode}: {done.stderr.strip()[-400:]}"
        progress(f"0.1.0: skipped ({reason})")
        return {"skipped": reason}
    probe = json.loads(done.stdout.strip().splitlines()[-1])
    rows = []
    for kind in REDIS_KINDS:
        old = probe["results"][urls[kind]]
        new = next(r for r in ours if r["saver"] == "RedisSaver" and r["server"] == kind)
        rows.append(
            {
                "server": kind,
                "v010_memory_usage": old["memory_usage"],
                "v010_raw_bytes": old["raw_bytes"],
                "v010_keys": old["keys"],
                "v010_families": old["families"],
                "ours_memory_usage": new["stored_bytes"],
                "ours_raw_bytes": new["raw_bytes"],
                "ratio": new["stored_bytes"] / old["memory_usage"],
            }
        )
    return {
        "version": probe["version"],
        "requirements": v010_requirements(),
        "rows": rows,
        "chat": probe.get("chat"),
    }


def render_bytes(rows: list[dict[str, Any]], v010: dict[str, Any], s: Settings) -> str:
    by_kind = {r["server"]: r for r in v010.get("rows", [])}
    body = []
    for r in rows:
        old = by_kind.get(r["server"]) if r["saver"] == "RedisSaver" else None
        body.append(
            [
                r["saver"],
                r["server"],
                size(r["stored_bytes"]),
                r["measured_as"],
                size(r["raw_bytes"]),
                ratio(r["stored_bytes"] / r["raw_bytes"]),
                ratio(old["ratio"]) if old else "",
                verdict(old["ratio"], TARGET_BYTES) if old else "",
            ]
        )
    headers = ["saver", "server", "stored", "measured as", "raw values", "stored/raw"]
    headers += ["× 0.1.0", f"≤ {TARGET_BYTES}×"]
    ours = next(r for r in rows if r["saver"] == "RedisSaver" and r["server"] == SCALE_KIND)
    families = ", ".join(
        f"{name} {size(f['memory_usage'])}"
        for name, f in sorted(ours["families"].items(), key=lambda kv: -kv[1]["memory_usage"])
    )
    return (
        f"## 3b. Stored bytes of one {s.bytes_turns}-turn thread\n\n"
        "Raw values: value bytes as stored (Redis: string lengths, hash fields and values, "
        "zset members; SQL: row or column sizes; InMemorySaver: serialized bytes).\n\n"
        + table(headers, body)
        + f"\n\nOurs on {SCALE_KIND} by key family (MEMORY USAGE): {families}."
    )


def render_v010(v010: dict[str, Any], rows: list[dict[str, Any]], s: Settings) -> str:
    head = f"## 4. Against 0.1.0 (JSON+base64), the same {s.bytes_turns}-turn thread\n\n"
    if "skipped" in v010:
        return head + f"Skipped: {v010['skipped']}"
    serialized = next(r for r in rows if r["saver"] == "InMemorySaver")["stored_bytes"]
    body = [
        [
            r["server"],
            size(r["v010_memory_usage"]),
            ratio(r["v010_memory_usage"] / serialized),
            size(r["ours_memory_usage"]),
            ratio(r["ours_memory_usage"] / serialized),
            ratio(r["ratio"]),
            verdict(r["ratio"], TARGET_BYTES),
        ]
        for r in v010["rows"]
    ]
    headers = ["server", "0.1.0 MEMORY USAGE", "× serialized", "ours", "× serialized"]
    headers += ["ours / 0.1.0", f"≤ {TARGET_BYTES}×"]
    return (
        head
        + f"0.1.0 ran as `{' '.join(v010['requirements'])}`. Serialized: the {size(serialized)} "
        "that LangGraph's serializer made for the thread (InMemorySaver, section 3b).\n\n"
        + table(headers, body)
    )


# -- 5. scale --------------------------------------------------------------------------------


def other_db(url: str) -> str:
    """The same Redis server's next database: SCAN and key counts there are its own."""
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(db + 1) % 16}"))


SCALE_OPS = ("get latest", "get by id", "list 10")


async def fill_others(url: str, prefix: str, event: Put, count: int, label: str) -> float:
    """Writes `count` other threads of one checkpoint each; returns the seconds it took.

    Every thread is written by AsyncRedisSaver's `aput`, keys and registry entry as a graph
    would write them; `FILL_CONCURRENCY` puts are in flight at once, only for speed.
    """
    async with AsyncRedisSaver(url, prefix=prefix) as saver:
        with Bar(label, count) as bar:

            async def writer(first: int) -> None:
                for i in range(first, count, FILL_CONCURRENCY):
                    config: RunnableConfig = {
                        "configurable": {"thread_id": f"other-{i}", "checkpoint_ns": ""}
                    }
                    checkpoint = copy_checkpoint(event.checkpoint)
                    await saver.aput(config, checkpoint, dict(event.metadata), event.new_versions)
                    bar.advance()

            began = time.perf_counter()
            await asyncio.gather(*(writer(k) for k in range(FILL_CONCURRENCY)))
            return time.perf_counter() - began


def scale_others(kind: str, s: Settings) -> int:
    return s.others_large if kind == SCALE_KIND else s.others_rest


async def bench_scale(
    urls: dict[str, str], trace: Trace, s: Settings, run: str
) -> list[dict[str, Any]]:
    """One thread's reads beside `others_small` threads (next database) and many more.

    The read thread is the recorded chat thread; each other thread holds one checkpoint,
    the last of a first chat turn. Both copies of the read thread are read alternately,
    call by call, so load from elsewhere hits both alike.
    """
    lone = [e for e in trace.first_turns(1) if isinstance(e, Put)][-1]
    prefix = f"{run}:scale"
    rows = []
    for kind in REDIS_KINDS:
        urls_by_side = (other_db(urls[kind]), urls[kind])
        counts = (s.others_small, scale_others(kind, s))
        with (
            RedisSaver(urls_by_side[0], prefix=prefix) as few,
            RedisSaver(urls_by_side[1], prefix=prefix) as many,
        ):
            sides = []
            for saver, url, others in zip((few, many), urls_by_side, counts, strict=True):
                calls = SyncCalls(saver)
                await replay(calls, trace.events, "target")
                label = f"scale: {kind}: {others:,} other threads"
                fill = await fill_others(url, prefix, lone, others, label)
                sides.append(await readers(calls, "target"))
            label = f"scale: {kind}: {s.scale_calls} calls of each read"
            small, large = await interleaved(sides, SCALE_OPS, s.scale_calls, label)
            delete_prefix(few.client, prefix)
            keys = delete_prefix(many.client, prefix)
        for op in SCALE_OPS:
            small_us = statistics.median(small[op]) / 1e3
            large_us = statistics.median(large[op]) / 1e3
            rows.append(
                {
                    "server": kind,
                    "op": op,
                    "others": counts[1],
                    "small_us": small_us,
                    "large_us": large_us,
                    "ratio": large_us / small_us,
                    "fill_seconds": fill,
                    "keys": keys,
                }
            )
    return rows


def tiny_checkpoints(saver: BaseCheckpointSaver[Any], thread_id: str, n: int) -> Any:
    """`n` puts of one small channel, each the child of the one before."""
    parent: str | None = None
    version: Any = None
    for step in range(n):
        version = saver.get_next_version(version, None)
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["channel_values"] = {"n": step}
        checkpoint["channel_versions"] = {"n": version}
        checkpoint["updated_channels"] = ["n"]
        config: RunnableConfig = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": "", "checkpoint_id": parent}
        }
        metadata: CheckpointMetadata = {"source": "loop", "step": step, "parents": {}}
        yield config, checkpoint, metadata, {"n": version}
        parent = checkpoint["id"]


LONG_OPS = ("get latest", "list 1", "list 10")


async def bench_long_thread(urls: dict[str, str], s: Settings, run: str) -> dict[str, Any]:
    """Reads of a 50-checkpoint thread against those of a `long_checkpoints` one."""
    prefix = f"{run}:long"
    with RedisSaver(urls[SCALE_KIND], prefix=prefix) as saver:
        for args in tiny_checkpoints(saver, "short", 50):
            saver.put(*args)
        label = f"long thread: {s.long_checkpoints:,} puts on {SCALE_KIND}"
        with Bar(label, s.long_checkpoints) as bar:
            began = time.perf_counter()
            for args in tiny_checkpoints(saver, "long", s.long_checkpoints):
                saver.put(*args)
                bar.advance()
            fill = time.perf_counter() - began
        calls = SyncCalls(saver)
        sides = [await readers(calls, "short"), await readers(calls, "long")]
        label = f"long thread: {s.scale_calls} calls of each read"
        short, long = await interleaved(sides, LONG_OPS, s.scale_calls, label)
        delete_prefix(saver.client, prefix)
    rows = []
    for op in LONG_OPS:
        short_us = statistics.median(short[op]) / 1e3
        long_us = statistics.median(long[op]) / 1e3
        rows.append(
            {"op": op, "short_us": short_us, "long_us": long_us, "ratio": long_us / short_us}
        )
    return {
        "server": SCALE_KIND,
        "checkpoints": s.long_checkpoints,
        "fill_seconds": fill,
        "rows": rows,
    }


def render_scale(rows: list[dict[str, Any]], long: dict[str, Any], s: Settings) -> str:
    body = [
        [
            f"RedisSaver {r['server']}",
            r["op"],
            f"{r['others']:,}",
            us(r["small_us"]),
            us(r["large_us"]),
            ratio(r["ratio"]),
            verdict(r["ratio"], TARGET_SCALE),
        ]
        for r in rows
    ]
    headers = ["saver", "op", "other threads", f"µs beside {s.others_small}", "µs beside many"]
    headers += ["ratio", f"≤ {TARGET_SCALE}×"]
    fills = ", ".join(
        f"{r['server']} {r['others']:,} in {r['fill_seconds']:.1f}s ({r['keys']:,} keys)"
        for r in rows
        if r["op"] == SCALE_OPS[-1]
    )
    if s.others_rest == s.others_large:
        where = f"{s.others_large:,} other threads on every Redis kind"
    else:
        where = (
            f"{s.others_large:,} other threads on {SCALE_KIND} and {s.others_rest:,} on the "
            "other kinds"
        )
    long_body = [
        [r["op"], us(r["short_us"]), us(r["long_us"]), ratio(r["ratio"])] for r in long["rows"]
    ]
    long_headers = ["op", "50 checkpoints µs", f"{long['checkpoints']:,} checkpoints µs", "ratio"]
    return (
        f"## 5. Scale\n\nMedian µs of reads of the recorded {s.op_turns}-turn thread beside "
        f"{s.others_small} and beside {where}, under the same prefix; the small case lives in "
        "the next database. Each other thread holds one checkpoint (the last of a first chat "
        "turn), written by AsyncRedisSaver with "
        f"{FILL_CONCURRENCY} puts in flight: {fills}. Reads alternate between the two "
        "cases call by call.\n\n"
        + table(headers, body)
        + f"\n\nA thread of {long['checkpoints']:,} small checkpoints on RedisSaver "
        f"{long['server']} (written one put after the other in {long['fill_seconds']:.1f}s) "
        "against one of 50:\n\n" + table(long_headers, long_body) + "\n\n![scale](scale.png)"
    )


# -- plots -----------------------------------------------------------------------------------

PLOTS = ("chat.png", "ops.png", "scale.png")


def plot(results: dict[str, Any], s: Settings) -> None:
    """Writes `PLOTS` into `RESULTS` (matplotlib, Agg: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for name, draw in zip(PLOTS, (plot_chat, plot_ops, plot_scale), strict=True):
        fig = draw(plt, results, s)
        fig.tight_layout()
        fig.savefig(RESULTS / name, dpi=110)
        plt.close(fig)


def short_name(row: dict[str, Any]) -> str:
    """`redis-7` for ours, `Postgres` for PostgresSaver and AsyncPostgresSaver."""
    if row["family"] == "ours":
        return str(row["saver"]).split()[-1]
    return str(row["saver"]).replace("Saver", "").replace("Async", "")


def plot_chat(plt: Any, results: dict[str, Any], s: Settings) -> Any:
    """Per style: median turn ÷ InMemorySaver's, unwrapped and wrapped; whiskers up to p95."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6), sharey=True)
    for ax, style in zip(axes, ("sync", "async"), strict=True):
        rows = [r for r in results["chat"] if r["style"] == style and r["family"] != "floor"]
        names = [short_name(r) for r in rows if not r["wrapped"]]
        x = range(len(names))
        for offset, wrapped, color in ((-0.2, False, "tab:blue"), (0.2, True, "tab:orange")):
            side = [r for r in rows if r["wrapped"] == wrapped]
            heights = [r["ratio_to_memory"] for r in side]
            whiskers = [[0] * len(side), [r["p95_to_memory"] - r["ratio_to_memory"] for r in side]]
            label = "wrapped in ReducingSaver" if wrapped else "unwrapped"
            ax.bar(
                [i + offset for i in x],
                heights,
                0.4,
                yerr=whiskers,
                capsize=2,
                color=color,
                label=label,
                error_kw={"elinewidth": 0.8},
            )
        ax.axhline(TARGET_CHAT, color="tab:red", linestyle="--", label=f"target {TARGET_CHAT}×")
        floors = (r for r in results["chat"] if r["style"] == style and r["family"] == "floor")
        for floor, line in zip(floors, (":", "-."), strict=False):
            ax.axhline(
                floor["ratio_to_memory"],
                color="tab:green",
                linestyle=line,
                label=f"{floor['saver']}: the round trips alone",
            )
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xticks(list(x), names, rotation=30, ha="right")
        ax.set_title(f"chat turn, {call_name(style)}")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("× InMemorySaver's median (bar: median, whisker: p95)")
    axes[0].legend(fontsize=8)
    return fig


def plot_ops(plt: Any, results: dict[str, Any], s: Settings) -> Any:
    """Per style: each op of our savers ÷ PostgresSaver's; wrapped ones as markers."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6), sharey=True)
    for ax, style in zip(axes, ("sync", "async"), strict=True):
        ours = [r for r in results["ops"] if r["style"] == style and r["family"] == "ours"]
        bare = [r for r in ours if not r["wrapped"]]
        width = 0.8 / len(bare)
        for k, row in enumerate(bare):
            twin = next(r for r in ours if r["wrapped"] and r["saver"] == row["saver"])
            xs = [i - 0.4 + (k + 0.5) * width for i in range(len(OPS))]
            ax.bar(
                xs,
                [row["ops"][op]["ratio_to_postgres"] for op in OPS],
                width,
                label=short_name(row),
            )
            wrapped = [twin["ops"][op]["ratio_to_postgres"] for op in OPS]
            label = "wrapped in ReducingSaver" if k == 0 else None
            ax.plot(xs, wrapped, "x", color="black", markersize=5, label=label)
        ax.axhline(TARGET_OPS, color="tab:red", linestyle="--", label="PostgresSaver (target)")
        ax.set_xticks(range(len(OPS)), OPS, rotation=20)
        ax.set_title(f"per-op latency, {style}")
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("median ÷ PostgresSaver's (unwrapped)")
    axes[0].legend(fontsize=8)
    return fig


def plot_scale(plt: Any, results: dict[str, Any], s: Settings) -> Any:
    """Read latency beside many other threads ÷ beside few, and on a long ÷ a short timeline."""
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [3, 1.3]}, sharey=True
    )
    rows = results["scale"]
    kinds = list(dict.fromkeys(r["server"] for r in rows))
    width = 0.8 / len(SCALE_OPS)
    for k, op in enumerate(SCALE_OPS):
        side = [next(r for r in rows if r["server"] == kind and r["op"] == op) for kind in kinds]
        xs = [i - 0.4 + (k + 0.5) * width for i in range(len(kinds))]
        left.bar(xs, [r["ratio"] for r in side], width, label=op)
    counts = sorted({r["others"] for r in rows})
    many = " / ".join(f"{n:,}" for n in counts)
    others = {r["server"]: r["others"] for r in rows}
    left.set_xticks(range(len(kinds)), [f"{kind}\n{others[kind]:,} others" for kind in kinds])
    left.set_title(f"one thread's reads: beside {many} other threads ÷ beside {s.others_small}")
    long = results["long_thread"]
    right.bar(range(len(long["rows"])), [r["ratio"] for r in long["rows"]], 0.6, color="tab:gray")
    right.set_xticks(range(len(long["rows"])), [r["op"] for r in long["rows"]])
    right.set_title(f"{long['checkpoints']:,} checkpoints ÷ 50 ({long['server']})")
    for ax in (left, right):
        ax.axhline(TARGET_SCALE, color="tab:red", linestyle="--", label=f"target {TARGET_SCALE}×")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.grid(axis="y", alpha=0.3)
    left.set_ylabel("ratio of median latencies")
    left.set_ylim(0, max(1.5, *(r["ratio"] for r in rows)) * 1.1)
    left.legend(fontsize=8, loc="upper left", ncol=4)
    return fig


# -- summary and main ------------------------------------------------------------------------


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The worst ratio of ours against each target."""
    rows = []
    chat = [r for r in results["chat"] if r["family"] == "ours" and not r["wrapped"]]
    worst = max(chat, key=lambda r: r["ratio_to_memory"])
    rows.append(
        {
            "target": f"chat turn ≤ {TARGET_CHAT}× InMemorySaver",
            "worst": worst["ratio_to_memory"],
            "where": f"{worst['saver']} ({worst['style']})",
            "met": worst["ratio_to_memory"] <= TARGET_CHAT,
        }
    )
    ops = [
        (r["ops"][op]["ratio_to_postgres"], f"{r['saver']} {op}")
        for r in results["ops"]
        if r["family"] == "ours" and not r["wrapped"]
        for op in OPS
    ]
    value, where = max(ops)
    rows.append(
        {
            "target": "every per-op latency < PostgresSaver's",
            "worst": value,
            "where": where,
            "met": value < TARGET_OPS,
        }
    )
    fast = [
        (r["ops"][op]["ratio_to_fast_postgres"], f"{r['saver']} {op}")
        for r in results["ops"]
        if r["family"] == "ours" and not r["wrapped"]
        for op in OPS
        if "ratio_to_fast_postgres" in r["ops"][op]
    ]
    if fast:
        value, where = max(fast)
        rows.append(
            {
                "target": f"per-op latency ÷ PostgresSaver{FAST_SUFFIX}",
                "worst": value,
                "where": where,
                "met": None,
            }
        )
    for floor in (r for r in results["chat"] if r["family"] == "floor"):
        rows.append(
            {
                "target": f"chat turn of {floor['saver']} (the round trips alone)",
                "worst": floor["ratio_to_memory"],
                "where": f"{SCALE_KIND} ({floor['style']})",
                "met": None,
            }
        )
    wrapped = [r for r in results["chat"] if r["family"] == "ours" and r["wrapped"]]
    heaviest = max(wrapped, key=lambda r: r["ratio_to_unwrapped"])
    rows.append(
        {
            "target": "chat turn wrapped in ReducingSaver ÷ unwrapped (ours)",
            "worst": heaviest["ratio_to_unwrapped"],
            "where": f"{heaviest['saver']} ({heaviest['style']})",
            "met": None,
        }
    )
    if "rows" in results["v010"]:
        old = max(results["v010"]["rows"], key=lambda r: r["ratio"])
        rows.append(
            {
                "target": f"50-turn thread ≤ {TARGET_BYTES}× 0.1.0 MEMORY USAGE",
                "worst": old["ratio"],
                "where": old["server"],
                "met": old["ratio"] <= TARGET_BYTES,
            }
        )
    scale = max(results["scale"], key=lambda r: r["ratio"])
    counts = sorted({r["others"] for r in results["scale"]})
    many = f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,}–{counts[-1]:,}"
    rows.append(
        {
            "target": f"get/list beside {many} other threads "
            f"≤ {TARGET_SCALE}× beside {results['settings']['others_small']}",
            "worst": scale["ratio"],
            "where": f"{scale['server']} {scale['op']}",
            "met": scale["ratio"] <= TARGET_SCALE,
        }
    )
    return rows


def met(value: bool | None) -> str:
    return "no target" if value is None else "yes" if value else "**no**"


def render_pinned(env: dict[str, Any]) -> str:
    pinned = env.get("pinned_us") or {}
    if len(pinned) < 2:
        return ""
    return (
        f"\n\nThe same raw `PING` to {SCALE_KIND}, with this process and the server pinned: "
        f"{us(pinned['same CPU'])} µs when both run on one CPU, {us(pinned['two CPUs'])} µs "
        "when the server has to be woken on another. The scheduler places and moves the "
        "servers, so the round trips above vary between kinds and between runs, and with "
        "them every latency that includes one."
    )


def render(results: dict[str, Any], s: Settings) -> str:
    env = results["environment"]
    versions = ", ".join(f"{k} {v}" for k, v in env["servers"].items())
    load = f"{env['load_before'][0]:.1f} / {env['load_after'][0]:.1f}"
    hows = list(dict.fromkeys(how for by_how in env["loopback_us"].values() for how in by_how))
    rtts = table(
        ["server", *(f"{how} µs" for how in hows)],
        [
            [kind, *(us(by_how[how]) if how in by_how else "" for how in hows)]
            for kind, by_how in env["loopback_us"].items()
        ],
    )
    head = (
        f"# Saver benchmark ({results['mode']})\n\n"
        f"Python {env['python']}, langgraph {env['langgraph']}, plainredis {env['plainredis']}; "
        f"servers: {versions}; {env['cpus']} CPUs, load average {load} (1 min, before and "
        f"after); {results['seconds']:.0f}s. Other processes share the machine: savers are "
        "timed alternately, call by call, so that load hits them alike.\n\n"
        f"Loopback round trip to each server, median of {PINGS} (an op of ours is one round "
        "trip, section 3a, so the ratios below move with it):\n\n" + rtts + render_pinned(env)
    )
    summary_rows = [
        [t["target"], ratio(t["worst"]), t["where"], met(t["met"])] for t in results["targets"]
    ]
    sections = [
        head,
        "## Targets\n\n" + table(["target", "worst ratio", "where", "met"], summary_rows),
        render_chat(results["chat"], s) + "\n\n" + render_v010_chat(results["v010"]),
        render_ops(results["ops"], s, results["trace"], env["allocators"]),
        render_round_trips(results["round_trips"]),
        render_bytes(results["bytes"], results["v010"], s),
        render_v010(results["v010"], results["bytes"], s),
        render_scale(results["scale"], results["long_thread"], s),
    ]
    return "\n\n".join(sections) + "\n"


async def bench(urls: dict[str, str], s: Settings, run: str, tmp: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    progress(f"loopback round trips: {PINGS} of each")
    results["loopback_us"] = loopback_round_trips(urls)
    results["pinned_us"] = pinned_round_trips(urls[SCALE_KIND])
    progress(f"recording a {s.op_turns}-turn chat thread")
    trace = record_trace(s.op_turns)
    async with AsyncExitStack() as stack:
        subjects = await open_subjects(stack, urls, run, tmp)
        results["chat"] = await bench_chat(subjects, s, run)
        results["ops"] = await bench_ops(subjects, trace, s, run)
    results["round_trips"] = await bench_round_trips(urls, trace, run)
    bytes_thread = f"{run}-bytes"
    results["bytes"] = await bench_bytes(urls, s, run, tmp, bytes_thread)
    results["v010"] = bench_v010(urls, s, run, bytes_thread, results["bytes"])
    results["scale"] = await bench_scale(urls, trace, s, run)
    results["long_thread"] = await bench_long_thread(urls, s, run)
    results["trace"] = {
        "turns": s.op_turns,
        "puts": sum(isinstance(e, Put) for e in trace.events),
        "put_writes": sum(isinstance(e, Writes) for e in trace.events),
    }
    return results


def cleanup(urls: dict[str, str], run: str) -> None:
    for kind in REDIS_KINDS:
        for url in (urls[kind], other_db(urls[kind])) if kind in urls else ():
            client = redis.Redis.from_url(url, protocol=2)
            left = delete_prefix(client, run)
            client.close()
            if left:
                progress(f"cleanup: deleted {left:,} keys under {run} on {url}")
    for _, kind, _ in postgres_servers(urls) if POSTGRES_KIND in urls else ():
        for schema in (run, f"{run}_bytes"):
            pg_schema(urls[kind], schema, drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a ~1 minute smoke run")
    args = parser.parse_args()
    s = QUICK if args.quick else FULL
    run = f"bench_{uuid.uuid4().hex[:8]}"  # a Redis prefix and a Postgres schema name
    load_before = os.getloadavg()
    pool = ServerPool()
    stack = contextlib.ExitStack()
    urls: dict[str, str] = {}
    try:
        for kind in REDIS_KINDS:
            progress(f"server: {kind}")
            urls[kind] = pool.get(kind)
        external = servers.external_url(POSTGRES_KIND)
        if external:  # the user's server, as they run it
            urls[POSTGRES_KIND] = external
        else:
            progress(f"servers: {POSTGRES_KIND} as installed, and the test harness's")
            durable = servers.start(POSTGRES_KIND, extra_args=PG_AS_INSTALLED)
            urls[POSTGRES_KIND] = stack.enter_context(durable).url
            urls[POSTGRES_FAST] = pool.get(POSTGRES_KIND)
        for _, kind, _ in postgres_servers(urls):
            pg_schema(urls[kind], run)
        with tempfile.TemporaryDirectory(prefix="bench-savers-") as tmp:
            results = asyncio.run(bench(urls, s, run, Path(tmp)))
        allocators = redis_allocators(urls)
        results.update(
            mode="quick" if args.quick else "full",
            settings=asdict(s),
            seconds=time.perf_counter() - _STARTED,
            environment={
                "python": platform.python_version(),
                "langgraph": metadata.version("langgraph"),
                "plainredis": metadata.version("langgraph-checkpoint-plainredis"),
                "cpus": os.cpu_count(),
                "load_before": load_before,
                "load_after": os.getloadavg(),
                "servers": server_versions(urls, allocators),
                "allocators": allocators,
                "loopback_us": results.pop("loopback_us"),
                "pinned_us": results.pop("pinned_us"),
            },
        )
        results["targets"] = targets(results)
    finally:
        cleanup(urls, run)
        pool.close()
        stack.close()
    markdown = render(results, s)
    print(markdown)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "savers.md").write_text(markdown)
    (RESULTS / "savers.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    plot(results, s)
    progress(f"wrote {RESULTS / 'savers.md'}, savers.json, {', '.join(PLOTS)}")


if __name__ == "__main__":
    main()
