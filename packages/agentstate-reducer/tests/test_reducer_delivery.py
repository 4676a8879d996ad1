"""Delivery: separable from the cut, once per hook, namespace and message, retried on failure."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Awaitable, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import BaseModel
from reducer_helpers import Recorder, StallingLedger, conversation, eventually, get

from agentstate_reducer import (
    AsyncBackground,
    AsyncDeliveryLedger,
    DeliveryLedger,
    InMemoryLedger,
    MessageReducer,
    ReducerConfig,
    message_identity,
)


def hook_key(hook: object) -> str:
    return f"{type(hook).__module__}.{type(hook).__qualname__}"


class DictLedger:
    """A ledger a durable store would implement, kept in a dict for the test."""

    def __init__(self) -> None:
        self.rows: set[tuple[str, Any, str]] = set()
        self.calls: list[str] = []

    def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        self.calls.append("seen")
        return {i for i in message_ids if (hook_key, namespace, i) in self.rows}

    def mark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        self.calls.append("mark")
        self.rows.update((hook_key, namespace, i) for i in message_ids)


def reducer_with(
    *hooks: Any, ledger: DeliveryLedger | None = None, **config: Any
) -> MessageReducer:
    """A reducer whose failed hooks are retried at the next delivery (`retry_after=0`): the
    rest after a failure has tests of its own (test_reducer_backoff.py)."""
    settings: dict[str, Any] = {
        "min_messages": 3,
        "max_messages": 5,
        "on_prune": list(hooks),
        "retry_after": 0,
    }
    return MessageReducer(config=ReducerConfig(**(settings | config)), ledger=ledger)


async def cancel_adeliver(reducer: MessageReducer, started: Awaitable[Any]) -> None:
    """Cancel `reducer.adeliver` of `conversation(1)` once `started` is done (a request's
    timeout, say), and check the cancellation went on to the caller."""
    call = asyncio.ensure_future(reducer.adeliver(conversation(1, calls=0), "ns"))
    await started
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call


def test_plan_runs_no_hook_and_leaves_the_ledger_alone() -> None:
    hook, ledger = Recorder(), DictLedger()
    result = reducer_with(hook, ledger=ledger).plan(conversation(3, calls=0), namespace="ns")
    assert result.pruned and result.delivery is None
    assert hook.calls == [] and ledger.calls == []


def test_deliver_after_plan_hands_over_the_pruned_messages_once() -> None:
    hook, ledger = Recorder(), DictLedger()
    reducer = reducer_with(hook, ledger=ledger)
    result = reducer.plan(conversation(3, calls=0))
    first = reducer.deliver(result.pruned, ("memories", "u1"))
    second = reducer.deliver(result.pruned, ("memories", "u1"))  # a retried checkpoint write
    assert hook.calls == [(result.pruned, ("memories", "u1"))]
    key = hook_key(hook)
    assert first[key].delivered == ("h0", "b0", "h1", "b1")
    assert second[key].delivered == () and second[key].skipped == ("h0", "b0", "h1", "b1")
    assert ledger.calls == ["seen", "mark", "seen"]
    assert first.ok and second.ok


def test_reduce_cuts_and_delivers_with_the_namespace_as_given() -> None:
    hook = Recorder()
    result = reducer_with(hook).reduce(conversation(3, calls=0))
    assert hook.calls == [(result.pruned, None)]
    assert result.delivery is not None and result.delivery.ok


def test_a_failing_hook_keeps_its_batch_and_the_next_delivery_retries_it() -> None:
    # 0.5.0 marked the ids before calling the hooks, so a failure lost the batch for good.
    down = True
    flaky, steady = Recorder(fail=lambda: down), Recorder()
    reducer = reducer_with(flaky, steady)
    messages = conversation(3, calls=0)
    report = reducer.reduce(messages, namespace="ns").delivery
    assert report is not None and not report.ok
    flaky_key = hook_key(flaky)
    assert report[flaky_key].failed == ("h0", "b0", "h1", "b1")
    assert reducer.pending == 4
    down = False
    retry = reducer.deliver([], "ns")
    assert retry[flaky_key].delivered == ("h0", "b0", "h1", "b1")
    assert reducer.pending == 0
    assert steady.ids == ["h0", "b0", "h1", "b1"]  # the steady hook was not called again
    assert flaky.calls == [(messages[1:5], "ns")]


def test_a_retry_joins_the_next_batch_for_the_same_namespace() -> None:
    down = True
    hook = Recorder(fail=lambda: down)
    reducer = reducer_with(hook)
    reducer.deliver([{"role": "human", "content": "a", "id": "a"}], "ns")
    down = False
    reducer.deliver([{"role": "human", "content": "b", "id": "b"}], "ns")
    assert hook.calls == [
        (
            [
                {"role": "human", "content": "a", "id": "a"},
                {"role": "human", "content": "b", "id": "b"},
            ],
            "ns",
        )
    ]


def test_each_namespace_and_each_hook_is_tracked_apart() -> None:
    one, two = Recorder(), Recorder()
    reducer = reducer_with(one, two)
    pruned = conversation(1, calls=0)
    reducer.deliver(pruned, ("memories", "a"))
    reducer.deliver(pruned, ("memories", "b"))
    assert [ns for _, ns in one.calls] == [("memories", "a"), ("memories", "b")]
    report = reducer.deliver(pruned, ("memories", "a"))
    assert [h.hook for h in report.hooks] == [hook_key(one), hook_key(one) + "#2"]
    assert all(h.skipped == ("sys", "h0", "b0") for h in report.hooks)


def test_unhashable_namespaces_work() -> None:
    hook = Recorder()
    reducer = reducer_with(hook)
    reducer.deliver(conversation(1, calls=0), ["memories", {"user": 1}])
    reducer.deliver(conversation(1, calls=0), ["memories", {"user": 1}])
    assert len(hook.calls) == 1


def test_a_namespace_is_the_same_as_a_list_or_a_tuple() -> None:
    """A namespace that made a JSON round trip (a tuple read back as a list) is the same
    namespace: its messages were delivered a second time."""
    hook = Recorder()
    reducer = reducer_with(hook)
    pruned = conversation(1, calls=0)
    reducer.deliver(pruned, ("memories", ("user", 1)))
    report = reducer.deliver(pruned, json.loads(json.dumps(("memories", ("user", 1)))))
    assert report[hook_key(hook)].skipped == ("sys", "h0", "b0")
    assert hook.ids == ["sys", "h0", "b0"]
    ledger = InMemoryLedger()
    ledger.mark("hook", ["a", "b"], ["m"])
    assert ledger.seen("hook", ("a", "b"), ["m"]) == {"m"}


@pytest.mark.parametrize(
    ("one", "other"),
    [
        # Python's equality makes these one value; a durable ledger stores their JSON
        # text, which keeps them apart, and so does the in-memory one.
        (("memories", 1), ("memories", True)),
        (("memories", 1), ("memories", 1.0)),
        ((0,), (False,)),
        # A tuple of strings never reads as another value's stand-in.
        (("json", '{"a": 1}'), {"a": 1}),  # 0.6.0's stand-in for the dict
        (("json", '{"a":1}'), {"a": 1}),
        (("json", "1"), 1),
        ("memories", ("memories",)),
    ],
)
def test_namespaces_a_durable_ledger_keeps_apart_are_apart(one: Any, other: Any) -> None:
    hook = Recorder()
    reducer = reducer_with(hook)
    pruned = conversation(1, calls=0)
    reducer.deliver(pruned, one)
    reducer.deliver(pruned, other)
    assert [ns for _, ns in hook.calls] == [one, other]
    ledger = InMemoryLedger()
    ledger.mark("hook", one, ["m"])
    assert ledger.seen("hook", other, ["m"]) == set()
    assert ledger.seen("hook", one, ["m"]) == {"m"}


def test_a_retry_kept_under_a_tuple_namespace_joins_the_same_namespace_as_a_list() -> None:
    down = True
    hook = Recorder(fail=lambda: down)
    reducer = reducer_with(hook)
    pruned = conversation(1, calls=0)
    reducer.deliver(pruned, ("a", "b"))
    down = False
    reducer.deliver(pruned, ["a", "b"])
    assert hook.ids == ["sys", "h0", "b0"] and reducer.pending == 0


def test_messages_without_ids_are_delivered_once_by_derived_identity() -> None:
    # 0.5.0 delivered id-less messages on every overlapping reduce.
    hook = Recorder()
    reducer = reducer_with(hook, preserve_first=False, min_messages=2, max_messages=4)
    messages = [{"role": "human" if n % 2 == 0 else "ai", "content": str(n)} for n in range(6)]
    reducer.reduce(messages)
    reducer.reduce(messages)
    assert len(hook.calls) == 1 and len(hook.calls[0][0]) == 4


def test_duplicates_within_one_batch_are_sent_once() -> None:
    hook = Recorder()
    message = {"role": "human", "content": "same", "id": "x"}
    report = reducer_with(hook).deliver([message, message], None)
    assert hook.calls == [([message], None)]
    assert report[hook_key(hook)].skipped == ("x",)


def test_skips_of_messages_in_flight_elsewhere_are_reported_apart() -> None:
    """`skipped` mixed messages another delivery held (it may still fail, leaving them in
    this process's retry buffer only) with ones the ledger had: an outbox acked its batch
    for both, and lost the first kind in a crash. `in_flight` names them."""
    entered, release = threading.Event(), threading.Event()

    def slow(pruned: list[Any], namespace: Any) -> None:
        entered.set()
        release.wait(5)
        raise RuntimeError("memory store is down")

    reducer = reducer_with(slow)
    pruned = conversation(1, calls=0)
    first = threading.Thread(target=reducer.deliver, args=(pruned, "ns"))
    first.start()
    assert entered.wait(5)
    busy = reducer.deliver([*pruned, pruned[1]], "ns").hooks[0]
    release.set()
    first.join(5)
    assert busy.in_flight == ("sys", "h0", "b0") and busy.skipped == ("h0", "sys", "h0", "b0")
    assert busy.delivered == busy.failed == () and reducer.pending == 3
    hook = Recorder()
    reducer = reducer_with(hook)
    reducer.deliver(pruned, "ns")
    known = reducer.deliver([*pruned, pruned[1]], "ns")[hook_key(hook)]
    assert known.skipped == ("h0", "sys", "h0", "b0") and known.in_flight == ()


def test_dedupe_off_delivers_every_time() -> None:
    hook = Recorder()
    reducer = reducer_with(hook, dedupe_on_prune=False)
    pruned = conversation(1, calls=0)
    reducer.deliver(pruned, None)
    reducer.deliver(pruned, None)
    assert len(hook.calls) == 2


def test_a_shared_durable_ledger_spans_reducer_instances() -> None:
    ledger = DictLedger()
    assert isinstance(ledger, DeliveryLedger)
    first, second = Recorder(), Recorder()
    pruned = conversation(1, calls=0)
    reducer_with(first, ledger=ledger).deliver(pruned, "ns")
    # A new process: same hook identity, same ledger.
    report = reducer_with(first, ledger=ledger).deliver(pruned, "ns")
    assert report.hooks[0].skipped == ("sys", "h0", "b0")
    assert len(first.calls) == 1 and second.calls == []


def test_a_ledger_that_cannot_answer_counts_as_a_failure_and_is_retried() -> None:
    class Flaky(DictLedger):
        broken = True

        def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
            if self.broken:
                raise ConnectionError("ledger down")
            return super().seen(hook_key, namespace, message_ids)

    ledger, hook = Flaky(), Recorder()
    reducer = reducer_with(hook, ledger=ledger)
    report = reducer.deliver(conversation(1, calls=0), "ns")
    assert report.hooks[0].failed == ("sys", "h0", "b0") and hook.calls == []
    ledger.broken = False
    assert reducer.deliver([], "ns").hooks[0].delivered == ("sys", "h0", "b0")


def test_the_retry_buffer_is_bounded() -> None:
    hook = Recorder(fail=lambda: True)
    reducer = reducer_with(hook, dedupe_window=3)
    reducer.deliver(conversation(2, calls=0), None)
    assert reducer.pending == 3


def test_a_hook_with_a_name_uses_it_as_ledger_key() -> None:
    class Named(Recorder):
        name = "extractor-v1"

    report = reducer_with(Named()).deliver(conversation(1, calls=0), None)
    assert report["extractor-v1"].delivered == ("sys", "h0", "b0")
    with pytest.raises(KeyError, match="extractor-v1"):
        report["other"]


def test_concurrent_deliveries_of_the_same_messages_deliver_once() -> None:
    gate = threading.Barrier(8)
    received: list[str] = []
    lock = threading.Lock()

    def slow(pruned: list[Any], namespace: Any) -> None:
        with lock:
            received.extend(m["id"] for m in pruned)

    reducer = reducer_with(slow)
    pruned = conversation(20, calls=1)

    def run() -> None:
        gate.wait()
        reducer.deliver(pruned, "ns")

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(received) == sorted(m["id"] for m in pruned)


async def test_areduce_awaits_coroutine_hooks() -> None:
    # 0.5.0 called a coroutine hook without awaiting it: the batch never arrived.
    seen: list[Any] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        await asyncio.sleep(0)
        seen.append((len(pruned), namespace))

    result = await reducer_with(remember).areduce(conversation(3, calls=0), namespace="ns")
    assert seen == [(4, "ns")]
    assert result.delivery is not None and result.delivery.hooks[0].delivered


async def test_adeliver_keeps_a_failed_coroutine_batch() -> None:
    async def down(pruned: list[Any], namespace: Any) -> None:
        raise RuntimeError("store down")

    reducer = reducer_with(down)
    report = await reducer.adeliver(conversation(1, calls=0), None)
    assert report.hooks[0].failed == ("sys", "h0", "b0") and reducer.pending == 3


def test_sync_reduce_runs_a_coroutine_hook_when_no_loop_is_running() -> None:
    seen: list[int] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        seen.append(len(pruned))

    report = reducer_with(remember).deliver(conversation(1, calls=0), None)
    assert seen == [3] and report.hooks[0].delivered == ("sys", "h0", "b0")


async def test_sync_reduce_inside_a_loop_schedules_a_coroutine_hook() -> None:
    # LangGraph calls channel reducers synchronously, even under ainvoke.
    seen: list[int] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        seen.append(len(pruned))

    ledger = DictLedger()
    reducer = reducer_with(remember, ledger=ledger)
    report = reducer.deliver(conversation(1, calls=0), None)
    assert report.hooks[0].queued == ("sys", "h0", "b0") and "mark" not in ledger.calls
    await eventually(lambda: "mark" in ledger.calls)
    assert seen == [3] and ledger.calls[-1] == "mark"
    assert reducer.deliver(conversation(1, calls=0), None).hooks[0].skipped


class LoopLedger(DictLedger):
    """A ledger with an event-loop side: under `adeliver` its blocking pair must stay idle."""

    loop_calls: list[str]

    def __init__(self, *, broken: bool = False) -> None:
        super().__init__()
        self.loop_calls = []
        self.broken = broken

    def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        if asyncio_loop_running():
            raise AssertionError("seen() ran on the event loop")
        return super().seen(hook_key, namespace, message_ids)

    def mark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        if asyncio_loop_running():
            raise AssertionError("mark() ran on the event loop")
        super().mark(hook_key, namespace, message_ids)

    async def aseen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        await asyncio.sleep(0)
        self.loop_calls.append("aseen")
        if self.broken:
            raise ConnectionError("ledger down")
        return {i for i in message_ids if (hook_key, namespace, i) in self.rows}

    async def amark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        await asyncio.sleep(0)
        self.loop_calls.append("amark")
        self.rows.update((hook_key, namespace, i) for i in message_ids)


def asyncio_loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def test_adeliver_awaits_an_async_ledger_and_never_calls_its_blocking_side() -> None:
    ledger = LoopLedger()
    assert isinstance(ledger, AsyncDeliveryLedger) and isinstance(ledger, DeliveryLedger)
    plain, got = Recorder(), []

    async def coroutine_hook(pruned: list[Any], namespace: Any) -> None:
        got.extend(message_identity(m) for m in pruned)

    async with AsyncBackground(Recorder(), name="bg") as background:
        reducer = reducer_with(plain, coroutine_hook, background, ledger=ledger)
        report = await reducer.adeliver(conversation(1, calls=0), "ns")
        await background.aflush()
    assert [h.delivered for h in report.hooks[:2]] == [("sys", "h0", "b0")] * 2
    assert report.hooks[2].queued == ("sys", "h0", "b0")
    assert ledger.calls == [] and ledger.loop_calls.count("aseen") == 3
    assert ledger.loop_calls.count("amark") == 3 and len(ledger.rows) == 9
    again = await reducer.adeliver(conversation(1, calls=0), "ns")
    assert all(h.skipped == ("sys", "h0", "b0") for h in again.hooks)
    # The blocking side still serves `deliver`, off the loop.
    blocking = await asyncio.to_thread(reducer.deliver, conversation(1, calls=0), "ns")
    assert all(h.skipped == ("sys", "h0", "b0") for h in blocking.hooks)
    assert ledger.calls == ["seen", "seen", "seen"]


async def test_sync_deliver_on_the_loop_runs_as_a_task_with_an_async_ledger() -> None:
    ledger, seen = LoopLedger(), []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        seen.append(len(pruned))

    # LangGraph calls channel reducers synchronously, also on the event loop's thread:
    # with a ledger that can be awaited, the delivery becomes a task there.
    reducer = reducer_with(remember, ledger=ledger)
    report = reducer.deliver(conversation(1, calls=0), None)
    assert report.hooks[0].queued == ("sys", "h0", "b0") and ledger.loop_calls == []
    await eventually(lambda: "amark" in ledger.loop_calls)
    assert seen == [3] and ledger.loop_calls == ["aseen", "amark"] and ledger.calls == []
    assert (await reducer.adeliver(conversation(1, calls=0), None)).hooks[0].skipped


async def test_an_async_ledger_that_cannot_answer_counts_as_a_failure_and_is_retried() -> None:
    ledger, hook = LoopLedger(broken=True), Recorder()
    reducer = reducer_with(hook, ledger=ledger)
    report = await reducer.adeliver(conversation(1, calls=0), "ns")
    assert report.hooks[0].failed == ("sys", "h0", "b0") and hook.calls == []
    ledger.broken = False
    assert (await reducer.adeliver([], "ns")).hooks[0].delivered == ("sys", "h0", "b0")
    assert ledger.calls == [] and ledger.loop_calls == ["aseen", "aseen", "amark"]


def test_message_identity_is_the_id_or_a_process_stable_hash() -> None:
    assert message_identity({"role": "human", "content": "x", "id": 7}) == "7"
    message = {"role": "user", "content": [{"type": "text", "text": "hé"}]}
    code = (
        "from agentstate_reducer import message_identity;"
        "print(message_identity({'role': 'human', 'content': [{'type': 'text', 'text': 'hé'}]}))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed, "PYTHONIOENCODING": "utf-8"},
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert outputs == {message_identity(message)}
    assert message_identity(message).startswith("sha256:")
    other = {"role": "user", "content": [{"type": "text", "text": "he"}]}
    assert message_identity(other) != message_identity(message)


def test_in_memory_ledger_is_a_bounded_lru() -> None:
    ledger = InMemoryLedger(max_entries=2)
    ledger.mark("h", "ns", ["a", "b"])
    assert ledger.seen("h", "ns", ["a"]) == {"a"}  # a is now the most recent
    ledger.mark("h", "ns", ["c"])
    assert ledger.seen("h", "ns", ["a", "b", "c"]) == {"a", "c"}
    assert len(ledger) == 2
    with pytest.raises(ValueError, match="max_entries=0"):
        InMemoryLedger(0)


async def test_a_cancelled_adeliver_leaves_its_messages_for_the_next_delivery() -> None:
    """A cancelled call (a request's timeout) held its claims for good: every later delivery
    of those messages, an outbox's after its lease included, skipped them as in flight."""
    started, store_down, seen = asyncio.Event(), [True], []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        if store_down[0]:
            started.set()
            await asyncio.Event().wait()  # until cancelled
        seen.append(len(pruned))

    reducer = reducer_with(remember, Recorder())
    await cancel_adeliver(reducer, started.wait())
    assert reducer.pending == 6  # both hooks' batches wait, neither is in flight
    store_down[0] = False
    report = await reducer.adeliver(conversation(1, calls=0), "ns")
    assert [h.delivered for h in report.hooks] == [("sys", "h0", "b0")] * 2
    assert seen == [3] and reducer.pending == 0


def test_a_delivery_the_loop_never_ran_leaves_its_messages_for_the_next_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """On the loop's thread with an async ledger, `deliver` only schedules a task: when the
    loop ended before the task started (`asyncio.run` cancels what is left), none of its
    body ran and the messages were lost silently."""
    ledger, hook = StallingLedger(), Recorder()
    reducer = reducer_with(hook, ledger=ledger)
    reports: list[Any] = []

    def reduce_step() -> None:  # a channel reducer, called as the loop's last callback
        reports.append(reducer.deliver(conversation(1, calls=0), "ns"))

    async def request() -> None:
        asyncio.get_running_loop().call_soon(reduce_step)

    with caplog.at_level(logging.WARNING, logger="agentstate_reducer"):
        asyncio.run(request())
    assert reports[0].hooks[0].queued == ("sys", "h0", "b0") and ledger.stuck == 0
    assert reducer.pending == 3
    assert "cancelled before it finished; reducer.pending=3" in caplog.text
    ledger.stalled = False
    retry = asyncio.run(reducer.adeliver([], "ns"))  # a later request, on a new loop
    assert retry.hooks[0].delivered == ("sys", "h0", "b0")
    assert hook.ids == ["sys", "h0", "b0"] and reducer.pending == 0


async def test_a_delivery_cancelled_while_the_ledger_answers_keeps_claims_and_retries() -> None:
    """Cancelled while `aseen` was awaited, `aprepare` kept the claims it took (later
    deliveries skipped those messages as in flight) and dropped the retries it took out."""

    class First(Recorder):
        name = "first"

    class Second(Recorder):
        name = "second"

    down = [True]
    first, second = First(), Second(fail=lambda: down[0])
    ledger = StallingLedger(stall="second")
    reducer = reducer_with(first, second, ledger=ledger)
    ledger.stalled = False
    await reducer.adeliver([{"role": "human", "content": "x", "id": "x"}], "ns")
    assert reducer.pending == 1  # second failed on x: a retry batch
    down[0], ledger.stalled = False, True
    # Cancelled once the first hook's job is built and the second hook's aseen waits.
    await cancel_adeliver(reducer, eventually(lambda: ledger.stuck == 1))
    assert reducer.pending == 3 + 4  # first: sys, h0, b0; second: x and those
    ledger.stalled = False
    report = await reducer.adeliver([], "ns")
    assert report["first"].delivered == ("sys", "h0", "b0") and not report["first"].skipped
    assert report["second"].delivered == ("x", "sys", "h0", "b0") and not report["second"].skipped
    assert first.ids == ["x", "sys", "h0", "b0"] and second.ids == ["x", "sys", "h0", "b0"]
    assert reducer.pending == 0
    again = await reducer.adeliver(conversation(1, calls=0), "ns")
    assert all(h.skipped == ("sys", "h0", "b0") and not h.delivered for h in again.hooks)


async def test_a_delivery_cancelled_while_its_ledger_records_delivers_nothing_twice() -> None:
    """Cancelled after the hook returned, while the ledger's amark ran: the messages were kept
    for retry, so the next delivery gave the hook them a second time. The mark now goes on
    (its claims held until it ends, so a delivery meanwhile skips them as in flight)."""
    marking, release = asyncio.Event(), asyncio.Event()

    class SlowMark(LoopLedger):
        async def amark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
            marking.set()
            await release.wait()
            await super().amark(hook_key, namespace, message_ids)

    hook = Recorder()
    reducer = reducer_with(hook, ledger=SlowMark())
    await cancel_adeliver(reducer, marking.wait())
    assert reducer.pending == 0  # delivered: nothing waits for a retry
    during = await reducer.adeliver(conversation(1, calls=0), "ns")
    assert during.hooks[0].delivered == () and len(hook.calls) == 1
    release.set()
    await eventually(lambda: reducer._dispatcher._in_flight == set())
    after = await reducer.adeliver(conversation(1, calls=0), "ns")
    assert after.hooks[0].delivered == () and len(hook.calls) == 1


async def test_a_cancelled_adeliver_leaves_a_later_background_hooks_messages_for_retry() -> None:
    """Jobs of `AsyncBackground` hooks after the cancelled one were never handed off, yet
    kept their claims: the messages were in flight for good, neither pending nor delivered."""
    started, store_down, got = asyncio.Event(), [True], []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        if store_down[0]:
            started.set()
            await asyncio.Event().wait()  # until cancelled

    async def extract(pruned: list[Any], namespace: Any) -> None:
        got.extend(message_identity(m) for m in pruned)

    background = AsyncBackground(extract, name="extract")
    reducer = reducer_with(remember, background)
    await cancel_adeliver(reducer, started.wait())
    assert reducer.pending == 6  # both hooks' batches wait, neither is in flight
    store_down[0] = False
    report = await reducer.adeliver(conversation(1, calls=0), "ns")
    await asyncio.wait_for(background.aclose(), 5)
    assert report["extract"].queued == ("sys", "h0", "b0") and not report["extract"].skipped
    assert got == ["sys", "h0", "b0"] and reducer.pending == 0


class FlakyLedger(InMemoryLedger):
    """An `AsyncDeliveryLedger`, a test double of a user's network ledger whose lookups for
    hook `down` fail."""

    def __init__(self, down: str | None) -> None:
        super().__init__(100)
        self.down = down

    async def aseen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        if hook_key == self.down:
            raise ConnectionError("ledger shard down")
        return self.seen(hook_key, namespace, message_ids)

    async def amark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        self.mark(hook_key, namespace, message_ids)


async def test_deferred_messages_are_never_dropped_to_make_room_for_failed_ones() -> None:
    """`deliver` on the loop keeps its messages for a task; a failed lookup there dropped
    the oldest kept messages, deferred ones included, so a healthy hook never got them."""
    a, b = Recorder(), Recorder()
    a.name, b.name = "a", "b"  # type: ignore[attr-defined]
    ledger = FlakyLedger(down="a")
    reducer = reducer_with(a, b, ledger=ledger, dedupe_window=3)
    reducer.deliver(conversation(1, calls=0), "ns")  # a task on the loop takes them up
    assert reducer.pending == 6  # more than dedupe_window: none failed yet
    await reducer.aflush()
    assert b.ids == ["sys", "h0", "b0"] and reducer.pending == 3
    ledger.down = None
    report = await reducer.adeliver([], "ns")
    assert report["a"].delivered == ("sys", "h0", "b0") and reducer.pending == 0
    assert a.ids == ["sys", "h0", "b0"] and b.ids == ["sys", "h0", "b0"]


def test_failed_messages_beyond_dedupe_window_are_still_dropped_oldest_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hook = Recorder(fail=lambda: True)
    reducer = reducer_with(hook, dedupe_window=2)
    reducer.deliver(conversation(1, calls=0), "ns")
    assert reducer.pending == 2 and "dropped 1 message for hook" in caplog.text
    hook.fail = lambda: False
    assert reducer.deliver([], "ns").hooks[0].delivered == ("h0", "b0")


def test_a_coroutine_hook_cancelled_inside_a_sync_deliver_fails_alone() -> None:
    """A `CancelledError` out of `asyncio.run` (a BaseException) escaped `deliver`: that
    hook's and every later hook's claims were held for good, so they never got the messages."""
    cancelled, later = [True], Recorder()

    async def remember(pruned: list[Any], namespace: Any) -> None:
        if cancelled[0]:
            raise asyncio.CancelledError  # a client library's timeout leaking out, say

    reducer = reducer_with(remember, later)
    report = reducer.deliver(conversation(1, calls=0), "ns")
    assert report.hooks[0].failed == ("sys", "h0", "b0") and reducer.pending == 3
    assert later.ids == ["sys", "h0", "b0"]
    cancelled[0] = False
    assert reducer.deliver([], "ns").hooks[0].delivered == ("sys", "h0", "b0")
    assert reducer.pending == 0 and later.ids == ["sys", "h0", "b0"]


async def _cancelled_by_itself() -> None:
    """What a hook awaits when a client cancels its own request: a cancelled future."""
    future = asyncio.get_running_loop().create_future()
    future.cancel()
    await future


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 has no Task.cancelling()")
async def test_a_coroutine_hook_cancelled_by_itself_fails_alone_in_adeliver() -> None:
    """A hook's own `CancelledError` escaped `adeliver` (and `areduce`), though nothing
    cancelled the caller, while `deliver` reported the same hook as failed."""
    cancelled, later = [True], Recorder()

    async def remember(pruned: list[Any], namespace: Any) -> None:
        if cancelled[0]:
            await _cancelled_by_itself()

    reducer = reducer_with(remember, later)
    report = await reducer.adeliver(conversation(1, calls=0), "ns")
    assert report.hooks[0].failed == ("sys", "h0", "b0") and reducer.pending == 3
    assert later.ids == ["sys", "h0", "b0"]
    result = await reducer.areduce(conversation(3, calls=0), namespace="ns")
    assert result.delivery is not None and result.delivery.hooks[0].failed
    cancelled[0] = False
    assert (await reducer.adeliver([], "ns")).hooks[0].delivered[:3] == ("sys", "h0", "b0")
    assert reducer.pending == 0


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 has no Task.cancelling()")
@pytest.mark.parametrize("step", ["aseen", "amark"])
async def test_an_async_ledgers_own_cancelled_error_does_not_escape_adeliver(
    step: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A ledger's own `CancelledError` (its client cancelled a request) escaped `adeliver`
    like a hook's: a failed lookup keeps the batch for retry, a failed mark is logged."""

    class OwnCancel(OffLoopLedger):
        async def aseen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> Any:
            if step == "aseen" and not self.rows:
                self.rows.add(("", None, ""))
                await _cancelled_by_itself()
            return await super().aseen(hook_key, namespace, message_ids)

        async def amark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
            if step == "amark":
                await _cancelled_by_itself()
            await super().amark(hook_key, namespace, message_ids)

    ledger = OwnCancel()
    ledger.stalled = False
    hook = Recorder()
    reducer = reducer_with(hook, ledger=ledger)
    report = (await reducer.adeliver(conversation(1, calls=0), "ns")).hooks[0]
    if step == "aseen":
        assert report.failed == ("sys", "h0", "b0") and hook.calls == [] and reducer.pending == 3
        assert "ledger lookup failed" in caplog.text
        assert (await reducer.adeliver([], "ns")).hooks[0].delivered == ("sys", "h0", "b0")
    else:
        assert report.delivered == ("sys", "h0", "b0") and len(hook.calls) == 1
        assert "could not record 3 messages" in caplog.text
    assert reducer.pending == 0


async def test_a_caller_cancelled_while_a_hook_runs_is_still_cancelled() -> None:
    """Telling a hook's own `CancelledError` from the caller's must not swallow the caller's,
    also when the hook turns it into a fresh one."""
    started = asyncio.Event()

    async def remember(pruned: list[Any], namespace: Any) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            raise asyncio.CancelledError("the hook's own") from None

    reducer = reducer_with(remember)
    await cancel_adeliver(reducer, started.wait())
    assert reducer.pending == 3


async def test_caller_cancelled_on_python_3_10_takes_every_cancellation_for_the_callers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without `Task.cancelling` a real cancellation cannot be told apart: it must go on."""
    from agentstate_reducer import _delivery

    class Task310:  # an asyncio.Task as Python 3.10 has it: no `cancelling`
        pass

    assert not _delivery.caller_cancelled()
    monkeypatch.setattr(_delivery.asyncio, "current_task", lambda: Task310())
    assert _delivery.caller_cancelled()


@pytest.mark.parametrize(
    ("item", "kind"), [("bye", "str"), (7, "int"), (None, "NoneType"), (("user", "hi"), "tuple")]
)
async def test_items_that_are_not_messages_are_refused_by_every_entry_point(
    item: Any, kind: str
) -> None:
    """Every str (int, None) had one identity: a cut pruned several, the hook got the first."""
    hook = Recorder()
    reducer = reducer_with(hook, min_messages=1, max_messages=2)
    items = [{"role": "human", "content": "a", "id": "a"}, item, item, item]
    expected = rf"message 1 is a {kind} \(.*\), not a message; pass message objects or "
    for call in (reducer.plan, reducer.reduce):
        with pytest.raises(TypeError, match=expected):
            call(items)
    for acall in (reducer.aplan, reducer.areduce):
        with pytest.raises(TypeError, match=expected):
            await acall(items)
    with pytest.raises(TypeError, match="pruned " + expected):
        reducer.deliver(items, "ns")
    with pytest.raises(TypeError, match="pruned " + expected):
        await reducer.adeliver(items, "ns")
    assert hook.calls == [] and reducer.pending == 0


def test_strings_pruned_in_one_cut_no_longer_reach_the_hook_as_one() -> None:
    got: list[Any] = []
    config = ReducerConfig(min_messages=2, max_messages=3, on_prune=[lambda p, ns: got.extend(p)])
    with pytest.raises(TypeError, match=r"message 0 is a str \('hello'\)"):
        MessageReducer(config=config).reduce(["hello", "how are you", "fine", "bye", "see you"])
    assert got == []


def test_every_documented_message_shape_is_still_accepted() -> None:
    """Mappings, and objects with a `type`, `role` or `content` attribute, are messages;
    a cut needs a role, so an object with only `content` goes to `deliver` alone."""
    from types import MappingProxyType, SimpleNamespace

    messages = [
        {"type": "human", "content": "a"},
        MappingProxyType({"role": "assistant", "content": "b"}),
        SimpleNamespace(type="human", content="c"),
        SimpleNamespace(role="assistant", content="d"),
        SimpleNamespace(type="critic", content="e"),
        {"role": "human", "content": "f"},
    ]
    hook = Recorder()
    result = reducer_with(hook, min_messages=1, max_messages=2).reduce(messages, None, "ns")
    assert result.surviving == [messages[0], messages[-1]]  # the first is preserved
    assert hook.calls[0][0] == messages[1:-1]
    roleless = SimpleNamespace(content="g")
    assert reducer_with(hook).deliver([roleless], "ns").ok
    assert hook.calls[-1][0] == [roleless]
    with pytest.raises(ValueError, match=r"message 1 has no role \(SimpleNamespace namespace"):
        reducer_with(hook).plan([messages[0], roleless])


def test_a_sync_deliver_interrupted_by_a_hook_leaves_every_unfinished_hook_for_retry() -> None:
    """A `KeyboardInterrupt` in a hook goes on, but the hooks it stopped keep their messages."""
    interrupt, first, later = [True], Recorder(), Recorder()

    def remember(pruned: list[Any], namespace: Any) -> None:
        if interrupt[0]:
            raise KeyboardInterrupt

    reducer = reducer_with(first, remember, later)
    with pytest.raises(KeyboardInterrupt):
        reducer.deliver(conversation(1, calls=0), "ns")
    assert reducer.pending == 6 and first.ids == ["sys", "h0", "b0"] and later.ids == []
    interrupt[0] = False
    report = reducer.deliver(conversation(1, calls=0), "ns")
    assert [h.delivered for h in report.hooks] == [(), *[("sys", "h0", "b0")] * 2]
    assert reducer.pending == 0 and later.ids == ["sys", "h0", "b0"]
    assert first.ids == ["sys", "h0", "b0"]


def test_an_interrupted_ledger_mark_in_a_sync_deliver_leaves_the_later_hooks_for_retry() -> None:
    """A KeyboardInterrupt while the ledger recorded the first hook's delivery: its claims
    were held for good and the second hook, never called, kept nothing for a retry."""

    class Interrupted(DictLedger):
        def mark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
            if not self.rows:
                self.rows.add(("", None, ""))
                raise KeyboardInterrupt
            super().mark(hook_key, namespace, message_ids)

    first, second = Recorder(), Recorder()
    reducer = reducer_with(first, second, ledger=Interrupted())
    with pytest.raises(KeyboardInterrupt):
        reducer.deliver(conversation(1, calls=0), "ns")
    assert len(first.calls) == 1 and second.calls == []
    assert reducer.pending == 3  # the second hook's batch; the first hook has its messages
    report = reducer.deliver([], "ns")
    assert [h.delivered for h in report.hooks] == [(), ("sys", "h0", "b0")]
    assert len(first.calls) == 1 and len(second.calls) == 1 and reducer.pending == 0


class OffLoopLedger(StallingLedger):
    """A `StallingLedger` whose blocking side answers too, for a `deliver` off the loop."""

    def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        return {i for i in message_ids if (hook_key, namespace, i) in self.rows}

    def mark(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> None:
        self.rows.update((hook_key, namespace, i) for i in message_ids)


async def test_failed_retries_put_back_by_a_cancelled_delivery_stay_oldest_and_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A cancelled `adeliver` put the failed retries it took out back as the newest failures,
    beyond `dedupe_window`: until the next failure more were kept than allowed, and that one
    then dropped the newer failures in their place."""
    a_down, b_down = [True], [False]
    a, b = Recorder(fail=lambda: a_down[0]), Recorder(fail=lambda: b_down[0])
    a.name, b.name = "a", "b"  # type: ignore[attr-defined]
    ledger = OffLoopLedger(stall="a")
    reducer = reducer_with(a, b, ledger=ledger, dedupe_window=2)
    later = [
        {"role": "human", "content": "x", "id": "x"},
        {"role": "ai", "content": "y", "id": "y"},
    ]
    ledger.stalled = False
    assert (await reducer.adeliver(conversation(1, calls=0)[1:], "ns"))["a"].failed == ("h0", "b0")
    a_down[0], b_down[0], ledger.stalled = False, True, True
    call = asyncio.ensure_future(reducer.adeliver([], "ns"))  # takes a's retries out
    await eventually(lambda: ledger.stuck == 1)
    report = await asyncio.to_thread(reducer.deliver, later, "ns")  # b fails meanwhile
    assert report["b"].failed == ("x", "y") and reducer.pending == 2
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert reducer.pending == 2  # the oldest failures, a's, made room for b's
    assert "for hook a (h0" in caplog.text
    b_down[0], ledger.stalled = False, False
    report = await reducer.adeliver([], "ns")
    assert report["a"].delivered == () and report["b"].delivered == ("x", "y")
    assert a.ids == ["x", "y"] and b.ids == ["h0", "b0", "x", "y"] and reducer.pending == 0


class RedisLike:
    """Stands in for `redis.Redis`: no `seen`, no `mark`."""

    def get(self, key: str) -> None:
        return None


RedisLike.__module__ = "redis.client"


class SeenOnly:
    def seen(self, hook_key: str, namespace: Any, message_ids: Sequence[str]) -> set[str]:
        return set()


@pytest.mark.parametrize(
    ("ledger", "message"),
    [
        (
            RedisLike(),
            r"got redis\.client\.RedisLike .*, which has no seen\(\) and mark\(\): for a Redis "
            r"client pass RedisDeliveryLedger\(client\)",
        ),
        (SeenOnly(), r"SeenOnly .*, which has no mark\(\): pass InMemoryLedger\(\)"),
        ({}, r"got builtins\.dict \{\}, which has no seen\(\) and mark\(\)"),
        (InMemoryLedger, r"got the class InMemoryLedger: pass InMemoryLedger\(\.\.\.\)"),
    ],
    ids=["redis-client", "seen-only", "dict", "a-class"],
)
def test_a_ledger_that_is_no_delivery_ledger_is_refused_when_the_reducer_is_built(
    ledger: Any, message: str
) -> None:
    """`ledger=redis.Redis(...)` (for `RedisDeliveryLedger(client)`) was taken: every lookup
    failed, logged as retryable, and once the retry buffer was full pruned turns were
    dropped for good."""
    hook = Recorder()
    with pytest.raises(TypeError, match=rf"^MessageReducer\(ledger=\.\.\.\) needs a .*{message}"):
        reducer_with(hook, ledger=ledger)
    assert hook.calls == []


def test_a_config_that_is_no_reducer_config_is_refused_naming_the_fix() -> None:
    """`MessageReducer(config={"max_messages": 4})` raised AttributeError: 'dict' object has
    no attribute 'dedupe_window'."""
    with pytest.raises(
        TypeError,
        match=r"takes a ReducerConfig, got dict \{'max_messages': 4\}: pass "
        r"config=ReducerConfig\(.*ReducerConfig\(\*\*settings\)",
    ):
        MessageReducer(config={"max_messages": 4})  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "kind"), [(5, "int"), ("hello", "str"), (b"hi", "bytes")])
async def test_a_message_list_of_the_wrong_type_is_refused_naming_the_argument(
    value: Any, kind: str
) -> None:
    """`reduce(5)` raised a bare "'int' object is not iterable", `deliver(None, ns)` a bare
    "'NoneType' object is not iterable", and a str was read letter by letter."""
    hook = Recorder()
    reducer = reducer_with(hook, min_messages=1, max_messages=2)
    history = conversation(2, calls=0)
    wanted = "list of messages, one message or None"
    for call in (reducer.plan, reducer.reduce):
        with pytest.raises(TypeError, match=rf"^existing must be a list of messages, got {kind} "):
            call(value)
        with pytest.raises(
            TypeError, match=rf"^new must be a list of messages, got {kind} .*{wanted}"
        ):
            call(history, value)
    for acall in (reducer.aplan, reducer.areduce):
        with pytest.raises(TypeError, match=rf"^existing must be a list of messages, got {kind} "):
            await acall(value)
    for pruned in (value, None):
        with pytest.raises(TypeError, match=r"^pruned must be a list of messages, got .*\[\] only"):
            reducer.deliver(pruned, "ns")
        with pytest.raises(TypeError, match=r"^pruned must be a list of messages, got "):
            await reducer.adeliver(pruned, "ns")
    assert hook.calls == [] and reducer.pending == 0
    assert len(reducer.reduce(None, history).surviving) < len(history)  # None is still none


class Look(BaseModel):
    """A message look-alike that is no LangChain message; pydantic iterates it by field."""

    role: str
    content: str
    id: str


async def test_one_message_is_taken_as_a_list_of_it() -> None:
    """`new` took a dict or a LangChain message alone but refused another message object
    (a pydantic one was split into its fields); `deliver` took none of them: a dict went
    in key by key, and the error said to pass the message it was given."""
    hook = Recorder()
    reducer = reducer_with(hook, min_messages=4, max_messages=6)
    history = conversation(1, calls=0)
    for one in (
        SimpleNamespace(role="assistant", content="x", id="x"),
        Look(role="assistant", content="y", id="y"),
        {"role": "assistant", "content": "z", "id": "z"},
    ):
        assert get(reducer.plan(history, one).surviving[-1], "id") == get(one, "id")
    reducer.deliver({"role": "user", "content": "d", "id": "d"}, "ns")
    reducer.deliver(Look(role="user", content="e", id="e"), "ns")
    await reducer.adeliver(SimpleNamespace(role="user", content="f", id="f"), "ns")
    assert hook.ids == ["d", "e", "f"]


def test_an_iterable_that_fails_while_read_keeps_its_own_error() -> None:
    def broken() -> Any:
        yield {"role": "human", "content": "a"}
        raise TypeError("from inside the generator")

    with pytest.raises(TypeError, match="from inside the generator"):
        reducer_with().reduce(broken())
