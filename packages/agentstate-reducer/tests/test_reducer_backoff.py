"""A hook that raised rests before it is called again.

A memory store that is down made every later delivery call the hook again, once per
conversation with messages waiting: at every put, a hundred calls (each paying the store's
timeout) and a hundred logged tracebacks for a hundred conversations, growing for as long
as the store stayed down. The clock here is the dispatcher's, set by the test: no test
waits on the wall clock.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from typing import Any

import pytest
from reducer_helpers import Recorder, StallingLedger, conversation

from agentstate_reducer import AsyncBackground, Background, MessageReducer, ReducerConfig
from agentstate_reducer._delivery import hook_key


class Clock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def clocked(hook: Any, ledger: Any = None, **config: Any) -> tuple[MessageReducer, Clock]:
    settings: dict[str, Any] = {"min_messages": 3, "max_messages": 5, "on_prune": [hook]}
    reducer = MessageReducer(config=ReducerConfig(**(settings | config)), ledger=ledger)
    clock = reducer._dispatcher.clock = Clock()
    return reducer, clock


def said(n: int) -> list[dict[str, Any]]:
    return [{"role": "human", "content": f"m{n}", "id": f"m{n}"}]


class Down:
    """A hook whose store is down until told: it counts its calls, and raises meanwhile."""

    def __init__(self) -> None:
        self.tried = 0
        self.down = True
        self.got: list[str] = []

    def __call__(self, pruned: list[Any], namespace: Any) -> None:
        self.tried += 1
        if self.down:
            raise RuntimeError("memory store is down")
        self.got += [m["id"] for m in pruned]


def test_a_failing_hook_is_called_once_per_rest_and_the_rest_doubles_up_to_its_cap() -> None:
    hook = Down()
    reducer, clock = clocked(hook, retry_after=1.0, max_retry_after=8.0)
    for n in range(50):
        reducer.deliver(said(n), "ns")
    calls = [hook.tried]
    for rest in (1, 2, 4, 8, 8, 8):
        clock.advance(rest - 0.001)
        reducer.deliver([], "ns")
        calls.append(hook.tried)  # not yet
        clock.advance(0.001)
        reducer.deliver([], "ns")
        reducer.deliver([], "ns")
        calls.append(hook.tried)  # once
    assert calls == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7]
    assert reducer.pending == 50


def test_what_waits_is_delivered_once_in_order_after_the_rest() -> None:
    down = [True]
    hook = Recorder(fail=lambda: down[0])
    reducer, clock = clocked(hook)
    for n in range(30):
        reducer.deliver(said(n), f"thread-{n % 3}")
    down[0] = False
    reducer.deliver([], "thread-0")
    assert hook.calls == []  # resting
    clock.advance(1.0)
    report = reducer.deliver(said(30), "thread-0")
    assert report.ok and reducer.pending == 0
    got = {ns: [m["id"] for m in batch] for batch, ns in hook.calls}
    assert got == {
        f"thread-{t}": [f"m{n}" for n in range(t, 30, 3)] + (["m30"] if t == 0 else [])
        for t in range(3)
    }
    clock.advance(1.0)
    reducer.deliver(said(31), "thread-1")
    reducer.deliver([], "thread-1")
    assert [m["id"] for m in hook.calls[-1][0]] == ["m31"]  # a success ended the rest


def test_within_one_delivery_a_hook_that_raised_is_not_called_again() -> None:
    hook = Down()
    reducer, _ = clocked(hook, retry_after=0)
    for n in range(20):
        reducer.deliver(said(n), f"thread-{n}")
    assert hook.tried == 20  # one call per delivery, not one per conversation waiting
    report = reducer.deliver([], "thread-0")
    assert hook.tried == 21 and len(report.hooks[0].failed) == 20 and reducer.pending == 20


@pytest.mark.parametrize("style", ["sync", "async"])
async def test_a_resting_hook_reports_what_waits_as_failed(style: str) -> None:
    hook = Recorder(fail=lambda: True)
    reducer, _ = clocked(hook)
    reducer.deliver(said(0), "ns")
    pruned = conversation(1, calls=0)
    report = (
        reducer.deliver(pruned, "ns") if style == "sync" else await reducer.adeliver(pruned, "ns")
    )
    assert report.hooks[0].failed == ("sys", "h0", "b0") and not report.ok
    assert reducer.pending == 4


def test_the_log_has_one_traceback_then_a_line_per_failed_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentstate_reducer")
    hook = Recorder(fail=lambda: True)
    reducer, clock = clocked(hook)
    for n in range(100):
        reducer.deliver(said(n), f"thread-{n}")
    clock.advance(1.0)
    reducer.deliver([], "thread-0")
    records = [r for r in caplog.records if "on_prune hook" in r.getMessage()]
    assert len(records) == 2
    assert records[0].exc_info is not None and "after a rest of 1 s" in records[0].getMessage()
    assert records[1].exc_info is None
    assert "failed again (2 times in a row)" in records[1].getMessage()
    assert "memory store is down" in records[1].getMessage()
    assert "after a rest of 2 s" in records[1].getMessage()


def test_a_full_retry_buffer_logs_one_error_per_delivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hook = Recorder(fail=lambda: True)
    reducer, _ = clocked(hook, dedupe_window=10)
    reducer.deliver([m for n in range(50) for m in said(n)], "ns")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "dropped 40 messages" in errors[0].getMessage()
    assert reducer.lost == 40 and reducer.pending == 10


def test_a_background_hook_that_failed_is_handed_one_batch_per_rest() -> None:
    """After its rest a background hook gets one batch, whose outcome (known only once its
    worker ran it) decides whether the others follow."""
    hook = Down()
    with Background(hook, name="store") as background:
        reducer, clock = clocked(background)
        for n in range(20):
            reducer.deliver(said(n), f"thread-{n}")
            assert background.flush(5)
        assert hook.tried == 1 and reducer.pending == 20
        clock.advance(1.0)
        reducer.deliver([], "thread-0")
        assert background.flush(5)
        assert hook.tried == 2 and reducer.pending == 20
        hook.down = False
        clock.advance(2.0)
        reducer.deliver([], "thread-0")  # one batch: it delivers
        assert background.flush(5) and hook.tried == 3 and reducer.pending == 19
        reducer.deliver([], "thread-0")  # then all the others
        assert background.flush(5) and reducer.pending == 0
        assert sorted(hook.got) == sorted(f"m{n}" for n in range(20))


@pytest.mark.parametrize(
    ("field", "value", "wanted"),
    [
        ("retry_after", -1, "finite number of seconds >= 0"),
        ("retry_after", math.nan, "finite number of seconds >= 0"),
        ("retry_after", "1", "must be a number of seconds"),
        ("max_retry_after", True, "must be a number of seconds"),
        ("max_retry_after", math.inf, "finite number of seconds >= 0"),
        ("max_retry_after", 0.5, "max_retry_after=0.5 is shorter than retry_after=1.0"),
    ],
)
def test_bad_retry_timings_name_the_value(field: str, value: Any, wanted: str) -> None:
    with pytest.raises(ValueError, match=rf"ReducerConfig\.{field}=|max_retry_after") as raised:
        ReducerConfig(**{field: value})
    assert wanted in str(raised.value)


@pytest.mark.parametrize("retry_after", [0.0, 1.0])
def test_a_batch_a_hook_always_raises_on_does_not_hold_up_the_others(retry_after: float) -> None:
    """The batch that raised was kept first again, and the batches left after it behind it:
    it ran first at every delivery and the other namespaces got nothing until the retry
    buffer dropped it (found by review)."""
    got: list[str] = []

    def hook(pruned: list[Any], namespace: Any) -> None:
        if namespace == "poison":
            raise ValueError("a message the store refuses")
        got.extend(m["id"] for m in pruned)

    reducer, clock = clocked(hook, retry_after=retry_after)
    reducer.deliver(said(0), "poison")
    for n in range(1, 21):
        clock.advance(300.0)
        reducer.deliver(said(n), "fine")
    assert got == [f"m{n}" for n in range(1, 21)] and reducer.pending == 1


def test_deliveries_made_while_a_probe_runs_hand_the_hook_nothing() -> None:
    """After its rest a background hook was handed one batch per delivery until the first
    came back, each failure counted: 11 calls and a rest at its cap (found by review)."""
    release = threading.Event()
    tried = [0]

    def store(pruned: list[Any], namespace: Any) -> None:
        tried[0] += 1
        release.wait(5)
        raise RuntimeError("memory store is down")

    with Background(store, name="store", workers=4) as background:
        reducer, clock = clocked(background)
        release.set()
        reducer.deliver(said(0), "t0")
        assert background.flush(5) and tried[0] == 1
        release.clear()
        clock.advance(1.0)
        for n in range(1, 11):  # the probe holds its worker meanwhile
            reducer.deliver(said(n), f"t{n}")
        release.set()
        assert background.flush(5)
        assert tried[0] == 2 and reducer._dispatcher.failures("store") == (2, 2.0)


def test_failures_that_overlap_count_as_one() -> None:
    """Batches handed over before any of them failed each counted a failure in a row: one
    outage of a few seconds sent the rest to its cap (found by review)."""
    release = threading.Event()

    def store(pruned: list[Any], namespace: Any) -> None:
        release.wait(5)
        raise RuntimeError("memory store is down")

    with Background(store, name="store", workers=4) as background:
        reducer, _ = clocked(background)
        for n in range(8):
            reducer.deliver(said(n), f"t{n}")
        release.set()
        assert background.flush(5)
    assert reducer._dispatcher.failures("store") == (1, 1.0) and reducer.pending == 8


def test_a_hook_cancelled_as_its_loop_ends_does_not_rest() -> None:
    """A coroutine hook scheduled on a loop that ended before it finished counted as a
    failure: a hook that never raised rested, and the next request did not call it."""
    calls = [0]

    async def store(pruned: list[Any], namespace: Any) -> None:
        calls[0] += 1
        if calls[0] == 1:
            await asyncio.sleep(60)  # still running when the loop ends

    reducer, _ = clocked(store)

    async def request(n: int) -> None:
        reducer.deliver(said(n), "ns")  # scheduled on this loop

    asyncio.run(request(0))
    assert reducer._dispatcher.failures(hook_key(store)) == (0, 0.0) and reducer.pending == 1
    asyncio.run(request(1))  # a second request: called at once
    assert calls[0] == 2


async def test_what_is_cut_while_a_hook_rests_stays_bounded_on_the_event_loop() -> None:
    """`deliver` on an event loop with an async ledger kept what was cut as never to be
    dropped, and a hook resting for 300 s let it grow past `dedupe_window` (found by
    review)."""
    ledger = StallingLedger()
    ledger.stalled = False
    hook = Down()
    reducer, _ = clocked(hook, ledger=ledger, dedupe_window=10)
    await reducer.adeliver(said(0), "ns")
    for n in range(1, 101):
        reducer.deliver(said(n), "ns")
    await reducer.aflush()
    assert hook.tried == 1 and reducer.pending == 10 and reducer.lost == 91


def test_a_probe_cancelled_as_its_loop_ends_leaves_no_long_rest() -> None:
    """A background hook out on a probe rests until it settles; one cancelled as its loop
    ended (no verdict) left the hook resting `max_retry_after`, 300 s (found by review)."""
    calls = [0]

    async def store(pruned: list[Any], namespace: Any) -> None:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("memory store is down")
        await asyncio.sleep(60)  # the probe: still running when its loop ends

    reducer, clock = clocked(AsyncBackground(store, name="store"))

    async def request(n: int) -> None:
        reducer.deliver(said(n), "ns")
        await asyncio.sleep(0.05)

    asyncio.run(request(0))
    clock.advance(1.0)
    asyncio.run(request(1))  # the probe, cancelled as the loop ends
    assert reducer._dispatcher.failures("store") == (1, 0.0) and calls[0] == 2
    asyncio.run(request(2))
    assert calls[0] == 3


@pytest.mark.parametrize("kind", ["AsyncBackground", "scheduled"])
def test_a_hook_that_raises_cancelled_error_itself_rests(kind: str) -> None:
    """A coroutine hook whose own call fails with `CancelledError` (its client's request was
    cancelled; its task was not) was taken for one cancelled as its loop ended: it never
    rested and was called at every delivery (found by review)."""
    calls = [0]

    async def store(pruned: list[Any], namespace: Any) -> None:
        calls[0] += 1
        request = asyncio.ensure_future(asyncio.sleep(10))
        request.cancel()
        await request

    hook: Any = AsyncBackground(store, name="store") if kind == "AsyncBackground" else store
    reducer, _ = clocked(hook)

    async def main() -> None:
        for n in range(10):
            reducer.deliver(said(n), "ns")
            await asyncio.sleep(0.01)
        await (hook.aflush() if kind == "AsyncBackground" else reducer.aflush())

    asyncio.run(main())
    assert calls[0] == 1 and reducer._dispatcher.failures(hook_key(hook)) == (1, 1.0)


def test_a_scheduled_coroutine_hook_out_on_a_probe_is_handed_nothing_more() -> None:
    """A coroutine hook scheduled on the loop after its rest was handed one batch per
    delivery until the first came back (found by review)."""
    calls = [0]
    down = [True]

    async def store(pruned: list[Any], namespace: Any) -> None:
        calls[0] += 1
        await asyncio.sleep(0.05)
        if down[0]:
            raise RuntimeError("memory store is down")

    reducer, clock = clocked(store)

    async def requests(first: int, count: int) -> None:
        for n in range(first, first + count):
            reducer.deliver(said(n), f"t{n}")
            await asyncio.sleep(0)
        await reducer.aflush()

    asyncio.run(requests(0, 1))
    assert calls[0] == 1
    clock.advance(1.0)
    asyncio.run(requests(1, 10))
    assert calls[0] == 2 and reducer._dispatcher.failures(hook_key(store)) == (2, 2.0)


def test_retry_now_ends_a_rest_and_names_a_hook_it_does_not_know() -> None:
    # A store known to be back had to wait out the rest (up to max_retry_after).
    hook, other = Down(), Recorder()
    reducer, clock = clocked(hook, retry_after=60.0)
    reducer.config.on_prune.append(other)
    reducer.deliver(said(0), "ns")
    reducer.deliver([], "ns")
    assert hook.tried == 1 and reducer.pending == 1
    hook.down = False
    reducer.retry_now(hook)
    reducer.deliver([], "ns")
    assert hook.tried == 2 and hook.got == ["m0"] and reducer.pending == 0
    hook.down = True
    reducer.deliver(said(1), "ns")
    reducer.deliver([], "ns")
    assert hook.tried == 3
    reducer.retry_now(hook_key(hook))  # by its key
    reducer.deliver([], "ns")
    assert hook.tried == 4
    reducer.retry_now()  # every hook
    reducer.deliver([], "ns")
    assert hook.tried == 5
    # its failures in a row still count: the next rest is longer
    clock.advance(60 * 4 - 0.001)
    reducer.deliver([], "ns")
    assert hook.tried == 5
    assert other.ids == ["m0", "m1"]
    with pytest.raises(ValueError, match=r"retry_now\('nope'\): not a hook of this reducer"):
        reducer.retry_now("nope")
    with pytest.raises(ValueError, match="pass one of config.on_prune or its key"):
        reducer.retry_now(Down())


def test_retry_now_takes_a_bound_method_and_every_hook_of_a_name() -> None:
    # A bound method is a new object at each read: retry_now(store.remember) was refused;
    # of two hooks named alike, the name woke only the first.
    class Store:
        def __init__(self) -> None:
            self.down = Down()

        def remember(self, pruned: list[Any], namespace: Any) -> None:
            self.down(pruned, namespace)

    store = Store()
    reducer, _ = clocked(store.remember, retry_after=60.0)
    reducer.deliver(said(0), "ns")
    reducer.retry_now(store.remember)
    reducer.deliver([], "ns")
    assert store.down.tried == 2
    first, second = Down(), Down()
    first.name = second.name = "memory"  # type: ignore[attr-defined]
    reducer, _ = clocked(first, retry_after=60.0)
    reducer.config.on_prune.append(second)
    reducer.deliver(said(0), "ns")
    assert (first.tried, second.tried) == (1, 1)
    reducer.retry_now("memory")
    reducer.deliver([], "ns")
    assert (first.tried, second.tried) == (2, 2)


def test_retry_now_leaves_a_probe_in_flight_to_decide() -> None:
    # Woken while its probe hung, a background hook was handed one more batch per delivery.
    release = threading.Event()
    tried = [0]

    def store(pruned: list[Any], namespace: Any) -> None:
        tried[0] += 1
        release.wait(5)
        raise RuntimeError("memory store is down")

    with Background(store, name="store", workers=4) as background:
        reducer, clock = clocked(background)
        release.set()
        reducer.deliver(said(0), "t0")
        assert background.flush(5) and tried[0] == 1
        release.clear()
        clock.advance(1.0)
        reducer.deliver(said(1), "t1")  # the probe, holding its worker
        for n in range(2, 6):
            reducer.retry_now()
            reducer.deliver(said(n), f"t{n}")
        release.set()
        assert background.flush(5)
        assert tried[0] == 2
        reducer.retry_now()  # settled: woken again
        reducer.deliver([], "t0")
        assert background.flush(5) and tried[0] == 3
