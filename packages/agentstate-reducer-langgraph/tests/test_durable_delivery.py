"""Durable delivery: `RedisOutbox`, `RedisDeliveryLedger`, `RedisSink` and the saver's modes.

Every test talks to a real server. The storage primitives run on every selected Redis
kind (clusters included); the saver's behaviour runs on one Redis 5, the baseline. The
inner savers are in-process ones: the tests over plainredis and PostgreSQL are in
``tests-integration/tests/delivery``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated, Any, TypedDict

import pytest
import redis
import redis.asyncio as aioredis
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from agentstate_reducer import Background, InMemoryLedger, MessageReducer, ReducerConfig
from agentstate_reducer_langgraph import (
    Delivery,
    DeliveryRunner,
    Outbox,
    RedisDeliveryLedger,
    RedisMemoryWriter,
    RedisOutbox,
    RedisSink,
    ReducingSaver,
    Settlement,
    StagedBatch,
    _outbox,
)
from agentstate_reducer_langgraph._keys import DeliveryKeys, namespace_tag
from agentstate_reducer_langgraph._redis_core import Eval, OutboxCore, resp3_refused
from agentstate_testkit import ServerPool

# -- helpers ---------------------------------------------------------------------------


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def reply(state: State) -> dict[str, Any]:
    last = state["messages"][-1]
    return {"messages": [AIMessage(f"echo: {last.content}", id=f"{last.id}-ai")]}


def chat_graph(checkpointer: Any) -> Any:
    return (
        StateGraph(State)
        .add_node("reply", reply)
        .add_edge(START, "reply")
        .compile(checkpointer=checkpointer)
    )


def turn(graph: Any, thread: str, text: str, config: Any = None) -> None:
    config = config or {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage(text, id=f"{thread}-{text}")]}, config)


class Counter(RedisSink):
    """A transactional hook: counts each message it stores, in its namespace's slot."""

    def commands(self, message: Any, message_id: str, namespace: Any) -> list[tuple[Any, ...]]:
        return [("HINCRBY", self.key("count", namespace), message_id, 1)]

    def counts(self, namespace: Any) -> dict[str, int]:
        raw = self.ledger.client.hgetall(self.key("count", namespace))
        return {k.decode(): int(v) for k, v in raw.items()}


class Plain:
    """A plain hook that records every id it was called with and can fail on purpose."""

    def __init__(self, name: str = "plain", fail: int = 0) -> None:
        self.name = name
        self.fail = fail
        self.calls = 0
        self.got: list[str] = []

    def __call__(self, pruned: list[Any], namespace: Any) -> None:
        self.calls += 1
        if self.fail:
            self.fail -= 1
            raise ConnectionError("memory store down")
        self.got.extend(m.id for m in pruned)


def reducer(ledger: Any, *hooks: Any, window: int = 6, keep: int = 4) -> MessageReducer:
    """A reducer that calls a hook that raised again at the next delivery (no rest): these
    tests retry by the outbox's schedule. The rest has tests of its own (test_hook_rest.py)."""
    config = ReducerConfig(
        min_messages=keep, max_messages=window, on_prune=list(hooks), retry_after=0
    )
    return MessageReducer(config=config, ledger=ledger)


def checkpoint_with(ids: Sequence[str]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": [HumanMessage(f"m {i}", id=i) for i in ids]}
    cp["channel_versions"] = {"messages": 1}
    return cp


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def batch(bid: str = "b1", thread: str = "t", cid: str = "c1") -> StagedBatch:
    return StagedBatch(bid, thread, "", cid, ("msgpack", b"\x90"))


def now_ms() -> int:
    return int(time.time() * 1000)


# -- keys and plans, without a server ---------------------------------------------------


def test_namespace_tags_never_collide_and_keep_braces_out() -> None:
    tags = [
        namespace_tag(("memories", "u1")),
        namespace_tag(["memories", "u1"]),
        namespace_tag("memories:u1"),
        namespace_tag(("memories:u1",)),
        namespace_tag(None),
        namespace_tag(("=null",)),
        namespace_tag(()),
        namespace_tag(("{x}",)),
    ]
    assert tags[0] == tags[1] == "memories:u1"
    assert len(set(tags[1:])) == len(tags) - 1
    assert all("{" not in t and "}" not in t for t in tags)
    keys = DeliveryKeys("app")
    assert keys.ledger(("memories", "u1")) == "app:ledger:{memories:u1}"
    assert keys.due == "app:outbox:{app}:due"
    with pytest.raises(ValueError, match="braces"):
        DeliveryKeys("a{b}")


def test_staging_is_one_script_call_carrying_pending_acks() -> None:
    core = OutboxCore(DeliveryKeys("app"), cluster=False)
    steps = core.stage(batch(), 1, 2, [Settlement("old", "ack")])
    plan = steps.send(None)
    assert len(plan) == 1 and isinstance(plan[0], Eval) and plan[0].script == "stage"
    assert "app:outbox:{app}:b:old" in plan[0].keys
    with pytest.raises(StopIteration) as stop:
        steps.send([3])
    assert stop.value.value == 3


def test_sink_commands_outside_the_namespace_slot_are_refused(client: redis.Redis) -> None:
    class Stray(RedisSink):
        def commands(self, message: Any, message_id: str, namespace: Any) -> Any:
            return [("SET", "elsewhere", message_id)]

    ledger = RedisDeliveryLedger(client, prefix=f"dd:{uuid.uuid4().hex[:8]}")
    with pytest.raises(ValueError, match="outside the hash slot"):
        Stray(ledger, name="stray")([HumanMessage("x", id="1")], ("memories", "u"))


def test_sync_and_async_methods_stay_parallel() -> None:
    for cls in (RedisOutbox, DeliveryRunner, ReducingSaver):
        names = {n for n, _ in inspect.getmembers(cls, callable) if not n.startswith("_")}
        pairs = {n for n in names if f"a{n}" in names}
        for name in ("stage", "claim", "settle", "stats", "drain", "delivery_stats", "close"):
            if name in names:
                assert name in pairs, f"{cls.__name__}.{name} has no a{name}"
    assert isinstance(RedisOutbox(redis.Redis()), Outbox)


# -- the storage primitives, on every selected kind ----------------------------------------


def test_ledger_records_per_hook_and_namespace(any_client: Any, prefix: str) -> None:
    ledger = RedisDeliveryLedger(any_client, prefix=prefix, ttl=60)
    ns = ("memories", "u1")
    assert ledger.seen("h", ns, ["a", "b"]) == set()
    ledger.mark("h", ns, ["a", "b"])
    assert ledger.seen("h", ns, ["a", "b", "c"]) == {"a", "b"}
    assert ledger.seen("other", ns, ["a"]) == set()
    assert ledger.seen("h", ("memories", "u2"), ["a"]) == set()
    assert ledger.seen("h", "memories:u1", ["a"]) == set()
    assert 0 < any_client.pttl(ledger.keys.ledger(ns)) <= 60_000


def test_a_sink_stores_each_message_once_with_its_ledger_entry(
    any_client: Any, prefix: str
) -> None:
    ledger = RedisDeliveryLedger(any_client, prefix=prefix)
    sink = Counter(ledger, name="count")
    ns = ("memories", "u1")
    messages = [HumanMessage("a", id="a"), AIMessage("b", id="b"), HumanMessage("a", id="a")]
    assert sorted(sink(messages, ns)) == ["a", "b"]
    assert sink(messages + [HumanMessage("c", id="c")], ns) == ["c"]
    assert sink.counts(ns) == {"a": 1, "b": 1, "c": 1}
    assert ledger.seen("count", ns, ["a", "b", "c"]) == {"a", "b", "c"}


def test_a_commit_outlives_the_checkpoint_and_no_discard_drops_it(
    any_client: Any, prefix: str
) -> None:
    outbox = RedisOutbox(any_client, prefix=prefix)
    t = now_ms()
    outbox.stage(batch("b1"), now=t, visible_at=t)
    (claimed,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 60_000, limit=10)
    assert claimed.committed is None  # the outbox cannot tell: the drain asks the saver
    outbox.settle([Settlement("b1", "commit")])  # the put returned; applies under any lease
    # The claimer found the checkpoint absent (pruned since): its discard changes nothing
    # but the lease, and the batch is due again, committed.
    outbox.settle([Settlement("b1", "discard", staged_at=claimed.staged_at, lease=claimed.lease)])
    (again,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 1000, limit=10)
    assert (again.id, again.committed) == ("b1", True)
    outbox.settle([Settlement("b1", "ack"), Settlement("b1", "commit")])  # gone: stays gone
    assert not any_client.exists(outbox.keys.batch("b1"))
    assert outbox.stats() == outbox.stats().__class__(staged=1, delivered=1)


def test_outbox_stages_idempotently_leases_and_settles(any_client: Any, prefix: str) -> None:
    outbox = RedisOutbox(any_client, prefix=prefix)
    t = now_ms()
    assert outbox.stage(batch("b1"), now=t, visible_at=t) == 1
    assert outbox.stage(batch("b1"), now=t, visible_at=t) == 1  # a retried put
    outbox.stage(batch("b2", cid="c2"), now=t, visible_at=t + 60_000)  # leased to its stager
    assert outbox.stats().backlog == 2 and outbox.stats().staged == 2

    # A 2.5 s lease: the claim that finds it leased has room for a busy machine.
    (claimed,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 2500, limit=10)
    assert (claimed.id, claimed.checkpoint_id, claimed.committed) == ("b1", "c1", None)
    assert claimed.age is not None and 0 <= claimed.age < 60_000
    assert outbox.claim(now=now_ms(), lease_until=now_ms() + 1000, limit=10) == []  # leased
    time.sleep(2.55)
    (again,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 1000, limit=10)
    assert again.id == "b1"  # lease expired: claimable again

    outbox.settle([Settlement("b1", "retry", failed=True, error="boom", lease=again.lease)])
    (again,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 1, limit=10)
    assert again.failures == 1
    stale = Settlement("b1", "discard", staged_at=again.staged_at - 1, lease=again.lease)
    outbox.settle([stale])  # staged since
    assert outbox.stats().backlog == 2
    outbox.settle([Settlement("b1", "ack"), Settlement("b1", "ack")])
    staged_b2 = int(any_client.hget(outbox.keys.batch("b2"), "s"))
    outbox.settle([Settlement("b2", "discard", staged_at=staged_b2)])
    assert outbox.stats() == outbox.stats().__class__(
        backlog=0, staged=2, delivered=1, failures=1, discarded=1
    )


def test_leases_and_waits_are_the_servers_not_each_deliverers_clock(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deliverer whose clock runs two hours ahead neither takes over a batch still leased
    to its stager, nor discards, as never stored, a batch staged a moment ago: due times,
    leases and ages are kept by the server's clock. A clock two hours behind does not make a
    due batch wait for two hours either."""
    outbox = RedisOutbox(client, prefix=prefix)
    hours = 2 * 3600 * 1000
    t = now_ms()
    outbox.stage(batch("leased"), now=t, visible_at=t + 60_000)
    ahead = now_ms() + hours
    assert outbox.claim(now=ahead, lease_until=ahead + 30_000, limit=10) == []
    outbox.stage(batch("fresh", cid="c2"), now=now_ms(), visible_at=now_ms())
    behind = now_ms() - hours
    (fresh,) = outbox.claim(now=behind, lease_until=behind + 30_000, limit=10)
    assert fresh.id == "fresh" and fresh.age is not None and fresh.age < 60_000
    # A drain from a clock two hours ahead waits for the fresh batch's checkpoint.
    client.zadd(outbox.keys.due, {"fresh": 0})
    runner = DeliveryRunner(
        InMemorySaver(), reducer(RedisDeliveryLedger(client, prefix=prefix), Plain()), outbox,
        Delivery("manual", grace=600),
    )  # fmt: skip
    monkeypatch.setattr(_outbox, "now_ms", lambda: now_ms() + hours)
    report = runner.drain()
    assert (report.claimed, report.waiting, report.discarded) == (1, 1, 0)
    assert outbox.stats().backlog == 2


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_deliverer_past_its_lease_cannot_cut_short_its_successors(
    client: redis.Redis, prefix: str
) -> None:
    """A's lease ran out while its hook ran and B claimed the batch: A's late retry (or
    discard) changes nothing, so no third deliverer claims the batch during B's lease; B's
    own settlements still apply."""
    outbox = RedisOutbox(client, prefix=prefix)
    outbox.stage(batch("b1"), now=now_ms(), visible_at=now_ms())
    (a,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 200, limit=10)
    time.sleep(0.25)
    (b,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 30_000, limit=10)
    assert a.lease and b.lease and a.lease != b.lease
    late = [
        Settlement("b1", "retry", failed=True, error="A's hook", lease=a.lease),
        Settlement("b1", "discard", staged_at=a.staged_at, lease=a.lease),
    ]
    outbox.settle(late)
    assert int(client.zscore(outbox.keys.due, "b1") or 0) - server_ms(client) > 25_000
    assert outbox.claim(now=now_ms(), lease_until=now_ms() + 30_000, limit=10) == []
    assert outbox.stats().failures == 0 and outbox.stats().backlog == 1
    outbox.settle([Settlement("b1", "retry", delay=0, failed=True, error="B's", lease=b.lease)])
    (c,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 30_000, limit=10)
    assert c.failures == 1 and c.lease not in (a.lease, b.lease)


def test_a_stager_past_its_lease_cannot_cut_short_whoever_took_its_batch_over(
    client: redis.Redis, prefix: str
) -> None:
    """A process stages its own batch leased for 0.2 s and delivers it slowly: a drain
    claims it meanwhile, then a retried put stages it again. The stager's late retry changes
    neither's hold."""
    outbox = RedisOutbox(client, prefix=prefix)
    own = replace(batch("b1"), lease="stager")
    outbox.stage(own, now=now_ms(), visible_at=now_ms() + 200)
    time.sleep(0.25)
    (drained,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 30_000, limit=10)
    late = Settlement("b1", "retry", delay=0, failed=True, error="slow", lease="stager")
    outbox.settle([late])
    assert int(client.zscore(outbox.keys.due, "b1") or 0) - server_ms(client) > 25_000
    outbox.settle([Settlement("b1", "retry", delay=0, lease=drained.lease)])  # released
    outbox.stage(replace(own, lease="retried put"), now=now_ms(), visible_at=now_ms() + 30_000)
    outbox.settle([late])
    assert int(client.zscore(outbox.keys.due, "b1") or 0) - server_ms(client) > 25_000
    assert outbox.stats().failures == 0
    outbox.settle([Settlement("b1", "retry", delay=0, failed=True, lease="retried put")])
    assert outbox.stats().failures == 1


def test_a_retried_stage_does_not_bring_forward_a_leased_batch(
    client: redis.Redis, prefix: str
) -> None:
    outbox = RedisOutbox(client, prefix=prefix)
    outbox.stage(batch("b1"), now=now_ms(), visible_at=now_ms())
    (held,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 30_000, limit=10)
    outbox.stage(batch("b1"), now=now_ms(), visible_at=now_ms())  # a retried put, manual mode
    assert outbox.claim(now=now_ms(), lease_until=now_ms() + 30_000, limit=10) == []
    outbox.settle([Settlement("b1", "retry", delay=0, lease=held.lease)])  # still the holder's
    (again,) = outbox.claim(now=now_ms(), lease_until=now_ms() + 30_000, limit=10)
    assert again.id == "b1"


@pytest.mark.parametrize("step_hours", [-1, 1])
def test_a_retry_waits_its_delay_whatever_the_deliverers_clock_does_meanwhile(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch, step_hours: int
) -> None:
    """The wall clock of the deliverer steps by an hour while its hook runs: the retry is
    still due `retry_after` after the failure, by the server's clock."""
    stepped = now_ms() + step_hours * 3600 * 1000
    original = _outbox.now_ms

    def stepping_hook(pruned: list[Any], namespace: Any) -> None:
        monkeypatch.setattr(_outbox, "now_ms", lambda: stepped)

    outbox = RedisOutbox(client, prefix=prefix)
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(ledger, stepping_hook, Plain(fail=1), window=3, keep=2),
        outbox=outbox,
        delivery=Delivery("manual", retry_after=60),
    )
    graph = chat_graph(saver)
    for i in range(3):
        turn(graph, "t", f"q{i}")
    report = saver.drain()
    monkeypatch.setattr(_outbox, "now_ms", original)
    assert report.failed >= 1
    waits = [
        (score - server_ms(client)) / 1000
        for _, score in client.zrange(outbox.keys.due, 0, -1, withscores=True)
    ]
    # 60 s, so a busy machine's seconds between the failure and this read do not matter
    assert waits and all(55 <= w <= 60.5 for w in waits), waits


def test_a_drain_stops_at_its_lease_when_the_wall_clock_steps_back(
    client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first batch outlasts the 1 s lease while the wall clock steps back an hour: the
    drain still stops there, leaving the second batch to whoever claims it next."""
    back = now_ms() - 3600 * 1000

    def slow(pruned: list[Any], namespace: Any) -> None:
        monkeypatch.setattr(_outbox, "now_ms", lambda: back)
        time.sleep(1.2)

    outbox = RedisOutbox(client, prefix=prefix)
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(RedisDeliveryLedger(client, prefix=prefix), slow, Plain(), window=3, keep=2),
        outbox=outbox,
        delivery=Delivery("manual", lease=1),
    )
    graph = chat_graph(saver)
    for i in range(4):
        turn(graph, "t", f"q{i}")
    assert outbox.stats().backlog >= 2
    report = saver.drain()
    assert report.delivered == 1 and outbox.stats().backlog >= 1


def test_drain_over_an_in_process_saver_on_every_kind(any_client: Any, prefix: str) -> None:
    inner = InMemorySaver()
    ledger = RedisDeliveryLedger(any_client, prefix=prefix)
    writer = RedisMemoryWriter(ledger)
    outbox = RedisOutbox(any_client, prefix=prefix)
    saver = ReducingSaver(inner, reducer(ledger, writer), outbox=outbox, delivery="manual")
    graph = chat_graph(saver)
    for i in range(6):
        turn(graph, "t", f"q{i}")
    # The outbox cannot see InMemorySaver's checkpoints; each put marked its batch committed.
    t = now_ms()
    claimed = outbox.claim(now=t, lease_until=t, limit=100)
    assert claimed and all(b.committed is True for b in claimed)
    assert saver.drain().delivered == len(claimed)
    config = {"configurable": {"thread_id": "t"}}
    kept = {m.id for m in graph.get_state(config).values["messages"]}
    stored = writer.read(("memories", "t"))
    everything = {f"t-q{i}" for i in range(6)} | {f"t-q{i}-ai" for i in range(6)}
    assert set(stored) == everything - kept and stored["t-q1"].content == "q1"
    assert saver.delivery_stats().backlog == 0


# -- the saver, on one Redis 5 ------------------------------------------------------------


def test_a_hook_that_fails_twice_then_succeeds_delivers_its_batch_once(
    client: redis.Redis, prefix: str
) -> None:
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    flaky, sink = Plain(fail=2), Counter(ledger, name="count")
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(ledger, sink, flaky, window=3, keep=2),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("manual", retry_after=0),
    )
    saver.put(cfg("t"), checkpoint_with(["a", "b", "c", "d", "e"]), {}, {"messages": 1})
    reports = [saver.drain() for _ in range(4)]
    assert [(r.failed, r.delivered) for r in reports] == [(1, 0), (1, 0), (0, 1), (0, 0)]
    assert flaky.calls == 3 and sorted(flaky.got) == ["b", "c", "d"]  # "a" is preserved first
    assert sink.counts(("memories", "t")) == {"b": 1, "c": 1, "d": 1}
    stats = saver.delivery_stats()
    assert (stats.backlog, stats.failures, stats.delivered) == (0, 2, 1)
    assert saver.delivery is not None and saver.delivery.failures == 2


def test_inline_failures_are_retried_by_a_later_put(client: redis.Redis, prefix: str) -> None:
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    flaky = Plain(fail=1)
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(ledger, flaky, window=3, keep=2),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("inline", retry_after=0),
    )
    saver.put(cfg("t1"), checkpoint_with(["a", "b", "c", "d"]), {}, {"messages": 1})
    assert flaky.got == [] and saver.delivery_stats().backlog == 1
    saver.put(cfg("t2"), checkpoint_with(["e", "f", "g", "h"]), {}, {"messages": 1})
    assert sorted(flaky.got) == ["b", "c", "f", "g"]
    assert saver.delivery_stats().backlog == 0


def test_a_batch_whose_messages_are_in_flight_elsewhere_stays_in_the_outbox(
    client: redis.Redis, prefix: str
) -> None:
    """A drain acked a batch whose messages it skipped because another delivery of this
    process held them (a put retrying them from the reducer's buffer). That delivery then
    failed, so the messages were kept in memory only: after a crash, never delivered."""
    entered, release = threading.Event(), threading.Event()

    class Scripted:
        name = "mem"

        def __init__(self) -> None:
            self.calls = 0

        def __call__(self, pruned: list[Any], namespace: Any) -> None:
            self.calls += 1
            if self.calls == 1:
                raise ConnectionError("memory store down")  # the batch of put A
            if self.calls == 2:  # put B's delivery retries A's messages from the buffer
                entered.set()
                release.wait(5)
                raise ConnectionError("memory store down again")

    ledger = RedisDeliveryLedger(client, prefix=prefix)
    inner = InMemorySaver()
    saver = ReducingSaver(
        inner,
        reducer(ledger, Scripted(), window=3, keep=2),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("inline", retry_after=0),
    )
    saver.put(cfg("A"), checkpoint_with(["s", "h1", "a1", "h2"]), {}, {"messages": 1})
    assert saver.delivery_stats().backlog == 1
    b = checkpoint_with(["s", "h3", "a3", "h4"])
    put_b = threading.Thread(target=saver.put, args=(cfg("B"), b, {}, {"messages": 1}))
    put_b.start()
    try:
        assert entered.wait(5)
        during = saver.drain()  # claims A's batch while h1, a1 are in flight in put B
    finally:
        release.set()
        put_b.join(5)
    assert (during.claimed, during.delivered, during.waiting) == (1, 0, 1)
    # A crash loses the reducer's buffer; a fresh process drains what the outbox holds.
    fresh = ReducingSaver(
        inner,
        reducer(ledger, Plain("mem"), window=3, keep=2),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("manual", retry_after=0),
    )
    for _ in range(5):
        fresh.drain()
    assert ledger.seen("mem", ("memories", "A"), ["h1", "a1"]) == {"h1", "a1"}
    assert fresh.delivery_stats().backlog == 0


def test_a_failed_put_delivers_nothing_and_its_retry_delivers_once(
    client: redis.Redis, prefix: str
) -> None:
    class Flaky(InMemorySaver):
        fail = 1

        def put(self, *args: Any) -> Any:
            if self.fail:
                self.fail -= 1
                raise ConnectionError("store down")
            return super().put(*args)

    ledger = RedisDeliveryLedger(client, prefix=prefix)
    hook = Plain()
    saver = ReducingSaver(
        Flaky(),
        reducer(ledger, hook, window=3, keep=2),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("manual", grace=3600),
    )
    cp = checkpoint_with(["a", "b", "c", "d", "e"])
    with pytest.raises(ConnectionError):
        saver.put(cfg("t"), cp, {}, {"messages": 1})
    assert saver.drain().waiting == 1 and hook.got == []  # not stored: not delivered
    saver.put(cfg("t"), cp, {}, {"messages": 1})  # the retry stages the same batch
    assert saver.delivery_stats().staged == 1
    assert saver.drain(limit=10).delivered == 1
    saver.put(cfg("t"), cp, {}, {"messages": 1})
    saver.drain()
    assert sorted(hook.got) == ["b", "c", "d"]


def test_a_batch_whose_checkpoint_never_appears_is_discarded_after_the_grace(
    client: redis.Redis, prefix: str
) -> None:
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    hook = Plain()
    inner = InMemorySaver()
    runner = DeliveryRunner(
        inner,
        reducer(ledger, hook),
        RedisOutbox(client, prefix=prefix),
        Delivery("manual", grace=0),
    )
    staged = runner.batch(cfg("t"), "never-stored", [HumanMessage("x", id="x")], ("m", "t"))
    runner.stage(staged)  # the process died before its put
    assert runner.drain().discarded == 1 and hook.got == []
    assert runner.stats().backlog == 0
    # Only slow: the commit after its put makes it due again, after a lease when its stager
    # delivers it from memory (no other deliverer takes it meanwhile), at once otherwise.
    outbox = runner.outbox
    outbox.settle([Settlement(staged.id, "commit", delay=60_000)])
    stats = runner.stats()
    assert (stats.backlog, stats.discarded) == (1, 0)
    assert runner.drain().claimed == 0  # leased to the stager's delivery from memory
    runner.stage(staged)  # a retried put stages it anew, and a commit then marks it
    outbox.settle([Settlement(staged.id, "commit")])
    assert runner.drain().delivered == 1 and hook.got == ["x"]


# What the puts of turns q0-q4 of `chat_graph` (window 6, keep 4) prune: at step 9 (turn
# q3's input, 7 messages) and at step 13 (turn q4's reply: the window then, and the reply).
PRUNED_BY_Q4 = ["t-q0-ai", "t-q1", "t-q1-ai", "t-q2", "t-q2-ai", "t-q3", "t-q3-ai"]


class DrainsFirst(InMemorySaver):
    """A put that takes longer than `grace`: a drain runs (through `outer`) before each put
    of a step that prunes stores its checkpoint."""

    outer: ReducingSaver | None = None
    drained: list[Any]

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if self.outer is not None:
            self.drained.append(self.outer.drain())
        return super().put(config, checkpoint, metadata, new_versions)


def test_a_put_slower_than_the_grace_still_has_its_batch_delivered(
    client: redis.Redis, prefix: str
) -> None:
    """A drain that met a batch whose put had not returned within `grace` deleted it; the
    commit after the put found nothing, and the process, which took those messages as
    pruned, staged them no more: lost (found by review). The discard now keeps the batch,
    marked, and the commit makes it due again: each pruned message arrives once."""
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    hook, inner = Plain(), DrainsFirst()
    inner.drained = []
    saver = ReducingSaver(
        inner,
        reducer(ledger, hook),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("manual", grace=0),
    )
    inner.outer = saver
    graph = chat_graph(saver)
    for i in range(5):
        turn(graph, "t", f"q{i}")
    inner.drained.append(saver.drain())
    assert sum(report.discarded for report in inner.drained) == 2  # during the pruning puts
    assert sum(report.delivered for report in inner.drained) == 2  # by the drains after
    assert sorted(hook.got) == PRUNED_BY_Q4  # once each
    window = graph.get_state({"configurable": {"thread_id": "t"}}).values["messages"]
    assert [m.id for m in window] == ["t-q0", "t-q4", "t-q4-ai"]
    stats = saver.delivery_stats()
    assert (stats.backlog, stats.discarded, stats.delivered) == (0, 0, 2)


def forget(saver: ReducingSaver, thread: str, how: str) -> None:
    """Removes what `thread` stored: every checkpoint but its latest, or the whole thread."""
    if how == "prune":
        saver.prune([thread], strategy="keep_latest")
    else:
        saver.delete_thread(thread)


async def aforget(saver: ReducingSaver, thread: str, how: str) -> None:
    if how == "prune":
        await saver.aprune([thread], strategy="keep_latest")
    else:
        await saver.adelete_thread(thread)


class FailsOnce(InMemorySaver):
    """Fails the put (and aput) of step `fail_step`; prunes as plainredis and PostgreSQL
    do (InMemorySaver has no `prune`)."""

    fail_step: int | None = None

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        for thread in thread_ids:
            for ns, stored in self.storage[thread].items():
                latest = max(stored, default=None) if strategy == "keep_latest" else None
                for checkpoint_id in [c for c in stored if c != latest]:
                    del stored[checkpoint_id]
                    self.writes.pop((thread, ns, checkpoint_id), None)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if metadata.get("step") == self.fail_step:
            self.fail_step = None
            raise ConnectionError("store down")
        return super().put(config, checkpoint, metadata, new_versions)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return self.put(config, checkpoint, metadata, new_versions)


def failing_manual(ledger_client: Any, outbox_client: Any, prefix: str) -> Any:
    """A manual-delivery saver over a `FailsOnce`, with its inner saver and its one hook; a
    batch not known stored is dropped at once (grace 0)."""
    ledger = RedisDeliveryLedger(ledger_client, prefix=prefix)
    hook, inner = Plain(), FailsOnce()
    saver = ReducingSaver(
        inner,
        reducer(ledger, hook),
        outbox=RedisOutbox(outbox_client, prefix=prefix),
        delivery=Delivery("manual", grace=0),
    )
    return saver, inner, hook


@pytest.mark.parametrize("how", ["prune", "delete"])
def test_manual_delivery_keeps_what_a_prune_or_delete_removed_before_the_drain(
    client: redis.Redis, prefix: str, how: str
) -> None:
    """The docs say to prune after each turn: a drain running later must still deliver the
    batches of stored checkpoints gone since, once each; a failed put's batch is dropped."""
    saver, inner, hook = failing_manual(client, client, prefix)
    graph = chat_graph(saver)
    for i in range(6):
        turn(graph, "t", f"q{i}")  # two of these puts prune (steps 9 and 13)
    inner.fail_step = 19  # the last put of the next turn prunes, stages and fails
    with pytest.raises(ConnectionError):
        turn(graph, "t", "q6")
    assert saver.delivery_stats().backlog == 3
    forget(saver, "t", how)
    report = saver.drain()
    assert (report.delivered, report.discarded) == (2, 1)
    assert sorted(hook.got) == PRUNED_BY_Q4  # once each
    assert saver.drain().claimed == 0 and saver.delivery_stats().backlog == 0


@pytest.mark.parametrize("how", ["prune", "delete"])
async def test_manual_adelivery_keeps_what_a_prune_or_delete_removed_before_the_drain(
    server_url: str, prefix: str, how: str
) -> None:
    sync_client = redis.Redis.from_url(server_url, protocol=2)
    async_client = aioredis.Redis.from_url(server_url, protocol=2)
    saver, inner, hook = failing_manual(sync_client, async_client, prefix)
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "t"}}
    inner.fail_step = 19  # the last put of turn q6 prunes, stages and fails
    for i in range(7):
        with pytest.raises(ConnectionError) if i == 6 else contextlib.nullcontext():
            await graph.ainvoke({"messages": [HumanMessage(f"q{i}", id=f"t-q{i}")]}, config)
    assert (await saver.adelivery_stats()).backlog == 3
    await aforget(saver, "t", how)
    report = await saver.adrain()
    assert (report.delivered, report.discarded) == (2, 1)
    assert sorted(hook.got) == PRUNED_BY_Q4
    assert (await saver.adrain()).claimed == 0
    assert (await saver.adelivery_stats()).backlog == 0
    await async_client.aclose()
    sync_client.close()


def test_a_fresh_process_delivers_what_a_crashed_one_staged_and_forks_add_nothing(
    client: redis.Redis, prefix: str
) -> None:
    inner = InMemorySaver()
    outbox = RedisOutbox(client, prefix=prefix)

    def process(*hooks: Any) -> ReducingSaver:
        ledger = RedisDeliveryLedger(client, prefix=prefix)  # fresh in-memory state
        return ReducingSaver(inner, reducer(ledger, *hooks), outbox=outbox, delivery="manual")

    first = chat_graph(process(Plain()))
    for i in range(6):
        turn(first, "t", f"q{i}")  # staged, never drained: the process "crashes"
    old = list(first.get_state_history({"configurable": {"thread_id": "t"}}))[-4].config

    hook = Plain()
    second = process(hook)
    second.drain()
    delivered = sorted(hook.got)
    assert delivered and len(delivered) == len(set(delivered))
    fork = chat_graph(second)
    turn(fork, "t", "q0-fork", old)
    turn(fork, "t", "q1-fork")
    turn(fork, "t", "q2-fork")
    second.drain()
    repeated = [i for i in hook.got if hook.got.count(i) > 1]
    assert repeated == [] and set(delivered) < set(hook.got)


def eight_turns_in_background(
    client: redis.Redis, prefix: str, ledger: RedisDeliveryLedger, hook: Any, made: Any = None
) -> ReducingSaver:
    """A saver delivering to `hook` on its background thread (handed to `made` first), after
    eight turns of "t"."""
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(ledger, hook),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("background", poll_interval=0.05),
    )
    if made is not None:
        made(saver)
    graph = chat_graph(saver)
    for i in range(8):
        turn(graph, "t", f"q{i}")
    return saver


def test_background_mode_delivers_off_the_put_and_close_flushes(
    client: redis.Redis, prefix: str
) -> None:
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    sink = Counter(ledger, name="count")
    saver = eight_turns_in_background(client, prefix, ledger, sink)
    assert saver.delivery is not None
    saver.delivery.close()
    counts = sink.counts(("memories", "t"))
    assert counts and set(counts.values()) == {1}
    assert saver.delivery_stats().backlog == 0


def test_a_hook_closing_the_background_delivery_does_not_join_itself(
    client: redis.Redis, prefix: str
) -> None:
    """A hook on the background thread that closed the delivery (a shutdown handler, say)
    raised "cannot join current thread": its batch failed, to be retried."""
    errors: list[BaseException] = []
    got: list[str] = []
    savers: list[ReducingSaver] = []

    def close_once(pruned: list[Any], namespace: Any) -> None:
        delivery = savers[0].delivery
        if not got and delivery is not None:
            try:
                delivery.close()
            except RuntimeError as error:
                errors.append(error)
        got.extend(m.id for m in pruned)

    ledger = RedisDeliveryLedger(client, prefix=prefix)
    saver = eight_turns_in_background(client, prefix, ledger, close_once, savers.append)
    assert saver.delivery is not None
    saver.delivery.close()
    assert errors == [] and got and len(got) == len(set(got))
    assert saver.delivery_stats().backlog == 0


async def seven_async_turns(saver: ReducingSaver, thread: str) -> None:
    """Seven `ainvoke` turns on `thread`, then the delivery closed with nothing left."""
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": thread}}
    for i in range(7):
        await graph.ainvoke({"messages": [HumanMessage(f"q{i}", id=f"{thread}{i}")]}, config)
    assert saver.delivery is not None
    await saver.delivery.aclose()
    assert (await saver.adelivery_stats()).backlog == 0


async def test_asyncio_inline_and_background(server_url: str, prefix: str) -> None:
    sync_client = redis.Redis.from_url(server_url, protocol=2)
    async_client = aioredis.Redis.from_url(server_url, protocol=2)
    ledger = RedisDeliveryLedger(sync_client, prefix=prefix)  # the ledger protocol is sync
    sink = Counter(ledger, name="count")
    seen: list[str] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        await asyncio.sleep(0)
        seen.extend(m.id for m in pruned)

    for mode in ("inline", "background"):
        saver = ReducingSaver(
            InMemorySaver(),
            reducer(ledger, sink, remember),
            outbox=RedisOutbox(async_client, prefix=prefix),
            delivery=Delivery(mode, poll_interval=0.05),  # type: ignore[arg-type]
        )
        await seven_async_turns(saver, mode)
        assert (await saver.adrain()).claimed == 0
        counts = sink.counts(("memories", mode))
        assert counts and set(counts.values()) == {1}
    assert seen and len(seen) == len(set(seen))
    await async_client.aclose()
    sync_client.close()


def unreachable_client(protocol: int = 2) -> redis.Redis:
    """A blocking client whose server does not exist: any command through it fails."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return redis.Redis(port=port, protocol=protocol, socket_connect_timeout=0.2, retry=None)


async def test_under_asyncio_the_ledger_and_sinks_never_use_the_blocking_client(
    server_url: str, client: redis.Redis, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With `aclient`, `ainvoke` delivers exactly once without a single blocking command:
    the ledger's blocking client points at a port where nothing listens."""
    async_client = aioredis.Redis.from_url(server_url, protocol=2)
    ledger = RedisDeliveryLedger(unreachable_client(), aclient=async_client, prefix=prefix)
    sink, writer = Counter(ledger, name="count"), RedisMemoryWriter(ledger)
    caplog.set_level("WARNING")
    for mode in ("inline", "background"):
        saver = ReducingSaver(
            InMemorySaver(),
            reducer(ledger, sink, writer),
            outbox=RedisOutbox(async_client, prefix=prefix),
            delivery=Delivery(mode, poll_interval=0.05),  # type: ignore[arg-type]
        )
        await seven_async_turns(saver, mode)
        raw = client.hgetall(sink.key("count", ("memories", mode)))
        assert raw and {int(v) for v in raw.values()} == {1}
        stored = await writer.aread(("memories", mode))
        assert set(stored) == {k.decode() for k in raw}
    assert [r.getMessage() for r in caplog.records] == []
    with pytest.raises(redis.ConnectionError):
        ledger.seen("count", ("memories", "inline"), ["inline0"])  # the blocking side is dead
    await async_client.aclose()


async def test_without_aclient_the_ledger_leaves_the_loop_for_its_blocking_calls(
    client: redis.Redis, prefix: str
) -> None:
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    threads: list[str] = []
    seen, mark = ledger.seen, ledger.mark

    def spy(call: Any) -> Any:
        def wrapped(*args: Any) -> Any:
            threads.append(threading.current_thread().name)
            return call(*args)

        return wrapped

    ledger.seen, ledger.mark = spy(seen), spy(mark)  # type: ignore[method-assign]
    await ledger.amark("hook", "ns", ["a", "b"])
    assert await ledger.aseen("hook", "ns", ["a", "c"]) == {"a"}
    assert len(threads) == 2 and threading.current_thread().name not in threads


def test_an_aclient_must_be_an_asyncio_client(client: redis.Redis) -> None:
    with pytest.raises(TypeError, match=r"redis\.asyncio"):
        RedisDeliveryLedger(client, aclient=client)
    with pytest.raises(TypeError, match="aclient"):
        RedisMemoryWriter(RedisDeliveryLedger(client)).aread("ns").send(None)


def test_langchain_messages_round_trip_through_the_outbox(client: redis.Redis, prefix: str) -> None:
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    writer = RedisMemoryWriter(ledger)
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(ledger, writer, window=3, keep=1),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery="manual",
    )
    call = {"name": "search", "args": {"q": "x"}, "id": "call-1", "type": "tool_call"}
    cp = empty_checkpoint()
    cp["channel_values"] = {
        "messages": [
            HumanMessage("hi", id="h1"),
            AIMessage("", id="a1", tool_calls=[call]),
            ToolMessage("found", tool_call_id="call-1", id="t1"),
            AIMessage("done", id="a2"),
            HumanMessage("next", id="h2"),
        ]
    }
    cp["channel_versions"] = {"messages": 1}
    saver.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": "", "memory_namespace": ["u", "7"]}},
        cp,
        {},
        {"messages": 1},
    )
    saver.drain()
    stored = writer.read(("u", "7"))
    assert stored["a1"].tool_calls[0]["id"] == "call-1"
    assert isinstance(stored["t1"], ToolMessage) and stored["t1"].tool_call_id == "call-1"


class Tagged(HumanMessage):
    """A message type of the graph's own: strict msgpack revives it only when allowlisted."""

    tag: str = ""


class Other(HumanMessage):
    """The message type of another graph compiled on the same saver."""

    kind: str = ""


def strict_inner() -> InMemorySaver:
    """A saver whose serializer is as strict as with ``LANGGRAPH_STRICT_MSGPACK=true``."""
    return InMemorySaver(serde=JsonPlusSerializer(allowed_msgpack_modules=None))


def strict_saver(
    client: redis.Redis,
    prefix: str,
    hook: Any,
    mode: str,
    inner: Any = None,
    outbox_client: Any = None,
    **options: Any,
) -> ReducingSaver:
    """Over `inner`, a new `strict_inner()` by default."""
    return ReducingSaver(
        inner if inner is not None else strict_inner(),
        reducer(RedisDeliveryLedger(client, prefix=prefix), hook, window=3, keep=2),
        outbox=RedisOutbox(outbox_client or client, prefix=prefix),
        delivery=Delivery(mode, poll_interval=0.05, **options),  # type: ignore[arg-type]
    )


def checkpoint_of(messages: list[Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": messages}
    cp["channel_versions"] = {"messages": 1}
    return cp


def tagged_checkpoint() -> Any:
    return checkpoint_of([Tagged(content=f"m{i}", id=f"m{i}", tag="x") for i in range(5)])


def other_checkpoint() -> Any:
    return checkpoint_of([Other(content=f"o{i}", id=f"o{i}", kind="y") for i in range(5)])


TAGGED = [(Tagged.__module__, "Tagged")]
OTHER = [(Other.__module__, "Other")]


def test_an_allowlisted_clone_decodes_its_staged_batches_with_the_allowlist(
    client: redis.Redis, prefix: str
) -> None:
    """`with_allowlist` (LangGraph calls it when it compiles a graph under strict msgpack)
    gave the clone the original's delivery, which decoded staged batches with the serializer
    that has no allowlist: the hook got the graph's own message types as plain dicts, and
    the ledger recorded them delivered."""
    got: list[Any] = []
    saver = strict_saver(client, prefix, lambda pruned, namespace: got.extend(pruned), "manual")
    clone = saver.with_allowlist([(Tagged.__module__, "Tagged")])
    assert clone is not saver and clone.delivery is not None
    clone.put(cfg("t"), tagged_checkpoint(), {}, {"messages": 1})
    assert clone.drain().delivered == 1
    assert [type(m) for m in got] == [Tagged, Tagged, Tagged] and got[0].tag == "x"
    # One delivery state for the saver and its clones: counters, acks, background worker.
    assert saver.delivery is not None and saver.delivery.delivered == 1


def test_closing_the_saver_flushes_what_its_allowlisted_clone_delivers_in_background(
    client: redis.Redis, prefix: str
) -> None:
    got: list[Any] = []
    saver = strict_saver(client, prefix, lambda pruned, namespace: got.extend(pruned), "background")
    clone = saver.with_allowlist([(Tagged.__module__, "Tagged")])
    clone.put(cfg("t"), tagged_checkpoint(), {}, {"messages": 1})
    assert saver.delivery is not None
    saver.delivery.close()  # what the README says to call: the clone's worker is the saver's
    assert [m.id for m in got] == ["m1", "m2", "m3"]
    assert saver.delivery_stats().backlog == 0


def test_the_saver_the_app_holds_drains_its_clones_batches_with_their_allowlist(
    client: redis.Redis, prefix: str
) -> None:
    """Manual mode: the compiled graph holds the clone and stages, the app drains through
    the saver it built, as the README says; that drain decoded with the serializer without
    the allowlist: the hook got plain dicts, recorded delivered."""
    got: list[Any] = []
    saver = strict_saver(client, prefix, lambda pruned, namespace: got.extend(pruned), "manual")
    clone = saver.with_allowlist(TAGGED)
    clone.put(cfg("t"), tagged_checkpoint(), {}, {"messages": 1})
    assert saver.drain().delivered == 1
    assert [type(m) for m in got] == [Tagged, Tagged, Tagged] and got[0].tag == "x"


def test_two_graphs_clones_drain_each_others_batches(client: redis.Redis, prefix: str) -> None:
    """Two graphs compiled on one saver make two clones with different allowlists and one
    outbox: either drains the other's batches, and decoded them with its own allowlist."""
    got: list[Any] = []
    saver = strict_saver(client, prefix, lambda pruned, namespace: got.extend(pruned), "manual")
    a = saver.with_allowlist(TAGGED)
    b = saver.with_allowlist(OTHER)
    b.put(cfg("tb"), other_checkpoint(), {}, {"messages": 1})
    assert a.drain().delivered == 1
    assert [type(m) for m in got] == [Other, Other, Other] and got[0].kind == "y"
    a.put(cfg("ta"), tagged_checkpoint(), {}, {"messages": 1})
    assert b.drain().delivered == 1
    assert [type(m) for m in got[3:]] == [Tagged, Tagged, Tagged]


def test_a_batch_holding_a_type_no_clone_allows_stays_in_the_outbox(
    client: redis.Redis, prefix: str
) -> None:
    """Another process (its own graph, over the same stores) staged a batch of a type no
    graph of this one allows: the serializer gave its fields as dicts, which the hook got and
    the ledger recorded delivered. It is now kept for retry, and delivered once a graph that
    allows the type is compiled here."""
    got: list[Any] = []
    inner = strict_inner()
    elsewhere = strict_saver(client, prefix, lambda pruned, namespace: None, "manual", inner)
    elsewhere.with_allowlist(OTHER).put(cfg("tb"), other_checkpoint(), {}, {"messages": 1})
    saver = strict_saver(
        client, prefix, lambda pruned, ns: got.extend(pruned), "manual", inner, retry_after=0
    )
    a = saver.with_allowlist(TAGGED)
    report = a.drain()
    assert (report.claimed, report.delivered, report.failed) == (1, 0, 1)
    assert got == [] and saver.delivery_stats().backlog == 1
    saver.with_allowlist(OTHER)  # a second graph compiled on the saver
    assert a.drain().delivered == 1
    assert [type(m) for m in got] == [Other, Other, Other]
    assert saver.delivery_stats().backlog == 0


def test_the_background_worker_decodes_with_every_clones_allowlist(
    client: redis.Redis, prefix: str
) -> None:
    """The one background worker drains through the runner that made it (here graph A's
    clone), and decoded with that runner's allowlist what graph B's clone allows."""
    got: list[Any] = []
    inner = strict_inner()
    saver = strict_saver(
        client, prefix, lambda pruned, namespace: got.extend(pruned), "background", inner
    )
    a = saver.with_allowlist(TAGGED)
    saver.with_allowlist(OTHER)  # graph B, whose turns run in another process too
    a.put(cfg("ta"), tagged_checkpoint(), {}, {"messages": 1})  # makes the worker
    assert saver.delivery is not None and saver.delivery.flush(10)
    elsewhere = strict_saver(client, prefix, lambda pruned, namespace: None, "manual", inner)
    elsewhere.with_allowlist(OTHER).put(cfg("tb"), other_checkpoint(), {}, {"messages": 1})
    deadline = time.monotonic() + 20
    while len(got) < 6 and time.monotonic() < deadline:
        time.sleep(0.05)
    saver.delivery.close()
    assert [type(m) for m in got] == [Tagged] * 3 + [Other] * 3
    assert saver.delivery_stats().backlog == 0


async def test_adrain_decodes_every_clones_batches(
    client: redis.Redis, server_url: str, prefix: str
) -> None:
    got: list[Any] = []
    aclient = aioredis.Redis.from_url(server_url, protocol=2)
    saver = strict_saver(
        client, prefix, lambda pruned, ns: got.extend(pruned), "manual", outbox_client=aclient
    )
    a = saver.with_allowlist(TAGGED)
    b = saver.with_allowlist(OTHER)
    await a.aput(cfg("ta"), tagged_checkpoint(), {}, {"messages": 1})
    await b.aput(cfg("tb"), other_checkpoint(), {}, {"messages": 1})
    assert (await saver.adrain()).delivered == 2
    assert sorted(type(m).__name__ for m in got) == ["Other"] * 3 + ["Tagged"] * 3
    await aclient.aclose()


def test_async_clients_are_refused_where_a_blocking_one_is_needed(
    server_url: str, prefix: str
) -> None:
    aclient = aioredis.Redis.from_url(server_url)
    with pytest.raises(TypeError, match="synchronous"):
        RedisDeliveryLedger(aclient)
    with pytest.raises(TypeError, match="astage"):
        RedisOutbox(aclient, prefix=prefix).stage(batch(), now=0, visible_at=0)
    with pytest.raises(ValueError, match="decode_responses"):
        RedisOutbox(redis.Redis.from_url(server_url, decode_responses=True))
    with pytest.raises(TypeError, match="plainredis"):
        RedisOutbox.for_saver(InMemorySaver())


async def test_the_wrong_side_of_an_outbox_names_the_savers_own_twin(
    server_url: str, prefix: str
) -> None:
    """`saver.drain()` over an outbox with an asyncio client (and the reverse) named the
    outbox's internal methods (`aclaim()`, `astats()`); it names the saver's twin."""
    aclient = aioredis.Redis.from_url(server_url, protocol=2)
    blocking = redis.Redis.from_url(server_url, protocol=2)
    r = reducer(RedisDeliveryLedger(blocking, aclient=aclient, prefix=prefix))
    on_async = ReducingSaver(InMemorySaver(), r, outbox=RedisOutbox(aclient, prefix=prefix))
    with pytest.raises(TypeError, match=r"blocking client.*call await saver\.adrain\(\) inst"):
        on_async.drain()
    with pytest.raises(TypeError, match=r"call await saver\.adelivery_stats\(\) instead"):
        on_async.delivery_stats()
    assert (await on_async.adelivery_stats()).backlog == 0
    on_blocking = ReducingSaver(InMemorySaver(), r, outbox=RedisOutbox(blocking, prefix=prefix))
    with pytest.raises(TypeError, match=r"asyncio client.*call saver\.drain\(\) instead"):
        await on_blocking.adrain()
    with pytest.raises(TypeError, match=r"call saver\.delivery_stats\(\) instead"):
        await on_blocking.adelivery_stats()
    assert on_blocking.delivery_stats().backlog == 0
    # A graph run on the other side failed only at its first put that pruned, naming the
    # outbox's internal stage()/astage(); it fails at its first put, naming what to run.
    with pytest.raises(
        TypeError,
        match=r"^ReducingSaver\.put\(\) needs an outbox with a blocking client, but its "
        r"RedisOutbox has redis\.asyncio\.client\.Redis: run the graph with ainvoke/astream, "
        r"or build the outbox with a blocking client",
    ):
        turn(chat_graph(on_async), "wrong-side", "hi")
    with pytest.raises(
        TypeError,
        match=r"^ReducingSaver\.aput\(\) needs an outbox with a redis\.asyncio client, .*"
        r"run the graph with invoke/stream, or build the outbox with an asyncio client",
    ):
        await chat_graph(on_blocking).ainvoke(
            {"messages": [HumanMessage("hi", id="h")]}, {"configurable": {"thread_id": "w2"}}
        )
    assert on_async.get_tuple({"configurable": {"thread_id": "wrong-side"}}) is None
    await aclient.aclose()
    blocking.close()


def test_a_ledger_for_an_async_saver_says_how_to_build_it(server_url: str) -> None:
    """`RedisDeliveryLedger.for_saver(AsyncRedisSaver(...))` said to pass a blocking client,
    without saying how for that saver."""
    plainredis = pytest.importorskip("langgraph_checkpoint_plainredis")
    saver = plainredis.AsyncRedisSaver(server_url)
    with pytest.raises(TypeError, match=r"needs a blocking RedisSaver.*aclient=saver\.client"):
        RedisDeliveryLedger.for_saver(saver)


def test_misconfigurations_say_what_to_do(client: redis.Redis, prefix: str) -> None:
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    outbox = RedisOutbox(client, prefix=prefix)
    with pytest.raises(ValueError, match="needs an outbox"):
        ReducingSaver(InMemorySaver(), reducer(ledger), delivery="background")
    for lease in (0, 0.0004):  # leases are whole milliseconds
        with pytest.raises(ValueError, match=rf"Delivery\(lease={lease}\) must be at least 0.001"):
            Delivery("manual", lease=lease)
    with pytest.raises(ValueError, match="delivery='background'"):
        ReducingSaver(InMemorySaver(), reducer(ledger, Background(Plain())), outbox=outbox)
    no_dedupe = MessageReducer(config=ReducerConfig(dedupe_on_prune=False), ledger=ledger)
    with pytest.raises(ValueError, match="dedupe_on_prune=True"):
        ReducingSaver(InMemorySaver(), no_dedupe, outbox=outbox)
    with pytest.raises(ValueError, match=r"dedupe_on_prune=True\), got False"):
        ReducingSaver(InMemorySaver(), no_dedupe)  # each put of a run cut them again
    other = RedisDeliveryLedger(client, prefix=f"{prefix}-other")
    with pytest.raises(ValueError, match="reducer's ledger"):
        ReducingSaver(InMemorySaver(), reducer(ledger, Counter(other, name="c")))
    with pytest.raises(ValueError, match="name= of its own"):
        ReducingSaver(
            InMemorySaver(), reducer(ledger, Counter(ledger, name="c"), Counter(ledger, name="c"))
        )
    with pytest.warns(UserWarning, match="InMemoryLedger") as caught:
        ReducingSaver(InMemorySaver(), reducer(InMemoryLedger()), outbox=outbox)
    # it points at the line building the saver (it named the line calling this function)
    assert caught[0].filename == __file__
    assert caught[0].lineno == sys._getframe().f_lineno - 3
    with pytest.raises(ValueError, match="mode"):
        Delivery("sometimes")  # type: ignore[arg-type]

    class ReducesItself(InMemorySaver):
        reducer = None

    inner = ReducesItself()
    with pytest.raises(ValueError, match="reduces itself"):
        ReducingSaver(inner, reducer(ledger), outbox=outbox)
    assert inner.reducer is None  # refused before the wrapper handed it the reducer
    with pytest.raises(ValueError, match="outbox"):
        ReducingSaver(InMemorySaver(), reducer(ledger)).drain()


@pytest.mark.parametrize(
    "name", ["lease", "grace", "retry_after", "max_retry_after", "poll_interval"]
)
@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.inf, "must be a finite number of seconds >= 0"),
        (math.nan, "must be a finite number of seconds >= 0"),
        (-1, "must be a finite number of seconds >= 0"),
        (1e17, r"is more than 1,000,000,000 seconds \(about 31 years\)"),
        ("30", "must be a number of seconds \\(int or float\\), got str"),
        (True, "must be a number of seconds \\(int or float\\), got bool"),
    ],
    ids=["inf", "nan", "negative", "1e17", "str", "bool"],
)
def test_a_delivery_timing_that_is_not_a_finite_number_of_seconds_is_refused(
    name: str, value: Any, message: str
) -> None:
    """`Delivery(lease=inf)` and `Delivery(lease=nan)` were taken (`value < 0` let them
    through); every put that pruned then failed with a bare OverflowError or ValueError
    ("cannot convert float infinity to integer") naming neither Delivery nor the field."""
    with pytest.raises(
        ValueError,
        match=rf"^Delivery\({name}={re.escape(repr(value))}\) {message}.*pass e\.g\. {name}=",
    ):
        Delivery("manual", **{name: value})
    assert getattr(Delivery("manual", **{name: 10**9}), name) == 10**9  # the longest taken


@pytest.mark.parametrize("value", [0, 0.0, 0.009])
def test_a_poll_interval_under_ten_milliseconds_is_refused(value: float) -> None:
    """`Delivery(poll_interval=0)` was taken: the background worker then polled the outbox
    some 20,000 times a second while there was nothing to deliver."""
    with pytest.raises(
        ValueError,
        match=rf"^Delivery\(poll_interval={value!r}\) must be at least 0\.01 seconds: .*"
        r"pass e\.g\. poll_interval=1\.0$",
    ):
        Delivery("background", poll_interval=value)
    assert Delivery("background", poll_interval=0.01).poll_interval == 0.01


@pytest.mark.parametrize(
    ("ttl", "error", "message"),
    [
        (math.inf, ValueError, r"ttl=inf\) is not a positive number of seconds"),
        (math.nan, ValueError, r"ttl=nan\) is not a positive number of seconds"),
        (0, ValueError, r"ttl=0\) is not a positive number of seconds"),
        (
            "3600",
            TypeError,
            r"ttl=\.\.\.\) must be seconds as int or float, or None; got str '3600'",
        ),
        (True, TypeError, r"ttl=\.\.\.\) must be seconds as int or float, or None; got bool True"),
        (1e17, ValueError, r"ttl=1e\+17\) is more than 1,000,000,000 seconds \(about 31 years\)"),
    ],
    ids=["inf", "nan", "zero", "str", "bool", "1e17"],
)
def test_a_ledger_ttl_redis_cannot_keep_is_refused_when_the_ledger_is_built(
    client: redis.Redis, prefix: str, ttl: Any, error: type[Exception], message: str
) -> None:
    """`ttl=inf` raised a bare OverflowError and `ttl='3600'` a bare TypeError; `ttl=1e17` was
    taken, then Redis refused every PEXPIRE, so no delivery was recorded and the reducer
    dropped the pruned messages once its retry buffer was full."""
    with pytest.raises(error, match=rf"^RedisDeliveryLedger\({message}"):
        RedisDeliveryLedger(client, prefix=prefix, ttl=ttl)


def test_the_longest_and_shortest_ledger_ttls_reach_redis(client: redis.Redis, prefix: str) -> None:
    """The longest ttl taken is one Redis keeps; a ttl under a millisecond was rounded to 0,
    which means no expiry, so its entries were kept forever."""
    longest = RedisDeliveryLedger(client, prefix=prefix, ttl=10**9)
    longest.mark("hook", ("m", "long"), ["a"])  # Redis takes its PEXPIRE
    assert longest.seen("hook", ("m", "long"), ["a"]) == {"a"}
    assert 0 < client.pttl(longest.keys.ledger(("m", "long"))) <= 10**12
    shortest = RedisDeliveryLedger(client, prefix=prefix, ttl=0.0001)
    shortest.mark("hook", ("m", "short"), ["a"])
    assert client.pttl(shortest.keys.ledger(("m", "short"))) in (-2, 0, 1)


def test_delivery_parts_that_would_fail_only_in_a_worker_are_refused_when_built(
    client: redis.Redis, prefix: str
) -> None:
    """Each was taken and failed later, at every delivery or in the background worker's
    loop: a serializer without dumps_typed, a checkpoint_key that is no function, options
    that are no Delivery."""
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    with pytest.raises(TypeError, match=r"^RedisMemoryWriter\(serde='json'\) needs a LangGraph "):
        RedisMemoryWriter(ledger, serde="json")
    with pytest.raises(
        TypeError, match=r"^RedisOutbox\(checkpoint_key='lg:cp'\) must be a function"
    ):
        RedisOutbox(client, prefix=prefix, checkpoint_key="lg:cp")  # type: ignore[arg-type]
    outbox = RedisOutbox(client, prefix=prefix)
    with pytest.raises(TypeError, match=r"^DeliveryRunner\(options='manual'\) must be a Delivery"):
        DeliveryRunner(InMemorySaver(), reducer(ledger), outbox, "manual")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^DeliveryRunner\(outbox=None\) does not implement"):
        DeliveryRunner(InMemorySaver(), reducer(ledger), None, Delivery())  # type: ignore[arg-type]


# -- RESP3 clients: refused, saying what to do, where the server has no HELLO ----------------

RESP3_REFUSED = r"RESP3 \(protocol=3\).*Redis 5 has no HELLO.*build it with protocol=2"


def test_resp3_refusals_name_the_setting_and_the_fix() -> None:
    hello = "unknown command `HELLO`, with args beginning with: `3`, "
    fix = "redis.Redis.from_url(url, protocol=2)"
    refused = resp3_refused(hello, "RedisOutbox", None, fix)
    assert refused is not None and str(refused).startswith(
        "RedisOutbox: the client speaks RESP3 (protocol=3, redis-py 8's default)"
    )
    assert f"e.g. {fix}" in str(resp3_refused(hello, "RedisOutbox", "3", fix))
    for other in ("unknown command `FOO`, with args beginning with: ", "NOSCRIPT No matching"):
        assert resp3_refused(other, "RedisOutbox", 3, fix) is None


def test_resp3_outbox_on_redis_5_raises_what_to_do_and_loses_nothing(
    client: redis.Redis, server_url: str, prefix: str
) -> None:
    t = now_ms()
    RedisOutbox(client, prefix=prefix).stage(batch("b1"), now=t, visible_at=t)
    outbox = RedisOutbox(redis.Redis.from_url(server_url, protocol=3), prefix=prefix)
    calls = {
        "stage": lambda: outbox.stage(batch("b2", cid="c2"), now=t, visible_at=t),
        "claim": lambda: outbox.claim(now=now_ms(), lease_until=now_ms() + 1000, limit=10),
        "settle": lambda: outbox.settle([Settlement("b1", "ack")]),
        "stats": outbox.stats,
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=rf"^RedisOutbox: .*{RESP3_REFUSED}") as refused:
            call()
        assert "redis.Redis.from_url(url, protocol=2)" in str(refused.value), name
        assert isinstance(refused.value.__cause__, redis.ResponseError), name

    saver = ReducingSaver(
        InMemorySaver(),
        reducer(RedisDeliveryLedger(client, prefix=prefix), Plain(), window=3, keep=2),
        outbox=outbox,
    )
    with pytest.raises(ValueError, match=RESP3_REFUSED):  # raised to the caller of the put
        saver.put(cfg("t"), checkpoint_with(["a", "b", "c", "d"]), {}, {"messages": 1})
    assert saver.inner.get_tuple(cfg("t")) is None  # refused before the inner put
    # What a RESP2 client staged is still there, for a drain once the client is fixed.
    kept = RedisOutbox(client, prefix=prefix)
    assert kept.stats().backlog == 1
    (claimed,) = kept.claim(now=now_ms(), lease_until=now_ms() + 1000, limit=10)
    assert (claimed.id, claimed.failures) == ("b1", 0)


async def test_resp3_asyncio_outbox_on_redis_5_raises_what_to_do(
    client: redis.Redis, server_url: str, prefix: str
) -> None:
    aclient = aioredis.Redis.from_url(server_url, protocol=3)
    outbox = RedisOutbox(aclient, prefix=prefix)
    t = now_ms()
    calls = {
        "astage": lambda: outbox.astage(batch(), now=t, visible_at=t),
        "aclaim": lambda: outbox.aclaim(now=now_ms(), lease_until=now_ms() + 1000, limit=10),
        "asettle": lambda: outbox.asettle([Settlement("b1", "ack")]),
        "astats": outbox.astats,
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=rf"^RedisOutbox: .*{RESP3_REFUSED}") as refused:
            await call()
        assert "redis.asyncio.Redis.from_url(url, protocol=2)" in str(refused.value), name

    ledger = RedisDeliveryLedger(client, prefix=prefix)
    saver = ReducingSaver(
        InMemorySaver(), reducer(ledger, Plain(), window=3, keep=2), outbox=outbox
    )
    with pytest.raises(ValueError, match=RESP3_REFUSED):  # raised to the caller of the aput
        await saver.aput(cfg("t"), checkpoint_with(["a", "b", "c", "d"]), {}, {"messages": 1})
    assert await saver.inner.aget_tuple(cfg("t")) is None
    await aclient.aclose()


def test_resp3_ledger_on_redis_5_is_refused_when_built(
    client: redis.Redis, server_url: str, prefix: str
) -> None:
    """The reducer takes a failed ledger lookup for a miss and only logs it, so a RESP3
    ledger on Redis 5 delivered nothing, silently: it is refused where the caller builds it."""
    ns = ("memories", "u1")
    RedisDeliveryLedger(client, prefix=prefix).mark("h", ns, ["a"])
    resp3 = redis.Redis.from_url(server_url, protocol=3)
    with pytest.raises(ValueError, match=rf"^RedisDeliveryLedger: .*{RESP3_REFUSED}") as refused:
        RedisDeliveryLedger(resp3, prefix=prefix)
    assert "redis.Redis.from_url(url, protocol=2)" in str(refused.value)
    with pytest.raises(ValueError, match=RESP3_REFUSED):
        RedisDeliveryLedger(client, aclient=aioredis.Redis.from_url(server_url, protocol=3))
    with pytest.raises(ValueError, match=RESP3_REFUSED) as refused:
        RedisDeliveryLedger(resp3, aclient=aioredis.Redis.from_url(server_url, protocol=3))
    assert "aclient=redis.asyncio.Redis.from_url(url, protocol=2)" in str(refused.value)
    assert RedisDeliveryLedger(client, prefix=prefix).seen("h", ns, ["a", "b"]) == {"a"}
    # A server out of reach cannot answer yet: the ledger is built, its first lookup tells.
    with pytest.raises(redis.ConnectionError):
        RedisDeliveryLedger(unreachable_client(protocol=3)).seen("h", ns, ["a"])


async def test_resp3_asyncio_ledger_on_redis_5_is_refused_when_built(
    client: redis.Redis, server_url: str
) -> None:
    aclient = aioredis.Redis.from_url(server_url, protocol=3)
    with pytest.raises(
        ValueError, match=rf"^RedisDeliveryLedger\(aclient=\.\.\.\): .*{RESP3_REFUSED}"
    ) as refused:
        RedisDeliveryLedger(client, aclient=aclient)
    assert "redis.asyncio.Redis.from_url(url, protocol=2)" in str(refused.value)
    await aclient.aclose()


def test_resp3_clients_work_where_the_server_has_hello(
    server_pool: ServerPool, prefix: str
) -> None:
    client = redis.Redis.from_url(server_pool.get("redis-7"), protocol=3)
    ledger = RedisDeliveryLedger(client, prefix=prefix)
    sink = Counter(ledger, name="count")
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(ledger, sink, window=3, keep=2),
        outbox=RedisOutbox(client, prefix=prefix),
    )
    saver.put(cfg("t"), checkpoint_with(["a", "b", "c", "d"]), {}, {"messages": 1})
    assert sink.counts(("memories", "t")) == {"b": 1, "c": 1}
    assert ledger.seen("count", ("memories", "t"), ["a", "b", "c"]) == {"b", "c"}
    assert (saver.drain().claimed, saver.delivery_stats().delivered) == (0, 1)
    client.close()


async def test_resp3_asyncio_clients_work_where_the_server_has_hello(
    server_pool: ServerPool, prefix: str
) -> None:
    url = server_pool.get("redis-7")
    client = redis.Redis.from_url(url, protocol=3)
    aclient = aioredis.Redis.from_url(url, protocol=3)
    ledger = RedisDeliveryLedger(client, aclient=aclient, prefix=prefix)
    sink = Counter(ledger, name="count")
    saver = ReducingSaver(
        InMemorySaver(), reducer(ledger, sink), outbox=RedisOutbox(aclient, prefix=prefix)
    )
    await seven_async_turns(saver, "t")
    counts = sink.counts(("memories", "t"))
    assert counts and set(counts.values()) == {1}
    assert await ledger.aseen("count", ("memories", "t"), list(counts)) == set(counts)
    resp2 = redis.Redis.from_url(url, protocol=2)  # asked with HELLO 2, it stays RESP2
    mixed = RedisDeliveryLedger(resp2, aclient=aclient, prefix=prefix)
    assert mixed.seen("count", ("memories", "t"), list(counts)) == set(counts)
    await aclient.aclose()
    client.close()
    resp2.close()


# -- asyncio background delivery past the end of its event loop ---------------------------


class ThreadedOutbox:
    """A blocking `RedisOutbox` whose asyncio methods run in a worker thread: usable from
    any event loop (a `redis.asyncio` client's connections belong to the loop that opened
    them)."""

    def __init__(self, outbox: RedisOutbox) -> None:
        self.outbox = outbox

    def stage(self, batch: StagedBatch, **kwargs: Any) -> int:
        return self.outbox.stage(batch, **kwargs)

    def claim(self, **kwargs: Any) -> list[StagedBatch]:
        return self.outbox.claim(**kwargs)

    def settle(self, settlements: Sequence[Settlement]) -> None:
        self.outbox.settle(settlements)

    def stats(self) -> Any:
        return self.outbox.stats()

    async def astage(self, batch: StagedBatch, **kwargs: Any) -> int:
        return await asyncio.to_thread(self.outbox.stage, batch, **kwargs)

    async def aclaim(self, **kwargs: Any) -> list[StagedBatch]:
        return await asyncio.to_thread(lambda: self.outbox.claim(**kwargs))

    async def asettle(self, settlements: Sequence[Settlement]) -> None:
        await asyncio.to_thread(self.outbox.settle, settlements)

    async def astats(self) -> Any:
        return await asyncio.to_thread(self.outbox.stats)


def stuck_hook(name: str, got: list[str], stuck: list[bool]) -> Any:
    """A coroutine hook (an LLM extractor) that is still running when its loop ends while
    `stuck[0]`; it records what it finished."""

    async def hook(pruned: list[Any], namespace: Any) -> None:
        while stuck[0]:
            await asyncio.sleep(0.01)
        got.extend(m.id for m in pruned)

    hook.name = name  # type: ignore[attr-defined]
    return hook


PRUNED = ["b", "c", "d", "e"]  # of a, ..., h: the reducer keeps the first
NEW = {"messages": 1}


def test_a_background_aput_batch_outlives_its_loop_and_a_deleted_thread(
    client: redis.Redis, prefix: str
) -> None:
    """aput + background: the task dies with its loop (`asyncio.run` ending, a serverless
    handler) in the middle of the hook, after the thread was deleted. The batch was
    marked committed only in memory, so the next drain discarded it: never delivered."""
    inner, ledger = InMemorySaver(), RedisDeliveryLedger(client, prefix=prefix)
    unfinished: list[str] = []
    saver = ReducingSaver(
        inner,
        reducer(ledger, stuck_hook("mem", unfinished, [True])),
        outbox=ThreadedOutbox(RedisOutbox(client, prefix=prefix)),
        delivery=Delivery("background", lease=0.2, poll_interval=60),
    )

    async def handler() -> None:
        await saver.aput(cfg("t"), checkpoint_with(list("abcdefgh")), {}, NEW)
        await saver.adelete_thread("t")  # the conversation closed

    asyncio.run(handler())
    assert unfinished == [] and inner.get_tuple(cfg("t")) is None
    got: list[str] = []
    drainer = ReducingSaver(
        inner,
        reducer(ledger, stuck_hook("mem", got, [False])),
        outbox=RedisOutbox(client, prefix=prefix),
        delivery=Delivery("manual", grace=0),  # an uncommitted batch would be dropped
    )
    time.sleep(0.3)  # the stager's lease expires
    report = drainer.drain()
    assert (report.delivered, report.discarded) == (1, 0)
    assert got == PRUNED
    assert drainer.delivery_stats().backlog == 0


@pytest.mark.parametrize("how", ["aflush", "aclose", "aput"])
def test_a_new_loop_delivers_what_the_background_task_of_an_ended_one_left(
    client: redis.Redis, prefix: str, how: str
) -> None:
    """`aflush`/`aclose` on a new loop delivered nothing the first loop's task held, and
    `aclose` raised CancelledError awaiting that dead task; the task a later `aput` starts
    takes it over too."""
    got: list[str] = []
    stuck = [True]
    hook = stuck_hook("mem", got, stuck)
    started: list[bool] = []

    async def watched(pruned: list[Any], namespace: Any) -> None:
        started.append(True)
        await hook(pruned, namespace)

    watched.name = "mem"  # type: ignore[attr-defined]
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(RedisDeliveryLedger(client, prefix=prefix), watched),
        outbox=ThreadedOutbox(RedisOutbox(client, prefix=prefix)),
        delivery=Delivery("background", poll_interval=60),
    )
    assert saver.delivery is not None

    async def handler() -> None:
        await saver.aput(cfg("t"), checkpoint_with(list("abcdefgh")), {}, NEW)
        await asyncio.sleep(0.05)  # the task is in the hook when the loop ends

    asyncio.run(handler())
    assert got == [] and started
    stuck[0] = False

    async def shutdown() -> None:
        assert saver.delivery is not None
        if how == "aput":
            await saver.aput(cfg("t2"), checkpoint_with(list("ijklmnop")), {}, NEW)
            await asyncio.wait_for(saver.delivery.aflush(), 5)
        else:
            await asyncio.wait_for(getattr(saver.delivery, how)(), 5)

    asyncio.run(shutdown())
    assert got[:4] == PRUNED and got[4:] == (["j", "k", "l", "m"] if how == "aput" else [])
    got[4:] = []
    assert saver.delivery_stats().backlog == 0
    asyncio.run(saver.delivery.aclose())  # nothing left; no dead task awaited
    assert got == PRUNED


@pytest.mark.parametrize("how", ["aflush", "aclose"])
def test_flushing_a_task_whose_loop_runs_in_another_thread_is_refused_not_awaited(
    client: redis.Redis, prefix: str, how: str
) -> None:
    """`aflush`/`aclose` from one loop waited on the background task of a loop running in
    another thread: for ever once that loop stopped, or with a CancelledError the caller never
    asked for once it closed (review finding). That loop's task is that loop's to flush."""
    got: list[str] = []
    stuck = [True]
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(RedisDeliveryLedger(client, prefix=prefix), stuck_hook("mem", got, stuck)),
        outbox=ThreadedOutbox(RedisOutbox(client, prefix=prefix)),
        delivery=Delivery("background", poll_interval=60),
    )
    assert saver.delivery is not None
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:
        put = saver.aput(cfg("t"), checkpoint_with(list("abcdefgh")), {}, NEW)
        asyncio.run_coroutine_threadsafe(put, other).result(5)

        async def flush_here() -> None:
            assert saver.delivery is not None
            await asyncio.wait_for(getattr(saver.delivery, how)(), 5)

        with pytest.raises(RuntimeError, match="another thread.*call aflush"):
            asyncio.run(flush_here())
        stuck[0] = False
        assert saver.delivery is not None
        flush = saver.delivery.aclose() if how == "aclose" else saver.delivery.aflush()
        asyncio.run_coroutine_threadsafe(flush, other).result(5)  # on its own loop: fine
        assert got == PRUNED
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(5)
        other.close()


def test_acks_left_at_exit_are_sent_through_an_asyncio_outbox(
    server_url: str, client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At interpreter exit the held acks went to the blocking `settle`, which an outbox on
    a `redis.asyncio` client refuses ("needs a blocking client"): they were lost."""
    from agentstate_reducer_langgraph import _delivery

    got: list[str] = []
    aclient = aioredis.Redis.from_url(server_url, protocol=2)
    saver = ReducingSaver(
        InMemorySaver(),
        reducer(RedisDeliveryLedger(client, prefix=prefix), stuck_hook("mem", got, [False])),
        outbox=RedisOutbox(aclient, prefix=prefix),
        delivery="inline",  # its ack waits for the next outbox call
    )
    assert saver.delivery is not None
    live: Any = _delivery.weakref.WeakSet([saver.delivery])
    monkeypatch.setattr(_delivery, "_live", live)

    async def handler() -> None:
        await saver.aput(cfg("t"), checkpoint_with(list("abcdefgh")), {}, NEW)

    asyncio.run(handler())  # the loop, and the connections the client opened on it, end
    assert got == PRUNED
    blocking = RedisOutbox(client, prefix=prefix)
    assert blocking.stats().backlog == 1  # delivered, its ack still in memory
    _delivery._close_at_exit()
    assert blocking.stats().backlog == 0
    assert saver.delivery.failures == 0


def test_an_unencodable_memory_namespace_says_what_to_use_and_stores_nothing(
    client: redis.Redis, prefix: str
) -> None:
    """A namespace holding an object msgpack cannot encode raised the serializer's bare
    "Type is not msgpack serializable" from the staging."""

    class Tenant:
        def __str__(self) -> str:
            return "acme"

    plain = Plain()
    inner = InMemorySaver()
    saver = ReducingSaver(
        inner,
        reducer(RedisDeliveryLedger(client, prefix=prefix), plain),
        outbox=RedisOutbox(client, prefix=prefix),
    )
    config = cfg("t")
    config["configurable"]["memory_namespace"] = ("memories", Tenant())
    with pytest.raises(TypeError) as raised:
        saver.put(config, checkpoint_with(list("abcdefgh")), {}, NEW)
    message = str(raised.value)
    assert "memory_namespace" in message and "Tenant" in message
    assert "str, int" in message and "str(value)" in message
    assert inner.get_tuple(cfg("t")) is None and plain.got == []
    assert saver.delivery_stats().staged == 0
