"""The put path of durable delivery, counted and broken on purpose, on plainredis and PostgreSQL.

- Round trips: a put that prunes costs one round trip more than the same put without
  the outbox (the staging script; acks ride on it), in every mode; a put that prunes
  nothing costs none more and sends nothing to the outbox. Counted on the client.
- A failed inner put delivers nothing; the retry delivers once. Over PostgreSQL both as
  a retried `put` of the same checkpoint and as a graph run again after the failure.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis
from delivery_support import CountingSink, chat_graph
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver

from agentstate_reducer import MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import (
    Delivery,
    RedisDeliveryLedger,
    RedisOutbox,
    ReducingSaver,
)
from agentstate_testkit.savers import RoundTrips, counting_client
from langgraph_checkpoint_plainredis import RedisSaver

PRUNES, KEEPS = 5, 2  # messages in a checkpoint: over the window of 3, and within it


def checkpoint(n: int) -> Any:
    tag = uuid.uuid4().hex[:8]
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [HumanMessage(f"m{i}", id=f"{tag}-{i}") for i in range(n)]}
    cp["channel_versions"] = {"messages": 1}
    return cp


def cfg(thread: str | None = None) -> Any:
    return {"configurable": {"thread_id": thread or uuid.uuid4().hex, "checkpoint_ns": ""}}


def reducer(ledger: RedisDeliveryLedger, *hooks: Any) -> MessageReducer:
    config = ReducerConfig(min_messages=2, max_messages=3, on_prune=list(hooks))
    return MessageReducer(config=config, ledger=ledger)


def put_cost(counter: RoundTrips, put: Callable[..., Any], n: int) -> int:
    with counter.measure():
        put(cfg(), checkpoint(n), {}, {"messages": 1})
    return counter.round_trips


def mentions(counter: RoundTrips, text: str) -> bool:
    """Whether any command of the last measurement names `text` (a key prefix)."""
    needle = text.encode()
    return any(
        needle in (arg if isinstance(arg, bytes) else str(arg).encode())
        for command in counter.commands
        for arg in command
    )


# -- round trips -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["manual", "background", "inline"])
def test_a_put_that_prunes_costs_one_round_trip_more_on_plainredis(
    redis7_url: str, prefix: str, mode: str
) -> None:
    client, counter = counting_client(redis7_url)
    inner = RedisSaver(client=client, prefix=f"{prefix}:cp")
    ledger = RedisDeliveryLedger(client, prefix=f"{prefix}:d")
    outbox = RedisOutbox.for_saver(inner, prefix=f"{prefix}:d")
    sink = CountingSink(ledger, name="sink")
    plain = ReducingSaver(inner, reducer(ledger, sink))
    durable = ReducingSaver(
        inner, reducer(ledger, sink), outbox=outbox, delivery=Delivery(mode, poll_interval=60)
    )
    assert durable.delivery is not None
    for saver in (plain, durable):  # load the scripts once
        saver.put(cfg(), checkpoint(PRUNES), {}, {"messages": 1})
    durable.delivery.flush()

    stored = put_cost(counter, inner.put, PRUNES)
    for _ in range(2):  # the second pruning put carries the first one's ack
        delivering = put_cost(counter, plain.put, PRUNES)
        cost = put_cost(counter, durable.put, PRUNES)
        durable.delivery.flush()
        # manual: the batch is also marked committed once the put returned (one more round
        # trip), so that a prune or delete before the drain loses nothing
        more = 2 if mode == "manual" else 1
        assert cost == (stored if mode != "inline" else delivering) + more, (mode, cost)
    untouched = put_cost(counter, durable.put, KEEPS)
    assert not mentions(counter, f"{prefix}:d")  # neither outbox nor ledger
    assert untouched == put_cost(counter, inner.put, KEEPS)
    durable.delivery.close()
    if mode == "manual":
        assert durable.drain().delivered == 3
    assert durable.delivery_stats().backlog == 0
    client.close()


@pytest.fixture
def pg(pg_url: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        yield saver


@pytest.mark.parametrize("mode", ["manual", "inline"])
def test_a_put_that_prunes_costs_one_round_trip_to_redis_over_postgres(
    pg: PostgresSaver, redis7_url: str, prefix: str, mode: str
) -> None:
    client, counter = counting_client(redis7_url)
    ledger = RedisDeliveryLedger(redis.Redis.from_url(redis7_url), prefix=prefix)
    saver = ReducingSaver(
        pg,
        reducer(ledger, CountingSink(ledger, name="sink")),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=mode,  # type: ignore[arg-type]
    )
    saver.put(cfg(), checkpoint(PRUNES), {}, {"messages": 1})  # load the scripts once
    staged = [put_cost(counter, saver.put, PRUNES) for _ in range(3)]
    assert staged == ([2, 2, 2] if mode == "manual" else [1, 1, 1])  # manual: + the commit mark
    assert put_cost(counter, saver.put, KEEPS) == 0 and counter.commands == []
    if mode == "manual":
        assert saver.drain().delivered == 4
    assert saver.delivery_stats().backlog == 0
    client.close()


# -- a failed put ------------------------------------------------------------------------


class FlakyPostgresSaver(PostgresSaver):
    """Fails the next put that writes the messages channel, before it reaches the database."""

    fail_next = False

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if self.fail_next and "messages" in new_versions:
            self.fail_next = False
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return super().put(config, checkpoint, metadata, new_versions)


@pytest.fixture
def flaky(pg_url: str) -> Iterator[FlakyPostgresSaver]:
    with FlakyPostgresSaver.from_conn_string(pg_url) as saver:
        saver.setup()
        yield saver  # type: ignore[misc]


def test_a_failed_put_over_postgres_delivers_nothing_and_its_retry_once(
    flaky: FlakyPostgresSaver, redis7_url: str, prefix: str
) -> None:
    client = redis.Redis.from_url(redis7_url)
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    sink = CountingSink(ledger, name="sink")
    saver = ReducingSaver(
        flaky,
        reducer(ledger, sink),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("manual", grace=3600),
    )
    config, cp = cfg("t"), checkpoint(PRUNES)
    flaky.fail_next = True
    with pytest.raises(psycopg.OperationalError):
        saver.put(config, cp, {}, {"messages": 1})
    report = saver.drain()
    assert (report.waiting, report.delivered) == (1, 0)  # asked PostgreSQL: not stored
    assert sink.counts(("memories", "t")) == {}
    saver.put(config, cp, {}, {"messages": 1})  # the retry stages the same batch
    assert saver.drain().delivered == 1
    saver.put(config, cp, {}, {"messages": 1})  # cuts what the last put cut: stages nothing
    saver.drain()
    pruned = [m.id for m in cp["channel_values"]["messages"][1:4]]
    assert sink.counts(("memories", "t")) == dict.fromkeys(pruned, 1)
    stats = saver.delivery_stats()
    assert (stats.backlog, stats.staged, stats.discarded) == (0, 1, 0)


def test_a_graph_run_again_after_a_failed_put_delivers_once(
    flaky: FlakyPostgresSaver, redis7_url: str, prefix: str
) -> None:
    client = redis.Redis.from_url(redis7_url)
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    sink = CountingSink(ledger, name="sink")
    saver = ReducingSaver(
        flaky,
        reducer(ledger, sink),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("inline", grace=0, lease=0.2),
    )
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "g"}}
    for i in range(2):
        graph.invoke({"messages": [HumanMessage(f"q{i}", id=f"q{i}")]}, config)
    before = sink.counts(("memories", "g"))
    flaky.fail_next = True
    with pytest.raises(psycopg.OperationalError):
        graph.invoke({"messages": [HumanMessage("q2", id="q2")]}, config)
    assert sink.counts(("memories", "g")) == before  # the failed put delivered nothing
    # The failed put's batch was staged leased to this process; once the lease ends, the
    # next staging reports it due, and the inline drain finds no checkpoint: discarded.
    time.sleep(0.3)
    graph.invoke({"messages": [HumanMessage("q2", id="q2")]}, config)  # the user retries
    counts = sink.counts(("memories", "g"))
    assert counts and set(counts.values()) == {1}
    kept = {m.id for m in graph.get_state(config).values["messages"]}
    everything = {f"q{i}" for i in range(3)} | {f"q{i}-ai" for i in range(3)}
    assert set(counts) == everything - kept
    stats = saver.delivery_stats()
    assert (stats.backlog, stats.discarded) == (0, 1)  # the failed put's batch
