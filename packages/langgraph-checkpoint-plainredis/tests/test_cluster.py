"""Redis Cluster specifics: one slot per thread, and a live slot migration."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
import uuid
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from agentstate_testkit.savers import aput_at_once
from agentstate_testkit.servers import cluster_cli, start_cluster
from langgraph_checkpoint_plainredis import AsyncRedisSaver, PlainRedisError, RedisSaver
from langgraph_checkpoint_plainredis._inspect import Inspector


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def reply(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}


def graph(saver: Any) -> Any:
    return (
        StateGraph(State)
        .add_node("reply", reply)
        .add_edge(START, "reply")
        .compile(checkpointer=saver)
    )


@pytest.mark.parametrize("thread", ["user-42:session-7", "{braces}", "", "用户"])
def test_every_key_of_a_thread_lands_in_one_slot(server_pool: Any, thread: str) -> None:
    url = server_pool.get("redis-7-cluster")
    prefix = f"slot:{uuid.uuid4().hex[:8]}"
    with RedisSaver(url, prefix=prefix) as saver:
        app = graph(saver)
        config = {"configurable": {"thread_id": thread}}
        for turn in range(3):
            app.invoke({"messages": [HumanMessage(f"q{turn}")]}, config)
        client = saver.client
        assert isinstance(client, RedisCluster)  # detected on first use
        keys = [k for k in client.scan_iter(match=f"{prefix}:*") if b":run:" not in k]
        slots = {client.keyslot(k) for k in keys}
        assert len(keys) > 5 and len(slots) == 1
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None, limit=1)] == [
            thread
        ]


async def test_cluster_is_detected_from_a_node_url(server_pool: Any) -> None:
    url = server_pool.get("valkey-cluster")
    async with AsyncRedisSaver(url, prefix=f"detect:{uuid.uuid4().hex[:8]}") as saver:
        config = {"configurable": {"thread_id": "t"}}
        assert await saver.aget_tuple(config) is None
        assert type(saver.client).__module__ == "redis.asyncio.cluster"


@pytest.mark.parametrize("cluster", [None, True, "client"])
async def test_many_first_calls_at_once_on_a_fresh_saver_all_succeed(
    server_pool: Any, cluster: Any
) -> None:
    """A fresh redis.asyncio RedisCluster that many commands start on at once fails some
    with AttributeError (redis-py 8.1); the saver reads the slot map once before its first
    calls run. Before, about half of these rounds lost a put."""
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    url = server_pool.get("redis-7-cluster")
    for round_ in range(6):
        prefix = f"burst:{uuid.uuid4().hex[:8]}"
        if cluster == "client":
            client = AsyncRedisCluster.from_url(url)
            saver = AsyncRedisSaver(client=client, prefix=prefix)
        else:
            client, saver = None, AsyncRedisSaver(url, prefix=prefix, cluster=cluster)
        try:
            configs = await aput_at_once(saver, 12, run_id=f"r{round_}")
            got = await asyncio.gather(*(saver.aget_tuple(c) for c in configs))
            assert [t.config for t in got] == configs, round_
        finally:
            await saver.aclose()
            if client is not None:
                await client.aclose()


def _node_of(client: RedisCluster, key: str) -> tuple[str, str]:
    """The id and address of the master that serves `key`."""
    node = client.get_node_from_key(key)
    node_id = client.cluster_myid(node)
    return (node_id.decode() if isinstance(node_id, bytes) else node_id), f"{node.host}:{node.port}"


def test_a_resp3_cluster_client_on_redis_5_is_told_to_use_protocol_2(server_pool: Any) -> None:
    """redis-py's cluster client reports a server without RESP3 as "Cluster mode is not
    enabled on this node"; the saver names the cluster client class it takes, with
    protocol=2 (redis-py 8's clients default to 3), or, built from a URL with protocol=3,
    says to leave that out."""
    url = server_pool.get("redis-5-cluster")
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(PlainRedisError, match="leave protocol=3 out: the saver's default"):
        RedisSaver(url, prefix="resp3", cluster=True, protocol=3)

    async def first_call() -> None:
        client = AsyncRedisCluster.from_url(url, protocol=3)
        try:
            await AsyncRedisSaver(client=client, prefix="resp3").aget_tuple(config)
        finally:
            await client.aclose()

    async_fix = r"e\.g\. redis\.asyncio\.cluster\.RedisCluster\.from_url\(url, protocol=2\)"
    with pytest.raises(PlainRedisError, match=async_fix):
        asyncio.run(first_call())


@pytest.mark.parametrize("kind", ["redis-5-cluster", "redis-7-cluster"])
def test_a_thread_survives_its_slot_moving_to_another_node_mid_run(kind: str) -> None:
    with start_cluster(kind) as cluster, RedisSaver(cluster.url, prefix="x", cluster=True) as saver:
        client = saver.client
        # A thread in one of the first slots of node 0 (slots 0-5460): `reshard` moves a
        # node's slots in ascending order, so moving 64 slots moves this thread.
        thread = next(
            f"moving-{i}"
            for i in range(100_000)
            if client.keyslot(saver.keyspace.thread(f"moving-{i}").ns) < 48
        )
        tk = saver.keyspace.thread(thread)
        app = graph(saver)
        config = {"configurable": {"thread_id": thread}}
        app.invoke({"messages": [HumanMessage("q-start")]}, config)
        source_id, source = _node_of(client, tk.ns)
        assert source == f"127.0.0.1:{cluster.nodes[0].port}"
        target = cluster.nodes[1]
        target_id = client.cluster_myid(client.get_node("127.0.0.1", target.port))
        target_id = target_id.decode() if isinstance(target_id, bytes) else target_id
        turns: list[int] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def chat() -> None:
            try:
                n = 0
                while not stop.is_set() or n < 5:
                    app.invoke({"messages": [HumanMessage(f"q{n}")]}, config)
                    turns.append(n)
                    n += 1
            except BaseException as error:  # reported below, with the reshard's output
                errors.append(error)

        worker = threading.Thread(target=chat)
        worker.start()
        moved = subprocess.run(
            [
                str(cluster_cli()),
                "--cluster",
                "reshard",
                source,
                "--cluster-from",
                source_id,
                "--cluster-to",
                target_id,
                "--cluster-slots",
                "64",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        stop.set()
        worker.join(120)
        assert moved.returncode == 0, moved.stdout[-2000:] + moved.stderr[-2000:]
        assert not errors, [f"{type(e).__name__}: {e}" for e in errors]
        # The thread now lives on the target node, and nothing was lost on the way.
        assert _node_of(client, tk.ns)[0] == target_id
        history = list(saver.list(config))
        assert len(history) == 3 * (len(turns) + 1)
        for snapshot in history:
            assert saver.get_tuple(snapshot.config) is not None
        messages = [m.content for m in app.get_state(config).values["messages"]]
        assert messages[0] == "q-start" and messages[-1] == f"echo: q{turns[-1]}"
        assert len(messages) == 2 * (len(turns) + 1)


def test_a_cluster_taken_for_a_standalone_server_says_pass_cluster_true(server_pool: Any) -> None:
    from langgraph_checkpoint_plainredis import PlainRedisError

    url = server_pool.get("redis-7-cluster")
    with RedisSaver(url, prefix=f"x:{uuid.uuid4().hex[:6]}", cluster=False) as saver:
        with pytest.raises(PlainRedisError, match="cluster=True"):
            for n in range(20):  # some thread lands on another node's slots
                saver.get_tuple({"configurable": {"thread_id": f"t{n}"}})


@pytest.mark.parametrize("style", ["sync", "async"])
def test_a_cluster_that_says_it_is_down_is_asked_again(server_pool: Any, style: str) -> None:
    """redis-py before 6 gives up on a restarting node after three tries of its own ("The
    cluster is down"), whatever the client's retry policy: the saver raised that at once.
    Every script is idempotent, so the plan is sent again after a pause, as for a moving
    slot. (The error is raised here by the saver's own sending step, as redis-py 5 does.)"""
    from redis.exceptions import ClusterDownError

    from langgraph_checkpoint_plainredis._core import cluster_retries

    assert cluster_retries(ClusterDownError("The cluster is down"))
    assert not cluster_retries(ClusterDownError.__mro__[1]("other"))  # ClusterError
    url = server_pool.get("redis-7-cluster")
    cp = empty_checkpoint()
    config = {"configurable": {"thread_id": f"down-{uuid.uuid4().hex}", "checkpoint_ns": ""}}
    down = [ClusterDownError("The cluster is down")] * 2

    if style == "sync":
        saver: Any = RedisSaver(url, prefix="down", cluster=True)
        real = saver._run_once

        def flaky(plan: Any) -> Any:
            if down:
                raise down.pop()
            return real(plan)

        saver._run_once = flaky
        stored = saver.put(config, cp, {}, {})
        assert not down and saver.get_tuple(stored) is not None
        saver.close()
        return

    async def run() -> None:
        saver = AsyncRedisSaver(url, prefix="down", cluster=True)
        real = saver._run_once

        async def flaky(plan: Any) -> Any:
            if down:
                raise down.pop()
            return await real(plan)

        saver._run_once = flaky  # type: ignore[method-assign]
        stored = await saver.aput(config, cp, {}, {})
        assert not down and await saver.aget_tuple(stored) is not None
        await saver.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["redis-7-cluster", "valkey-cluster"])
def test_a_node_restart_is_survived(kind: str) -> None:
    aof = ("--appendonly", "yes", "--appendfsync", "always")
    with (
        start_cluster(kind, extra_args=aof) as cluster,
        RedisSaver(cluster.url, prefix="r") as saver,
    ):
        app = graph(saver)
        config = {"configurable": {"thread_id": "restarted"}}
        for turn in range(3):
            app.invoke({"messages": [HumanMessage(f"before {turn}")]}, config)
        before = [s.config for s in saver.list(config)]
        _, address = _node_of(saver.client, saver.keyspace.thread("restarted").ns)
        node = next(n for n in cluster.nodes if f"127.0.0.1:{n.port}" == address)
        node.restart()  # same port, same data dir: AOF and nodes.conf come back
        for turn in range(2):
            app.invoke({"messages": [HumanMessage(f"after {turn}")]}, config)
        for old in before:
            assert saver.get_tuple(old) is not None
        messages = [m.content for m in app.get_state(config).values["messages"]]
        assert messages[0] == "before 0" and messages[-1] == "echo: after 1"
        assert len(list(saver.list(config))) == len(before) + 6


def test_writes_without_a_ttl_keep_the_run_set_of_the_checkpoint_they_keep(
    server_pool: Any,
) -> None:
    """On a cluster the run set lives in another slot than the thread: a saver without a TTL
    that keeps, for its pending writes, a checkpoint another saver stored with a TTL keeps
    that checkpoint's run set too, so `delete_for_runs` still finds it.

    Both savers open, `forever` connected, before the timed put: the writes come well
    within its 2 s TTL, even on a busy machine."""
    url = server_pool.get("redis-7-cluster")
    prefix = f"runs:{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with (
        RedisSaver(url, prefix=prefix, ttl=2) as timed,
        RedisSaver(url, prefix=prefix) as forever,
    ):
        forever.get_tuple({"configurable": {"thread_id": "warm", "checkpoint_ns": ""}})
        cp = empty_checkpoint()
        cp["channel_values"], cp["channel_versions"] = {"m": 1}, {"m": "1"}
        first = timed.put(config, cp, {"run_id": "r"}, {"m": "1"})
        forever.put_writes(first, [("__interrupt__", "approve?")], "task")
        time.sleep(2.3)
        assert [t.config for t in forever.list(config)] == [first]
        forever.delete_for_runs(["r"])
        assert list(forever.list(config)) == []


@pytest.mark.parametrize("refresh", ["put_writes", "refresh_on_read"])
def test_a_refreshed_checkpoint_keeps_its_run_set_as_long(server_pool: Any, refresh: str) -> None:
    """On a cluster the run set lives in another slot than the thread: pending writes (or a
    read with `refresh_on_read`) that give a checkpoint another `ttl` give its run set as
    long, so `delete_for_runs` still finds the checkpoint after the put's TTL has passed.

    Steps 2.3 s apart with a 4 s TTL: each has ~1.7 s to spare."""
    url = server_pool.get("redis-7-cluster")
    prefix = f"runs:{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with RedisSaver(url, prefix=prefix, ttl=4, refresh_on_read=True) as saver:
        cp = empty_checkpoint()
        cp["channel_values"], cp["channel_versions"] = {"m": 1}, {"m": "1"}
        first = saver.put(config, cp, {"run_id": "r"}, {"m": "1"})
        time.sleep(2.3)
        if refresh == "put_writes":
            saver.put_writes(first, [("__interrupt__", "approve?")], "task")
        else:
            assert saver.get_tuple(config) is not None
        time.sleep(2.3)  # past the put's TTL, within the refreshed one
        assert [t.config for t in saver.list(config)] == [first]
        saver.delete_for_runs(["r"])
        assert list(saver.list(config)) == []


def test_a_delete_between_writes_and_their_run_set_leaves_no_run_set_for_ever(
    server_pool: Any,
) -> None:
    """On a cluster a saver without a TTL keeps, for its pending writes, the run set of a
    checkpoint another saver stored with a TTL after its thread script (another slot). A
    `delete_thread` landing in between (forced here by stepping the saver's plan) leaves no
    run set kept for ever naming the deleted checkpoint."""
    url = server_pool.get("redis-7-cluster")
    prefix = f"race:{uuid.uuid4().hex[:8]}"
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with (
        RedisSaver(url, prefix=prefix, ttl=1, cluster=True) as timed,
        RedisSaver(url, prefix=prefix, cluster=True) as forever,
    ):
        cp = empty_checkpoint()
        cp["channel_values"], cp["channel_versions"] = {"m": 1}, {"m": "1"}
        first = timed.put(config, cp, {"run_id": "r"}, {"m": "1"})
        steps = forever._put_writes_steps(first, [("m", 2)], "task", "")
        reply = forever._run(steps.send(None))  # the thread script
        timed.delete_thread("t")
        with pytest.raises(StopIteration):
            forever._run(steps.send(reply))  # the run set, in its own slot
            steps.send(None)
        client = RedisCluster.from_url(url, protocol=2)
        assert [client.pttl(k) for k in client.scan_iter(match=f"{prefix}:run:*")] in ([], [-2])


def _connections(url: str, name: str) -> int:
    """Connections named `name` on every node of the cluster at `url`."""
    with RedisCluster.from_url(url) as client:
        per_node = client.client_list(target_nodes=RedisCluster.ALL_NODES)
    return sum(entry.get("name") == name for entries in per_node.values() for entry in entries)


def test_close_disconnects_every_node(server_pool: Any) -> None:
    """redis-py's RedisCluster.close leaves its nodes' pools connected until they are
    collected; the saver's close disconnects them."""
    url = server_pool.get("redis-7-cluster")
    name = f"close-{uuid.uuid4().hex[:8]}"
    saver = RedisSaver(url, prefix=f"close:{uuid.uuid4().hex[:8]}", client_name=name)
    for thread in range(12):  # threads on every node
        saver.put(
            {"configurable": {"thread_id": f"t{thread}", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {},
            {},
        )
    assert _connections(url, name) >= 3
    saver.close()
    assert _connections(url, name) == 0
    # the CLI's inspector closes its own cluster client the same way
    inspector = Inspector.connect(url, "close", client_name=name)
    inspector.checkpoint_count("t0")
    assert _connections(url, name) >= 1
    inspector.close()
    assert _connections(url, name) == 0


def test_options_a_blocking_cluster_client_hands_its_nodes_are_taken(server_pool: Any) -> None:
    """RedisCluster passes connection_pool_class, queue_class and timeout on to its nodes'
    pools (its REDIS_ALLOWED_KEYS); the saver's construction check took them for typos."""
    import queue

    import redis

    url = server_pool.get("redis-7-cluster")
    options = {"connection_pool_class": redis.BlockingConnectionPool, "timeout": 3}
    with RedisSaver(url, cluster=True, queue_class=queue.LifoQueue, **options) as saver:
        config = {"configurable": {"thread_id": "pool-class", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {}, {})
        assert saver.get_tuple(config) is not None
    with pytest.raises(TypeError, match="did you mean socket_timeout="):
        RedisSaver(url, cluster=True, socket_timout=1)  # was dropped silently
