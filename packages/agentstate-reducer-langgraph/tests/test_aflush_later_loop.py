"""`aflush`/`aclose` on a later event loop, with `redis.asyncio` clients of the ended one."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import (
    Delivery,
    RedisDeliveryLedger,
    RedisOutbox,
    ReducingSaver,
)

PRUNED = ["b", "c", "d", "e"]  # of a, ..., h: the reducer keeps the first and the last 3


def checkpoint_with(ids: Sequence[str]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [HumanMessage(f"m {i}", id=i) for i in ids]}
    cp["channel_versions"] = {"messages": 1}
    return cp


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


class Stuck:
    """A coroutine hook still running when its loop ends while `stuck`."""

    name = "mem"

    def __init__(self) -> None:
        self.stuck = True
        self.got: list[str] = []

    async def __call__(self, pruned: list[Any], namespace: Any) -> None:
        while self.stuck:
            await asyncio.sleep(0.01)
        self.got.extend(m.id for m in pruned)


@pytest.fixture
def aclient(server_url: str) -> Iterator[aioredis.Redis]:
    c = aioredis.Redis.from_url(server_url, protocol=2)
    yield c
    # Its connections belong to loops that have ended; nothing to await them on.


def saver_on(client: redis.Redis, aclient: aioredis.Redis, prefix: str, hook: Stuck) -> Any:
    """A background-delivery saver whose ledger and outbox use `aclient` under `aput`."""
    ledger = RedisDeliveryLedger(client, aclient=aclient, prefix=prefix)
    config = ReducerConfig(min_messages=4, max_messages=6, on_prune=[hook])
    return ReducingSaver(
        InMemorySaver(),
        MessageReducer(config=config, ledger=ledger),
        outbox=RedisOutbox(aclient, prefix=prefix),
        delivery=Delivery("background", poll_interval=60),
    )


def put_and_end_the_loop(
    saver: Any, aclient: Any = None, *, close: bool = False, stale: int = 0
) -> None:
    """`aput` on a loop that ends while the background task is in the hook; with `close`,
    `aclient` is closed on that loop first, as the error advises; with `stale`, that many
    connections of `aclient` are left in its pool."""

    async def handler() -> None:
        await saver.aput(cfg("t"), checkpoint_with(list("abcdefgh")), {}, {"messages": 1})
        if stale:  # connected, then back in the pool
            pool = aclient.connection_pool
            # redis-py 5.0 needs a command name, which 5.3 deprecates
            named = inspect.signature(pool.get_connection).parameters
            args = (
                ()
                if next(iter(named.values())).default is not inspect.Parameter.empty
                else ("PING",)
            )
            held = [await pool.get_connection(*args) for _ in range(stale)]
            for conn in held:
                await conn.connect()
                await pool.release(conn)
        await asyncio.sleep(0.05)
        if close:
            await aclient.aclose()

    asyncio.run(handler())


@pytest.mark.parametrize("how", ["aflush", "aclose"])
@pytest.mark.parametrize("stale", [0, 3])
def test_a_later_loop_delivers_through_a_client_of_the_ended_loop(
    client: redis.Redis, aclient: aioredis.Redis, prefix: str, how: str, stale: int
) -> None:
    """The first command of the ledger's `redis.asyncio` client on the new loop failed (its
    connection belongs to the ended loop); the reducer only logged the failed lookup, and
    `aflush` returned having delivered nothing, without a word. Now the connections of the
    ended loop are dropped first (a PING each, sent nowhere), and the batch is delivered;
    the client then serves this loop, concurrently too."""
    hook = Stuck()
    saver = saver_on(client, aclient, prefix, hook)
    put_and_end_the_loop(saver, aclient, stale=stale)
    hook.stuck = False

    async def flush() -> list[Any]:
        await asyncio.wait_for(getattr(saver.delivery, how)(), 5)
        ledger = saver.reducer.ledger
        return await asyncio.gather(*(ledger.aseen("mem", ("x",), ["m"]) for _ in range(4)))

    assert asyncio.run(flush()) == [set()] * 4
    assert hook.got == PRUNED
    assert RedisOutbox(client, prefix=prefix).stats().backlog == 0


@pytest.mark.parametrize("how", ["aflush", "aclose"])
def test_a_later_loop_with_nothing_left_returns_quietly(
    client: redis.Redis, aclient: aioredis.Redis, prefix: str, how: str
) -> None:
    """Flushed on its own loop, nothing is left: a later loop's `aflush`/`aclose` has nothing
    to deliver and returns (a first version of the fix raised there)."""
    hook = Stuck()
    hook.stuck = False
    saver = saver_on(client, aclient, prefix, hook)

    async def handler() -> None:
        await saver.aput(cfg("t"), checkpoint_with(list("abcdefgh")), {}, {"messages": 1})
        await saver.delivery.aflush()

    asyncio.run(handler())
    assert hook.got == PRUNED
    for _ in range(2):
        asyncio.run(getattr(saver.delivery, how)())
    assert hook.got == PRUNED


def test_connections_of_another_loop_that_stay_are_named_and_the_batch_kept(
    client: redis.Redis,
    aclient: aioredis.Redis,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When a connection of another loop is still met (here the connections refuse to be
    dropped, as a cluster client's nodes keep theirs), the flush raises naming the cause and
    the fix, and the batch stays staged for the next flush."""
    hook = Stuck()
    saver = saver_on(client, aclient, prefix, hook)
    put_and_end_the_loop(saver, aclient, stale=3)
    hook.stuck = False

    async def keep(nowait: bool = False) -> None:
        pass

    for conn in aclient.connection_pool._available_connections:
        monkeypatch.setattr(conn, "disconnect", keep)

    async def flush() -> None:
        await asyncio.wait_for(saver.delivery.aflush(), 5)

    with pytest.raises(RuntimeError, match="opened on another event loop") as raised:
        asyncio.run(flush())
    assert "await client.aclose()" in str(raised.value)
    assert "its own client" in str(raised.value)
    assert hook.got == []
    outbox = RedisOutbox(client, prefix=prefix)
    assert outbox.stats().backlog == 1  # still staged, committed: nothing lost
    monkeypatch.undo()
    asyncio.run(flush())
    assert hook.got == PRUNED
    assert outbox.stats().backlog == 0


def test_a_client_closed_on_its_loop_lets_a_later_loop_deliver(
    client: redis.Redis, aclient: aioredis.Redis, prefix: str
) -> None:
    """The fix the error names: closing the client on the loop that used it."""
    hook = Stuck()
    saver = saver_on(client, aclient, prefix, hook)
    put_and_end_the_loop(saver, aclient, close=True)
    hook.stuck = False

    async def flush() -> None:
        await asyncio.wait_for(saver.delivery.aflush(), 5)

    asyncio.run(flush())
    assert hook.got == PRUNED
    assert RedisOutbox(client, prefix=prefix).stats().backlog == 0


def test_an_outbox_command_on_an_ended_loops_connection_says_why(
    client: redis.Redis, aclient: aioredis.Redis, prefix: str
) -> None:
    """Outside a flush the first command still fails once; it said only "Event loop is
    closed"."""
    outbox = RedisOutbox(aclient, prefix=prefix)
    asyncio.run(outbox.astats())
    with pytest.raises(RuntimeError, match=r"RedisOutbox: .*opened on another event loop"):
        asyncio.run(outbox.astats())
    assert asyncio.run(outbox.astats()).backlog == 0


def test_a_later_loop_flush_leaves_the_applications_commands_on_this_loop_alone(
    client: redis.Redis, aclient: aioredis.Redis, prefix: str
) -> None:
    """The application shares the client and, on the new loop, runs commands while the flush
    drops the ended loop's connections: dropping every idle connection (a first version of
    the fix) closed some under the application's commands ("Connection lost"). Only the
    connections of another loop are dropped."""
    hook = Stuck()
    saver = saver_on(client, aclient, prefix, hook)
    put_and_end_the_loop(saver, aclient, close=True)  # closed on its loop, as advised
    hook.stuck = False

    async def new_loop() -> list[str]:
        errors: list[str] = []
        stop = False

        async def app() -> None:
            while not stop:
                try:
                    await aclient.incr(f"{prefix}:app")
                except Exception as error:  # noqa: BLE001 - collected for the assertion
                    errors.append(f"{type(error).__name__}: {error}")
                await asyncio.sleep(0)

        tasks = [asyncio.create_task(app()) for _ in range(4)]
        await asyncio.sleep(0.05)
        for _ in range(5):
            await saver.delivery.aflush()
            await asyncio.sleep(0.01)
        stop = True
        await asyncio.gather(*tasks)
        return errors

    assert asyncio.run(new_loop()) == []
    assert hook.got == PRUNED
