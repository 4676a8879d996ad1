"""Background hooks: off the request path, bounded, and marked only after they succeed."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from reducer_helpers import Recorder, conversation

from agentstate_reducer import AsyncBackground, Background, MessageReducer, ReducerConfig


def reducer_with(*hooks: Any) -> MessageReducer:
    return MessageReducer(config=ReducerConfig(min_messages=3, max_messages=5, on_prune=[*hooks]))


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
