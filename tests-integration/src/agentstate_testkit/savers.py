"""Test helpers shared by every package's suite: adapters, round-trip counters, conformance."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import redis
import redis.asyncio as aioredis
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
)

__all__ = [
    "RoundTrips",
    "SyncAsAsync",
    "aput_at_once",
    "assert_conformance",
    "counting_async_client",
    "counting_client",
    "scan_keys",
    "wire_commands",
]


_SYNC_METHODS = (
    "get_tuple",
    "list",
    "put",
    "put_writes",
    "delete_thread",
    "delete_for_runs",
    "copy_thread",
    "prune",
)
_ADAPTERS: dict[tuple[type, tuple[str, ...]], type] = {}


class SyncAsAsync(BaseCheckpointSaver[Any]):
    """Exposes a sync saver's methods under the async names, each run in a worker thread.

    Lets one async test (and the conformance suite, which calls only `a*` methods)
    exercise `put`, `get_tuple`, `list`... of a blocking saver. Optional capabilities
    are forwarded only when the wrapped saver has them.
    """

    def __new__(cls, inner: BaseCheckpointSaver[Any] | None = None) -> SyncAsAsync:
        # Async names whose sync method the inner saver lacks stay the base class's, so
        # capability probes (the conformance suite's) see exactly the inner saver's.
        missing = tuple(
            n
            for n in _SYNC_METHODS
            if inner is not None
            and getattr(type(inner), n, None) is getattr(BaseCheckpointSaver, n)
        )
        if not missing:
            return super().__new__(cls)
        key = (cls, missing)
        if key not in _ADAPTERS:
            base_methods = {f"a{n}": getattr(BaseCheckpointSaver, f"a{n}") for n in missing}
            _ADAPTERS[key] = type(cls.__name__, (cls,), base_methods)
        return super().__new__(_ADAPTERS[key])

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        super().__init__(serde=inner.serde)
        self.inner = inner

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.inner.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(
            lambda: list(self.inner.list(config, filter=filter, before=before, limit=limit))
        )
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.inner.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.inner.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.inner.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.inner.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.inner.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.inner.prune, thread_ids, strategy=strategy)


class RoundTrips:
    """Counts round trips (packed sends) and the commands they carry, read off the wire."""

    def __init__(self) -> None:
        self.round_trips = 0
        self.commands: list[tuple[Any, ...]] = []

    def reset(self) -> None:
        self.round_trips = 0
        self.commands.clear()

    @contextlib.contextmanager
    def measure(self) -> Iterator[RoundTrips]:
        self.reset()
        yield self


def wire_commands(packed: Any) -> list[tuple[Any, ...]]:
    """The commands in what a connection sends: RESP arrays of bulk strings, as bytes
    except each command's name (a str)."""
    chunks = [packed] if isinstance(packed, (str, bytes, bytearray, memoryview)) else packed
    data = b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)
    commands: list[tuple[Any, ...]] = []
    pos = 0

    def header(kind: bytes) -> int:
        nonlocal pos
        end = data.index(b"\r\n", pos)
        assert data[pos : pos + 1] == kind, f"not RESP at {pos}: {data[pos : pos + 20]!r}"
        number, pos = int(data[pos + 1 : end]), end + 2
        return number

    while pos < len(data):
        args: list[Any] = []
        for _ in range(header(b"*")):
            size = header(b"$")
            args.append(data[pos : pos + size])
            pos += size + 2
        commands.append((args[0].decode(), *args[1:]))
    return commands


def _counting_connection(base: type, counter: RoundTrips) -> type:
    class Counting(base):  # type: ignore[misc]
        def send_packed_command(self, command: Any, check_health: bool = True) -> Any:
            counter.round_trips += 1
            counter.commands.extend(wire_commands(command))
            return super().send_packed_command(command, check_health)

    return Counting


def _counting_async_connection(base: type, counter: RoundTrips) -> type:
    class Counting(base):  # type: ignore[misc]
        async def send_packed_command(self, command: Any, check_health: bool = True) -> Any:
            counter.round_trips += 1
            counter.commands.extend(wire_commands(command))
            return await super().send_packed_command(command, check_health)

    return Counting


def counting_client(url: str, **kwargs: Any) -> tuple[redis.Redis, RoundTrips]:
    """A blocking client (RESP2) whose round trips and commands are counted."""
    counter = RoundTrips()
    pool = redis.ConnectionPool.from_url(url, protocol=2, **kwargs)
    pool.connection_class = _counting_connection(pool.connection_class, counter)
    return redis.Redis(connection_pool=pool), counter


def counting_async_client(url: str, **kwargs: Any) -> tuple[aioredis.Redis, RoundTrips]:
    """An asyncio client (RESP2) whose round trips and commands are counted."""
    counter = RoundTrips()
    pool = aioredis.ConnectionPool.from_url(url, protocol=2, **kwargs)
    pool.connection_class = _counting_async_connection(pool.connection_class, counter)
    return aioredis.Redis(connection_pool=pool), counter


async def aput_at_once(saver: Any, threads: int, run_id: str) -> list[RunnableConfig]:
    """Puts an empty checkpoint on threads t0, t1, ... all at once (concurrent first calls)."""
    return list(
        await asyncio.gather(
            *(
                saver.aput(
                    {"configurable": {"thread_id": f"t{i}", "checkpoint_ns": ""}},
                    empty_checkpoint(),
                    {"run_id": run_id},
                    {},
                )
                for i in range(threads)
            )
        )
    )


def scan_keys(client: redis.Redis, prefix: str) -> list[bytes]:
    """Every key under `prefix` (SCAN, never KEYS)."""
    return sorted(client.scan_iter(match=f"{prefix}:*", count=1000))


async def assert_conformance(
    factory: Callable[[], Any],
    name: str,
    expected: set[str] | None = None,
) -> None:
    """Runs `langgraph-checkpoint-conformance` and fails with its report unless all passed.

    Args:
        factory: An async generator function yielding a fresh saver (cleanup after yield).
        name: Name shown in the report.
        expected: The capabilities that must be detected; all eight by default.
    """
    from langgraph.checkpoint.conformance import checkpointer_test, validate
    from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES

    registered = checkpointer_test(name=name)(factory)
    report = await validate(registered)
    want = expected if expected is not None else {c.value for c in ALL_CAPABILITIES}
    detected = {cap for cap, result in report.results.items() if result.detected}
    failures = {
        cap: result.failures for cap, result in report.results.items() if result.passed is False
    }
    assert detected == want, f"{name}: detected {sorted(detected)}, expected {sorted(want)}"
    assert not failures, f"{name}: conformance failures: {failures}"
