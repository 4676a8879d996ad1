"""ReducingSaver around real servers: conformance with the inner saver's capabilities,
and storage that stays bounded (PostgreSQL 15 and plainredis)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Annotated, Any, TypedDict

import psycopg
import pytest
import redis
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance.capabilities import DetectedCapabilities
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import ReducingSaver
from agentstate_testkit.savers import SyncAsAsync, assert_conformance
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver


def reducer(window: int = 6, keep: int = 4) -> MessageReducer:
    return MessageReducer(config=ReducerConfig(min_messages=keep, max_messages=window))


def capabilities(saver: Any) -> set[str]:
    return {c.value for c in DetectedCapabilities.from_instance(saver).detected}


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    """A database of this test's own on the harness's PostgreSQL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


async def test_conformance_around_async_postgres_saver(pg_url: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url) as setup:
        await setup.setup()
        want = capabilities(setup)

    async def factory() -> AsyncIterator[ReducingSaver]:
        async with AsyncPostgresSaver.from_conn_string(pg_url) as inner:
            saver = ReducingSaver(inner, reducer())
            assert capabilities(saver) == want
            yield saver

    await assert_conformance(factory, "ReducingSaver(AsyncPostgresSaver)", expected=want)


@pytest.mark.parametrize("style", ["async", "sync"])
async def test_conformance_around_plainredis(redis_url: str, style: str) -> None:
    async def factory() -> AsyncIterator[Any]:
        prefix = f"wrap:{uuid.uuid4().hex}"
        if style == "async":
            async with AsyncRedisSaver(redis_url, prefix=prefix) as inner:
                yield ReducingSaver(inner, reducer())
        else:
            with RedisSaver(redis_url, prefix=prefix) as inner:
                yield SyncAsAsync(ReducingSaver(inner, reducer()))

    await assert_conformance(factory, f"ReducingSaver({style} plainredis)")


# -- storage stays bounded -----------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def reply(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"echo: {state['messages'][-1].content}")]}


def turns(saver: Any, thread: str, n: int, after_turn: Callable[[int], None]) -> None:
    graph = (
        StateGraph(State)
        .add_node("reply", reply)
        .add_edge(START, "reply")
        .compile(checkpointer=saver)
    )
    config = {"configurable": {"thread_id": thread}}
    for turn in range(n):
        graph.invoke({"messages": [HumanMessage(f"question {turn:04d}")]}, config)
        after_turn(turn + 1)


class Store:
    """Measures what one saver holds for one thread."""

    def __init__(self, saver: Any, newest_messages: Callable[[], int], total: Callable[[], int]):
        self.saver, self.newest_messages, self.total = saver, newest_messages, total


@pytest.fixture(params=["postgres", "plainredis"])
def store_factory(
    request: pytest.FixtureRequest, pg_url: str, server_pool: Any
) -> Iterator[Callable[[str, bool], Store]]:
    closers: list[Callable[[], None]] = []
    if request.param == "postgres":
        cm = PostgresSaver.from_conn_string(pg_url)
        pg = cm.__enter__()
        pg.setup()
        closers.append(lambda: cm.__exit__(None, None, None))

        def make(thread: str, wrapped: bool) -> Store:
            def newest() -> int:
                tup = pg.get_tuple({"configurable": {"thread_id": thread}})
                version = tup.checkpoint["channel_versions"]["messages"]
                row = pg.conn.execute(
                    "select length(blob) as n from checkpoint_blobs where thread_id = %s "
                    "and channel = 'messages' and version = %s",
                    (thread, str(version)),
                ).fetchone()
                return int(row["n"])

            def total() -> int:
                size = 0
                for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes"):
                    row = pg.conn.execute(
                        f"select coalesce(sum(pg_column_size(t.*)), 0) as n from {table} t "
                        "where thread_id = %s",
                        (thread,),
                    ).fetchone()
                    size += int(row["n"])
                return size

            return Store(ReducingSaver(pg, reducer()) if wrapped else pg, newest, total)
    else:
        url = server_pool.get("redis-7")
        prefix = f"bound:{uuid.uuid4().hex[:8]}"
        client = redis.Redis.from_url(url, protocol=2)
        rs = RedisSaver(url, prefix=prefix, compress=False)
        closers += [rs.close, client.close]

        def make(thread: str, wrapped: bool) -> Store:
            tk = rs.keyspace.thread(thread)

            def newest() -> int:
                tup = rs.get_tuple({"configurable": {"thread_id": thread}})
                return int(
                    client.strlen(
                        tk.blob("", "messages", tup.checkpoint["channel_versions"]["messages"])
                    )
                )

            def total() -> int:
                return sum(
                    int(client.memory_usage(k) or 0)
                    for k in client.scan_iter(match=f"{prefix}:*{{{tk.component}}}*", count=1000)
                )

            return Store(ReducingSaver(rs, reducer()) if wrapped else rs, newest, total)

    yield make
    for close in closers:
        close()


def test_after_ten_turns_the_newest_messages_value_is_no_larger_than_when_the_window_filled(
    store_factory: Callable[[str, bool], Store],
) -> None:
    store = store_factory("ten", True)
    sizes: dict[int, int] = {}
    turns(store.saver, "ten", 10, lambda t: sizes.__setitem__(t, store.newest_messages()))
    # Six messages (the window) are stored after turn 3.
    assert sizes[10] <= sizes[3]
    assert sizes[10] < sizes[3] * 10 // 6


def test_two_hundred_turns_grow_linearly_wrapped_quadratically_unwrapped_and_pruned_stay_flat(
    store_factory: Callable[[str, bool], Store],
) -> None:
    curves: dict[str, dict[int, int]] = {}
    for mode in ("unwrapped", "wrapped", "pruned"):
        store = store_factory(mode, mode != "unwrapped")
        curve = curves[mode] = {}

        def measure(
            turn: int, store: Store = store, curve: dict[int, int] = curve, mode: str = mode
        ) -> None:
            if mode == "pruned":
                store.saver.prune([mode], strategy="keep_latest")
            if turn % 50 == 0:
                curve[turn] = store.total()

        turns(store.saver, mode, 200, measure)
    for mode, curve in curves.items():
        print(mode, curve)
    unwrapped, wrapped, pruned = curves["unwrapped"], curves["wrapped"], curves["pruned"]
    # Quadratic: each 50 turns add more than the 50 before.
    assert unwrapped[200] - unwrapped[150] > 1.5 * (unwrapped[100] - unwrapped[50])
    # Linear: each 50 turns add about the same.
    assert wrapped[200] - wrapped[150] <= 1.15 * (wrapped[100] - wrapped[50])
    assert wrapped[200] < unwrapped[200] / 3
    # Constant: keep_latest holds one bounded checkpoint.
    assert pruned[200] <= pruned[50] * 1.05
