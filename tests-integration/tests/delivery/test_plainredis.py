"""Durable delivery with plainredis as the inner saver, on every selected Redis kind.

`RedisOutbox.for_saver` reuses the saver's client and tells from the checkpoint's key
whether a batch is committed: inside the claim script on a single server, with one
pipelined EXISTS on a cluster, where the checkpoint lives in its thread's slot. Either
way the drain never reads the checkpoint back through the saver.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from delivery_support import CountingSink, chat_graph
from langchain_core.messages import HumanMessage

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import (
    Delivery,
    RedisDeliveryLedger,
    RedisMemoryWriter,
    RedisOutbox,
    ReducingSaver,
)
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver


class NoReads(RedisSaver):
    """Fails the test if a checkpoint is read back while `forbid` is set."""

    forbid = False

    def get_tuple(self, config: Any) -> Any:
        if self.forbid:
            raise AssertionError(f"the drain read {config} through the saver")
        return super().get_tuple(config)


def reducer(ledger: RedisDeliveryLedger, *hooks: Any) -> MessageReducer:
    config = ReducerConfig(min_messages=4, max_messages=6, on_prune=list(hooks))
    return MessageReducer(config=config, ledger=ledger)


def test_the_commit_check_is_the_checkpoint_key_on_every_kind(
    redis_url: str, any_client: Any, prefix: str
) -> None:
    with NoReads(redis_url, prefix=prefix) as inner:
        ledger = RedisDeliveryLedger.for_saver(inner)
        writer = RedisMemoryWriter(ledger)
        outbox = RedisOutbox.for_saver(inner)
        saver = ReducingSaver(inner, reducer(ledger, writer), outbox=outbox, delivery="manual")
        graph = chat_graph(saver)
        config = {"configurable": {"thread_id": "t"}}
        for i in range(6):
            graph.invoke({"messages": [HumanMessage(f"q{i}", id=f"q{i}")]}, config)
        inner.forbid = True
        now = int(time.time() * 1000)
        claimed = outbox.claim(now=now, lease_until=now, limit=100)
        assert claimed and all(b.committed is True for b in claimed)
        assert saver.drain().delivered == len(claimed)
        inner.forbid = False
        kept = {m.id for m in graph.get_state(config).values["messages"]}
        everything = {f"q{i}" for i in range(6)} | {f"q{i}-ai" for i in range(6)}
        assert set(writer.read(("memories", "t"))) == everything - kept
        assert saver.delivery_stats().backlog == 0
        # Beside the saver's keys, not under them: its tools would count them as orphans.
        assert outbox.keys.prefix == f"{prefix}-reducer"
        assert not any(
            k.startswith(f"{prefix}-reducer".encode())
            for k in any_client.scan_iter(match=f"{prefix}:*")
        )


@pytest.mark.parametrize("aclient", [False, True], ids=["worker-thread", "aclient"])
async def test_async_plainredis_inline_and_background(
    redis_url: str, prefix: str, aclient: bool
) -> None:
    """Without `aclient` the ledger's blocking calls run in worker threads; with the async
    saver's client as `aclient` (cluster kinds too) they are awaited on the loop."""
    sync_inner = RedisSaver(redis_url, prefix=prefix)
    async with AsyncRedisSaver(redis_url, prefix=prefix) as inner:
        await inner.asetup()  # a cluster URL swaps in the cluster client here
        ledger = RedisDeliveryLedger.for_saver(
            sync_inner, aclient=inner.client if aclient else None
        )
        sink = CountingSink(ledger, name="count")
        for mode in ("inline", "background"):
            saver = ReducingSaver(
                inner,
                reducer(ledger, sink),
                outbox=RedisOutbox.for_saver(inner),
                delivery=Delivery(mode, poll_interval=0.05),  # type: ignore[arg-type]
            )
            graph = chat_graph(saver)
            config = {"configurable": {"thread_id": mode}}
            for i in range(7):
                message = HumanMessage(f"q{i}", id=f"{mode}-{i}")
                await graph.ainvoke({"messages": [message]}, config)
            assert saver.delivery is not None
            await saver.delivery.aclose()
            assert (await saver.adelivery_stats()).backlog == 0
            counts = sink.counts(("memories", mode))
            assert counts and set(counts.values()) == {1}
    sync_inner.close()


def test_a_killed_put_that_never_stored_is_discarded_and_its_rerun_delivered(
    redis_url: str, prefix: str
) -> None:
    """Between staging and the plainredis script: the EXISTS says no, the grace expires."""
    with RedisSaver(redis_url, prefix=prefix) as inner:
        ledger = RedisDeliveryLedger.for_saver(inner)
        sink = CountingSink(ledger, name="count")
        saver = ReducingSaver(
            inner,
            reducer(ledger, sink),
            outbox=RedisOutbox.for_saver(inner),
            delivery=Delivery("manual", grace=0),
        )
        assert saver.delivery is not None
        config = {"configurable": {"thread_id": "k"}}
        graph = chat_graph(saver)
        for i in range(5):
            graph.invoke({"messages": [HumanMessage(f"q{i}", id=f"q{i}")]}, config)
        kept = graph.get_state(config).values["messages"]
        # A put that would have pruned the newest two died after staging, before its script.
        orphan = saver.delivery.batch(
            {"configurable": {"thread_id": "k", "checkpoint_ns": ""}},
            "1ef00000-0000-6000-8000-000000000000",
            kept[-2:],
            ("memories", "k"),
        )
        saver.delivery.stage(orphan)
        report = saver.drain()
        assert report.discarded == 1 and report.delivered >= 1
        counts = sink.counts(("memories", "k"))
        assert counts and set(counts.values()) == {1}
        assert not set(counts) & {m.id for m in kept}  # still in the window: not delivered
        stats = saver.delivery_stats()
        assert (stats.backlog, stats.discarded) == (0, 1)


async def test_a_saver_of_the_other_style_gets_an_error_naming_the_fix(
    redis_url: str, prefix: str
) -> None:
    async with AsyncRedisSaver(redis_url, prefix=prefix) as async_inner:
        with pytest.raises(TypeError, match="synchronous"):
            RedisDeliveryLedger.for_saver(async_inner)
        outbox = RedisOutbox.for_saver(async_inner)
        with pytest.raises(TypeError, match="astats"):
            outbox.stats()
        assert (await outbox.astats()).backlog == 0
    with RedisSaver(redis_url, prefix=prefix) as sync_inner:
        with pytest.raises(TypeError, match="use stats"):
            await RedisOutbox.for_saver(sync_inner).astats()
