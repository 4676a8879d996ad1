"""Background hooks: off the request path, bounded, and marked only after they succeed."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from reducer_helpers import Recorder, conversation

from agentstate_reducer import (
    AsyncBackground,
    Background,
    DeliveryReport,
    MessageReducer,
    ReducerConfig,
)


def reducer_with(*hooks: Any) -> MessageReducer:
    """A reducer whose failed hooks are retried at the next delivery (see test_reducer_backoff)."""
    config = ReducerConfig(min_messages=3, max_messages=5, on_prune=[*hooks], retry_after=0)
    return MessageReducer(config=config)


def test_a_batch_is_marked_delivered_only_when_the_worker_finishes() -> None:
    release = threading.Event()
    hook = Recorder()

    def slow(pruned: list[Any], namespace: Any) -> None:
        release.wait(5)
        hook(pruned, namespace)

    with Background(slow, name="slow") as background:
        reducer = reducer_with(background)
        pruned = conversation(1, calls=0)
        report = reducer.deliver(pruned, "ns")
        assert report["slow"].queued == ("sys", "h0", "b0")
        assert reducer.ledger.seen("slow", "ns", ["h0"]) == set()
        assert reducer.deliver(pruned, "ns")["slow"].skipped == ("sys", "h0", "b0")  # in flight
        release.set()
        assert background.flush(5)
        assert reducer.ledger.seen("slow", "ns", ["h0"]) == {"h0"}
    assert hook.ids == ["sys", "h0", "b0"]


def test_a_failed_background_batch_is_retried_by_the_next_delivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = True
    hook = Recorder(fail=lambda: down)
    with Background(hook, name="mem") as background:
        reducer = reducer_with(background)
        reducer.deliver(conversation(1, calls=0), "ns")
        background.flush(5)
        assert background.failed == 1 and reducer.pending == 3
        assert "hook failed on 3 messages" in caplog.text
        down = False
        assert reducer.deliver([], "ns")["mem"].queued == ("sys", "h0", "b0")
        background.flush(5)
    assert hook.ids == ["sys", "h0", "b0"] and reducer.pending == 0


def test_a_full_backlog_drops_counts_logs_and_keeps_the_batch_for_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    background = Background(lambda p, ns: release.wait(5), workers=1, max_pending=1, name="bg")
    reducer = reducer_with(background)
    reducer.deliver([{"role": "human", "content": "a", "id": "a"}], None)
    with caplog.at_level(logging.WARNING):
        report = reducer.deliver([{"role": "human", "content": "b", "id": "b"}], None)
    assert report["bg"].failed == ("b",)
    assert background.dropped == 1 and background.dropped_messages == 1
    assert "backlog of 1 batches is full" in caplog.text
    assert reducer.pending == 1
    release.set()
    background.close()


def test_direct_calls_copy_the_list_and_close_drains() -> None:
    got: list[list[Any]] = []
    background = Background(lambda p, ns: got.append(p))
    batch = [1, 2]
    background(batch, None)
    batch.append(3)
    background.close()
    assert got == [[1, 2]]
    background([4], None)
    assert background.dropped == 1


def test_background_runs_coroutine_functions() -> None:
    got: list[Any] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        got.append(namespace)

    with Background(remember) as background:
        background([1], "ns")
    assert got == ["ns"]


def test_pending_batches_drain_at_interpreter_exit(tmp_path: Path) -> None:
    out = tmp_path / "out.txt"
    script = textwrap.dedent(
        f"""
        import time
        from agentstate_reducer import Background

        def write(pruned, namespace):
            time.sleep(0.2)
            with open({str(out)!r}, "a") as handle:
                handle.write(f"{{len(pruned)}}\\n")

        background = Background(write, workers=1)
        for _ in range(3):
            background([1, 2], None)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=30)
    assert out.read_text().splitlines() == ["2", "2", "2"]


def test_exit_does_not_wait_for_a_background_closed_without_waiting() -> None:
    """`close(wait=False)` is a promise not to wait (here for a hook that hangs): exit kept
    it until a close learned to wait after an earlier one (for a close from the hook)."""
    script = textwrap.dedent(
        """
        import threading
        from agentstate_reducer import Background

        background = Background(lambda pruned, namespace: threading.Event().wait(), workers=1)
        background([1], None)
        background.close(wait=False)
        print("closed", flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=30, capture_output=True)
    assert done.returncode == 0 and done.stdout == b"closed\n"


@pytest.mark.parametrize("value", [0, -1, 1.5, True])
def test_sizes_are_validated(value: Any) -> None:
    with pytest.raises(ValueError, match="workers="):
        Background(print, workers=value)
    with pytest.raises(ValueError, match="max_pending="):
        AsyncBackground(print, max_pending=value)


async def test_async_background_marks_after_the_task_succeeds() -> None:
    got: list[Any] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        await asyncio.sleep(0.01)
        got.append([m["id"] for m in pruned])

    async with AsyncBackground(remember, name="amem") as background:
        reducer = reducer_with(background)
        result = await reducer.areduce(conversation(3, calls=0), namespace="ns")
        assert result.delivery is not None
        assert result.delivery["amem"].queued == ("h0", "b0", "h1", "b1")
        assert reducer.ledger.seen("amem", "ns", ["h0"]) == set()
    assert got == [["h0", "b0", "h1", "b1"]]
    assert reducer.ledger.seen("amem", "ns", ["h0"]) == {"h0"}


async def test_async_background_failures_and_limits() -> None:
    async def down(pruned: list[Any], namespace: Any) -> None:
        raise RuntimeError("down")

    background = AsyncBackground(down, workers=1, max_pending=1, name="down")
    reducer = reducer_with(background)
    first = reducer.deliver([{"role": "human", "content": "a", "id": "a"}], None)
    second = reducer.deliver([{"role": "human", "content": "b", "id": "b"}], None)
    assert first["down"].queued == ("a",) and second["down"].failed == ("b",)
    await background.aclose()
    assert background.failed == 1 and background.dropped == 1
    assert reducer.pending == 2
    assert not background.submit([1], None)


def test_async_background_without_a_loop_drops() -> None:
    background = AsyncBackground(lambda p, ns: None)
    assert not background.submit([1], None)
    assert background.dropped == 1


async def test_async_background_accepts_batches_from_other_threads() -> None:
    got: list[Any] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        got.append(pruned)

    background = AsyncBackground(remember)
    background([0], None)  # binds the running loop
    thread = threading.Thread(target=background, args=([1], None))
    thread.start()
    thread.join()
    await background.aclose()
    assert sorted(got) == [[0], [1]]


def test_a_background_worker_outlives_a_cancelled_coroutine_hook(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A `CancelledError` out of a coroutine hook's `asyncio.run` ended the worker thread: the
    batches queued behind it never ran nor settled, and their claims were held for good."""
    cancelled = [True]
    hook = Recorder()

    async def remember(pruned: list[Any], namespace: Any) -> None:
        if cancelled[0]:
            raise asyncio.CancelledError  # a client library's timeout leaking out, say
        hook(pruned, namespace)

    with Background(remember, workers=1, name="mem") as background:
        reducer = reducer_with(background)
        reducer.deliver(conversation(1, calls=0), "ns")
        assert background.flush(5) and reducer.pending == 3
        cancelled[0] = False
        assert reducer.deliver([], "ns")["mem"].queued == ("sys", "h0", "b0")
        assert background.flush(5)
    assert hook.ids == ["sys", "h0", "b0"] and reducer.pending == 0
    assert background.failed == 1 and "hook cancelled on 3 messages" in caplog.text


def ids(messages: list[Any]) -> list[str]:
    return [m["id"] for m in messages]


def recording_async_background(
    stuck: Sequence[bool] = (False,),
) -> tuple[list[str], AsyncBackground, MessageReducer]:
    """An `AsyncBackground` named `amem` whose hook records the ids it gets (while `stuck[0]`,
    it waits until cancelled first), and a reducer that delivers to it."""
    got: list[str] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        if stuck[0]:
            await asyncio.Event().wait()  # until cancelled, if ever
        got.extend(ids(pruned))

    background = AsyncBackground(remember, name="amem")
    return got, background, reducer_with(background)


def retry_on_a_new_loop(background: AsyncBackground, reducer: MessageReducer) -> DeliveryReport:
    """A later request, on a new loop: flush `background`, retry with `adeliver([])`, close
    `background`; returns the retry's report."""

    async def later() -> DeliveryReport:
        await asyncio.wait_for(background.aflush(), 5)
        report = await reducer.adeliver([], "ns")
        await asyncio.wait_for(background.aclose(), 5)
        return report

    return asyncio.run(later())


def test_an_async_batch_the_loop_never_started_waits_for_the_next_delivery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`asyncio.run` ending cancels a batch's task before its first step, so none of it ran:
    `done` was never called, its claims were held for good (later deliveries skipped the
    messages as in flight) and `aflush` never returned."""
    got, background, reducer = recording_async_background()
    pruned = conversation(1, calls=0)

    async def request() -> None:  # the channel reducer runs as the loop's last callback
        asyncio.get_running_loop().call_soon(reducer.deliver, pruned, "ns")

    with caplog.at_level(logging.WARNING, logger="agentstate_reducer"):
        asyncio.run(request())
    assert got == [] and reducer.pending == 3 and background.failed == 1
    assert "a batch of 3 messages was cancelled before its hook finished" in caplog.text

    async def later() -> Any:  # a later request, on a new loop
        await asyncio.wait_for(background.aflush(), 5)
        report = await reducer.adeliver(pruned, "ns")
        await asyncio.wait_for(background.aflush(), 5)
        again = await reducer.adeliver(pruned, "ns")
        await background.aclose()
        return report, again

    report, again = asyncio.run(later())
    assert report["amem"].queued == ("sys", "h0", "b0") and not report["amem"].skipped
    assert again["amem"].skipped == ("sys", "h0", "b0") and not again["amem"].queued
    assert got == ["sys", "h0", "b0"] and reducer.pending == 0


def test_async_batches_cancelled_while_their_hook_runs_wait_for_a_new_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Batches running or waiting for a slot when the loop ends settle as failed; a later
    loop delivers each message once (the slot semaphore stayed bound to the old loop)."""
    got: list[str] = []
    stuck = [True]

    async def remember(pruned: list[Any], namespace: Any) -> None:
        if stuck[0]:
            await asyncio.Event().wait()  # until cancelled
        await asyncio.sleep(0.01)  # so the second batch waits for the slot
        got.extend(ids(pruned))

    background = AsyncBackground(remember, workers=1, name="amem")
    reducer = reducer_with(background)
    first, second = conversation(1, calls=0), [{"role": "human", "content": "x", "id": "x"}]

    async def request(*batches: list[Any]) -> None:
        for batch in batches:
            reducer.deliver(batch, "ns")
        await asyncio.sleep(0.01)  # the first hook runs, the second batch waits for its slot

    with caplog.at_level(logging.WARNING, logger="agentstate_reducer"):
        asyncio.run(request(first, second))
    assert got == [] and reducer.pending == 4 and background.failed == 2
    stuck[0] = False

    async def later() -> None:  # the retries go with y; z waits for the slot
        await request(*([{"role": "human", "content": i, "id": i}] for i in "yz"))
        await asyncio.wait_for(background.aclose(), 5)

    asyncio.run(later())
    assert sorted(got) == ["b0", "h0", "sys", "x", "y", "z"] and len(got) == 6
    assert reducer.pending == 0 and background.failed == 2
    assert "a batch of 3 messages was cancelled before its hook finished" in caplog.text
    assert "a batch of 1 messages was cancelled before its hook finished" in caplog.text


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 has no Task.cancelling()")
async def test_an_async_background_hook_cancelled_by_itself_fails_its_batch_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hook's own `CancelledError` (nothing cancelled its task) was raised on: the task
    ended cancelled and the batch was logged as cut short by the loop ending, with no
    traceback, telling to await `aclose()`; it is a failed batch, kept for retry."""
    cancelled: list[bool] = [True]
    got: list[str] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        if cancelled[0]:
            future = asyncio.get_running_loop().create_future()
            future.cancel()
            await future
        got.extend(ids(pruned))

    background = AsyncBackground(remember, name="amem")
    reducer = reducer_with(background)
    await reducer.adeliver(conversation(1, calls=0), "ns")
    tasks = list(background._tasks)
    await asyncio.wait_for(background.aflush(), 5)
    assert tasks and not any(task.cancelled() for task in tasks)
    assert background.failed == 1 and reducer.pending == 3
    assert "amem: hook failed on 3 messages" in caplog.text
    assert "cancelled before its hook finished" not in caplog.text
    cancelled[0] = False
    await reducer.adeliver([], "ns")
    await asyncio.wait_for(background.aclose(), 5)
    assert got == ["sys", "h0", "b0"] and reducer.pending == 0


async def test_cancelling_async_background_aflush_leaves_the_batches_running() -> None:
    """`aflush` gathered the batches, so a timeout around it cancelled the hooks themselves."""
    release = asyncio.Event()
    got: list[str] = []

    async def remember(pruned: list[Any], namespace: Any) -> None:
        await release.wait()
        got.extend(ids(pruned))

    background = AsyncBackground(remember, name="amem")
    reducer = reducer_with(background)
    reducer.deliver(conversation(1, calls=0), "ns")
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(background.aflush(), 0.05)
    release.set()
    await asyncio.wait_for(background.aclose(), 5)
    assert got == ["sys", "h0", "b0"] and background.failed == 0 and reducer.pending == 0
    assert reducer.ledger.seen("amem", "ns", ["sys", "h0", "b0"]) == {"sys", "h0", "b0"}


def test_an_async_done_of_a_batch_the_loop_never_started_is_awaited() -> None:
    settled: list[Any] = []

    async def done(error: BaseException | None) -> None:
        await asyncio.sleep(0)
        settled.append(type(error))

    background = AsyncBackground(Recorder(), name="amem")

    async def request() -> None:
        asyncio.get_running_loop().call_soon(background.submit, [1], None, done)

    asyncio.run(request())
    assert settled == [asyncio.CancelledError] and background.failed == 1
    asyncio.run(asyncio.wait_for(background.aflush(), 5))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_background_worker_ended_by_a_hook_is_replaced() -> None:
    """`SystemExit` in a hook ended the worker thread, which stayed counted as a worker: the
    batches queued behind it never ran nor settled, and `flush` timed out."""
    exited: list[threading.Thread] = []
    hook = Recorder()

    def remember(pruned: list[Any], namespace: Any) -> None:
        if not exited:
            exited.append(threading.current_thread())
            raise SystemExit
        hook(pruned, namespace)

    with Background(remember, workers=1, name="mem") as background:
        reducer = reducer_with(background)
        reducer.deliver(conversation(1, calls=0), "ns")
        assert background.flush(5) and reducer.pending == 3
        reducer.deliver([{"role": "human", "content": "x", "id": "x"}], "ns")
        assert background.flush(5)
    exited[0].join(5)  # its end is reported now, not in a later test
    assert hook.ids == ["sys", "h0", "b0", "x"] and reducer.pending == 0
    assert background.failed == 1 and not exited[0].is_alive()


def test_a_batch_handed_to_a_loop_that_closed_before_starting_it_is_retried() -> None:
    """A batch submitted from another thread, whose loop closed before running the hand-over,
    never settled: its claims were held for good and `aclose` on a later loop never returned."""
    got, background, reducer = recording_async_background()
    pruned = conversation(1, calls=0)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(reducer.adeliver([{"role": "human", "id": "x"}], "ns"))
    loop.run_until_complete(background.aflush())  # bound to `loop`
    reports: list[DeliveryReport] = []

    def last_callback() -> None:  # the loop stops after it, before running the hand-over
        loop.stop()
        thread = threading.Thread(target=lambda: reports.append(reducer.deliver(pruned, "ns")))
        thread.start()
        thread.join()

    loop.call_soon(last_callback)
    loop.run_forever()
    loop.close()
    assert reports[0]["amem"].queued == ("sys", "h0", "b0")

    report = retry_on_a_new_loop(background, reducer)
    assert report["amem"].queued == ("sys", "h0", "b0") and background.failed == 1
    assert got == ["x", "sys", "h0", "b0"] and reducer.pending == 0


def test_an_async_batch_delivered_while_its_loop_is_stopped_is_dropped_and_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Sync code delivering with no loop running, after the loop `AsyncBackground` was bound
    to stopped without closing (`run_until_complete` returned), handed the batch to that loop:
    its hook never ran, yet the report said queued, and later deliveries skipped the messages
    as in flight; none was ever delivered nor retried."""
    got, background, reducer = recording_async_background()
    pruned = conversation(1, calls=0)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(reducer.adeliver([{"role": "human", "id": "x"}], "ns"))
    loop.run_until_complete(background.aflush())  # bound to `loop`, which stays stopped

    with caplog.at_level(logging.WARNING, logger="agentstate_reducer"):
        report = reducer.deliver(pruned, "ns")  # no loop runs
        again = reducer.deliver([], "ns")
    assert report["amem"].failed == ("sys", "h0", "b0") and not report["amem"].queued
    assert again["amem"].failed == ("sys", "h0", "b0") and not again["amem"].in_flight
    assert background.dropped == 2 and reducer.pending == 3
    assert "because its event loop is not running" in caplog.text

    later = loop.run_until_complete(reducer.adeliver([], "ns"))  # the loop runs again
    loop.run_until_complete(asyncio.wait_for(background.aclose(), 5))
    loop.close()
    assert later["amem"].queued == ("sys", "h0", "b0")
    assert got == ["x", "sys", "h0", "b0"] and reducer.pending == 0 and background.failed == 0


class ClosingLoop(asyncio.SelectorEventLoop):
    """A loop running in another thread that closes just as a batch is handed to it."""

    def run_in_a_thread(self) -> None:
        running = threading.Event()
        self.call_soon(running.set)
        self.thread = threading.Thread(target=self.run_forever)
        self.thread.start()
        assert running.wait(5)

    def call_soon_threadsafe(self, *args: Any, **kwargs: Any) -> Any:
        super().call_soon_threadsafe(self.stop)
        self.thread.join()
        self.close()
        return super().call_soon_threadsafe(*args, **kwargs)


def test_a_batch_whose_loop_closes_while_it_is_handed_over_is_dropped_and_retried() -> None:
    """`call_soon_threadsafe` raised `RuntimeError` out of `deliver`, after counting the batch
    as unsettled: its claims and every later hook's were held for good."""
    later = Recorder()
    background = AsyncBackground(Recorder(), name="amem")
    reducer = reducer_with(background, later)

    async def bind() -> None:  # its first batch binds it to this loop
        assert background.submit([], None)

    loop = ClosingLoop()
    loop.run_until_complete(bind())
    loop.run_until_complete(background.aflush())
    loop.run_in_a_thread()
    report = reducer.deliver(conversation(1, calls=0), "ns")  # from this thread: handed over
    assert report["amem"].failed == ("sys", "h0", "b0") and background.dropped == 1
    assert later.ids == ["sys", "h0", "b0"] and reducer.pending == 3
    asyncio.run(asyncio.wait_for(background.aclose(), 5))


def test_a_hand_over_that_fails_after_another_thread_settled_the_batch_counts_it_once() -> None:
    """The loop closes while a batch is handed to it from another thread, and a third
    thread's `submit` settles the batch as cancelled before the hand-over fails: it was
    settled twice (`done` and a drop), the unsettled count went below zero and `aflush`
    spun for ever."""
    done: list[BaseException | None] = []
    background = AsyncBackground(lambda pruned, namespace: None, workers=1)
    loop = asyncio.new_event_loop()
    background._loop = loop  # as if an earlier batch on that loop bound it
    loop.is_running = lambda: True  # type: ignore[method-assign]  # in another thread, say

    def closing(callback: Any, *args: Any) -> None:  # the race, played in one thread
        del loop.is_running  # it stopped
        loop.close()
        background._reap()
        raise RuntimeError("Event loop is closed")

    loop.call_soon_threadsafe = closing  # type: ignore[method-assign]
    assert background.submit([{"id": "m1"}], None, done.append) is True
    assert len(done) == 1 and isinstance(done[0], asyncio.CancelledError)
    assert background.dropped == 0 and background.failed == 1
    asyncio.run(asyncio.wait_for(background.aflush(), 5))


def test_a_batch_taken_over_while_asyncio_run_ends_is_retried_on_a_later_loop() -> None:
    """A batch handed over from another thread while `asyncio.run` cancelled what was left got
    a task that the cancelling missed: the loop closed with it pending, so its `done` was never
    called, its claims were held for good and `aflush` on a later loop never returned."""
    stuck = [True]
    got, background, reducer = recording_async_background(stuck)
    pruned = conversation(1, calls=0)

    async def request() -> None:
        async def cleanup() -> None:  # cancelled by the shutdown, it delivers from a thread
            try:
                await asyncio.Event().wait()
            finally:
                thread = threading.Thread(target=reducer.deliver, args=(pruned, "ns"))
                thread.start()
                thread.join()

        assert background.submit([], None)  # its first batch binds it to this loop
        asyncio.get_running_loop().create_task(cleanup())
        await asyncio.sleep(0)  # the cleanup task starts waiting

    asyncio.run(request())
    stuck[0] = False

    report = retry_on_a_new_loop(background, reducer)
    assert report["amem"].queued == ("sys", "h0", "b0") and background.failed == 2
    assert got == ["sys", "h0", "b0"] and reducer.pending == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_closing_waits_for_a_worker_that_replaced_one_ended_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`close` joined the workers it saw when called: a hook's `SystemExit` then ended one, its
    replacement ran the batches queued behind it, and `close` returned before they settled."""
    closing, joined_again = threading.Event(), threading.Event()
    workers: list[threading.Thread] = []
    join = threading.Thread.join

    def watched_join(thread: threading.Thread, timeout: float | None = None) -> None:
        if thread.name.startswith("agentstate-on-prune"):  # a worker of `background`
            (joined_again if closing.is_set() else closing).set()
        join(thread, timeout)

    monkeypatch.setattr(threading.Thread, "join", watched_join)
    hook = Recorder()

    def remember(pruned: list[Any], namespace: Any) -> None:
        workers.append(threading.current_thread())
        if len(workers) == 1:
            closing.wait(5)  # until `close` joins this worker
            raise SystemExit
        joined_again.wait(5)  # until `close` joins this one, the replacement
        hook(pruned, namespace)

    background = Background(remember, workers=1, name="mem")
    background.submit([1], None)
    background.submit([2], None)
    try:
        background.close()
        assert hook.calls == [([2], None)] and background.flush(0)
        assert not any(worker.is_alive() for worker in workers)
    finally:
        joined_again.set()
        for worker in workers:
            join(worker, 5)


def test_flush_leaves_dropped_batches_to_the_reducers_next_delivery() -> None:
    """`flush` waits for the batches the backlog took; a dropped one never reached it, and
    waits in `reducer.pending` until the reducer's next delivery hands it over again."""
    release = threading.Event()
    hook = Recorder()

    def slow(pruned: list[Any], namespace: Any) -> None:
        release.wait(5)
        hook(pruned, namespace)

    with Background(slow, workers=1, max_pending=1, name="bg") as background:
        reducer = reducer_with(background)
        reducer.deliver([{"role": "human", "content": "a", "id": "a"}], "ns")
        assert reducer.deliver([{"role": "human", "content": "b", "id": "b"}], "ns")["bg"].failed
        release.set()
        assert background.flush(5)
        assert hook.ids == ["a"] and reducer.pending == 1
        assert reducer.deliver([], "ns")["bg"].queued == ("b",)
        assert background.flush(5)
    assert hook.ids == ["a", "b"] and reducer.pending == 0


@pytest.mark.parametrize("workers", [1, 2])
def test_closing_a_background_from_its_own_hook_runs_what_is_queued(workers: int) -> None:
    """A hook that closes its `Background` (a worker thread) failed: the close tried to join
    that very thread ("cannot join current thread")."""
    release, closed = threading.Event(), threading.Event()
    hook = Recorder()

    def close_then_remember(pruned: list[Any], namespace: Any) -> None:
        if pruned[0]["id"] == "a":
            release.wait(5)
            try:
                background.close()
            finally:
                closed.set()
        hook(pruned, namespace)

    with Background(close_then_remember, workers=workers, name="bg") as background:
        reducer = reducer_with(background)
        reducer.deliver([{"role": "human", "content": "a", "id": "a"}], "ns")
        reducer.deliver([{"role": "human", "content": "b", "id": "b"}], "ns")
        release.set()
        assert closed.wait(5)
    # Leaving the block waited for the batch queued behind the close.
    assert sorted(hook.ids) == ["a", "b"]
    assert background.failed == 0 and reducer.pending == 0
    assert not any(thread.is_alive() for thread in background._threads)
    assert reducer.deliver([{"role": "human", "content": "c", "id": "c"}], "ns")["bg"].failed


async def test_closing_an_async_background_from_its_own_hook_does_not_wait_for_itself() -> None:
    """`aclose` from the hook awaited the hook's own task, which never ended."""
    hook = Recorder()

    async def close_then_remember(pruned: list[Any], namespace: Any) -> None:
        if pruned[0]["id"] == "a":
            await background.aclose()
        hook(pruned, namespace)

    background = AsyncBackground(close_then_remember, workers=1, name="bg")
    reducer = reducer_with(background)
    await reducer.adeliver([{"role": "human", "content": "a", "id": "a"}], "ns")
    await reducer.adeliver([{"role": "human", "content": "b", "id": "b"}], "ns")
    await asyncio.wait_for(background.aclose(), 5)
    assert hook.ids == ["a", "b"]
    assert background.failed == 0 and reducer.pending == 0
    report = await reducer.adeliver([{"role": "human", "content": "c", "id": "c"}], "ns")
    assert report["bg"].failed == ("c",)


def test_flushing_a_background_from_its_own_hook_is_refused_not_a_hang() -> None:
    """`flush()` in the hook waited for the hook's own batch: for ever without a timeout."""
    raised: list[BaseException] = []

    def flush_inside(pruned: list[Any], namespace: Any) -> None:
        try:
            background.flush()
        except RuntimeError as error:
            raised.append(error)

    with Background(flush_inside, name="bg") as background:
        reducer_with(background).deliver([{"role": "human", "content": "a", "id": "a"}], "ns")
        assert background.flush(5)
    assert len(raised) == 1 and "its own on_prune hook" in str(raised[0])
    assert background.failed == 0


async def test_flushing_an_async_background_from_its_own_hook_is_refused_not_a_hang() -> None:
    raised: list[BaseException] = []

    async def flush_inside(pruned: list[Any], namespace: Any) -> None:
        try:
            await background.aflush()
        except RuntimeError as error:
            raised.append(error)

    background = AsyncBackground(flush_inside, name="bg")
    await reducer_with(background).adeliver([{"role": "human", "content": "a", "id": "a"}], "ns")
    await asyncio.wait_for(background.aclose(), 5)
    assert len(raised) == 1 and "its own on_prune hook" in str(raised[0])


@pytest.mark.parametrize("how", ["gather", "wait_for", "to_thread"])
async def test_a_hook_flushing_its_own_background_from_a_task_or_thread_it_starts_is_refused(
    how: str,
) -> None:
    """The guard looked at the current task only: a flush from a task the hook started
    (`gather`, `wait_for` on Python before 3.12) or from `asyncio.to_thread` waited on the
    hook itself, for ever."""
    raised: list[BaseException] = []

    async def flush_inside(pruned: list[Any], namespace: Any) -> None:
        try:
            if how == "gather":
                await asyncio.gather(background.aflush())
            elif how == "wait_for":
                await asyncio.wait_for(background.aflush(), 30)
            else:
                await asyncio.to_thread(sync.flush)
        except RuntimeError as error:
            raised.append(error)

    background = AsyncBackground(flush_inside, name="bg")
    sync = Background(lambda pruned, namespace: asyncio.run(flush_inside(pruned, namespace)))
    if how == "to_thread":  # a sync Background whose (coroutine) hook flushes it in a thread
        sync([{"role": "human", "content": "a", "id": "a"}], "ns")
        assert sync.flush(5)
    else:
        await reducer_with(background).adeliver(
            [{"role": "human", "content": "a", "id": "a"}], "ns"
        )
        await asyncio.wait_for(background.aflush(), 5)
    sync.close()
    assert len(raised) == 1 and "its own on_prune hook" in str(raised[0])


def test_exit_runs_what_is_queued_behind_a_hook_that_closed_its_background() -> None:
    """A close from the hook does not wait; exit skipped such a Background as one closed
    without waiting, so the batches behind the hook never ran."""
    script = textwrap.dedent(
        """
        import threading, time
        from agentstate_reducer import Background

        closed = threading.Event()

        def hook(pruned, namespace):
            if pruned == ["first"]:
                background.close()
                closed.set()
                time.sleep(0.2)
            print("ran", pruned[0], flush=True)

        background = Background(hook, workers=1)
        for name in ("first", "second", "third"):
            background([name], None)
        closed.wait(5)  # exit comes after the hook closed it
        """
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=30, capture_output=True)
    assert done.stdout.decode().split() == ["ran", "first", "ran", "second", "ran", "third"]


async def test_a_reducers_aflush_in_its_own_scheduled_hook_waits_for_the_others_only() -> None:
    """`MessageReducer.aflush()` awaited in a hook task `deliver` scheduled waited for that
    very task: for ever."""
    seen: list[str] = []

    async def hook(pruned: list[Any], namespace: Any) -> None:
        await reducer.aflush()
        seen.extend(m["id"] for m in pruned)

    reducer = MessageReducer(config=ReducerConfig(min_messages=1, max_messages=2, on_prune=[hook]))
    reducer.deliver([{"role": "human", "content": "a", "id": "m1"}], "ns")  # scheduled: a task
    await asyncio.wait_for(reducer.aflush(), 5)
    assert seen == ["m1"] and reducer.pending == 0


@pytest.mark.parametrize("kind", [Background, AsyncBackground])
def test_a_background_hook_that_is_not_callable_is_refused_when_built(kind: type) -> None:
    """`Background(5)` was taken; every batch then failed in the worker, so its messages
    stayed undelivered for good."""
    name = kind.__name__
    with pytest.raises(
        TypeError,
        match=rf"^{name}\(fn\) takes the hook to run, .*got int 5, which is not callable: "
        rf"pass e\.g\. {name}\(remember\)",
    ):
        kind(5)
    with pytest.raises(TypeError, match=rf"^{name}\(name=7\) must be a str"):
        kind(print, name=7)
