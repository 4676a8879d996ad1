"""Retries back off: while a hook is down, deliveries leave it alone between retries.

Every test runs on a fake monotonic clock (`ReducerConfig.clock`) and counts hook calls;
none waits for real time.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from reducer_helpers import Recorder, StallingLedger, conversation

from agentstate_reducer import (
    AsyncBackground,
    Background,
    DeliveryLedger,
    InMemoryLedger,
    MessageReducer,
    ReducerConfig,
)


class Clock:
    """A monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Down(Recorder):
    """A hook that fails while `down`, counting every call it gets."""

    def __init__(self) -> None:
        self.down = True
        self.tries = 0
        super().__init__(fail=lambda: self.down)

    def __call__(self, pruned: list[Any], namespace: Any) -> None:
        self.tries += 1
        super().__call__(pruned, namespace)


def message(n: int) -> dict[str, Any]:
    return {"role": "human", "content": f"m{n}", "id": f"m{n}"}


def reducer_with(
    *hooks: Any, clock: Clock, ledger: DeliveryLedger | None = None, **config: Any
) -> MessageReducer:
    config = ReducerConfig(on_prune=list(hooks), clock=clock, **config)
    return MessageReducer(config=config, ledger=ledger)


def test_a_failing_hook_is_called_once_per_wait_not_once_per_delivery() -> None:
    """A delivery every 0.5 s for 130 s while the hook is down called it 261 times; now only
    when its wait is over: 1 s after the first failure, doubling, at most 60 s."""
    clock, hook = Clock(), Down()
    reducer = reducer_with(hook, clock=clock)
    called_at: list[float] = []
    for n in range(261):
        before = hook.tries
        reducer.deliver([message(n)], "ns")
        if hook.tries > before:
            called_at.append(clock.now)
        clock.now += 0.5
    assert called_at == [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 123.0]
    assert reducer.pending == 261  # every message waits: none was dropped for the wait


def test_the_messages_a_backoff_held_back_are_delivered_once_when_the_hook_is_back() -> None:
    clock, hook = Clock(), Down()
    steady = Recorder()
    ledger = InMemoryLedger(100)  # remembers more than the retry buffer holds
    reducer = reducer_with(hook, steady, clock=clock, dedupe_window=3, ledger=ledger)
    for n in range(10):  # more than the retry buffer's 3: held back, never dropped
        report = reducer.deliver([message(n)], "ns")
        assert report.hooks[0].failed == ((f"m{n}",) if n else ("m0",))
        assert report.hooks[1].delivered == (f"m{n}",)  # the other hook is called as usual
    assert hook.tries == 1 and reducer.pending == 10
    hook.down = False
    clock.now = 1.0
    report = reducer.deliver([message(10)], "ns")
    assert report.ok and hook.tries == 2
    assert hook.ids == [f"m{n}" for n in range(11)] and reducer.pending == 0
    assert reducer.deliver([message(n) for n in range(11)], "ns").hooks[0].delivered == ()
    assert steady.ids == [f"m{n}" for n in range(11)]  # once each


def test_a_success_resets_the_wait() -> None:
    clock, hook = Clock(), Down()
    reducer = reducer_with(hook, clock=clock)
    for now in (0.0, 1.0, 3.0):  # three failures in a row: the wait is 4 s now
        clock.now = now
        reducer.deliver([message(int(now))], "ns")
    assert hook.tries == 3 and reducer.next_retry == 4.0
    hook.down = False
    clock.now = 7.0
    assert reducer.deliver([], "ns").ok and reducer.next_retry is None
    hook.down = True
    reducer.deliver([message(7)], "ns")  # fails: 1 s again, not 8 s
    assert reducer.next_retry == 1.0
    clock.now = 8.0
    hook.down = False
    assert reducer.deliver([message(8)], "ns").ok
    assert hook.tries == 6 and reducer.pending == 0


def test_a_call_that_asks_for_the_retries_only_retries_at_once() -> None:
    clock, hook = Clock(), Down()
    reducer = reducer_with(hook, clock=clock)
    reducer.deliver([message(0)], "ns")
    hook.down = False
    assert reducer.deliver([message(1)], "ns").hooks[0].failed == ("m1",)
    assert reducer.deliver([], "ns", retry_now=False).hooks[0].delivered == ()
    assert hook.tries == 1  # left alone: the wait is not over
    assert reducer.deliver([]).hooks[0].delivered == ("m0", "m1")
    assert hook.tries == 2 and reducer.pending == 0 and reducer.next_retry is None


async def test_adeliver_backs_off_alike() -> None:
    clock, hook = Clock(), Down()

    async def remember(pruned: list[Any], namespace: Any) -> None:
        hook(pruned, namespace)

    reducer = reducer_with(remember, clock=clock)
    for n in range(5):
        await reducer.adeliver([message(n)], "ns")
    assert hook.tries == 1 and reducer.pending == 5
    assert (await reducer.adeliver([message(5)], "ns", retry_now=True)).hooks[0].failed
    assert hook.tries == 2  # asked for now: called, failed, and the wait is unchanged
    hook.down = False
    clock.now = 1.0
    assert (await reducer.adeliver([message(6)], "ns")).ok
    assert hook.ids == [f"m{n}" for n in range(7)] and reducer.pending == 0


def test_next_retry_says_when_the_waiting_messages_are_retried() -> None:
    clock, hook = Clock(), Down()
    reducer = reducer_with(hook, clock=clock, retry_after=2, max_retry_after=5)
    assert reducer.next_retry is None
    for now, wait in ((0.0, 2.0), (2.0, 4.0), (6.0, 5.0), (11.0, 5.0)):
        clock.now = now
        reducer.deliver([message(int(now))], "ns")
        assert reducer.next_retry == wait
    clock.now = 13.5
    assert reducer.next_retry == 2.5
    clock.now = 20.0
    assert reducer.next_retry == 0.0  # the next delivery retries


def test_retry_after_zero_retries_at_every_delivery() -> None:
    clock, hook = Clock(), Down()
    reducer = reducer_with(hook, clock=clock, retry_after=0, max_retry_after=0)
    for n in range(5):
        reducer.deliver([message(n)], "ns")
    assert hook.tries == 5 and reducer.next_retry == 0.0


def test_a_cancelled_delivery_starts_no_wait() -> None:
    """A caller's cancellation (a request's timeout) says nothing of the hook."""
    clock = Clock()
    got: list[str] = []
    started = asyncio.Event()
    stall = [True]

    async def remember(pruned: list[Any], namespace: Any) -> None:
        if stall[0]:
            started.set()
            await asyncio.Event().wait()
        got.extend(m["id"] for m in pruned)

    reducer = reducer_with(remember, clock=clock)

    async def run() -> None:
        call = asyncio.ensure_future(reducer.adeliver([message(0)], "ns"))
        await started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        stall[0] = False
        assert (await reducer.adeliver([message(1)], "ns")).ok  # no wait: called at once

    asyncio.run(run())
    assert got == ["m0", "m1"] and reducer.pending == 0


def test_a_background_hooks_failure_backs_off_too() -> None:
    clock, hook = Clock(), Down()
    with Background(hook, name="bg") as background:
        reducer = reducer_with(background, clock=clock)
        reducer.deliver([message(0)], "ns")
        assert background.flush(5) and background.failed == 1
        report = reducer.deliver([message(1)], "ns")
        assert report["bg"].failed == ("m1",) and hook.tries == 1
        hook.down = False
        clock.now = 1.0
        assert reducer.deliver([message(2)], "ns")["bg"].queued == ("m0", "m1", "m2")
        assert background.flush(5)
    assert hook.ids == ["m0", "m1", "m2"] and reducer.pending == 0


async def test_an_async_background_hooks_failure_backs_off_too() -> None:
    clock, hook = Clock(), Down()

    async def remember(pruned: list[Any], namespace: Any) -> None:
        hook(pruned, namespace)

    async with AsyncBackground(remember, name="abg") as background:
        reducer = reducer_with(background, clock=clock)
        reducer.deliver([message(0)], "ns")
        await background.aflush()
        assert reducer.deliver([message(1)], "ns")["abg"].failed == ("m1",)
        assert hook.tries == 1
        hook.down = False
        assert reducer.deliver([], "ns")["abg"].queued == ("m0", "m1")  # asked for now
        await background.aflush()
    assert hook.ids == ["m0", "m1"] and reducer.pending == 0


def test_a_delivery_scheduled_on_the_event_loop_backs_off_too() -> None:
    """With a ledger to await, a `deliver` on the loop's thread (a LangGraph channel
    reducer under `ainvoke`) runs as a task: that task is automatic too."""
    clock, hook = Clock(), Down()
    ledger = StallingLedger()
    ledger.stalled = False
    reducer = reducer_with(hook, clock=clock, ledger=ledger)

    async def cuts() -> None:
        for n in range(6):
            assert reducer.deliver([message(n)], "ns").hooks[0].queued == (f"m{n}",)
            await reducer.aflush()

    asyncio.run(cuts())
    assert hook.tries == 1 and reducer.pending == 6


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"retry_after": -1}, r"retry_after=-1 must be a finite number of seconds >= 0"),
        ({"retry_after": math.nan}, r"retry_after=nan must be a finite number"),
        ({"max_retry_after": math.inf}, r"max_retry_after=inf must be a finite number"),
        ({"retry_after": "1s"}, r"retry_after='1s' must be a number of seconds .*retry_after=1"),
        ({"retry_after": True}, r"retry_after=True must be a number of seconds"),
        (
            {"retry_after": 10, "max_retry_after": 5},
            r"max_retry_after=5 is shorter than retry_after=10.*set max_retry_after >= ",
        ),
        ({"clock": 0.0}, r"clock=0.0 is not callable; pass .*time.monotonic"),
    ],
)
def test_backoff_settings_are_checked_naming_the_value_and_the_fix(
    settings: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        ReducerConfig(**settings)


def test_the_defaults_wait_one_second_doubling_to_a_minute() -> None:
    config = ReducerConfig()
    assert (config.retry_after, config.max_retry_after) == (1.0, 60.0)
    clock, hook = Clock(), Down()
    reducer = reducer_with(hook, clock=clock)
    reducer.deliver(conversation(1, calls=0), "ns")
    assert reducer.next_retry == 1.0
