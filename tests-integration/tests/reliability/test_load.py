"""Load: many threads through asyncio, and several processes on the same threads.

After each run the parity invariant holds: every put and put_writes that reached our
saver, replayed into LangGraph's `InMemorySaver`, gives the same tuples field by field
(the invariant of the parity suite), and the keyspace audit (`assert_sound`) passes.
Throughput is printed (run with ``-s``) and recorded as test properties; nothing is
asserted about time.
"""

from __future__ import annotations

import asyncio
import pickle
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from reliability_support import (
    WORKER,
    assert_parity,
    assert_sound,
    build_graph,
    delete_everything,
    put_record,
    read_records,
    replay,
    turn_input,
    writes_record,
)

from langgraph_checkpoint_plainredis import AsyncRedisSaver

POOL = 16

# Clusters have their own suite (packages/.../tests/test_cluster.py); these run on one server.
pytestmark = pytest.mark.standalone


class RecordingSaver(AsyncRedisSaver):
    """`AsyncRedisSaver` that keeps a snapshot of every put and put_writes it completed."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[bytes] = []

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        snapshot = pickle.dumps(put_record(config, checkpoint, metadata, new_versions))
        stored = await super().aput(config, checkpoint, metadata, new_versions)
        self.records.append(snapshot)
        return stored

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        snapshot = pickle.dumps(writes_record(config, writes, task_id, task_path))
        await super().aput_writes(config, writes, task_id, task_path)
        self.records.append(snapshot)


async def _connections_in_use(url: str, name: str, stop: asyncio.Event) -> int:
    """The most connections named `name` the server saw at once, sampled until `stop`."""
    seen = 0
    async with aioredis.Redis.from_url(url, protocol=2) as monitor:
        while not stop.is_set():
            clients = await monitor.client_list()
            seen = max(seen, sum(1 for c in clients if c.get("name") == name))
            try:
                await asyncio.wait_for(stop.wait(), 0.02)
            except asyncio.TimeoutError:
                pass
    return seen


async def run_asyncio_load(
    url: str, prefix: str, threads: int, turns: int, record_property: Any, sample: int | None
) -> None:
    """Runs the load, then audits it; `sample` bounds the by-id re-reads and the threads
    compared with the reference (None: all of them)."""
    name = f"load-{uuid.uuid4().hex[:8]}"
    # A bounded pool that makes callers wait for a free connection. A plain
    # ConnectionPool(max_connections=N) raises MaxConnectionsError instead.
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=POOL, timeout=60, protocol=2, client_name=name
    )
    client = aioredis.Redis(connection_pool=pool)
    saver = RecordingSaver(client=client, prefix=prefix)
    # One node: this measures the saver under load, not LangGraph's subgraph machinery
    # (the multi-process test below runs the subgraph).
    graph = build_graph(saver, subgraph=False)
    ids = [f"load-{i}" for i in range(threads)]

    async def conversation(thread: str) -> None:
        config = {"configurable": {"thread_id": thread}}
        for turn in range(turns):
            await graph.ainvoke(turn_input(f"{thread} turn {turn}"), config)

    stop = asyncio.Event()
    sampler = asyncio.create_task(_connections_in_use(url, name, stop))
    began = time.perf_counter()
    # A deadlock guard, not a speed limit: generous for a loaded 2-core runner.
    await asyncio.wait_for(asyncio.gather(*(conversation(t) for t in ids)), timeout=600)
    elapsed = time.perf_counter() - began
    stop.set()
    most = await sampler

    puts = sum(1 for r in saver.records if pickle.loads(r)[0] == "put")
    writes = len(saver.records) - puts
    rate = {
        "turns_per_s": threads * turns / elapsed,
        "puts_per_s": puts / elapsed,
        "put_writes_per_s": writes / elapsed,
    }
    for key, value in rate.items():
        record_property(key, round(value, 1))
    print(
        f"\nasyncio load {threads} threads x {turns} turns, pool {POOL}: {elapsed:.1f}s, "
        + ", ".join(f"{k} {v:.0f}" for k, v in rate.items())
        + f", max connections {most}"
    )
    assert 1 < most <= POOL, f"{most} connections for a pool of {POOL}"

    for thread in ids[:: max(1, threads // 20)]:
        state = await graph.aget_state({"configurable": {"thread_id": thread}})
        assert state.values["turns"] == turns
        assert len(state.values["messages"]) == 2 * turns
        assert state.values["messages"][-2].content == f"{thread} turn {turns - 1}"

    await client.aclose()
    sync = redis.Redis.from_url(url, protocol=2)
    try:
        audit = assert_sound(sync, prefix, sample=sample)
        assert audit.threads == set(ids)
        ref = replay(pickle.loads(r) for r in saver.records)
        chosen = ids if sample is None else random.Random(0).sample(ids, min(sample, threads))
        compared = assert_parity(audit.checkpoints, ref, threads=chosen)
        if sample is None:
            assert compared == puts
        delete_everything(sync, prefix, ids)
    finally:
        sync.close()


@pytest.mark.parametrize("redis_kind", ["redis-7"], scope="session")
async def test_200_threads_x_20_turns_through_asyncio(
    redis_url: str, prefix: str, record_property: Any
) -> None:
    await run_asyncio_load(redis_url, prefix, 200, 20, record_property, sample=40)


@pytest.mark.slow
@pytest.mark.parametrize("redis_kind", ["redis-5", "redis-7", "redis-8", "valkey"], scope="session")
async def test_500_threads_x_20_turns_through_asyncio_all_checked(
    redis_url: str, prefix: str, record_property: Any
) -> None:
    await run_asyncio_load(redis_url, prefix, 500, 20, record_property, sample=None)


# -- several processes, the same threads -------------------------------------------------------


def run_processes(
    url: str, prefix: str, tmp_path: Path, processes: int, threads: int, turns: int
) -> tuple[float, list[Any]]:
    """Starts `processes` workers that all run `turns` turns on the same `threads`."""
    logs = [tmp_path / f"proc-{i}.log" for i in range(processes)]
    argv = [sys.executable, str(WORKER), "shared", url, prefix]
    began = time.perf_counter()
    procs = [
        subprocess.Popen(
            [*argv, str(log), str(i), str(threads), str(turns)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for i, log in enumerate(logs)
    ]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        outputs.append(out.decode(errors="replace"))
    elapsed = time.perf_counter() - began
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out[-3000:]
    records = [r for log in logs for r in read_records(str(log))]
    return elapsed, records


def check_processes(
    redis_url: str,
    prefix: str,
    tmp_path: Path,
    record_property: Any,
    processes: int,
    threads: int,
    turns: int,
) -> None:
    elapsed, records = run_processes(redis_url, prefix, tmp_path, processes, threads, turns)
    ids = [f"shared-{i}" for i in range(threads)]
    puts = sum(1 for r in records if r[0] == "put")
    record_property("turns_per_s", round(processes * threads * turns / elapsed, 1))
    print(
        f"\n{processes} processes x {threads} shared threads x {turns} turns: {elapsed:.1f}s "
        f"(with interpreter start-up), {puts} puts"
    )
    client = redis.Redis.from_url(redis_url, protocol=2)
    try:
        audit = assert_sound(client, prefix)
        assert audit.threads == set(ids)
        assert assert_parity(audit.checkpoints, replay(records), threads=ids) == puts
        # Every process's turns are in the threads, none overwrote another's.
        for thread in ids:
            humans = {
                m.content
                for t in audit.checkpoints.values()
                if t.config["configurable"]["thread_id"] == thread
                for m in t.checkpoint["channel_values"].get("messages", ())
                if m.type == "human"
            }
            assert humans == {
                f"p{p} {thread} turn {n}" for p in range(processes) for n in range(turns)
            }
        delete_everything(client, prefix, ids)
    finally:
        client.close()


@pytest.mark.parametrize("redis_kind", ["redis-7"], scope="session")
def test_four_processes_writing_the_same_threads(
    redis_url: str, prefix: str, tmp_path: Path, record_property: Any
) -> None:
    check_processes(redis_url, prefix, tmp_path, record_property, 4, 4, 6)


@pytest.mark.slow
def test_four_processes_writing_the_same_threads_long(
    redis_url: str, prefix: str, tmp_path: Path, record_property: Any
) -> None:
    check_processes(redis_url, prefix, tmp_path, record_property, 4, 8, 15)
