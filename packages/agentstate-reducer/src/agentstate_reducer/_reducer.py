"""`MessageReducer`: the cut (`plan`), the hand-off (`deliver`), and both (`reduce`)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._background import AsyncBackground, Background, BatchDropped
from ._config import ReducerConfig, ReducerResult, RememberFn
from ._cut import Cut, checked_count, plan_cut
from ._delivery import (
    Dispatcher,
    Job,
    ReportBuilder,
    caller_cancelled,
    hook_key,
    hook_keys,
    own_cancellation,
)
from ._ledger import AsyncDeliveryLedger, DeliveryLedger, InMemoryLedger
from ._merge import CutIds, merge_messages
from ._messages import check_messages, is_message, message_identity, shown
from ._report import DeliveryReport
from ._summary import Summaries, summary_block, summary_size
from ._tokens import resolve_token_counter

logger = logging.getLogger("agentstate_reducer")


class MessageReducer:
    """Keeps a message list inside a window and hands what leaves it to `on_prune` hooks.

    Sync and async methods come in pairs sharing one core: `plan`/`aplan` cut and
    summarize only, `deliver`/`adeliver` run the hooks, `reduce`/`areduce` do both.

    Args:
        min_messages: Count mode: most messages a cut keeps. Ignored when `config` is given.
        max_messages: Count mode: cut when the list is longer. Ignored when `config` is given.
        config: The full configuration.
        ledger: Records deliveries; defaults to `InMemoryLedger(config.dedupe_window)`.
            Pass a durable one to deliver exactly once across restarts.

    Raises:
        TypeError: `config` is not a `ReducerConfig`, or `ledger` has no callable `seen`
            and `mark` (a Redis client given for `RedisDeliveryLedger(client)`, say).
    """

    def __init__(
        self,
        min_messages: int = 0,
        max_messages: int | None = None,
        *,
        config: ReducerConfig | None = None,
        ledger: DeliveryLedger | None = None,
    ) -> None:
        if config is None:
            config = ReducerConfig(min_messages=min_messages, max_messages=max_messages)
        elif not isinstance(config, ReducerConfig):
            raise TypeError(
                f"MessageReducer(config=...) takes a ReducerConfig, got "
                f"{type(config).__name__} {shown(config)}: pass "
                "config=ReducerConfig(max_messages=..., ...) (for a dict of settings, "
                "ReducerConfig(**settings))"
            )
        elif (min_messages, max_messages) != (0, None):
            warnings.warn(
                f"MessageReducer(min_messages={min_messages}, max_messages={max_messages}) "
                "is ignored because config= is given; set them on the ReducerConfig",
                UserWarning,
                stacklevel=2,
            )
        if ledger is not None:
            _check_ledger(ledger)
        self.config = config
        self.ledger: DeliveryLedger = (
            ledger if ledger is not None else InMemoryLedger(config.dedupe_window)
        )
        self._dispatcher = Dispatcher(
            self.ledger, config.dedupe_window, config.retry_after, config.max_retry_after
        )
        self._tasks: set[asyncio.Task[Any]] = set()
        self._summaries = Summaries()

    @property
    def min_messages(self) -> int:
        """`config.min_messages`."""
        return self.config.min_messages

    @property
    def max_messages(self) -> int | None:
        """`config.max_messages`."""
        return self.config.max_messages

    @property
    def pending(self) -> int:
        """How many (hook, message) deliveries wait for the next delivery: failed, or
        scheduled on an event loop by `deliver` and not taken up yet."""
        return self._dispatcher.pending

    @property
    def lost(self) -> int:
        """How many (hook, message) deliveries were dropped from a full retry buffer
        (`dedupe_window`): each is logged as an error when dropped."""
        return self._dispatcher.lost

    def retry_now(self, hook: RememberFn | str | None = None) -> None:
        """Ends the rest of a hook that raised (see `ReducerConfig.retry_after`), so that the
        next delivery calls it with what waits for it: once the store behind it is back, say.

        A hook whose one batch after its rest still runs (a background hook's probe) is left
        to that batch: its outcome ends the rest or not.

        Args:
            hook: One of `config.on_prune` (a bound method as well), or its ledger key (its
                `name`, else its qualified name: every hook of that name, also those keyed
                ``name#2``...); None ends every hook's rest.

        Raises:
            ValueError: `hook` is not one of `config.on_prune`.
        """
        hooks = self.config.on_prune
        keys = hook_keys(hooks)
        if hook is None:
            self._dispatcher.wake(keys)
            return
        chosen = [
            k
            for h, k in zip(hooks, keys, strict=True)
            if _same_hook(h, hook) or (isinstance(hook, str) and hook_key(h) == hook)
        ]
        if not chosen:
            raise ValueError(
                f"retry_now({hook!r}): not a hook of this reducer; pass one of "
                f"config.on_prune or its key ({', '.join(map(repr, keys)) or 'none set'})"
            )
        self._dispatcher.wake(chosen)

    # -- the cut ---------------------------------------------------------------------

    def plan(
        self, existing: Iterable[Any] | None = None, new: Any = None, namespace: Any = None
    ) -> ReducerResult:
        """Cut `existing + new` and summarize the pruned part, without delivering.

        No hook runs and the ledger is untouched, so a caller can store `surviving` first
        and `deliver(result.pruned, namespace)` after the store succeeded.

        Args:
            existing: The current messages.
            new: Messages to append: a list, or one message.
            namespace: Unused; accepted so `plan` takes the arguments `reduce` takes.

        Returns:
            The cut; `delivery` is None.

        Raises:
            TypeError: An item is not a message (a str, say): each of those had one
                identity, so a hook got only the first. Or `existing` or `new` is neither
                a list of messages, one message nor None.
        """
        messages, cut, pruned = self._cut(existing, new)
        if cut is None:
            return ReducerResult(surviving=messages, pruned=[])
        summary, key = self._summarized(pruned)
        summarize = self.config.summarize_fn
        if summary is None and summarize is not None:
            try:
                summary = summarize(list(pruned))
            except Exception:
                logger.warning("summarize_fn failed; cutting without a summary", exc_info=True)
            if inspect.isawaitable(summary):
                _discard(summary)
                raise TypeError(
                    "ReducerConfig.summarize_fn returned an awaitable in a sync call; use "
                    "aplan/areduce (under a ReducingSaver: run the graph with ainvoke or "
                    "astream, not invoke or stream), or pass a plain function (the "
                    "LangGraph bridge, as_langgraph_reducer, always calls it synchronously)"
                )
            summary = _summary_text(summary)
            if key is not None:
                self._summaries.put(key, summary)
        return self._assemble(messages, cut, pruned, summary)

    async def aplan(
        self, existing: Iterable[Any] | None = None, new: Any = None, namespace: Any = None
    ) -> ReducerResult:
        """Like `plan`, awaiting `summarize_fn` when it is a coroutine function."""
        messages, cut, pruned = self._cut(existing, new)
        if cut is None:
            return ReducerResult(surviving=messages, pruned=[])
        summary, key = self._summarized(pruned)
        summarize = self.config.summarize_fn
        if summary is None and summarize is not None:
            try:
                summary = summarize(list(pruned))
                if inspect.isawaitable(summary):
                    summary = await summary
            except Exception:
                logger.warning("summarize_fn failed; cutting without a summary", exc_info=True)
                summary = None
            summary = _summary_text(summary)
            if key is not None:
                self._summaries.put(key, summary)
        return self._assemble(messages, cut, pruned, summary)

    # -- the hand-off -----------------------------------------------------------------

    def deliver(self, pruned: Iterable[Any], namespace: Any = None) -> DeliveryReport:
        """Run every `on_prune` hook on the messages it has not received yet.

        First retries, per hook, what earlier deliveries failed to hand over. A message is
        marked delivered for a hook only after that hook returned; a hook that raises is
        logged and its messages wait for the next delivery. A coroutine hook is awaited
        with `asyncio.run`, or, when an event loop runs in this thread, scheduled on it and
        marked when it finishes. `Background` and `AsyncBackground` hooks mark when their
        worker finishes. Called on an event loop's thread with a ledger that has an async
        side (`AsyncDeliveryLedger`), the whole delivery runs as a task on that loop, so
        the ledger is never asked while the loop waits; every hook then reports `queued`,
        and the messages count in `pending` until the task takes them up. Await `aflush`
        before the loop ends: a task it cancels leaves them for the next delivery.

        Args:
            pruned: Messages that left the window (or one message); `[]` only retries.
            namespace: Passed to every hook as given (a failed batch it joins for a retry keeps
                that batch's: a list and a tuple of the same items are one namespace), and
                part of the ledger key.

        Returns:
            Per hook: delivered, queued, failed and skipped message identities.
        """
        pruned = _checked(pruned)
        loop = self._loop_for_ledger()
        if loop is not None:
            return self._deliver_on(loop, pruned, namespace)
        jobs, report = self._dispatcher.prepare(
            list(self.config.on_prune), pruned, namespace, self.config.dedupe_on_prune
        )
        # Hooks not called again in this delivery: one that raised in it, and one that raised
        # before and has a batch in a worker's hands (its outcome decides the rest's).
        held: set[str] = set()
        for n, job in enumerate(jobs):
            returned = False
            try:
                if job.key in held:
                    self._left(job, report)
                    continue
                if isinstance(job.hook, (Background, AsyncBackground)):
                    self._probe(job, held)  # before the outcome can come
                    self._hand_off(job, job.hook, report)
                    continue
                try:
                    result = job.hook(list(job.messages), job.namespace)
                    if inspect.isawaitable(result):
                        if self._schedule(job, result):  # runs once this call returns
                            self._probe(job, held)
                            report.add(job.key, "queued", job.ids)
                            continue
                        asyncio.run(_await(result))
                # Nothing cancels a sync call: a CancelledError is the hook's own (a coroutine
                # hook awaiting something cancelled), so it failed like any hook that raises.
                except (Exception, asyncio.CancelledError) as exc:
                    self._failed(job, exc, report)
                    held.add(job.key)
                    continue
                returned = True
                self._dispatcher.finish(job, None)  # settles it, whatever the mark raises
            except BaseException as stop:  # KeyboardInterrupt, SystemExit
                self._abandon(jobs[n + 1 :] if returned else jobs[n:], stop)
                raise
            report.add(job.key, "delivered", job.ids)
        return report.build()

    async def adeliver(self, pruned: Iterable[Any], namespace: Any = None) -> DeliveryReport:
        """Like `deliver`, awaiting coroutine hooks in turn; plain hooks run inline.

        A ledger with `aseen` and `amark` (`AsyncDeliveryLedger`) is awaited, so its I/O
        never blocks the event loop. A `CancelledError` a hook raises while this task is
        not being cancelled is the hook's own: it failed, as in `deliver`. On Python 3.10,
        which cannot tell (no `Task.cancelling`), it goes on, as a cancellation of the caller
        does; either way its batch and those of the hooks not run yet wait for the next
        delivery.
        """
        jobs, report = await self._dispatcher.aprepare(
            list(self.config.on_prune), _checked(pruned), namespace, self.config.dedupe_on_prune
        )
        # Hooks not called again in this delivery: one that raised in it, and one that raised
        # before and has a batch in a worker's hands (its outcome decides the rest's).
        held: set[str] = set()
        for n, job in enumerate(jobs):
            returned = False
            try:
                if job.key in held:
                    self._left(job, report)
                    continue
                if isinstance(job.hook, (Background, AsyncBackground)):
                    self._probe(job, held)  # before the outcome can come
                    self._hand_off(job, job.hook, report)
                    continue
                try:
                    result = job.hook(list(job.messages), job.namespace)
                    if inspect.isawaitable(result):
                        await result
                except Exception as exc:
                    self._failed(job, exc, report)  # marks nothing: no ledger call to await
                    held.add(job.key)
                    continue
                except asyncio.CancelledError as exc:
                    if caller_cancelled():
                        raise
                    # The hook's own (this task was never cancelled): it failed, as in
                    # `deliver`. Python 3.10 cannot tell the two apart: see caller_cancelled.
                    self._failed(job, exc, report)
                    held.add(job.key)
                    continue
                returned = True
                await self._dispatcher.afinish(job, None)
            except BaseException as stop:  # cancelled (a request's timeout, say)
                # A hook that returned has its messages: afinish settles it once its mark ends.
                self._abandon(jobs[n + 1 :] if returned else jobs[n:], stop)
                raise
            report.add(job.key, "delivered", job.ids)
        return report.build()

    async def aflush(self) -> None:
        """Wait until what `deliver` scheduled on the running event loop has settled.

        `deliver` on an event loop's thread (a LangGraph channel reducer under `ainvoke`)
        may leave a delivery task or coroutine hooks running on it. Await this before the
        loop ends (before `asyncio.run` returns): a task the loop cancels leaves its
        messages in `pending`, for the next delivery. What failed stays in `pending` too.
        `AsyncBackground` hooks drain with their own `aclose`. Awaited in a hook's own
        task, it waits for the others (that one settles once the hook returns).
        """
        loop, me = asyncio.get_running_loop(), asyncio.current_task()
        while tasks := [t for t in self._tasks.copy() if t.get_loop() is loop and t is not me]:
            await asyncio.wait(tasks)  # unlike gather, never cancels them when cancelled

    def _abandon(self, jobs: list[Job], stop: BaseException) -> None:
        """Jobs a stopped delivery (a cancelled `adeliver`, a `KeyboardInterrupt`) did not
        run or hand off wait for the next delivery, as failed ones do: their claims held
        on, and every later delivery of those messages (an outbox's, after its lease)
        skipped them as in flight, so they were never delivered. `Background` and
        `AsyncBackground` jobs among them were never submitted, so they are settled too."""
        for job in jobs:
            self._log_failure(job, stop)
            self._dispatcher.finish(job, stop, called=False)

    # -- both -------------------------------------------------------------------------

    def reduce(
        self, existing: Iterable[Any] | None = None, new: Any = None, namespace: Any = None
    ) -> ReducerResult:
        """Cut `existing + new`, then deliver the pruned messages to the hooks.

        Args:
            existing: The current messages.
            new: Messages to append: a list, or one message.
            namespace: Passed to every hook unchanged (may be None).

        Returns:
            The cut, with `delivery` set when hooks ran.
        """
        result = self.plan(existing, new, namespace)
        if result.pruned and self.config.on_prune:
            result.delivery = self.deliver(result.pruned, namespace)
        return result

    async def areduce(
        self, existing: Iterable[Any] | None = None, new: Any = None, namespace: Any = None
    ) -> ReducerResult:
        """Like `reduce`, awaiting a coroutine `summarize_fn` and coroutine hooks."""
        result = await self.aplan(existing, new, namespace)
        if result.pruned and self.config.on_prune:
            result.delivery = await self.adeliver(result.pruned, namespace)
        return result

    def as_langgraph_reducer(self, namespace: Any = None) -> Callable[[Any, Any], list[Any]]:
        """Return a LangGraph channel reducer: `Annotated[list, reducer.as_langgraph_reducer()]`.

        The returned `(left, right) -> list` merges like LangGraph's `add_messages` (by id,
        honouring `RemoveMessage`), then runs `reduce`. A `RemoveMessage` of a message this
        bridge cut, among its last `dedupe_window` cut messages, is a no-op where
        `add_messages` would raise: a parallel node in the step that cut it read it before
        the cut. An update with the id of a cut message is appended, as `add_messages`
        appends an id it does not hold. LangGraph calls it synchronously,
        also under `ainvoke`/`astream`, where coroutine hooks, and with an
        `AsyncDeliveryLedger` the whole delivery, are scheduled on the event loop: await
        `aflush()` before that loop ends, or they finish only at the next delivery.

        Args:
            namespace: Passed to the hooks on every cut.
        """

        cut = CutIds(self.config.dedupe_window)

        def reduce_messages(left: Any, right: Any) -> list[Any]:
            merged = merge_messages(left, cut.drop_removals(left, right))
            result = self.reduce(merged, None, namespace)
            cut.add(result.pruned)
            return result.surviving

        return reduce_messages

    def __repr__(self) -> str:
        c = self.config
        if c.max_tokens is not None:
            target = c.target_tokens if c.target_tokens is not None else c.max_tokens
            window = f"max_tokens={c.max_tokens}, target_tokens={target}"
        else:
            window = f"min_messages={c.min_messages}, max_messages={c.max_messages}"
        return (
            f"MessageReducer({window}, preserve_first={c.preserve_first}, "
            f"require_human_first={c.require_human_first}, hooks={len(c.on_prune)})"
        )

    # -- shared core --------------------------------------------------------------------

    def _cut(self, existing: Any, new: Any) -> tuple[list[Any], Cut | None, list[Any]]:
        messages = [*_listify(existing, "existing"), *_listify(new, "new")]
        check_messages(messages)
        c = self.config
        counter = None
        reserve = 0
        if c.max_tokens is not None:
            counter = resolve_token_counter(c.token_counter)
        elif (
            c.inject_summary
            and c.summarize_fn is not None
            and c.max_messages is not None
            and len(messages) > c.max_messages
        ):
            reserve = summary_size(c.summary_message_factory)
        cut = plan_cut(messages, c, counter, reserve)
        if cut is None:
            return messages, None, []
        pruned = [messages[i] for i in cut.pruned_indices()]
        if not pruned:
            return messages, None, []
        return messages, cut, pruned

    def _summarized(self, pruned: list[Any]) -> tuple[str | None, str | None]:
        """The summary of `pruned` a cut of the same messages got (see `Summaries`), and
        None; or None and the key to record a new one under (None for a cut it cannot key),
        when `summarize_fn` must run (None and None without a `summarize_fn`)."""
        if self.config.summarize_fn is None:
            return None, None
        key = Summaries.key(pruned)
        text = None if key is None else self._summaries.get(key)
        return (text, None) if text is not None else (None, key)

    def _assemble(
        self, messages: list[Any], cut: Cut, pruned: list[Any], summary: Any
    ) -> ReducerResult:
        summary = _summary_text(summary)
        # The summary goes where the pruned messages were: after the preserved first
        # message, before the newest human message of a cut inside its turn.
        kept = [messages[i] for i in cut.kept_indices(len(messages))]
        surviving = kept
        if summary is not None and self.config.inject_summary:
            block = summary_block(summary, pruned, messages, self.config.summary_message_factory)
            window = [*kept[: cut.preserved], *block, *kept[cut.preserved :]]
            if self._fits(window, block, cut):
                surviving = window
        logger.debug("cut %d messages to %d", len(messages), len(surviving))
        return ReducerResult(surviving=surviving, pruned=pruned, summary=summary)

    def _fits(self, window: list[Any], block: list[Any], cut: Cut) -> bool:
        """Whether `window`, the summary `block` included, stays within `max_messages`
        (count mode) or `max_tokens` (token mode); else the block is not injected (logged).

        In count mode the cut left room for the block within `min_messages`, so it only does
        not fit when the newest turn, kept whole, overflows that room. In token
        mode the block's size is known only now (the cut counted the rest): injected over
        `max_tokens`, it would make the next call cut again (and summarize again) with
        nothing added. The results of a call the cut held (`Cut.over`) may take the window
        over the limit by their size, the block included."""
        c = self.config
        held = " and the results of a call held for the graph to resume into" if cut.over else ""
        if c.max_tokens is not None and cut.kept_tokens is not None:
            count = resolve_token_counter(c.token_counter)
            size = cut.kept_tokens + sum(
                checked_count(count, m, cut.preserved + i) for i, m in enumerate(block)
            )
            if size <= c.max_tokens + cut.over:
                return True
            logger.info(
                "summary not injected: with it the window would hold %d tokens, over "
                "max_tokens=%d%s; set target_tokens below max_tokens by the summary's size",
                size,
                c.max_tokens,
                f" plus {cut.over}{held}" if cut.over else "",
            )
            return False
        if c.max_messages is None or len(window) <= c.max_messages + cut.over:
            return True
        logger.info(
            "summary not injected: with it the window would hold %d messages, over "
            "max_messages=%s%s, as the newest turn%s, kept whole, fills the window",
            len(window),
            c.max_messages,
            f" plus {cut.over}" if cut.over else "",
            held,
        )
        return False

    def _hand_off(
        self, job: Job, hook: Background | AsyncBackground, report: ReportBuilder
    ) -> None:
        # Background hooks settle on a worker thread, AsyncBackground ones on their loop.
        done: Callable[[BaseException | None], Any] = functools.partial(
            self._background_done if isinstance(hook, AsyncBackground) else self._dispatcher.finish,
            job,
        )
        try:
            accepted = hook.submit(job.messages, job.namespace, done)
        except Exception as exc:  # not accepted: `done` will not be called
            self._failed(job, exc, report)
            return
        if accepted:
            report.add(job.key, "queued", job.ids)
        else:
            self._dispatcher.finish(job, BatchDropped(f"{hook.name} dropped the batch"))
            report.add(job.key, "failed", job.ids)

    def _background_done(self, job: Job, error: BaseException | None) -> Any:
        """`done` for an `AsyncBackground` batch: a failed one is kept for retry at once, with
        nothing to await, since a batch cancelled before it started settles in its task's
        done callback; a delivered one returns `afinish`, which the batch awaits."""
        if error is not None:  # cancelled (its loop ended): not the hook's failure
            called = not isinstance(error, asyncio.CancelledError)
            self._dispatcher.finish(job, error, called=called)
            return None
        return self._dispatcher.afinish(job, None)

    def _loop_for_ledger(self) -> asyncio.AbstractEventLoop | None:
        """The loop running in this thread, when the ledger has an async side to await."""
        if not isinstance(self.ledger, AsyncDeliveryLedger):
            return None
        try:
            return asyncio.get_running_loop()
        except RuntimeError:
            return None

    def _spawn(self, loop: asyncio.AbstractEventLoop, coroutine: Any) -> asyncio.Task[Any]:
        """A task kept referenced in `_tasks` until it is done."""
        task = loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _deliver_on(
        self, loop: asyncio.AbstractEventLoop, pruned: list[Any], namespace: Any
    ) -> DeliveryReport:
        # Kept as pending before the task exists: a task the loop cancels before it starts
        # (`asyncio.run` returning first) runs none of its body, so it could not keep them.
        self._dispatcher.defer(self.config.on_prune, pruned, namespace)
        self._spawn(loop, self.adeliver([], namespace)).add_done_callback(self._delivered_on)
        ids = list(dict.fromkeys(message_identity(m) for m in pruned))
        report = ReportBuilder(hook_keys(self.config.on_prune))
        for key in report.keys:
            report.add(key, "queued", ids)
        return report.build()

    def _delivered_on(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            logger.warning(
                "a delivery scheduled on the event loop was cancelled before it finished; "
                "reducer.pending=%d (hook, message) deliveries wait for the next delivery: "
                "await reducer.aflush() before the loop ends, or retry with deliver([])",
                self.pending,
            )
        elif (error := task.exception()) is not None:
            logger.error("delivery on the event loop failed", exc_info=error)

    def _schedule(self, job: Job, awaitable: Any) -> bool:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        self._spawn(loop, _hook_call(awaitable)).add_done_callback(
            functools.partial(self._task_done, job)
        )
        return True

    def _task_done(self, job: Job, task: asyncio.Task[Any]) -> None:
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
        loop = self._loop_for_ledger()
        if loop is None or error is not None:  # a failure: nothing to await
            self._dispatcher.finish(job, error, called=not task.cancelled())
        else:  # a ledger to await: record the outcome in a task, never blocking the loop
            self._spawn(loop, self._dispatcher.afinish(job, error))
        if error is not None:
            self._log_failure(job, error)

    def _failed(self, job: Job, error: BaseException, report: ReportBuilder) -> None:
        self._dispatcher.finish(job, error)
        report.add(job.key, "failed", job.ids)
        self._log_failure(job, error)

    def _probe(self, job: Job, held: set[str]) -> None:
        """A job run later (a background hook's, a coroutine scheduled on the loop) of a
        hook that raised before: its outcome decides whether the hook's other batches
        follow, so none is handed over until it comes (`Dispatcher.probing`)."""
        if self._dispatcher.failures(job.key)[0]:
            job.probe = True
            self._dispatcher.probing(job.key)
            held.add(job.key)

    def _left(self, job: Job, report: ReportBuilder) -> None:
        """A job of a hook held in this delivery: not run, its messages wait with the ones
        it failed on."""
        self._dispatcher.finish(job, _Resting(job.key), called=False)
        report.add(job.key, "failed", job.ids)

    def _log_failure(self, job: Job, error: BaseException) -> None:
        """A traceback for a hook's first failure in a row; a line for each one after it
        (a hook calls a service that is down: the log would repeat it at every retry)."""
        failures, rest = self._dispatcher.failures(job.key)
        after = f"after a rest of {rest:.3g} s" if rest else "at the next delivery"
        if failures <= 1:
            logger.warning(
                "on_prune hook %s failed on %d messages; they wait for a retry %s",
                job.key,
                len(job.ids),
                after,
                exc_info=error,
            )
        else:
            logger.warning(
                "on_prune hook %s failed again (%d times in a row) on %d messages: %r; "
                "they wait for a retry %s",
                job.key,
                failures,
                len(job.ids),
                error,
                after,
            )


class _Resting(RuntimeError):
    """Why a job was not run: its hook raised, in this delivery or before."""

    def __init__(self, key: str) -> None:
        super().__init__(f"on_prune hook {key} raised: held until it delivers again")


def _check_ledger(ledger: object) -> None:
    """Refuses a `ledger` that is no `DeliveryLedger`: the reducer only met it at the first
    delivery, logged each failed lookup as retryable, and once its retry buffer
    (`dedupe_window`) was full dropped the pruned messages for good."""
    if isinstance(ledger, type):  # its seen() and mark() are unbound: every call raises
        raise TypeError(
            f"MessageReducer(ledger=...) needs a ledger instance, got the class "
            f"{ledger.__qualname__}: pass {ledger.__qualname__}(...)"
        )
    missing = [name for name in ("seen", "mark") if not callable(getattr(ledger, name, None))]
    if not missing:
        return
    kind = type(ledger)
    if kind.__module__.split(".")[0] == "redis":
        fix = (
            "for a Redis client pass RedisDeliveryLedger(client) "
            "(from agentstate_reducer_langgraph)"
        )
    else:
        fix = (
            "pass InMemoryLedger(), RedisDeliveryLedger(client) (from "
            "agentstate_reducer_langgraph), or an object with seen(hook_key, namespace, "
            "message_ids) and mark(hook_key, namespace, message_ids)"
        )
    raise TypeError(
        f"MessageReducer(ledger=...) needs a DeliveryLedger, got {kind.__module__}."
        f"{kind.__qualname__} {shown(ledger)}, which has no "
        f"{' and '.join(name + '()' for name in missing)}: {fix}"
    )


def _listify(value: Any, name: str) -> list[Any]:
    if value is None:
        return []
    if is_message(value):  # one message (a pydantic one would iterate field by field)
        return [value]
    return _as_list(value, name, "a list of messages, one message or None")


def _checked(pruned: Iterable[Any]) -> list[Any]:
    """`pruned` as a list (one message is a list of it), checked to hold only messages
    (`check_messages`)."""
    if is_message(pruned):
        return [pruned]
    items = _as_list(pruned, "pruned", "a list of messages (or one message; [] only retries)")
    check_messages(items, "pruned message")
    return items


def _as_list(value: Any, name: str, wanted: str) -> list[Any]:
    """`list(value)`; a TypeError naming `name`, its value and `wanted` for a value that is
    no collection of messages (None, a number, a str): it raised from deep inside, or a
    str went in letter by letter."""
    if value is not None and not isinstance(value, (str, bytes)):
        try:
            return list(value)
        except TypeError as exc:
            if isinstance(value, Iterable):
                raise  # raised while iterating: not about the value's type
            raise _not_messages(name, value, wanted) from exc
    raise _not_messages(name, value, wanted)


def _not_messages(name: str, value: Any, wanted: str) -> TypeError:
    return TypeError(
        f"{name} must be a list of messages, got {type(value).__name__} {shown(value)}: "
        f"pass {wanted}, where a message is a {{'role': ..., 'content': ...}} dict or a "
        "message object"
    )


async def _await(awaitable: Any) -> Any:
    return await awaitable


async def _hook_call(awaitable: Any) -> Any:
    """A scheduled coroutine hook's call: a `CancelledError` it raised itself (its task not
    cancelled) fails as any error does, so the task ends cancelled only when its loop ended
    before it finished, which is no failure of the hook."""
    try:
        return await awaitable
    except asyncio.CancelledError as exc:
        if caller_cancelled():
            raise
        raise own_cancellation(exc) from exc


def _same_hook(hook: Any, other: Any) -> bool:
    """Whether `other` is `hook`, or equal to it (a bound method is a new object each time
    it is read); an `__eq__` that raises or answers no bool means no."""
    if hook is other:
        return True
    try:
        return (hook == other) is True
    except Exception:  # noqa: BLE001 - a hook's own __eq__ decides nothing here
        return False


def _summary_text(summary: Any) -> str | None:
    """The text `summarize_fn` returned: a string, or the text content of a message it
    returned instead (a chat model's reply, say: a string, or content blocks, whose text
    blocks are joined); None, logged, for anything else."""
    if summary is None or isinstance(summary, str):
        return summary
    if isinstance(summary, Mapping):
        content = summary.get("content")
    else:
        content = getattr(summary, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts: list[str] = []
        for block in content:
            if isinstance(block, str):
                texts.append(block)
            elif isinstance(block, Mapping) and block.get("type", "text") == "text":
                text = block.get("text")
                if isinstance(text, str):
                    texts.append(text)
        if texts:
            return "".join(texts)
    logger.warning(
        "summarize_fn returned %s with no text content: cutting without a summary. Return "
        "the summary's text (for a chat model's reply, the text of its content)",
        type(summary).__name__,
    )
    return None


def _discard(awaitable: Any) -> None:
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()  # Silences "coroutine was never awaited".
