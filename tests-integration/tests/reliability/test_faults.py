"""Faults: the server restarts, crashes or goes away mid-call.

- Restarted (same port, ``appendonly yes``, ``appendfsync always``) while a graph runs:
  the savers reconnect, reload their scripts (the restart empties the script cache,
  EVALSHA gets NOSCRIPT, the saver sends EVAL once), the run goes on, and every
  checkpoint acknowledged before the restart reads back unchanged.
- Crashed (SIGKILL) and started again while an invoke is already waiting: the retry
  (the savers' default, or a `retry=` of one's own) carries the invoke over the gap.
- Gone for good, or gone mid-call (a proxy cuts the connection halfway through the
  request, or drops the reply): once the retries are spent the caller gets redis-py's
  `ConnectionError`, and the keyspace holds either nothing of the call or all of it,
  never part; a call cut once is retried and applied exactly once.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff, ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry
from reliability_support import (
    CuttingProxy,
    State,
    assert_sound,
    build_graph,
    cfg,
    dump_keyspace,
    ident,
    keys_under,
    turn_input,
    view,
)

from agentstate_testkit import Server, start
from agentstate_testkit.savers import counting_async_client, counting_client
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver

AOF = ["--appendonly", "yes", "--appendfsync", "always"]
# The savers' default for a URL (redis-py's own for `Redis(host=...)`, which
# `Redis.from_url` does not apply), passed explicitly to clients the test builds.
RETRY_BACKOFF, RETRIES = ExponentialWithJitterBackoff(base=0.01, cap=1), 10

# Clusters have their own suite (packages/.../tests/test_cluster.py); these run on one server.
pytestmark = pytest.mark.standalone


@pytest.fixture
def aof_server() -> Iterator[Server]:
    """A private Redis 7 that fsyncs every write: a restart or crash loses nothing."""
    with start("redis-7", extra_args=AOF) as server:
        yield server


def views(saver: RedisSaver) -> dict[tuple[str, str, str], dict[str, Any]]:
    return {ident(t): view(t) for t in saver.list(None)}


def kill_server(server: Server) -> None:
    """SIGKILLs the server process (its pid from INFO) and waits until it is gone."""
    with redis.Redis.from_url(server.url) as admin:
        pid = int(admin.info("server")["process_id"])
    os.kill(pid, signal.SIGKILL)
    for _ in range(500):
        if not server.running:
            return
        time.sleep(0.01)
    raise AssertionError("the server survived SIGKILL")


def run_id(server: Server) -> str:
    with redis.Redis.from_url(server.url) as admin:
        return str(admin.info("server")["run_id"])


# -- restarted while a graph runs --------------------------------------------------------------


def restarting_graph(checkpointer: Any, server: Server, restart_on: str) -> Any:
    """agent -> maybe_restart -> agent2: restarts the server mid-run when asked."""

    def agent(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        return {"messages": [AIMessage(f"echo: {last.content}", id=f"{last.id}-echo")]}

    def maybe_restart(state: State) -> dict[str, Any]:
        if state["messages"][-2].content == restart_on:
            server.restart()
        return {"turns": state.get("turns", 0) + 1}

    return (
        StateGraph(State)
        .add_node("agent", agent)
        .add_node("maybe_restart", maybe_restart)
        .add_edge(START, "agent")
        .add_edge("agent", "maybe_restart")
        .compile(checkpointer=checkpointer)
    )


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_restart_mid_graph_reconnects_and_keeps_what_was_acknowledged(
    aof_server: Server, prefix: str, style: str
) -> None:
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:6]}"}}
    # LangGraph writes checkpoints in the background while the next node runs, so a
    # put may be in flight while the server is down: the retry carries it over.
    if style == "sync":
        client, counter = counting_client(aof_server.url, retry=Retry(RETRY_BACKOFF, RETRIES))
        saver: Any = RedisSaver(client=client, prefix=prefix)
    else:
        aclient, counter = counting_async_client(
            aof_server.url, retry=AsyncRetry(RETRY_BACKOFF, RETRIES)
        )
        saver = AsyncRedisSaver(client=aclient, prefix=prefix)
    graph = restarting_graph(saver, aof_server, restart_on="turn 3")

    async def invoke(text: str) -> None:
        if style == "sync":
            await asyncio.to_thread(graph.invoke, turn_input(text), config)
        else:
            await graph.ainvoke(turn_input(text), config)

    for turn in range(3):
        await invoke(f"turn {turn}")
    with redis.Redis.from_url(aof_server.url, protocol=2) as c:
        before = views(RedisSaver(client=c, prefix=prefix))
    first_run = run_id(aof_server)
    counter.reset()
    await invoke("turn 3")  # the server restarts between two checkpoints of this run
    assert run_id(aof_server) != first_run, "the server did not restart"
    # The restart emptied the script cache: the saver fell back to EVAL once per script.
    assert any(c[0] == "EVAL" for c in counter.commands)
    await invoke("turn 4")

    with redis.Redis.from_url(aof_server.url, protocol=2) as c:
        reader = RedisSaver(client=c, prefix=prefix)
        after = views(reader)
        assert {i: after[i] for i in before} == before
        assert len(after) > len(before)
        state = reader.get_tuple(config)
        assert state is not None
        assert state.checkpoint["channel_values"]["turns"] == 5
        assert [m.content for m in state.checkpoint["channel_values"]["messages"]][-4:] == [
            "turn 3", "echo: turn 3", "turn 4", "echo: turn 4",
        ]  # fmt: skip
        assert_sound(c, prefix)
    if style == "async":
        await aclient.aclose()
    else:
        client.close()


# -- crashed while an invoke waits -------------------------------------------------------------


class SignallingBackoff(ExponentialBackoff):
    """Short exponential backoff that tells the test when the first retry happens.

    redis-py deep-copies the `Retry` into every connection; this object is shared.
    """

    def __init__(self) -> None:
        super().__init__(cap=0.1, base=0.01)
        self.retried = threading.Event()
        self.failures = 0

    def compute(self, failures: int) -> float:
        self.failures += 1
        self.retried.set()
        return float(super().compute(failures))

    def __deepcopy__(self, memo: Any) -> SignallingBackoff:
        return self


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_an_invoke_sent_while_the_server_is_down_succeeds_with_retry(
    aof_server: Server, prefix: str, style: str
) -> None:
    backoff = SignallingBackoff()
    config = {"configurable": {"thread_id": "crash"}}
    if style == "sync":
        saver: Any = RedisSaver(aof_server.url, prefix=prefix, retry=Retry(backoff, 200))
    else:
        saver = AsyncRedisSaver(aof_server.url, prefix=prefix, retry=AsyncRetry(backoff, 200))
    graph = build_graph(saver)

    async def invoke(text: str) -> None:
        if style == "sync":
            await asyncio.to_thread(graph.invoke, turn_input(text), config)
        else:
            await graph.ainvoke(turn_input(text), config)

    await invoke("before the crash")
    with redis.Redis.from_url(aof_server.url, protocol=2) as c:
        before = views(RedisSaver(client=c, prefix=prefix))
    kill_server(aof_server)

    def restart_once_retrying() -> None:
        assert backoff.retried.wait(60), "the saver never retried"
        aof_server.restart()

    restarter = threading.Thread(target=restart_once_retrying)
    restarter.start()
    try:
        await invoke("while it was down")
    finally:
        restarter.join()
    assert backoff.failures >= 1
    with redis.Redis.from_url(aof_server.url, protocol=2) as c:
        reader = RedisSaver(client=c, prefix=prefix)
        after = views(reader)
        assert {i: after[i] for i in before} == before
        latest = reader.get_tuple(config)
        assert latest is not None
        assert latest.checkpoint["channel_values"]["turns"] == 2
        assert_sound(c, prefix)
    if style == "async":
        await saver.aclose()
    else:
        saver.close()


def test_a_server_gone_for_good_raises_connection_error_and_loses_nothing(
    aof_server: Server, prefix: str
) -> None:
    """A saver built from a URL, with its default retry: a call while the server stays
    down raises `ConnectionError` once the retries are spent; nothing is lost; once the
    server is back, the same saver carries on."""
    saver = RedisSaver(aof_server.url, prefix=prefix)
    graph = build_graph(saver)
    config = {"configurable": {"thread_id": "gone"}}
    graph.invoke(turn_input("one"), config)
    with redis.Redis.from_url(aof_server.url, protocol=2) as c:
        before = views(RedisSaver(client=c, prefix=prefix))
    kill_server(aof_server)
    with pytest.raises(redis.exceptions.ConnectionError):
        graph.invoke(turn_input("two"), config)
    aof_server.restart()
    with redis.Redis.from_url(aof_server.url, protocol=2) as c:
        assert views(RedisSaver(client=c, prefix=prefix)) == before
        assert_sound(c, prefix)
    graph.invoke(turn_input("three"), config)
    assert graph.get_state(config).values["turns"] == 2
    saver.close()


# -- gone mid-call -----------------------------------------------------------------------------

BIG = os.urandom(48 * 1024).hex()  # incompressible, so the request spans many packets


def _checkpoint(value: Any, version: str) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"m": value}
    cp["channel_versions"] = {"m": version}
    return cp


class Calls:
    """The same saver calls, run through a sync or an async saver."""

    def __init__(self, saver: Any, style: str) -> None:
        self.saver, self.style = saver, style

    async def __call__(self, method: str, *args: Any) -> Any:
        if self.style == "sync":
            return await asyncio.to_thread(getattr(self.saver, method), *args)
        return await getattr(self.saver, "a" + method)(*args)

    async def close(self) -> None:
        if self.style == "sync":
            self.saver.close()
        else:
            await self.saver.aclose()


def _saver_through(proxy: CuttingProxy, prefix: str, style: str, retries: int | None) -> Calls:
    kwargs: dict[str, Any] = {"prefix": prefix}
    if retries is not None:
        retry_cls = Retry if style == "sync" else AsyncRetry
        kwargs["retry"] = retry_cls(NoBackoff(), retries)
    cls = RedisSaver if style == "sync" else AsyncRedisSaver
    return Calls(cls(proxy.url, **kwargs), style)


async def _warm_up(calls: Calls) -> Any:
    """One checkpoint with writes, through the proxy: every script is cached after it."""
    a = await calls("put", cfg("t"), _checkpoint("first", "1"), {"step": 0}, {"m": "1"})
    await calls("put_writes", a, [("m", "w0")], "task-0")
    await calls("get_tuple", a)
    await calls("delete_thread", "nothing-here")
    return a


async def _the_call(calls: Calls, op: str, a: Any) -> None:
    if op == "put":
        await calls("put", a, _checkpoint(BIG, "2"), {"step": 1}, {"m": "2"})
    elif op == "put_writes":
        await calls("put_writes", a, [("m", BIG), ("__error__", "boom")], "task-1")
    else:
        await calls("delete_thread", "t")


def _assert_all_of_it(client: redis.Redis, prefix: str, op: str, a: Any) -> None:
    saver = RedisSaver(client=client, prefix=prefix)
    if op == "put":
        latest = saver.get_tuple(cfg("t"))
        assert latest is not None and latest.checkpoint["channel_values"] == {"m": BIG}
        assert [t.checkpoint["id"] for t in saver.list(cfg("t"))][1:] == [
            a["configurable"]["checkpoint_id"]
        ]
    elif op == "put_writes":
        got = saver.get_tuple(a)
        assert got is not None
        assert sorted(got.pending_writes) == sorted(
            [("task-0", "m", "w0"), ("task-1", "m", BIG), ("task-1", "__error__", "boom")]
        )
    else:
        assert keys_under(client, prefix) == set()
    assert_sound(client, prefix)


@pytest.mark.parametrize("style", ["sync", "async"])
@pytest.mark.parametrize("op", ["put", "put_writes", "delete_thread"])
@pytest.mark.parametrize("cut", ["request", "reply"])
async def test_server_gone_mid_call_raises_connection_error_and_writes_all_or_nothing(
    redis_url: str, client: redis.Redis, prefix: str, style: str, op: str, cut: str
) -> None:
    host, port = (
        client.connection_pool.connection_kwargs["host"],
        client.connection_pool.connection_kwargs["port"],
    )
    proxy = CuttingProxy(host, port)
    calls = _saver_through(proxy, prefix, style, retries=2)
    try:
        a = await _warm_up(calls)
        before = dump_keyspace(client, prefix)
        # "request": 16 bytes reach the server, less than any command of the saver.
        proxy.arm(cut, after=16, go_away=True)
        with pytest.raises(redis.exceptions.ConnectionError):
            await _the_call(calls, op, a)
        assert proxy.cuts == 1
        if cut == "request":
            assert dump_keyspace(client, prefix) == before, "a cut request wrote something"
            assert_sound(client, prefix)
        else:
            _assert_all_of_it(client, prefix, op, a)
    finally:
        proxy.close()
        await calls.close()


@pytest.mark.parametrize("style", ["sync", "async"])
@pytest.mark.parametrize("op", ["put", "put_writes", "delete_thread"])
@pytest.mark.parametrize("cut", ["request", "reply"])
async def test_a_call_cut_off_once_is_retried_and_applied_exactly_once(
    redis_url: str, client: redis.Redis, prefix: str, style: str, op: str, cut: str
) -> None:
    """With `retry=`, redis-py sends the call again on a new connection. A cut request
    never ran; a lost reply means the script ran, and it runs again: every script of
    the saver is idempotent, so the result is that of one call."""
    host, port = (
        client.connection_pool.connection_kwargs["host"],
        client.connection_pool.connection_kwargs["port"],
    )
    proxy = CuttingProxy(host, port)
    calls = _saver_through(proxy, prefix, style, retries=3)
    try:
        a = await _warm_up(calls)
        proxy.arm(cut, after=16, go_away=False)
        await _the_call(calls, op, a)
        assert proxy.cuts == 1
        _assert_all_of_it(client, prefix, op, a)
    finally:
        proxy.close()
        await calls.close()


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_a_saver_built_from_a_url_retries_by_default(
    redis_url: str, client: redis.Redis, prefix: str, style: str
) -> None:
    """A connection cut once does not fail the call of a saver given only a URL.

    `Redis.from_url` builds connections with `Retry(NoBackoff(), 0)` (redis-py applies its
    10-retry default only to `Redis(host=...)`), so the savers set a retry of their own.
    """
    host, port = (
        client.connection_pool.connection_kwargs["host"],
        client.connection_pool.connection_kwargs["port"],
    )
    proxy = CuttingProxy(host, port)
    calls = _saver_through(proxy, prefix, style, retries=None)
    try:
        a = await _warm_up(calls)
        proxy.arm("request", after=16, go_away=False)
        await _the_call(calls, "put", a)
        _assert_all_of_it(client, prefix, "put", a)
    finally:
        proxy.close()
        await calls.close()
