"""`aflush`/`aclose` on a later event loop, with `redis.asyncio` clients of the ended one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import Delivery, RedisDeliveryLedger, RedisOutbox, ReducingSaver

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


def put_and_end_the_loop(saver: Any, aclient: Any = None) -> None:
    """`aput` on a loop that ends while the background task is in the hook; with `aclient`,
    the client is closed on that loop first, as the error advises."""

    async def handler() -> None:
        await saver.aput(cfg("t"), checkpoint_with(list("abcdefgh")), {}, {"messages": 1})
        await asyncio.sleep(0.05)
        if aclient is not None:
            await aclient.aclose()

    asyncio.run(handler())


@pytest.mark.parametrize("how", ["aflush", "aclose"])
def test_a_later_loop_with_an_ended_loops_client_raises_naming_the_fix_and_keeps_the_batch(
    client: redis.Redis, aclient: aioredis.Redis, prefix: str, how: str
) -> None:
    """The first command of the ledger's `redis.asyncio` client on the new loop failed (its
    connection belongs to the ended loop); the reducer only logged the failed lookup, and
    `aflush` returned having delivered nothing, without a word."""
    hook = Stuck()
    saver = saver_on(client, aclient, prefix, hook)
    put_and_end_the_loop(saver)
    hook.stuck = False

    async def flush() -> None:
        await asyncio.wait_for(getattr(saver.delivery, how)(), 5)

    with pytest.raises(RuntimeError, match="event loop that has ended") as raised:
        asyncio.run(flush())
    message = str(raised.value)
    assert "aflush()" in message and "await client.aclose()" in message
    assert hook.got == []
    outbox = RedisOutbox(client, prefix=prefix)
    assert outbox.stats().backlog == 1  # still staged, committed: nothing lost

    # The failed command dropped the stale connection: the next flush delivers the batch.
    asyncio.run(flush())
    assert hook.got == PRUNED
    assert outbox.stats().backlog == 0


def test_a_client_closed_on_its_loop_lets_a_later_loop_deliver(
    client: redis.Redis, aclient: aioredis.Redis, prefix: str
) -> None:
    """The fix the error names: closing the client on the loop that used it."""
    hook = Stuck()
    saver = saver_on(client, aclient, prefix, hook)
    put_and_end_the_loop(saver, aclient)
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
    with pytest.raises(RuntimeError, match=r"RedisOutbox: .*event loop that has ended"):
        asyncio.run(outbox.astats())
    assert asyncio.run(outbox.astats()).backlog == 0
