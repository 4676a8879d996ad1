"""The delivery core: which messages each hook still needs, claims, marks and retries.

It calls no hook itself: `MessageReducer.deliver` and `adeliver` are the thin sync and
async shells that run the jobs `prepare` returns and report back through `finish`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._config import RememberFn
from ._ledger import AsyncDeliveryLedger, DeliveryLedger, namespace_key
from ._messages import message_identity
from ._report import DeliveryReport, HookReport

logger = logging.getLogger("agentstate_reducer")

_Batch = tuple[Any, "OrderedDict[str, Any]"]  # (namespace, identity -> message)
_Failed = tuple[str, Hashable, str]  # (hook key, namespace key, identity) kept on failure


def hook_key(hook: object) -> str:
    """Return a hook's stable ledger key: its `name` attribute, else its qualified name."""
    name = getattr(hook, "name", None)
    if isinstance(name, str) and name:
        return name
    if isinstance(hook, functools.partial):
        return hook_key(hook.func)
    target = getattr(hook, "__func__", hook)
    qualname = getattr(target, "__qualname__", None)
    if not isinstance(qualname, str):
        target = type(hook)
        qualname = target.__qualname__
    return f"{getattr(target, '__module__', None) or '?'}.{qualname}"


def caller_cancelled() -> bool:
    """Whether the running task is being cancelled: a `CancelledError` a hook raised then
    is (or hides) that cancellation and must go on; otherwise it is the hook's own (a
    client whose internal request was cancelled, say) and the hook failed like any other.

    Python 3.11+ counts a task's pending cancellations (`Task.cancelling`). Python 3.10
    keeps no such count, so there every `CancelledError` counts as the caller's: letting a
    hook's own one go on only fails that delivery (its batch is kept for the next one),
    while taking a real cancellation for a hook failure would swallow it.
    """
    task = asyncio.current_task()
    if task is None:  # no task to cancel: the error is the hook's
        return False
    cancelling = getattr(task, "cancelling", None)
    if cancelling is None:  # Python 3.10
        return True
    return bool(cancelling())


def own_cancellation(exc: asyncio.CancelledError) -> RuntimeError:
    """The failure a `CancelledError` a hook raised itself (`caller_cancelled` false) counts
    as: a `RuntimeError` caused by it, so that nothing takes it for a cancellation."""
    error = RuntimeError("the on_prune hook raised CancelledError itself")
    error.__cause__ = exc
    return error


def hook_keys(hooks: Sequence[object]) -> list[str]:
    """Return one key per hook; repeated keys get `#2`, `#3`, ... in list order."""
    keys: list[str] = []
    counts: dict[str, int] = {}
    for hook in hooks:
        key = hook_key(hook)
        counts[key] = counts.get(key, 0) + 1
        keys.append(key if counts[key] == 1 else f"{key}#{counts[key]}")
    return keys


@dataclass(frozen=True)
class Lookup:
    """A question for the ledger: which of `ids` has hook `key` had in `namespace`?"""

    key: str
    namespace: Any
    ids: list[str]


def _unrecorded(job: Job, error: BaseException) -> None:
    logger.error(
        "delivery ledger could not record %d messages for hook %s; they may be delivered again",
        len(job.ids),
        job.key,
        exc_info=error,
    )


@dataclass
class Job:
    """One hook call to make: `hook(messages, namespace)`."""

    hook: RememberFn
    key: str
    namespace: Any
    messages: list[Any]
    ids: list[str]
    dedupe: bool
    seen: int = 0  # its hook's failures in a row when the job was made
    probe: bool = False  # run later, alone, by a hook that raised before (`probing`)


@dataclass
class ReportBuilder:
    """Collects per-hook outcomes of one delivery, then freezes them."""

    keys: list[str]
    fields: dict[tuple[str, str], list[str]] = field(default_factory=dict)

    def add(self, key: str, outcome: str, ids: Sequence[str]) -> None:
        """Record `ids` under `outcome` (`delivered`, `queued`, `failed`, `skipped`,
        `in_flight`: skipped because another delivery holds them)."""
        self.fields.setdefault((key, outcome), []).extend(ids)

    def build(self) -> DeliveryReport:
        """Return the frozen report, hooks in config order."""

        def get(key: str, outcome: str) -> tuple[str, ...]:
            return tuple(self.fields.get((key, outcome), ()))

        return DeliveryReport(
            tuple(
                HookReport(
                    hook=key,
                    delivered=get(key, "delivered"),
                    queued=get(key, "queued"),
                    failed=get(key, "failed"),
                    skipped=get(key, "skipped"),
                    in_flight=get(key, "in_flight"),
                )
                for key in self.keys
            )
        )


class Dispatcher:
    """Decides what each hook still needs and records what it got.

    A hook that raised rests: until its rest is over no job calls it, and what is cut
    meanwhile waits for it with what it failed on. The rest is `retry_after` seconds,
    doubled with each failure in a row up to `max_retry_after`; a success ends it.

    Args:
        ledger: Where delivered identities are recorded.
        retry_limit: Most failed (hook, message) deliveries kept for retry; the oldest
            beyond it are dropped with an error log. Kept messages no hook failed on
            (`defer`, a cancelled `aprepare`'s) are never dropped and count apart.
        retry_after: The first rest of a hook that raised, in seconds (0: none).
        max_retry_after: The longest rest.
    """

    def __init__(
        self,
        ledger: DeliveryLedger,
        retry_limit: int,
        retry_after: float = 0.0,
        max_retry_after: float = 0.0,
    ) -> None:
        self.ledger = ledger
        self.retry_limit = retry_limit
        self.retry_after, self.max_retry_after = retry_after, max_retry_after
        self.clock: Callable[[], float] = time.monotonic  # tests set another
        self.lost = 0
        # hook key -> (its failures in a row, when its rest ends on `clock`)
        self._down: dict[str, tuple[int, float]] = {}
        self._probes: set[str] = set()  # hooks whose probe (see `probing`) has not settled
        self._last_failed: dict[str, Hashable] = {}  # hook key -> the namespace it raised on
        self._lock = threading.Lock()
        self._in_flight: set[tuple[str, Hashable, str]] = set()
        self._retry: dict[str, OrderedDict[Hashable, _Batch]] = {}
        self._pending = 0
        # The (key, ns, identity) in `_retry` kept because a hook or a lookup failed, oldest
        # first: only these count against `retry_limit` and are dropped for room.
        self._failed: OrderedDict[_Failed, None] = OrderedDict()

    @property
    def pending(self) -> int:
        """How many (hook, message) deliveries wait for a retry."""
        return self._pending

    def resting(self, key: str) -> bool:
        """Whether hook `key` raised and its rest is not over."""
        down = self._down.get(key)
        return down is not None and self.clock() < down[1]

    def failures(self, key: str) -> tuple[int, float]:
        """Hook `key`'s failures in a row, and the seconds left of its rest."""
        failures, until = self._down.get(key, (0, 0.0))
        return failures, max(0.0, until - self.clock()) if failures else 0.0

    def wake(self, keys: Sequence[str]) -> None:
        """Ends the rests of hooks `keys`: the next delivery calls each (a background hook
        gets one batch first). Their failures in a row still count toward a next rest. A
        hook whose probe has not settled waits for it: woken, each delivery would hand it
        another batch meanwhile."""
        with self._lock:
            for key in keys:
                if key not in self._probes and (down := self._down.get(key)) is not None:
                    self._down[key] = (down[0], self.clock())

    def probing(self, key: str) -> None:
        """Hook `key`, which raised before, is handed one batch to run later (a background
        hook's, or a coroutine hook's scheduled on the event loop): it rests until that batch
        settles, at most `max_retry_after`, so that the deliveries made meanwhile do not hand
        it one each."""
        with self._lock:
            if self.retry_after and (down := self._down.get(key)) is not None:
                self._down[key] = (down[0], self.clock() + self.max_retry_after)
                self._probes.add(key)

    def prepare(
        self, hooks: Sequence[RememberFn], pruned: Sequence[Any], namespace: Any, dedupe: bool
    ) -> tuple[list[Job], ReportBuilder]:
        """Claim what each hook still needs, retries first; return the jobs to run."""
        steps = self._prepare(hooks, pruned, namespace, dedupe)
        answer: set[str] | Exception | None = None
        try:
            while True:
                try:
                    lookup = steps.send(answer)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                try:
                    answer = self.ledger.seen(lookup.key, lookup.namespace, lookup.ids)
                except Exception as exc:  # the ledger is the user's: any failure is a miss
                    answer = exc
        except BaseException:
            steps.close()  # releases its claims and puts back what it took out
            raise

    async def aprepare(
        self, hooks: Sequence[RememberFn], pruned: Sequence[Any], namespace: Any, dedupe: bool
    ) -> tuple[list[Job], ReportBuilder]:
        """`prepare` on an event loop: awaits the ledger's `aseen` when it has one."""
        if not isinstance(self.ledger, AsyncDeliveryLedger):
            return self.prepare(hooks, pruned, namespace, dedupe)
        steps = self._prepare(hooks, pruned, namespace, dedupe)
        answer: set[str] | BaseException | None = None
        try:
            while True:
                try:
                    lookup = steps.send(answer)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                try:
                    answer = await self.ledger.aseen(lookup.key, lookup.namespace, lookup.ids)
                except Exception as exc:
                    answer = exc
                except asyncio.CancelledError as exc:
                    if caller_cancelled():
                        raise
                    answer = exc  # the ledger's own: a failed lookup, as in `prepare`
        except BaseException:  # cancelled while the ledger answered (a request's timeout)
            steps.close()
            raise

    def _prepare(
        self, hooks: Sequence[RememberFn], pruned: Sequence[Any], namespace: Any, dedupe: bool
    ) -> Generator[Lookup, set[str] | BaseException | None, tuple[list[Job], ReportBuilder]]:
        """The I/O-free part of `prepare`: yields each ledger lookup, gets its answer back.

        Closed before it returns (a cancelled `aprepare`), it releases every claim it took
        and puts back every batch it took out, so no message is skipped or dropped.
        """
        keys = hook_keys(hooks)
        report = ReportBuilder(keys)
        fresh: OrderedDict[str, Any] = OrderedDict()
        repeated: list[str] = []
        for message in pruned:
            identity = message_identity(message)
            if identity in fresh:
                repeated.append(identity)
            else:
                fresh[identity] = message
        ns = namespace_key(namespace)
        jobs: list[Job] = []
        taken: list[tuple[str, OrderedDict[Hashable, _Batch], list[_Failed]]] = []
        try:
            for hook, key in zip(hooks, keys, strict=True):
                report.add(key, "skipped", repeated)
                if self.resting(key):  # what is new waits with what it failed on
                    with self._lock:
                        self._keep(key, ns, namespace, [*fresh], [*fresh.values()])
                    report.add(key, "failed", [*fresh])
                    continue
                batches, failed = self._take_retries(key)
                taken.append((key, batches, failed))
                _, target = batches.setdefault(ns, (namespace, OrderedDict()))
                for identity, message in fresh.items():
                    target.setdefault(identity, message)
                # The namespace the hook last raised on goes last: a batch it always raises on
                # would otherwise come first every time and hold up every other namespace.
                if (last := self._last_failed.get(key)) in batches:
                    batches.move_to_end(last)
                seen = self._down.get(key, (0, 0.0))[0]
                for batch_ns, (batch_namespace, messages) in batches.items():
                    ids = list(messages)
                    if ids and dedupe:
                        ids = yield from self._claim(
                            key, batch_ns, batch_namespace, messages, report
                        )
                    if ids:
                        batch = [messages[i] for i in ids]
                        jobs.append(Job(hook, key, batch_namespace, batch, ids, dedupe, seen))
        except BaseException:  # closed by a cancelled `aprepare`: no job will run
            self._put_back(taken, jobs)
            raise
        return jobs, report

    def defer(self, hooks: Sequence[RememberFn], pruned: Sequence[Any], namespace: Any) -> None:
        """Keep `pruned` for every hook as the next delivery's retries, claiming nothing.

        For a delivery that runs later (a task): it takes them back as its retries, and
        until then they count in `pending`, so a task that never runs loses nothing.
        """
        ns = namespace_key(namespace)
        ids = [message_identity(message) for message in pruned]
        with self._lock:
            for key in hook_keys(hooks):  # for a resting hook, as failed: bounded as those are
                self._keep(key, ns, namespace, ids, list(pruned), evict=self.resting(key))

    def finish(self, job: Job, error: BaseException | None, *, called: bool = True) -> None:
        """Record the outcome of `job`: mark it delivered, or keep it for retry. A failure
        of a hook `called` (not a job left unrun) counts towards its rest."""
        try:
            if error is None and job.dedupe:
                try:
                    self.ledger.mark(job.key, job.namespace, job.ids)
                except Exception as exc:
                    _unrecorded(job, exc)
        finally:  # a KeyboardInterrupt in the mark still releases the claims
            self._settle(job, error, called)

    async def afinish(self, job: Job, error: BaseException | None) -> None:
        """`finish` on an event loop: awaits the ledger's `amark` when it has one."""
        if error is not None or not job.dedupe or not isinstance(self.ledger, AsyncDeliveryLedger):
            self.finish(job, error)  # nothing to await
            return
        # Shielded: the hook has the messages, so a caller cancelled now (a request's
        # timeout) must not leave them unrecorded, to be delivered again. The mark goes on,
        # the claims held until it ends, and the cancellation goes on to the caller.
        mark = asyncio.ensure_future(self.ledger.amark(job.key, job.namespace, job.ids))
        try:
            await asyncio.shield(mark)
        except Exception as exc:
            _unrecorded(job, exc)
        except BaseException as exc:  # cancelled, or the mark itself was
            if isinstance(exc, asyncio.CancelledError) and mark.done() and not caller_cancelled():
                _unrecorded(job, exc)  # the ledger's own, this task not cancelled: a failure
            else:
                if mark.done():
                    self._marked(job, mark)
                else:
                    mark.add_done_callback(functools.partial(self._marked, job))
                raise
        self._settle(job, error)

    def _marked(self, job: Job, mark: asyncio.Future[None]) -> None:
        """Settles `job`, delivered, once the mark its cancelled `afinish` left running ended."""
        if mark.cancelled():
            _unrecorded(job, asyncio.CancelledError())
        elif (exc := mark.exception()) is not None:
            _unrecorded(job, exc)
        self._settle(job, None)

    def _settle(self, job: Job, error: BaseException | None, called: bool = True) -> None:
        ns = namespace_key(job.namespace)
        with self._lock:
            if job.dedupe:
                self._in_flight.difference_update((job.key, ns, i) for i in job.ids)
            if job.probe:
                self._probes.discard(job.key)
            if error is None:
                self._down.pop(job.key, None)
                return
            self._keep(job.key, ns, job.namespace, job.ids, job.messages)
            if not called:
                if job.probe and (down := self._down.get(job.key)) is not None:
                    self._down[job.key] = (down[0], self.clock())  # no verdict: probe again
                return
            self._last_failed[job.key] = ns
            failures = self._down.get(job.key, (0, 0.0))[0]
            if failures > job.seen:  # one that overlapped it counted already: one outage
                return
            failures += 1
            rest = self.retry_after * 2 ** min(failures - 1, 32)
            self._down[job.key] = (failures, self.clock() + min(rest, self.max_retry_after))

    def _claim(
        self,
        key: str,
        ns: Hashable,
        namespace: Any,
        messages: OrderedDict[str, Any],
        report: ReportBuilder,
    ) -> Generator[Lookup, set[str] | BaseException | None, list[str]]:
        # Claim before asking the ledger: a concurrent delivery of the same messages then
        # either sees the claim or, once released, sees the ledger entry.
        with self._lock:
            claimed = [i for i in messages if (key, ns, i) not in self._in_flight]
            self._in_flight.update((key, ns, i) for i in claimed)
        taken = set(claimed)
        busy = [i for i in messages if i not in taken]
        report.add(key, "skipped", busy)
        report.add(key, "in_flight", busy)
        if not claimed:
            return []
        try:
            seen = yield Lookup(key, namespace, claimed)
        except BaseException:  # closed by a cancelled `aprepare`
            with self._lock:
                self._in_flight.difference_update((key, ns, i) for i in claimed)
            raise
        if isinstance(seen, BaseException):  # a CancelledError only when the ledger's own
            logger.error(
                "delivery ledger lookup failed for hook %s; will retry", key, exc_info=seen
            )
            report.add(key, "failed", claimed)
            with self._lock:
                self._in_flight.difference_update((key, ns, i) for i in claimed)
                self._keep(key, ns, namespace, claimed, [messages[i] for i in claimed])
            return []
        found = seen or set()
        if found:
            with self._lock:
                self._in_flight.difference_update((key, ns, i) for i in found)
            report.add(key, "skipped", [i for i in claimed if i in found])
        return [i for i in claimed if i not in found]

    def _take_retries(self, key: str) -> tuple[OrderedDict[Hashable, _Batch], list[_Failed]]:
        """Take out what waits for hook `key`, with which of it was kept on failure."""
        with self._lock:
            batches = self._retry.pop(key, OrderedDict())
            return batches, self._unkeep(key, batches)

    def _unkeep(self, key: str, batches: OrderedDict[Hashable, _Batch]) -> list[_Failed]:
        """Uncount `batches`, taken out of `_retry`; caller holds the lock."""
        self._pending -= sum(len(messages) for _, messages in batches.values())
        entries = ((key, ns, i) for ns, (_, messages) in batches.items() for i in messages)
        failed = [entry for entry in entries if entry in self._failed]
        for entry in failed:
            del self._failed[entry]
        return failed

    def _put_back(
        self,
        taken: list[tuple[str, OrderedDict[Hashable, _Batch], list[_Failed]]],
        jobs: list[Job],
    ) -> None:
        """Undo an unfinished `_prepare`: release the claims of its jobs and keep every
        batch it took out (retries and new messages) ahead of what was kept since. What was
        kept on failure counts as failed again, ahead of what failed since, and the oldest
        failed beyond `retry_limit` are dropped now, as a failure meanwhile would have."""
        with self._lock:
            for job in jobs:
                if job.dedupe:
                    ns = namespace_key(job.namespace)
                    self._in_flight.difference_update((job.key, ns, i) for i in job.ids)
            for key, batches, failed in taken:
                # What was kept since: its failed stay in `_failed`, in place.
                since = self._retry.pop(key, OrderedDict())
                self._pending -= sum(len(messages) for _, messages in since.values())
                for ns, (namespace, messages) in [*batches.items(), *since.items()]:
                    self._keep(
                        key, ns, namespace, list(messages), [*messages.values()], evict=False
                    )
                for entry in reversed(failed):
                    self._failed[entry] = None
                    self._failed.move_to_end(entry, last=False)
            self._evict_overflow()

    def _keep(
        self,
        key: str,
        ns: Hashable,
        namespace: Any,
        ids: list[str],
        messages: list[Any],
        *,
        evict: bool = True,
    ) -> None:
        """Keep undelivered messages for the next delivery; caller holds the lock.

        With `evict` (a failure) they count as failed, and the oldest failed beyond
        `retry_limit` are dropped. Messages no hook has failed on (`defer`, `_put_back`)
        are never dropped for room, nor counted against it.
        """
        if not ids:
            return
        batches = self._retry.setdefault(key, OrderedDict())
        _, kept = batches.setdefault(ns, (namespace, OrderedDict()))
        for identity, message in zip(ids, messages, strict=True):
            if identity not in kept:
                kept[identity] = message
                self._pending += 1
            if evict:
                self._failed.setdefault((key, ns, identity))
        self._evict_overflow()

    def _evict_overflow(self) -> None:
        """Drops the oldest failed deliveries beyond `retry_limit`, with one error log for
        them all; caller holds the lock."""
        dropped: dict[str, list[str]] = {}
        while len(self._failed) > self.retry_limit:
            (key, ns, identity), _ = self._failed.popitem(last=False)
            batches = self._retry[key]
            _, messages = batches[ns]
            del messages[identity]
            self._pending -= 1
            self.lost += 1
            dropped.setdefault(key, []).append(identity)
            if not messages:
                del batches[ns]
            if not batches:
                del self._retry[key]
        for key, identities in dropped.items():
            shown = ", ".join(identities[:3]) + (", ..." if len(identities) > 3 else "")
            logger.error(
                "retry buffer full (%d messages): dropped %d message%s for hook %s (%s); "
                "raise dedupe_window or fix the failing hook",
                self.retry_limit,
                len(identities),
                "" if len(identities) == 1 else "s",
                key,
                shown,
            )
