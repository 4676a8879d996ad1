"""Run `on_prune` hooks off the request path: `Background` (threads) and `AsyncBackground`."""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import functools
import inspect
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ._config import RememberFn
from ._delivery import caller_cancelled, hook_key, own_cancellation
from ._messages import shown

logger = logging.getLogger("agentstate_reducer")

Done = Callable[[BaseException | None], object]
"""Called once a batch settles: with None after the hook returned, else with the error.

What it returns is ignored, except that `AsyncBackground` awaits an awaitable."""


class BatchDropped(RuntimeError):
    """A background hook did not accept a batch: its backlog was full or it was closed."""


def _check_args(owner: str, fn: object, workers: object, max_pending: object, name: object) -> None:
    """Refuses what only failed later: a `fn` that is not callable failed each batch in the
    worker, which stayed undelivered for good; a `name` that is not a str was no ledger key."""
    if not callable(fn):
        raise TypeError(
            f"{owner}(fn) takes the hook to run, a function (pruned, namespace); got "
            f"{type(fn).__name__} {shown(fn)}, which is not callable: pass e.g. "
            f"{owner}(remember)"
        )
    for label, value in (("workers", workers), ("max_pending", max_pending)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{owner}({label}={value!r}) must be an int >= 1")
    if name is not None and not isinstance(name, str):
        raise TypeError(
            f"{owner}(name={shown(name)}) must be a str (the hook's ledger key), or None for "
            "the qualified name of fn"
        )


def _settle(done: Done | None, error: BaseException | None) -> Any:
    """Calls `done`; returns what it returned (an awaitable from an async `done`)."""
    if done is None:
        return None
    try:
        return done(error)
    except Exception:
        logger.exception("delivery bookkeeping failed after a background hook")
        return None


def _count_dropped(background: Background | AsyncBackground, size: int) -> None:
    """Count a batch of `size` messages `background` did not accept; caller holds its lock."""
    background.dropped += 1
    background.dropped_messages += size


_live: weakref.WeakSet[Background] = weakref.WeakSet()
# The Background whose hook runs in this context, and whether that batch has settled: tasks
# and `asyncio.to_thread` calls the hook starts inherit it, so a flush or close from them is
# known to come from the hook too (plain executor threads do not copy the context).
_running: contextvars.ContextVar[tuple[Any, Callable[[], bool]] | None] = contextvars.ContextVar(
    "agentstate_reducer_running", default=None
)


def _waits_for_itself(
    background: Background | AsyncBackground, flush: str, close: str
) -> Exception:
    return RuntimeError(
        f"{background!r}.{flush}() was called in its own on_prune hook, whose batch settles "
        f"only when the hook returns, so it would wait for itself; flush from outside the "
        f"hook ({close}() from inside it does not wait)"
    )


@atexit.register
def _drain_at_exit() -> None:
    # Its owner's `close(wait=False)` was a promise not to wait (for a hook that hangs, say),
    # which exit keeps; one its own hook closed still runs what is queued.
    for background in list(_live):
        if not background._waitless:
            background.close()


class Background:
    """Run a hook on a bounded pool of worker threads.

    Used in `on_prune`, a batch counts as delivered (in the reducer's ledger) only when
    `fn` returns in the worker; a batch that fails or is dropped stays undelivered and is
    retried by the reducer's next delivery. Called directly, it only runs `fn` and logs.

    Args:
        fn: The hook `(pruned, namespace)`. A coroutine function runs in the worker with
            `asyncio.run`; prefer `AsyncBackground` when it needs the app's event loop.
        workers: Worker threads, started on first use.
        max_pending: Most batches waiting or running; beyond that batches are dropped,
            counted and logged, never blocking the caller.
        name: The ledger key; defaults to the qualified name of `fn`. Set it when two
            hooks share a function, or keep it stable so a durable ledger keeps matching.

    Attributes:
        dropped: Batches dropped (backlog full or closed).
        dropped_messages: Messages in those batches.
        failed: Batches whose `fn` raised.
    """

    def __init__(
        self,
        fn: RememberFn,
        *,
        workers: int = 2,
        max_pending: int = 1000,
        name: str | None = None,
    ) -> None:
        _check_args("Background", fn, workers, max_pending, name)
        self.fn = fn
        self.name = name or hook_key(fn)
        self.workers = workers
        self.max_pending = max_pending
        self.dropped = 0
        self.dropped_messages = 0
        self.failed = 0
        self._queue: queue.Queue[tuple[list[Any], Any, Done | None] | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._unsettled = 0
        self._closed = False
        self._waitless = False
        _live.add(self)

    def __call__(self, pruned: list[Any], namespace: Any) -> None:
        """Queue `fn(pruned, namespace)`; never blocks."""
        self.submit(pruned, namespace)

    def submit(self, pruned: list[Any], namespace: Any, done: Done | None = None) -> bool:
        """Queue a copy of `pruned` for `fn`.

        Args:
            pruned: The messages; copied, so the caller may reuse the list.
            namespace: Passed to `fn` unchanged.
            done: Called in the worker once `fn` settled, with None or its error.

        Returns:
            True when queued; False when dropped because the backlog is full or `close`
            was called. `done` is not called for a dropped batch.
        """
        with self._lock:
            if self._closed:
                reason = "it is closed"
            elif self._unsettled >= self.max_pending:
                reason = f"its backlog of {self.max_pending} batches is full"
            else:
                self._start_workers()
                self._unsettled += 1
                self._queue.put((list(pruned), namespace, done))
                return True
            _count_dropped(self, len(pruned))
        logger.warning(
            "Background %s dropped a batch of %d messages because %s (%d batches dropped "
            "so far); raise max_pending or workers, or make the hook faster",
            self.name,
            len(pruned),
            reason,
            self.dropped,
        )
        return False

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued batch has settled; return False on timeout.

        A dropped batch (backlog full, or closed) was never queued, so `flush` does not wait
        for it: a reducer keeps its messages in `reducer.pending`, and its next delivery
        (`reducer.deliver([])`) hands them over again. Called from its own hook it raises
        `RuntimeError`: the hook's batch settles only once the hook returns.
        """
        if self._inside():
            raise _waits_for_itself(self, "flush", "close")
        with self._idle:
            return self._idle.wait_for(lambda: self._unsettled == 0, timeout)

    def close(self, wait: bool = True) -> None:
        """Stop accepting batches; with `wait`, run those queued and join the workers.

        Called from its own hook (a worker thread), it does not wait, since a worker cannot
        join itself: the workers run what is queued once the hook returns, and a `close()`
        from another thread (leaving a `with` block) waits for them.
        """
        with self._lock:
            first = not self._closed
            self._closed = True
            threads = list(self._threads)
            inside = self._inside()
            if not wait and not inside:
                self._waitless = True
        if first:
            for _ in threads:
                self._queue.put(None)
        if not wait or inside:
            return
        while threads:
            for thread in threads:
                thread.join()
            # A worker a hook ended meanwhile was replaced (`_replace`): join that one too.
            with self._lock:
                threads = [thread for thread in self._threads if thread.is_alive()]

    def _inside(self) -> bool:
        """Whether this runs in a hook of this Background whose batch has not settled."""
        owner = _running.get()
        if owner is not None and owner[0] is self and not owner[1]():
            return True
        return threading.current_thread() in self._threads

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Background({self.name}, workers={self.workers}, max_pending={self.max_pending}, "
            f"dropped={self.dropped})"
        )

    def _start_workers(self) -> None:
        while len(self._threads) < self.workers:
            thread = threading.Thread(
                target=self._work,
                name=f"agentstate-on-prune-{len(self._threads)}",
                daemon=True,
            )
            self._threads.append(thread)
            thread.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            pruned, namespace, done = item
            error: BaseException | None = None
            fatal = False
            settled = threading.Event()
            token = _running.set((self, settled.is_set))
            try:
                result = self.fn(pruned, namespace)
                if inspect.isawaitable(result):
                    asyncio.run(_await(result))
            except BaseException as exc:
                error = exc
                with self._lock:
                    self.failed += 1
                if isinstance(exc, asyncio.CancelledError):
                    # A coroutine hook cancelled inside `asyncio.run`: one failed batch. Raised
                    # on, it ended this worker, and the batches queued behind it never settled.
                    logger.warning(
                        "Background %s: hook cancelled on %d messages; they stay undelivered",
                        self.name,
                        len(pruned),
                    )
                else:
                    logger.warning(
                        "Background %s: hook failed on %d messages; they stay undelivered",
                        self.name,
                        len(pruned),
                        exc_info=True,
                    )
                    if not isinstance(exc, Exception):
                        fatal = True
                        raise
            finally:
                _running.reset(token)
                settled.set()
                _settle(done, error)
                with self._idle:
                    self._unsettled -= 1
                    self._idle.notify_all()
                    if fatal:  # SystemExit, KeyboardInterrupt: this worker ends
                        self._replace(threading.current_thread())

    def _replace(self, thread: threading.Thread) -> None:
        """Start a worker in place of `thread`, which is ending; caller holds the lock.

        A dead worker left in `_threads` was never replaced, so with `workers=1` the
        batches queued behind it never ran nor settled. The replacement also takes up the
        `close` sentinel `thread` would have taken.
        """
        self._threads.remove(thread)
        self._start_workers()


async def _await(awaitable: Any) -> Any:
    return await awaitable


class AsyncBackground:
    """Run a coroutine hook as event-loop tasks, at most `workers` at a time.

    The asyncio counterpart of `Background`. Batches run on the loop that is running when
    the first batch arrives; batches submitted from another thread are handed to that loop
    while it runs. A batch submitted where no loop runs while that loop is stopped is
    dropped (a reducer keeps it for its next delivery).
    Drain it with `await aclose()` or `async with` before the loop stops: nothing drains it
    at interpreter exit. A batch cancelled before its hook finished (the loop ending first,
    `asyncio.run` cancelling what is left) settles as failed: `done` gets the
    `CancelledError`, so a reducer keeps its messages for the next delivery.

    Args:
        fn: The hook `(pruned, namespace)`; a coroutine function, or a plain function.
        workers: Most batches running at once.
        max_pending: Most batches waiting or running; beyond that batches are dropped.
        name: The ledger key; defaults to the qualified name of `fn`.

    Attributes:
        dropped: Batches dropped (backlog full, closed, or no event loop).
        dropped_messages: Messages in those batches.
        failed: Batches whose `fn` raised or that were cancelled.
    """

    def __init__(
        self,
        fn: RememberFn,
        *,
        workers: int = 2,
        max_pending: int = 1000,
        name: str | None = None,
    ) -> None:
        _check_args("AsyncBackground", fn, workers, max_pending, name)
        self.fn = fn
        self.name = name or hook_key(fn)
        self.workers = workers
        self.max_pending = max_pending
        self.dropped = 0
        self.dropped_messages = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots: asyncio.Semaphore | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        # Batches handed to their loop from another thread whose task does not exist yet,
        # and batches with a task: a loop closed before it ran the hand-over, or before the
        # task ended (one spawned after `asyncio.run` cancelled what was left), never
        # settles them, so `_reap` does.
        self._handed: set[_Queued] = set()
        self._spawned: set[_Queued] = set()
        self._unsettled = 0
        self._closed = False

    def __call__(self, pruned: list[Any], namespace: Any) -> None:
        """Schedule `fn(pruned, namespace)`; never blocks."""
        self.submit(pruned, namespace)

    def submit(self, pruned: list[Any], namespace: Any, done: Done | None = None) -> bool:
        """Schedule a copy of `pruned` for `fn`.

        Args:
            pruned: The messages; copied, so the caller may reuse the list.
            namespace: Passed to `fn` unchanged.
            done: Called on the loop once `fn` settled, with None or its error; exactly
                once, with a `CancelledError` when the batch was cancelled, also before it
                started (then from the task's done callback, and an awaitable it returns
                runs as a new task).

        A batch whose loop closed before it settled (handed over from another thread and not
        started yet, or started after `asyncio.run` cancelled what was left) settles as
        cancelled when a later `submit`, `aflush` or `aclose` finds that loop closed; `done`
        is then called in that caller's thread.

        Returns:
            True when scheduled; False when dropped (backlog full, closed, no running event
            loop yet, none running here while its loop is stopped, or its loop closed while
            handing it over). `done` is not called for a dropped batch.
        """
        self._reap()
        batch = list(pruned)
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                if running is not self._loop:
                    self._slots = None  # a semaphore binds to the loop it first waits on
                self._loop = running
            loop = self._loop
            reason = None
            if self._closed:
                reason = "it is closed"
            elif loop is None:
                reason = "no event loop is running; submit from async code"
            elif running is None and not loop.is_running():
                # Its loop stopped (say `run_until_complete` returned) and none runs here: a
                # batch handed to it would wait, claimed, until that loop ran again, if ever.
                reason = "its event loop is not running; submit from async code"
            elif self._unsettled >= self.max_pending:
                reason = f"its backlog of {self.max_pending} batches is full"
            if reason is None:
                self._unsettled += 1
            else:
                _count_dropped(self, len(batch))
        if reason is not None:
            logger.warning(
                "AsyncBackground %s dropped a batch of %d messages because %s",
                self.name,
                len(batch),
                reason,
            )
            return False
        assert loop is not None
        queued = _Queued(batch, namespace, done, loop)
        if loop is running:
            self._spawn(queued)
            return True
        with self._lock:
            self._handed.add(queued)
        try:
            loop.call_soon_threadsafe(self._take_over, queued)
        except RuntimeError:  # the loop closed since it was checked
            with self._lock:
                if queued not in self._handed:
                    return True  # another thread's `_reap` settled it meanwhile
                self._handed.discard(queued)
                self._unsettled -= 1
                _count_dropped(self, len(batch))
            logger.warning(
                "AsyncBackground %s dropped a batch of %d messages because its event loop "
                "closed while it was handed over",
                self.name,
                len(batch),
            )
            return False
        return True

    async def aflush(self) -> None:
        """Wait until every scheduled batch has settled.

        Cancelling it cancels only the wait, never the batches. Batches whose event loop
        closed before they settled settle as cancelled. Awaited from its own hook it raises
        `RuntimeError`: the hook's batch settles only once the hook returns.
        """
        if self._inside():
            raise _waits_for_itself(self, "aflush", "aclose")
        while self._reap() > 0 or self._tasks:
            # A task whose loop closed never ends; `_reap` settled its batch.
            self._tasks.difference_update(
                [task for task in self._tasks if task.get_loop().is_closed()]
            )
            if self._tasks:
                await asyncio.wait(list(self._tasks))  # unlike gather, never cancels them
            else:
                await asyncio.sleep(0)  # let batches handed over from other threads start

    async def aclose(self) -> None:
        """Stop accepting batches and wait for those scheduled.

        Awaited from its own hook, it does not wait: the hook's task would wait for itself
        (and, holding a slot, for the batches behind it) for ever. Those batches still run,
        and an `aclose()` from elsewhere waits for them.
        """
        self._closed = True
        if self._inside():
            return
        await self.aflush()

    def _inside(self) -> bool:
        """Whether this runs in a hook of this AsyncBackground whose batch has not settled."""
        owner = _running.get()
        if owner is not None and owner[0] is self and not owner[1]():
            return True
        return asyncio.current_task() in self._tasks

    async def __aenter__(self) -> AsyncBackground:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (
            f"AsyncBackground({self.name}, workers={self.workers}, "
            f"max_pending={self.max_pending}, dropped={self.dropped})"
        )

    def _take_over(self, queued: _Queued) -> None:
        """Spawn a batch handed over from another thread, unless `_reap` settled it."""
        with self._lock:
            if queued not in self._handed:
                return
            self._handed.discard(queued)
        self._spawn(queued)

    def _reap(self) -> int:
        """Settle as cancelled the batches whose loop closed before they settled (no step
        of theirs will ever run); return how many batches are unsettled."""
        with self._lock:
            lost = [queued for queued in (*self._handed, *self._spawned) if queued.loop.is_closed()]
            self._handed.difference_update(lost)
            self._spawned.difference_update(lost)
        for queued in lost:
            _discard(self._settle_batch(queued, asyncio.CancelledError()))
        return self._unsettled

    def _spawn(self, queued: _Queued) -> None:
        with self._lock:
            self._spawned.add(queued)
        task = asyncio.get_running_loop().create_task(self._run(queued))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(functools.partial(self._ended, queued))

    async def _run(self, queued: _Queued) -> None:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.workers)
        error: BaseException | None = None
        own = False  # a CancelledError the hook raised itself, this task not cancelled
        _running.set((self, lambda: queued.settled))  # the task's own context copy
        try:
            async with self._slots:
                result = self.fn(queued.messages, queued.namespace)
                if inspect.isawaitable(result):
                    await result
        except BaseException as exc:
            error = exc
            own = isinstance(exc, asyncio.CancelledError) and not caller_cancelled()
            # `_settle_batch` logs a cancellation; a GeneratorExit closes the coroutine of a
            # task its loop closed on, collected after `_reap` settled its batch.
            if own or not isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
                logger.warning(
                    "AsyncBackground %s: hook failed on %d messages; they stay undelivered",
                    self.name,
                    len(queued.messages),
                    exc_info=True,
                )
            # The hook's own CancelledError failed its batch only: raised on, it ended this
            # task as cancelled, logged as a loop that ended before the batch finished.
            if not isinstance(exc, Exception) and not own:
                raise
        finally:
            if own:  # a failure of the hook's, unlike a cancellation as the loop ended
                assert isinstance(error, asyncio.CancelledError)
                error = own_cancellation(error)
            pending = self._settle_batch(queued, error, cancelled=not own)
            if inspect.isawaitable(pending):
                try:
                    await pending
                except Exception:
                    logger.exception("delivery bookkeeping failed after a background hook")

    def _ended(self, queued: _Queued, task: asyncio.Task[None]) -> None:
        # A task cancelled before its first step (the loop ending: `asyncio.run` cancels what
        # is left) runs none of `_run`, not even its `finally`, so it is settled here.
        if queued.settled:
            return
        pending = self._settle_batch(queued, asyncio.CancelledError())
        if inspect.isawaitable(pending):
            follow_up = task.get_loop().create_task(_await(pending))
            self._tasks.add(follow_up)
            follow_up.add_done_callback(self._tasks.discard)
            follow_up.add_done_callback(_log_bookkeeping_error)

    def _settle_batch(
        self, queued: _Queued, error: BaseException | None, *, cancelled: bool = True
    ) -> Any:
        """Settle `queued` once: count it, log a cancellation (unless `cancelled` is False:
        a `CancelledError` that is the hook's own, logged as a failure), call its `done`."""
        with self._lock:
            if queued.settled:  # by `_reap`; its task's coroutine is closed now (collected)
                return None
            queued.settled = True
            self._spawned.discard(queued)
            self._unsettled -= 1
            if error is not None:
                self.failed += 1
        if cancelled and isinstance(error, asyncio.CancelledError):
            logger.warning(
                "AsyncBackground %s: a batch of %d messages was cancelled before its hook "
                "finished; they stay undelivered (a reducer keeps them for its next "
                "delivery): await aclose() before the event loop ends",
                self.name,
                len(queued.messages),
            )
        return _settle(queued.done, error)


class _Queued:
    """A batch `AsyncBackground` accepted; `settled` once its `done` was called."""

    __slots__ = ("done", "loop", "messages", "namespace", "settled")

    def __init__(
        self,
        messages: list[Any],
        namespace: Any,
        done: Done | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.messages = messages
        self.namespace = namespace
        self.done = done
        self.loop = loop
        self.settled = False


def _discard(awaitable: Any) -> None:
    """Close what an async `done` returned for a batch settled off its closed loop."""
    close = getattr(awaitable, "close", None)
    if inspect.isawaitable(awaitable) and callable(close):
        close()  # Silences "coroutine was never awaited".


def _log_bookkeeping_error(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error(
            "delivery bookkeeping failed after a background hook", exc_info=task.exception()
        )
