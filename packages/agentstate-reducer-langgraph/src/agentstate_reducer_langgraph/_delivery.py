"""`DeliveryRunner`: stages pruned batches before the put and delivers them after it.

The decisions (batch ids, when to retry, when a batch is committed or abandoned) are
plain functions of a batch, a `DeliveryReport` and the clock; the sync and async
methods only differ in how they call the outbox, the inner saver and the reducer.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import copy
import logging
import secrets
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver

from agentstate_reducer import DeliveryReport, MessageReducer
from agentstate_reducer._messages import shown  # the reducer's own (pinned <0.7)

from . import _outbox
from ._outbox import (
    Delivery,
    DrainReport,
    Outbox,
    OutboxStats,
    Settlement,
    StagedBatch,
    batch_id,
    decode_payload,
    encode_payload,
)

__all__ = ["DeliveryRunner"]

logger = logging.getLogger("agentstate_reducer_langgraph")


@dataclass(frozen=True)
class _Own:
    """A batch this process staged and stored: delivered without claiming or decoding."""

    batch: StagedBatch
    pruned: list[Any]
    namespace: Any


@dataclass(frozen=True)
class _Outcome:
    settlement: Settlement
    kind: str  # "delivered", "failed", "waiting" or "discarded"


class _Shared:
    """What a runner shares with those `DeliveryRunner.with_inner` derives from it: one
    saver's delivery, whichever of its allowlisted clones stores.

    Any of them drains batches any other staged (one outbox, one background worker), so
    they read with one saver: the original inner saver allowing every type any clone was
    given (`allow`); it decodes the batches and tells whether their checkpoints are stored.
    """

    def __init__(self, inner: BaseCheckpointSaver[Any]) -> None:
        self.lock = threading.Lock()
        self.acks: list[Settlement] = []
        self.delivered = 0
        self.failures = 0
        self.discarded = 0
        self.thread: _ThreadWorker | None = None
        self.task: _TaskWorker | None = None
        # Whether the outbox was called from asyncio: it may then need an event loop (a
        # `redis.asyncio` client), so what is left at exit is sent on a fresh one.
        self.asyncio = False
        self.root = inner
        self.allowlist: dict[Any, None] = {}  # in registration order: a set that keeps it
        self.reader = inner

    def allow(self, extra_allowlist: Collection[Any]) -> None:
        """Adds `extra_allowlist` to what staged batches decode with."""
        entries = [tuple(e) if isinstance(e, list) else e for e in extra_allowlist]
        with self.lock:
            added = [entry for entry in entries if entry not in self.allowlist]
            if not added:
                return
            self.allowlist.update(dict.fromkeys(added))
            # Built from the original inner saver as `with_allowlist` built each clone's.
            self.reader = self.root.with_allowlist(list(self.allowlist))


# While `_decode` runs in this context: the types the serializer refused to revive.
_blocked: contextvars.ContextVar[list[tuple[str, str]] | None] = contextvars.ContextVar(
    "agentstate_reducer_langgraph_blocked", default=None
)


def _on_serde_event(event: Any) -> None:
    """LangGraph's serializer reports each type its msgpack allowlist blocks (and returns
    the type's raw fields in its place) to listeners, in the thread that decodes."""
    seen = _blocked.get()
    if seen is not None and event.get("kind") == "msgpack_blocked":
        seen.append((str(event.get("module")), str(event.get("name"))))


try:
    from langgraph.checkpoint.serde.event_hooks import register_serde_event_listener
except ImportError:  # pragma: no cover - a langgraph-checkpoint without serde events:
    pass  # blocked types go unnoticed, as before
else:
    register_serde_event_listener(_on_serde_event)


class _BlockedTypesError(ValueError):
    """A staged batch holds types the serializer's msgpack allowlist blocks."""


def _decode(serde: Any, payload: tuple[str, bytes]) -> tuple[list[Any], Any]:
    """`decode_payload`, refusing a payload in which the serializer blocked a type: it
    would give the hooks that type's fields as a plain dict, and the ledger would record
    the message delivered. Kept for retry, it is delivered once a graph whose state allows
    the type is compiled (here or in another process draining the same outbox)."""
    seen: list[tuple[str, str]] = []
    token = _blocked.set(seen)
    try:
        decoded = decode_payload(serde, payload)
    finally:
        _blocked.reset(token)
    if seen:
        blocked = sorted(set(seen))
        raise _BlockedTypesError(
            f"the serializer's msgpack allowlist blocks {', '.join(map('.'.join, blocked))}: "
            "compile the graph whose state holds them on this saver, or allow them with "
            f"saver.with_allowlist({blocked!r})"
        )
    return decoded


_live: weakref.WeakSet[DeliveryRunner] = weakref.WeakSet()


@atexit.register
def _close_at_exit() -> None:
    for runner in list(_live):
        try:
            runner.close_at_exit(timeout=10)
        except Exception:
            logger.exception("closing delivery at exit failed; staged batches stay in the outbox")


class DeliveryRunner:
    """Stages, delivers and drains the pruned batches of one `ReducingSaver`.

    Args:
        inner: The saver that stores checkpoints; asked whether a batch's checkpoint exists
            when the outbox cannot tell.
        reducer: Runs the hooks and keeps the delivery ledger.
        outbox: Where batches wait.
        options: Mode and timings.

    Attributes:
        delivered: Batches this process delivered and acknowledged.
        failures: Deliveries in this process in which a hook raised, or rested after
            raising (`ReducerConfig.retry_after`) and was not called.
        discarded: Batches this process dropped because their checkpoint never appeared.
    """

    def __init__(
        self,
        inner: BaseCheckpointSaver[Any],
        reducer: MessageReducer,
        outbox: Outbox,
        options: Delivery,
    ) -> None:
        # Checked here: a background worker met them only in its loop, and died there.
        if not isinstance(outbox, Outbox):
            raise TypeError(
                f"DeliveryRunner(outbox={shown(outbox)}) does not implement the Outbox "
                "protocol; pass e.g. RedisOutbox(client)"
            )
        if not isinstance(options, Delivery):
            raise TypeError(
                f"DeliveryRunner(options={shown(options)}) must be a Delivery: pass "
                "Delivery.of(mode) or Delivery(mode, ...)"
            )
        self.inner = inner
        self.reducer = reducer
        self.outbox = outbox
        self.options = options
        self._shared = _Shared(inner)
        self._lock = self._shared.lock
        self._acks = self._shared.acks
        _live.add(self)

    def with_inner(
        self, inner: BaseCheckpointSaver[Any], extra_allowlist: Collection[Any] = ()
    ) -> DeliveryRunner:
        """This runner over `inner`, the inner saver's ``with_allowlist(extra_allowlist)``
        clone: batches are encoded with `inner`'s serializer, while the counters, the acks
        waiting to be sent and the background worker stay shared, so closing or flushing
        either runner covers both.

        `extra_allowlist` joins what every runner sharing this delivery decodes with: any
        of them may drain the batches the others staged (the saver the app holds, each
        graph's clone, the one background worker).
        """
        self._shared.allow(extra_allowlist)
        runner = copy.copy(self)
        runner.inner = inner
        _live.add(runner)  # a compiled graph may keep only the clone
        return runner

    @property
    def mode(self) -> str:
        """``inline``, ``background`` or ``manual``."""
        return self.options.mode

    @property
    def delivered(self) -> int:
        """Batches this process delivered and acknowledged."""
        return self._shared.delivered

    @property
    def failures(self) -> int:
        """Deliveries in this process in which a hook raised, or rested after raising."""
        return self._shared.failures

    @property
    def discarded(self) -> int:
        """Batches this process dropped because their checkpoint never appeared."""
        return self._shared.discarded

    @property
    def _thread(self) -> _ThreadWorker | None:
        return self._shared.thread

    @_thread.setter
    def _thread(self, worker: _ThreadWorker | None) -> None:
        self._shared.thread = worker

    @property
    def _task(self) -> _TaskWorker | None:
        return self._shared.task

    @_task.setter
    def _task(self, worker: _TaskWorker | None) -> None:
        self._shared.task = worker

    # -- decisions -------------------------------------------------------------------------

    def batch(
        self, config: RunnableConfig, checkpoint_id: str, pruned: list[Any], namespace: Any
    ) -> StagedBatch:
        """The batch a put of `checkpoint_id` prunes; its id is the same on every retry."""
        conf = config.get("configurable") or {}
        thread_id = str(conf.get("thread_id", ""))
        checkpoint_ns = str(conf.get("checkpoint_ns") or "")
        return StagedBatch(
            id=batch_id(thread_id, checkpoint_ns, checkpoint_id),
            thread_id=thread_id,
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint_id,
            payload=encode_payload(self.inner.serde, namespace, list(pruned)),
            # Inline and background deliver it themselves, under a lease of their own.
            lease="" if self.mode == "manual" else secrets.token_hex(8),
        )

    def _stage_times(self) -> tuple[int, int]:
        now = _outbox.now_ms()
        # Inline and background deliver their own batch right after the put, so it is
        # staged already leased; a manual batch is claimable at once.
        lease = 0 if self.mode == "manual" else int(self.options.lease * 1000)
        return now, now + lease

    def _claim_times(self) -> tuple[float, int, int]:
        """``(deadline, now, lease_until)`` of a drain's claim. The lease ends by the
        outbox's clock; this process counts it down to `deadline` on its own monotonic one,
        from before the claim, which no step of the wall clock moves."""
        deadline = time.monotonic() + self.options.lease
        now = _outbox.now_ms()
        return deadline, now, now + int(self.options.lease * 1000)

    def _outcome(self, batch: StagedBatch, report: DeliveryReport) -> _Outcome:
        """Acks `batch` only when every hook has every message recorded. Messages queued to
        a background hook, or skipped as in flight in another delivery of this process,
        are not yet: that delivery may fail and keep them in memory only, so the batch
        stays in the outbox and is retried without counting a failure."""
        failed = [h.hook for h in report.hooks if h.failed]
        busy = [h.hook for h in report.hooks if h.queued or h.in_flight]
        if not failed and not busy:
            return _Outcome(Settlement(batch.id, "ack"), "delivered")
        attempt = batch.failures + 1 if failed else max(batch.failures, 1)
        error = (
            f"hooks {', '.join(failed)} failed"
            if failed
            else f"hooks {', '.join(busy)} queued or in flight elsewhere"
        )
        settlement = Settlement(
            batch.id,
            "retry",
            delay=self.options.retry_delay_ms(attempt),
            failed=bool(failed),
            committed=True,
            error=error,
            lease=batch.lease,
        )
        return _Outcome(settlement, "failed" if failed else "waiting")

    def _undecodable(self, batch: StagedBatch, error: Exception) -> _Outcome:
        logger.error(
            "staged batch %s (thread %r, checkpoint %s) does not decode: %r; it stays in the "
            "outbox: fix the serializer (allowlist) so the next drain can deliver it",
            batch.id,
            batch.thread_id,
            batch.checkpoint_id,
            error,
        )
        settlement = Settlement(
            batch.id,
            "retry",
            delay=self.options.retry_delay_ms(batch.failures + 1),
            failed=True,
            committed=True,
            error=repr(error),
            lease=batch.lease,
        )
        return _Outcome(settlement, "failed")

    def _uncommitted(self, batch: StagedBatch, now: int) -> _Outcome:
        grace_ms = int(self.options.grace * 1000)
        waited = batch.age if batch.age is not None else now - batch.staged_at
        if waited >= grace_ms:
            logger.info(
                "discarding staged batch %s: checkpoint %s of thread %r was not stored within "
                "%.0f s (its put failed or never ran)",
                batch.id,
                batch.checkpoint_id,
                batch.thread_id,
                self.options.grace,
            )
            discard = Settlement(batch.id, "discard", staged_at=batch.staged_at, lease=batch.lease)
            return _Outcome(discard, "discarded")
        delay = min(int(self.options.retry_after * 1000), grace_ms - waited)
        return _Outcome(Settlement(batch.id, "retry", delay=delay, lease=batch.lease), "waiting")

    def _count(self, outcomes: Sequence[_Outcome]) -> DrainReport:
        kinds = [o.kind for o in outcomes]
        shared = self._shared
        with self._lock:
            shared.delivered += kinds.count("delivered")
            shared.failures += kinds.count("failed")
            shared.discarded += kinds.count("discarded")
        return DrainReport(
            claimed=len(kinds),
            delivered=kinds.count("delivered"),
            failed=kinds.count("failed"),
            waiting=kinds.count("waiting"),
            discarded=kinds.count("discarded"),
        )

    def _take_acks(self) -> list[Settlement]:
        """Takes the settlements waiting for the next outbox call: acks, and commits that
        were not recorded yet."""
        with self._lock:
            acks = self._acks[:]
            self._acks.clear()  # in place: the list is shared with `with_inner` runners
        return acks

    def _pend(self, settlements: Sequence[Settlement]) -> None:
        """Keeps `settlements` for the next outbox call, ahead of what waits already."""
        with self._lock:
            self._acks[:0] = settlements

    def _commits(self, own: Sequence[_Own]) -> list[Settlement]:
        """Marks the batches of `own` committed: their put returned, so their checkpoint was
        stored, and a drain delivers them even once it is pruned or its thread deleted.

        One a drain discarded meanwhile (its put took longer than `grace`) is due again: at
        once in manual mode, and after a lease (`delay`) when this process delivers it from
        memory, so that no other deliverer takes it while that delivery runs."""
        delay = 0 if self.mode == "manual" else int(self.options.lease * 1000)
        return [Settlement(o.batch.id, "commit", delay=delay) for o in own]

    def _defer(self, outcome: _Outcome) -> list[Settlement]:
        """Keeps an ack for the next outbox call; returns what must be settled now."""
        if outcome.settlement.action == "ack":
            with self._lock:
                self._acks.append(outcome.settlement)
            return []
        return [outcome.settlement]

    @staticmethod
    def _config(batch: StagedBatch) -> RunnableConfig:
        return {
            "configurable": {
                "thread_id": batch.thread_id,
                "checkpoint_ns": batch.checkpoint_ns,
                "checkpoint_id": batch.checkpoint_id,
            }
        }

    # -- blocking --------------------------------------------------------------------------

    def stage(self, batch: StagedBatch) -> int:
        """Stages `batch` before the put, with the acks waiting to be sent; one round trip.

        Returns:
            How many batches are due in the outbox.
        """
        now, visible_at = self._stage_times()
        acks = self._take_acks()
        try:
            return self.outbox.stage(batch, now=now, visible_at=visible_at, settle=acks)
        except BaseException:
            with self._lock:
                self._acks[:0] = acks
            raise

    def stored(self, batch: StagedBatch, pruned: list[Any], namespace: Any, due: int) -> None:
        """After the put stored the checkpoint of `batch`: mark the batch committed, and
        deliver it as the mode says.

        Never raises: the batch is in the outbox, and the next drain delivers what failed;
        a commit mark that could not be sent rides on the next outbox call.
        """
        own = _Own(batch, pruned, namespace)
        try:
            if self.mode == "manual":
                # Before this call returns: a later call may prune the checkpoint, and a
                # drain takes a batch whose checkpoint is absent and that is not marked
                # committed for one whose put failed. One round trip, with pending acks.
                self._send(self._take_acks() + self._commits([own]))
            elif self.mode == "background":
                # Delivered from memory by the worker whatever happens to the checkpoint;
                # the mark, riding on the next outbox call, covers a process that dies first.
                self._pend(self._commits([own]))
                self._thread_worker().submit(own)
            elif self.mode == "inline":
                self._deliver_own([own], defer=True)
                if due > 0:
                    self.drain()
        except Exception:
            logger.exception(
                "delivering batch %s after its put failed; it stays in the outbox and the "
                "next drain delivers it",
                batch.id,
            )

    def _settlements(self, outcomes: Sequence[_Outcome], *, defer: bool) -> list[Settlement]:
        """Counts `outcomes` and returns what to settle: deferred, or final with the acks
        waiting to be sent."""
        self._count(outcomes)
        settle: list[Settlement] = []
        for outcome in outcomes:
            settle += self._defer(outcome) if defer else [outcome.settlement]
        if not defer:
            settle = self._take_acks() + settle
        return settle

    def _send(self, settle: list[Settlement]) -> None:
        """Settles `settle` now; when that fails, keeps it for the next outbox call."""
        try:
            self.outbox.settle(settle)
        except BaseException:
            self._pend(settle)
            raise

    def _deliver_own(self, own: Sequence[_Own], *, defer: bool) -> None:
        try:
            outcomes = [
                self._outcome(o.batch, self.reducer.deliver(o.pruned, o.namespace)) for o in own
            ]
        except BaseException:
            self._pend(self._commits(own))  # stored all the same: a drain delivers them
            raise
        settle = self._settlements(outcomes, defer=defer)
        if settle:
            self._send(settle)

    def _process(self, batch: StagedBatch, now: int) -> _Outcome:
        committed = batch.committed
        if committed is None:
            committed = self._shared.reader.get_tuple(self._config(batch)) is not None
        if not committed:
            return self._uncommitted(batch, now)
        try:
            messages, namespace = _decode(self._shared.reader.serde, batch.payload)
        except Exception as exc:
            return self._undecodable(batch, exc)
        return self._outcome(batch, self.reducer.deliver(messages, namespace))

    def drain(self, limit: int | None = None) -> DrainReport:
        """Claims up to `limit` due batches and delivers those whose checkpoint is stored.

        Several processes may drain one outbox at once: a claimed batch is leased to its
        claimer for `Delivery.lease` seconds.
        """
        deadline, now, lease_until = self._claim_times()
        claimed = self.outbox.claim(
            now=now, lease_until=lease_until, limit=limit or self.options.batch_size
        )
        outcomes: list[_Outcome] = []
        for batch in claimed:
            if time.monotonic() >= deadline:
                break  # the rest may belong to another deliverer now; they are due again
            outcomes.append(self._process(batch, now))
        settle = self._take_acks() + [o.settlement for o in outcomes]
        if settle:
            self._send(settle)
        return self._count(outcomes)

    def stats(self) -> OutboxStats:
        """The outbox's shared counters, after sending the acks this process still holds."""
        self.flush_acks()
        return self.outbox.stats()

    def flush_acks(self) -> None:
        """Sends the acks of delivered batches (and the commit marks) that wait to ride on
        the next staging."""
        acks = self._take_acks()
        if acks:
            self._send(acks)

    def flush(self, timeout: float | None = None) -> bool:
        """Waits until the background thread delivered what it was handed; sends acks.

        Returns:
            False when `timeout` passed first.
        """
        worker = self._thread
        done = worker.flush(timeout) if worker is not None else True
        self.flush_acks()
        return done

    def close(self, timeout: float | None = None) -> None:
        """Delivers what the background thread holds, stops it and sends pending acks."""
        worker, self._thread = self._thread, None
        if worker is not None:
            worker.close(timeout)
        self.flush_acks()

    def close_at_exit(self, timeout: float) -> None:
        """`close` at interpreter exit. When this delivery used the outbox from asyncio,
        the acks and commit marks still held are sent with `asettle` on a fresh event loop
        (the app's has ended, and the outbox's client may be a `redis.asyncio` one, which
        `settle` refuses). Batches an asyncio task still held stay in the outbox, marked
        committed once their put returned: the next drain delivers them once their lease
        expires."""
        worker, self._thread = self._thread, None
        if worker is not None:
            worker.close(timeout)
        if not self._shared.asyncio:
            self.flush_acks()
            return
        for attempt in (1, 2):
            with self._lock:
                if not self._acks:
                    return
            try:
                asyncio.run(asyncio.wait_for(self.aflush_acks(), timeout))
            except RuntimeError:
                # A `redis.asyncio` connection opened on the ended loop fails its first
                # command on this one ("Event loop is closed") and is dropped: once more.
                if attempt == 2:
                    raise

    def _thread_worker(self) -> _ThreadWorker:
        with self._lock:
            if self._thread is None:
                self._thread = _ThreadWorker(self)
            return self._thread

    # -- asyncio ---------------------------------------------------------------------------

    async def astage(self, batch: StagedBatch) -> int:
        """`stage`, for asyncio."""
        self._shared.asyncio = True
        now, visible_at = self._stage_times()
        acks = self._take_acks()
        try:
            return await self.outbox.astage(batch, now=now, visible_at=visible_at, settle=acks)
        except BaseException:
            with self._lock:
                self._acks[:0] = acks
            raise

    async def astored(
        self, batch: StagedBatch, pruned: list[Any], namespace: Any, due: int
    ) -> None:
        """`stored`, for asyncio; background mode runs an asyncio task on this loop."""
        own = _Own(batch, pruned, namespace)
        try:
            if self.mode == "manual":
                await self._asend(self._take_acks() + self._commits([own]))
            elif self.mode == "background":
                # Unlike the thread, the task dies with its event loop (a script's
                # `asyncio.run`, a serverless handler), taking what it holds: mark the batch
                # committed now, as manual mode does, so that whatever happens to the
                # checkpoint before it is delivered the next drain delivers it.
                try:
                    await self._asend(self._take_acks() + self._commits([own]))
                finally:  # after the mark: the task starts no sooner than it used to
                    self._task_worker().submit(own)
            elif self.mode == "inline":
                await self._adeliver_own([own], defer=True)
                if due > 0:
                    await self.adrain()
        except Exception:
            logger.exception(
                "delivering batch %s after its put failed; it stays in the outbox and the "
                "next drain delivers it",
                batch.id,
            )

    async def _asend(self, settle: list[Settlement]) -> None:
        """`_send`, for asyncio."""
        try:
            await self.outbox.asettle(settle)
        except BaseException:
            self._pend(settle)
            raise

    async def _adeliver_own(
        self,
        own: Sequence[_Own],
        *,
        defer: bool,
        on_cancel: Callable[[Sequence[_Own]], None] | None = None,
    ) -> None:
        """`_deliver_own`, for asyncio. Cancelled (its loop ends), it settles what it
        finished with the next outbox call and hands the rest to `on_cancel`."""
        outcomes: list[_Outcome] = []
        try:
            for o in own:
                report = await self.reducer.adeliver(o.pruned, o.namespace)
                outcomes.append(self._outcome(o.batch, report))
        except BaseException as exc:
            self._pend(self._commits(own))
            if on_cancel is not None and isinstance(exc, asyncio.CancelledError):
                self._pend(self._settlements(outcomes, defer=True))
                on_cancel(own[len(outcomes) :])
            raise
        settle = self._settlements(outcomes, defer=defer)
        if settle:
            await self._asend(settle)

    async def _aprocess(self, batch: StagedBatch, now: int) -> _Outcome:
        committed = batch.committed
        if committed is None:
            committed = await self._shared.reader.aget_tuple(self._config(batch)) is not None
        if not committed:
            return self._uncommitted(batch, now)
        try:
            messages, namespace = _decode(self._shared.reader.serde, batch.payload)
        except Exception as exc:
            return self._undecodable(batch, exc)
        return self._outcome(batch, await self.reducer.adeliver(messages, namespace))

    async def adrain(self, limit: int | None = None) -> DrainReport:
        """`drain`, for asyncio."""
        deadline, now, lease_until = self._claim_times()
        claimed = await self.outbox.aclaim(
            now=now, lease_until=lease_until, limit=limit or self.options.batch_size
        )
        outcomes: list[_Outcome] = []
        for batch in claimed:
            if time.monotonic() >= deadline:
                break  # the rest may belong to another deliverer now; they are due again
            outcomes.append(await self._aprocess(batch, now))
        settle = self._take_acks() + [o.settlement for o in outcomes]
        if settle:
            await self._asend(settle)
        return self._count(outcomes)

    async def astats(self) -> OutboxStats:
        """`stats`, for asyncio."""
        await self.aflush_acks()
        return await self.outbox.astats()

    async def aflush_acks(self) -> None:
        """`flush_acks`, for asyncio."""
        acks = self._take_acks()
        if acks:
            await self._asend(acks)

    async def aflush(self) -> None:
        """Waits until the background task delivered what it was handed; sends acks.

        When the task's event loop has ended (or the task died with it), the batches it had
        not delivered are delivered here, on the running loop."""
        worker = self._task
        if worker is not None:
            if worker.usable():
                await worker.aflush()
            else:
                await self._aadopt(worker)
        await self.aflush_acks()

    async def aclose(self) -> None:
        """Delivers what the background task holds, stops it and sends pending acks; on a
        new event loop, delivers here what the task of an ended one left."""
        worker = self._task
        if worker is not None:
            if worker.usable():
                self._task = None
                await worker.aclose()
            else:
                await self._aadopt(worker)
        await self.aflush_acks()

    async def _aadopt(self, worker: _TaskWorker) -> None:
        """`aflush()` or `aclose()` from a loop that is not the worker's: when the worker's
        loop has ended, what it had not delivered is delivered here. A worker whose loop
        still runs in another thread is that loop's to flush: waiting on it from here would
        hang if that loop stopped, and end in its cancellation if it closed."""
        if worker.alive_elsewhere():
            raise RuntimeError(
                "the background delivery task of this saver runs on an event loop still "
                f"running in another thread ({worker.loop!r}): call aflush() or aclose() on "
                "that loop (asyncio.run_coroutine_threadsafe), or let that loop end first; "
                "its batches wait in the outbox meanwhile"
            )
        # before taking what the worker left: kept with it on a raise
        await self._aheal_clients(pending=worker.pending())
        if self._task is worker:
            self._task = None  # the next background `aput` starts a task on this loop
        own = worker.take_leftover()
        if own:
            await self._adeliver_own(own, defer=False)

    async def _aheal_clients(self, pending: bool) -> None:
        """Drops the connections of the ended loop from the outbox's and the ledger's
        `redis.asyncio` clients: each would fail its first command here, and the reducer only
        logs a failed ledger lookup, so a delivery would say nothing. With batches `pending`,
        raises, naming the fix, when connections of another loop are still met."""
        for holder in (self.outbox, getattr(self.reducer, "ledger", None)):
            heal = getattr(holder, "_aheal", None)  # RedisOutbox, RedisDeliveryLedger
            error = await heal() if heal is not None else None
            if error is not None and pending:
                raise error

    def _task_worker(self) -> _TaskWorker:
        old = self._task
        if old is not None and old.usable():
            return old
        worker = self._task = _TaskWorker(self)
        if old is not None and not old.alive_elsewhere():
            for own in old.take_leftover():  # what the task of an ended loop left
                worker.submit(own)
        return worker

    def __repr__(self) -> str:
        return f"DeliveryRunner({self.outbox!r}, mode={self.mode!r})"


class _ThreadWorker:
    """The background thread: delivers this process's batches, then polls the outbox."""

    def __init__(self, runner: DeliveryRunner) -> None:
        self.runner = runner
        self._queue: deque[_Own] = deque()
        self._cond = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="agentstate-delivery", daemon=True)
        self._thread.start()

    def submit(self, own: _Own) -> None:
        with self._cond:
            if self._closed:
                return  # staged and leased: the next drain after the lease delivers it
            self._queue.append(own)
            self._cond.notify_all()

    def flush(self, timeout: float | None) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def close(self, timeout: float | None) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:  # a hook may close it: no self-join
            self._thread.join(timeout)

    def _loop(self) -> None:
        options = self.runner.options
        next_poll = 0.0
        while True:
            with self._cond:
                if not self._queue and not self._closed:
                    self._cond.wait(max(0.0, next_poll - time.monotonic()))
                own = list(self._queue)
                self._queue.clear()
                closing = self._closed
                self._busy = True
            try:
                if own:
                    self.runner._deliver_own(own, defer=False)
                if not closing and time.monotonic() >= next_poll:
                    report = self.runner.drain()
                    full = report.claimed >= options.batch_size
                    next_poll = time.monotonic() + (0.0 if full else options.poll_interval)
            except Exception:
                logger.exception("background delivery failed; retrying after poll_interval")
                next_poll = time.monotonic() + options.poll_interval
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()
            if closing:
                with self._cond:
                    if not self._queue:
                        return


class _TaskWorker:
    """The background asyncio task: `_ThreadWorker` on the event loop of the first `aput`."""

    def __init__(self, runner: DeliveryRunner) -> None:
        self.runner = runner
        self._queue: deque[_Own] = deque()
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._task = self._loop.create_task(self._run(), name="agentstate-delivery")

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def usable(self) -> bool:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            return False
        return running is self._loop and not self._task.done()

    def alive_elsewhere(self) -> bool:
        """Whether the task still runs, on a loop running in another thread."""
        return not self._task.done() and not self._loop.is_closed() and self._loop.is_running()

    def _requeue(self, own: Sequence[_Own]) -> None:
        self._queue.extendleft(reversed(own))

    def pending(self) -> bool:
        """Whether the task holds batches it has not delivered."""
        return bool(self._queue)

    def take_leftover(self) -> list[_Own]:
        """Stops the task (its loop is over) and returns what it had not delivered."""
        self._closed = True
        own = list(self._queue)
        self._queue.clear()
        return own

    def submit(self, own: _Own) -> None:
        self._queue.append(own)
        self._idle.clear()
        self._wake.set()

    async def aflush(self) -> None:
        while self._queue or not self._idle.is_set():
            await self._idle.wait()
            await asyncio.sleep(0)

    async def aclose(self) -> None:
        self._closed = True
        self._wake.set()
        await self._task

    async def _run(self) -> None:
        options = self.runner.options
        next_poll = 0.0
        while True:
            if not self._queue and not self._closed:
                try:
                    timeout = max(0.0, next_poll - self._loop.time())
                    await asyncio.wait_for(self._wake.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
            self._wake.clear()
            own = list(self._queue)
            self._queue.clear()
            closing = self._closed
            self._idle.clear()
            try:
                if own:
                    # Cancelled (the loop ends), what it did not deliver waits for
                    # `aflush`/`aclose` or the task of the next loop.
                    await self.runner._adeliver_own(own, defer=False, on_cancel=self._requeue)
                if not closing and self._loop.time() >= next_poll:
                    report = await self.runner.adrain()
                    full = report.claimed >= options.batch_size
                    next_poll = self._loop.time() + (0.0 if full else options.poll_interval)
            except Exception:
                logger.exception("background delivery failed; retrying after poll_interval")
                next_poll = self._loop.time() + options.poll_interval
            finally:
                if not self._queue:
                    self._idle.set()
            if closing and not self._queue:
                return
