"""`ReducingSaver`: any LangGraph checkpointer, with a bounded messages channel."""

from __future__ import annotations

import copy
import inspect
import threading
import warnings
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from agentstate_reducer import (
    AsyncBackground,
    Background,
    InMemoryLedger,
    MessageReducer,
    ReducerConfig,
    ReducerResult,
    message_identity,
    namespace_json,
)
from agentstate_reducer._messages import id_of, shown  # the reducer's own (pinned <0.7)

from ._delivery import DeliveryRunner
from ._outbox import Delivery, DeliveryMode, DrainReport, Outbox, OutboxStats
from ._redis import RedisOutbox, RedisSink, _is_async
from ._replay import needs_history, rebuilt, replayable, replayable_history

__all__ = [
    "ReducingSaver",
    "aplan_reduction",
    "apply_reducer",
    "memory_namespace",
    "plan_reduction",
]

# Methods a saver may or may not implement. The wrapper has one only when the inner
# saver overrides it, so capability probes (LangGraph's, the conformance suite's) see
# exactly the inner saver's capabilities.
OPTIONAL_METHODS = (
    "delete_for_runs",
    "adelete_for_runs",
    "copy_thread",
    "acopy_thread",
    "prune",
    "aprune",
    "get_delta_channel_history",
    "aget_delta_channel_history",
)

# Not BaseCheckpointSaver's, but what a user calls on the saver they pass to `compile`
# (PostgresSaver's tables, a Redis saver's readiness): delegated when the inner saver has them.
SETUP_METHODS = ("setup", "asetup")


def memory_namespace(reducer: Any, config: RunnableConfig | None) -> Any:
    """The long-term-memory namespace for a run.

    ``config["configurable"][reducer.config.namespace_key]`` when set, else
    ``("memories", thread_id)``, else None.

    Raises:
        TypeError: `config`, or its ``configurable``, is not a dict.
    """
    configurable = _configurable("memory_namespace", config)
    key = getattr(getattr(reducer, "config", None), "namespace_key", "memory_namespace")
    namespace = configurable.get(key)
    if namespace is not None:
        return tuple(namespace) if isinstance(namespace, list) else namespace
    thread_id = configurable.get("thread_id")
    return ("memories", str(thread_id)) if thread_id is not None else None


def _configurable(where: str, config: Any) -> Mapping[str, Any]:
    """``config["configurable"]`` ({} when absent); a TypeError naming `where` when `config`
    or it is no dict (an AttributeError came from deep inside)."""
    if not config:
        return {}
    if not isinstance(config, Mapping):
        example = repr(config) if isinstance(config, str) else "..."
        raise TypeError(
            f"{where}: config must be a dict (a RunnableConfig), got "
            f"{type(config).__name__} {shown(config)}: pass "
            f"{{'configurable': {{'thread_id': {example}}}}}"
        )
    configurable = config.get("configurable")
    if not configurable:
        return {}
    if not isinstance(configurable, Mapping):
        raise TypeError(
            f"{where}: config['configurable'] must be a dict, got "
            f"{type(configurable).__name__} {shown(configurable)}: pass "
            "{'configurable': {'thread_id': ...}}"
        )
    return configurable


def _check_reducer(where: str, reducer: Any) -> None:
    """Refuses what is no reducer instance, then what the reducer's config would make
    deliver the same messages again (`_check_sinks`)."""
    if isinstance(reducer, ReducerConfig):
        raise TypeError(
            f"{where} needs a MessageReducer, got a ReducerConfig: pass "
            "MessageReducer(config=...) with it"
        )
    if isinstance(reducer, type):  # has `plan` and `deliver`, as functions of the class
        raise TypeError(
            f"{where} needs a MessageReducer, got the class {reducer.__name__}: pass an "
            "instance, MessageReducer(config=ReducerConfig(...))"
        )
    if not hasattr(reducer, "plan") or not hasattr(reducer, "deliver"):
        raise TypeError(
            f"{where} needs a MessageReducer, got {type(reducer).__name__} "
            f"{shown(reducer)}: pass MessageReducer(config=ReducerConfig(...))"
        )
    _check_sinks(where, reducer)


def _check_checkpoint(where: str, checkpoint: Any, *, stored: bool = False) -> None:
    """Refuses what is no LangGraph `Checkpoint` (a KeyError or TypeError came from deep
    inside); with `stored`, also one without an ``id`` or ``channel_versions``, which a put
    needs. Only the shape: nothing inside the channels is read."""
    if not isinstance(checkpoint, Mapping):
        raise TypeError(
            f"{where}: checkpoint must be a dict (a LangGraph Checkpoint), got "
            f"{type(checkpoint).__name__} {shown(checkpoint)}: pass a checkpoint LangGraph "
            "made (empty_checkpoint(), create_checkpoint())"
        )
    if stored and checkpoint.get("id") is None:
        state = "is missing" if "id" not in checkpoint else "is None"
        raise ValueError(
            f"{where}: checkpoint['id'] {state}: pass a checkpoint LangGraph made "
            "(empty_checkpoint() and create_checkpoint() give it a fresh id)"
        )
    fields = ("channel_values", "channel_versions") if stored else ("channel_values",)
    for field in fields:
        value = checkpoint.get(field)
        if not isinstance(value, Mapping):
            state = "is missing" if field not in checkpoint else f"is {shown(value)}"
            raise ValueError(
                f"{where}: checkpoint[{field!r}] {state}, not a dict of channel name -> "
                "value: pass a checkpoint LangGraph made (empty_checkpoint(), "
                "create_checkpoint())"
            )


def _check_put(where: str, config: Any, checkpoint: Any, new_versions: Any) -> None:
    """Refuses, before anything is staged or stored, a put the wrapper cannot read (it
    raised AttributeError, KeyError or a bare TypeError from deep inside). Cheap: the
    shape only, as every put runs it."""
    if not isinstance(config, Mapping):
        raise TypeError(
            f"{where}: config must be a dict (a RunnableConfig), got "
            f"{type(config).__name__} {shown(config)}: pass "
            "{'configurable': {'thread_id': ..., 'checkpoint_ns': ''}}"
        )
    _configurable(where, config)
    _check_checkpoint(where, checkpoint, stored=True)
    if not isinstance(new_versions, Mapping):
        raise TypeError(
            f"{where}: new_versions must be a dict of channel name -> version, got "
            f"{type(new_versions).__name__} {shown(new_versions)}: pass {{}} when no "
            "channel changed"
        )


def _messages_to_cut(
    reducer: MessageReducer,
    checkpoint: Checkpoint,
    config: RunnableConfig | None,
    messages_key: str,
) -> tuple[list[Any] | None, Any]:
    """The message list a put stores, and the namespace. A `DeltaChannel` stores one only
    at its snapshots (a `_DeltaSnapshot`, which the cut keeps wrapped); between them its
    checkpoints hold no value, the writes since the snapshot rebuild it on a read."""
    messages = _listed(checkpoint["channel_values"].get(messages_key))
    return (messages if isinstance(messages, list) else None), memory_namespace(reducer, config)


def _listed(value: Any) -> Any:
    """A channel's stored value, a `DeltaChannel` snapshot unwrapped to the list it holds."""
    return value.value if isinstance(value, _DeltaSnapshot) else value


_WARNED_KEYS: set[tuple[str, str]] = set()  # (messages_key, channel) pairs warned about


def _looks_like_message(item: Any) -> bool:
    if isinstance(item, dict):
        return "content" in item and ("role" in item or "type" in item)
    return hasattr(item, "content") and isinstance(getattr(item, "type", None), str)


def _warn_other_messages(reducer: MessageReducer, values: Any, messages_key: str) -> None:
    """Warns, once per channel, when a checkpoint has no `messages_key` channel but another
    holds a list of messages longer than the window: the saver stores it whole, cutting
    nothing (a graph whose messages channel has another name)."""
    if messages_key in values:
        return
    bound = reducer.config.max_messages or 0
    for channel, value in values.items():
        if (
            isinstance(value, list)
            and len(value) > bound
            and (messages_key, channel) not in _WARNED_KEYS
            and all(_looks_like_message(item) for item in value[-3:])
        ):
            _WARNED_KEYS.add((messages_key, channel))
            warnings.warn(
                f"ReducingSaver(messages_key={messages_key!r}) found no channel "
                f"{messages_key!r}, but channel {channel!r} holds {len(value)} messages, "
                f"more than max_messages={reducer.config.max_messages}: it is stored whole. "
                f"Pass messages_key={channel!r} to bound it",
                UserWarning,
                stacklevel=2,
            )


def _with_messages(
    checkpoint: Checkpoint, messages_key: str, before: list[Any], result: ReducerResult
) -> Checkpoint:
    if not result.pruned and len(result.surviving) == len(before):
        return checkpoint
    kept: Any = result.surviving
    if isinstance(checkpoint["channel_values"][messages_key], _DeltaSnapshot):
        kept = _DeltaSnapshot(kept)  # a snapshot still: the writes after it replay onto it
    return _holding(checkpoint, messages_key, kept)


def _holding(checkpoint: Checkpoint, messages_key: str, messages: list[Any]) -> Checkpoint:
    reduced = copy.copy(checkpoint)
    reduced["channel_values"] = {**checkpoint["channel_values"], messages_key: messages}
    return reduced


_Messages = list[Any]  # `list` is a method's name inside ReducingSaver
_Where = list[int | None]  # where each message of a list to cut sits in the list given

# How many (thread, namespace) windows a wrapper remembers (see `_Windows`).
WINDOWS = 4096
# What LangGraph puts between the namespaces of a subgraph and of the graph that called it
# (langgraph.constants.NS_SEP; this package depends on langgraph-checkpoint only).
NS_SEP = "|"


_NOTHING: frozenset[str] = frozenset()


class _Run(NamedTuple):
    """What the last put of a slot stored, for the next put of its run."""

    checkpoint_id: Any  # the checkpoint it stored: the next put of the run names it parent
    given: int  # the length of the list it was handed
    kept: list[tuple[int | None, Any]]  # the window it stored, each message with its index
    # in that list (None: not from it, a summary the cut injected)
    namespace: str | None  # the memory namespace of its cut, as text
    cut: frozenset[str]  # the identities its run cut so far (in memory, since it loaded)
    # what the runs of subgraphs it called cut (handed over) meanwhile, for the same memory
    # namespace: its list holds them too, and its next cut does not hand them over again
    handed: frozenset[str] = _NOTHING


class _Resumed(NamedTuple):
    """The list a put cuts (`_Windows.resumed`)."""

    messages: list[Any]
    where: _Where  # where each sits in the list given (None: a summary of the window)
    cut: frozenset[str]  # what the slot's last run cut (handed over): not handed over again
    namespace: str | None  # the memory namespace of that cut, as text
    goes_on: bool  # whether the put goes on from the slot's last put, in memory
    handed: frozenset[str] = _NOTHING  # what subgraphs it called cut: not handed over again


class _Windows:
    """The window each put of this process stored last, and what its run cut, per (thread,
    namespace).

    LangGraph keeps the whole message list in memory for the rest of a run, and a later
    put of that run that leaves the channel at the same version still carries it. A saver
    that stores values per channel version (InMemorySaver, PostgresSaver, plainredis)
    stores only the channels in ``new_versions``, but one that stores the whole checkpoint
    on every put (SqliteSaver) would store the list uncut: those puts store the window
    stored for that version instead (`same`).

    A put that changes the list is handed that whole list too. It cuts the window the
    run's last put stored and the messages added since (`resumed`), what the next invoke
    would load: cutting the whole list at every put kept each window near `min_messages`
    and ran `summarize_fn` at every step, on everything the run had cut. A put goes on
    from the last one when it names that one's checkpoint as its parent (LangGraph's
    config); a fork from an older checkpoint, or another thread's, cuts the list it was
    given, a window loaded from storage and what came since. What the slot's last run cut
    (and handed over) is not handed over again when a put repeated right after it cuts it
    again (`unseen`); after a fork only the reducer's ledger keeps what earlier cuts handed
    over from the hooks.

    The oldest entries beyond `WINDOWS` are forgotten: those threads' next puts cut the
    list they are given.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: OrderedDict[tuple[Any, Any], tuple[Any, list[Any]]] = OrderedDict()
        self._runs: OrderedDict[tuple[Any, Any], _Run] = OrderedDict()

    @staticmethod
    def _slot(config: RunnableConfig) -> tuple[Any, Any]:
        conf = config.get("configurable") or {}
        return conf.get("thread_id"), conf.get("checkpoint_ns", "")

    def _last_run(self, config: RunnableConfig) -> tuple[_Run | None, bool]:
        """The slot's last put, and whether the put of `config` goes on from its
        checkpoint."""
        with self._lock:
            run = self._runs.get(self._slot(config))
        parent = (config.get("configurable") or {}).get("checkpoint_id")
        return run, run is not None and parent == run.checkpoint_id

    def resumed(self, config: RunnableConfig, messages: list[Any]) -> _Resumed:
        """The list a put handed `messages` cuts.

        When the put goes on from the slot's last put and its list from that put's list:
        the window stored then and the messages added since. Found by object where the
        window's messages still sit at their places (the run only added messages), else by
        identity (a node edited or removed a message by id: the window holds the edited one,
        drops the removed one, and what the run cut before stays out, edited or not). A list
        none of the window's messages are in was loaded from storage (a new run, after an
        interrupt, say): the stored window and what came since, cut as it is. So is a list
        with messages an edit cannot be followed in (id-less ones), and one that does not go
        on from the last put's (the same put again, a fork: LangGraph's first put of a fork
        does not go on from the last put, and after it only the ledger keeps what earlier
        cuts handed over from the hooks). `cut` is what the slot's last run cut, which a
        put repeated right after it does not hand over again."""
        run, chained = self._last_run(config)
        if run is None:
            for caller in self._callers(config):
                if (handed := self._in_place(caller, messages)) is not None:
                    return handed
            return _Resumed(messages, list(range(len(messages))), _NOTHING, None, False)
        whole = _Resumed(messages, list(range(len(messages))), run.cut, run.namespace, False)
        if not chained:
            return whole
        if (appended := self._in_place(run, messages)) is not None:
            return appended
        kept = run.kept
        placed = [(i, m) for i, m in kept if i is not None]
        here = {id(m) for m in messages}
        if not any(id(m) in here for _, m in placed):
            return whole
        # An edit gives an id-less message another identity: it cannot be followed in place.
        if any(id_of(m) is None for m in messages):
            return whole
        try:
            at = {message_identity(m): k for k, m in enumerate(messages)}
            windowed = [None if i is None else message_identity(m) for i, m in kept]
        except (TypeError, ValueError):  # not messages: the reducer names what is wrong
            return whole
        if len(at) < len(messages):  # two messages under one id: not followed
            return whole
        # a summary the run's cuts injected stays while what it stands for is in the list
        summarized = any(identity in at for identity in run.cut)
        out: list[Any] = []
        where = []
        for (i, m), identity in zip(kept, windowed, strict=True):
            k = None if identity is None else at.get(identity)
            if (i is None and summarized) or k is not None:
                out.append(m if k is None else messages[k])
                where.append(k)
        left_out = run.cut.union(windowed)
        for identity, k in at.items():
            if identity not in left_out:
                out.append(messages[k])
                where.append(k)
        # what came since follows
        return _Resumed(out, where, run.cut, run.namespace, True, run.handed)

    @staticmethod
    def _in_place(run: _Run, messages: list[Any]) -> _Resumed | None:
        """The window `run`'s last put stored and what came since, when every message of
        that window still sits at its place in `messages`, object for object (the run only
        added messages since); else None."""
        size, kept = run.given, run.kept
        placed = [(i, m) for i, m in kept if i is not None]
        if not (
            placed
            and len(messages) >= size
            and all(i < size and messages[i] is m for i, m in placed)
        ):
            return None
        where: _Where = [i for i, _ in kept]
        where += range(size, len(messages))
        window = [m for _, m in kept] + messages[size:]
        return _Resumed(window, where, run.cut, run.namespace, True, run.handed)

    def _callers(self, config: RunnableConfig) -> list[_Run]:
        """For a put in a subgraph's namespace: the runs of the namespaces that called it,
        the nearest first.

        A subgraph that shares the checkpointer is handed its caller's list, the one that
        run holds in memory, and checkpoints under a namespace of its own, new at each call:
        its first put cut the caller's whole list, summarizing again at every call what the
        caller's run had cut (46 summaries of up to 92 messages in a 50-step loop whose tool
        node was a subgraph, against 7 of 14 without it). It goes on from a caller's window
        instead, when its list holds that window object for object (`_in_place`); a list
        loaded from storage (a resumed interrupt, a fork) holds other objects. The callers
        further up count too: a subgraph's first put may come before its caller's has been
        recorded (LangGraph saves in the background meanwhile), and the list holds their
        windows as well."""
        conf = config.get("configurable") or {}
        namespace = conf.get("checkpoint_ns") or ""
        if not isinstance(namespace, str):
            return []
        found = []
        with self._lock:
            while namespace:
                namespace = namespace.rpartition(NS_SEP)[0]
                if (run := self._runs.get((conf.get("thread_id"), namespace))) is not None:
                    found.append(run)
        return found

    def ran(
        self,
        config: RunnableConfig,
        checkpoint_id: Any,
        given: int,
        resumed: _Resumed | None,
        stored: Any,
        pruned: list[Any],
        namespace: Any,
    ) -> None:
        """Remembers, after a put stored checkpoint `checkpoint_id`, the window `stored`
        holds, cut from `resumed` (None: the put cut no list) for a list of `given`
        messages, with what it `pruned` for `namespace` and its run pruned before. A put
        that stored no value of the channel (a `DeltaChannel` between snapshots) only moves
        the run on to its checkpoint."""
        slot = self._slot(config)
        run, chained = self._last_run(config)
        if resumed is None or not isinstance(stored, list):
            with self._lock:
                if run is not None and chained and resumed is None and stored is None:
                    self._runs[slot] = run._replace(checkpoint_id=checkpoint_id)
                else:
                    self._runs.pop(slot, None)
            return
        text = _namespace_text(namespace)
        going_on = resumed.goes_on and resumed.namespace == text
        before = resumed.cut if going_on else _NOTHING
        now = frozenset(map(message_identity, pruned)) if text is not None else _NOTHING
        at = {id(m): i for m, i in zip(resumed.messages, resumed.where, strict=True)}
        entry = _Run(
            checkpoint_id,
            given,
            [(at.get(id(m)), m) for m in stored],
            text,
            before | now,
            resumed.handed if going_on else _NOTHING,
        )
        with self._lock:
            current = self._runs.get(slot)
            if (
                going_on
                and chained
                and current is not None
                and run is not None
                and current.checkpoint_id == run.checkpoint_id
            ):
                # what subgraphs handed up while this put ran, after `resumed` was read
                entry = entry._replace(handed=entry.handed | current.handed)
            self._runs[slot] = entry
            self._runs.move_to_end(slot)
            self._hand_up(slot, entry, now)
            while len(self._runs) > WINDOWS:
                self._runs.popitem(last=False)

    def _hand_up(self, slot: tuple[Any, Any], entry: _Run, now: frozenset[str]) -> None:
        """After a put of a subgraph's run: the runs that called it hold in memory what it
        cut, `now`, and do not hand that over again (`unseen`). Caller holds the lock."""
        thread, caller = slot
        while now and isinstance(caller, str) and caller:
            caller = caller.rpartition(NS_SEP)[0]
            up = self._runs.get((thread, caller))
            if up is not None and up.namespace == entry.namespace:
                self._runs[(thread, caller)] = up._replace(handed=up.handed | now)

    @staticmethod
    def unseen(resumed: _Resumed | None, pruned: list[Any], namespace: Any) -> list[Any]:
        """The messages of `pruned` that neither the slot's last run nor the subgraphs it
        called cut for the same namespace (when they did, they handed them over)."""
        if resumed is None or not ((resumed.cut or resumed.handed) and pruned):
            return pruned
        if resumed.namespace is None or resumed.namespace != _namespace_text(namespace):
            return pruned
        cut, handed = resumed.cut, resumed.handed
        return [m for m in pruned if (i := message_identity(m)) not in cut and i not in handed]

    def passed(self, config: RunnableConfig, checkpoint_id: Any) -> None:
        """After a put that left the channel as it was (a step writing other channels):
        the run goes on from its checkpoint, whose list is the last put's."""
        self.ran(config, checkpoint_id, 0, None, None, [], None)

    def stored(
        self, config: RunnableConfig, stored: Checkpoint, given: Checkpoint, key: str
    ) -> None:
        """Remembers the window `stored` holds, when the cut changed `given`'s list."""
        slot = self._slot(config)
        with self._lock:
            if stored is given:  # nothing cut: the list in memory is the one stored
                self._last.pop(slot, None)
                return
            version = stored["channel_versions"].get(key)
            self._last[slot] = (version, stored["channel_values"][key])
            self._last.move_to_end(slot)
            while len(self._last) > WINDOWS:
                self._last.popitem(last=False)

    def same(self, config: RunnableConfig, checkpoint: Checkpoint, key: str) -> Checkpoint:
        """`checkpoint`, holding the window stored for its version of `key` if one was."""
        if not isinstance(checkpoint["channel_values"].get(key), list):
            return checkpoint
        with self._lock:
            last = self._last.get(self._slot(config))
        if last is None or last[0] != checkpoint["channel_versions"].get(key):
            return checkpoint
        return _holding(checkpoint, key, last[1])


def _context_manager(value: Any) -> bool:
    """Whether `value` is entered with ``with`` or ``async with``."""
    kind = type(value)
    return (hasattr(kind, "__enter__") and hasattr(kind, "__exit__")) or (
        hasattr(kind, "__aenter__") and hasattr(kind, "__aexit__")
    )


def _namespace_text(namespace: Any) -> str | None:
    """`namespace_json(namespace)`, or None where it has none (nothing is left out then)."""
    try:
        return namespace_json(namespace)
    except (TypeError, ValueError, RecursionError):
        return None


def plan_reduction(
    reducer: MessageReducer,
    checkpoint: Checkpoint,
    config: RunnableConfig | None,
    messages_key: str = "messages",
) -> tuple[Checkpoint, ReducerResult | None, Any]:
    """Cuts the messages channel of `checkpoint` without delivering anything.

    Returns:
        The checkpoint to store (a copy when the cut changed the list, else the same
        object), the cut (None when there was no message list), and the namespace.
    """
    messages, namespace = _messages_to_cut(reducer, checkpoint, config, messages_key)
    if messages is None:
        return checkpoint, None, namespace
    result = reducer.plan(messages, None, namespace)
    return _with_messages(checkpoint, messages_key, messages, result), result, namespace


async def aplan_reduction(
    reducer: MessageReducer,
    checkpoint: Checkpoint,
    config: RunnableConfig | None,
    messages_key: str = "messages",
) -> tuple[Checkpoint, ReducerResult | None, Any]:
    """`plan_reduction`, awaiting a coroutine `summarize_fn`."""
    messages, namespace = _messages_to_cut(reducer, checkpoint, config, messages_key)
    if messages is None:
        return checkpoint, None, namespace
    result = await reducer.aplan(messages, None, namespace)
    return _with_messages(checkpoint, messages_key, messages, result), result, namespace


def apply_reducer(
    reducer: MessageReducer | None,
    checkpoint: Checkpoint,
    config: RunnableConfig | None,
    messages_key: str = "messages",
) -> Checkpoint:
    """Returns `checkpoint` with its messages channel reduced, delivering what was pruned.

    Non-mutating: a copy when something was cut, else `checkpoint` itself. For a
    saver of your own, call it in ``put`` (and deliver after the store, as
    `ReducingSaver` does, if a failed store must not reach long-term memory).
    """
    if reducer is None:
        return checkpoint
    _check_reducer("apply_reducer", reducer)
    _check_checkpoint("apply_reducer", checkpoint)
    reduced, result, namespace = plan_reduction(reducer, checkpoint, config, messages_key)
    if result is not None and result.pruned:
        reducer.deliver(result.pruned, namespace)
    return reduced


# What to do when a graph's side does not match its outbox's client (see _check_outbox_side).
_SYNC_SIDE = (
    "run the graph with ainvoke/astream, or build the outbox with a blocking client "
    "(RedisOutbox(redis.Redis(...)))"
)
_ASYNC_SIDE = (
    "run the graph with invoke/stream, or build the outbox with an asyncio client "
    "(RedisOutbox(redis.asyncio.Redis(...)))"
)


class ReducingSaver(BaseCheckpointSaver[Any]):
    """Wraps any `BaseCheckpointSaver` so every checkpoint holds a bounded message window.

    The constructor looks at the inner saver once:

    - no ``reducer`` attribute: the wrapper reduces the messages channel in `put`/`aput`;
    - ``reducer = None``: the wrapper gives the inner saver its reducer and passes every
      call through, so the reduction runs once, inside the saver;
    - the same reducer object (also another `ReducingSaver`): pass-through;
    - a different reducer: `ValueError`, since two reducers keep two delivery ledgers and
      pruned turns would reach long-term memory twice.

    Pruned messages are delivered after the inner store succeeded, so a failed `put`
    that is retried delivers once.

    With an `outbox`, delivery is durable: a put that prunes first stages the batch in
    the outbox (one round trip), then stores; the batch is delivered (`delivery`) once
    its checkpoint exists and removed when every hook succeeded. With a durable ledger
    (`RedisDeliveryLedger`), across processes, restarts, retries and forks, each message
    reaches a `RedisSink` exactly once per namespace and any other hook at least once
    (twice only if a process dies between the hook returning and the ledger recording
    it); see the README's "Durable delivery".

    Args:
        inner: The checkpointer that stores.
        reducer: The `MessageReducer` that cuts and delivers.
        messages_key: The state channel holding the message list.
        outbox: Where pruned batches wait for delivery, e.g. `RedisOutbox`; None
            delivers in the process, after the put, as before.
        delivery: ``"inline"``, ``"background"``, ``"manual"`` or a `Delivery` with
            timings; needs an `outbox` unless ``"inline"``.
    """

    inner: BaseCheckpointSaver[Any]
    reducer: MessageReducer
    messages_key: str
    passthrough: bool
    outbox: Outbox | None
    delivery: DeliveryRunner | None

    def __new__(cls, *args: Any, **kwargs: Any) -> ReducingSaver:
        # copy.copy() calls __new__ without arguments: keep the class it already has.
        inner = args[0] if args else kwargs.get("inner")
        target = cls if inner is None else _class_for(cls, type(inner))
        return super().__new__(target)

    def __init__(
        self,
        inner: BaseCheckpointSaver[Any],
        reducer: MessageReducer,
        *,
        messages_key: str = "messages",
        outbox: Outbox | None = None,
        delivery: Delivery | DeliveryMode = "inline",
    ) -> None:
        if isinstance(inner, type) and issubclass(inner, BaseCheckpointSaver):
            raise TypeError(
                f"ReducingSaver wraps a saver instance, got the class {inner.__name__}: "
                f"pass {inner.__name__}(...)"
            )
        if not isinstance(inner, BaseCheckpointSaver) and _context_manager(inner):
            # PostgresSaver.from_conn_string(url) and the like yield the saver once entered
            raise TypeError(
                f"ReducingSaver wraps a saver, got the context manager {shown(inner)}: enter "
                "it first, e.g. `with PostgresSaver.from_conn_string(url) as inner:` (or "
                "`async with AsyncPostgresSaver.from_conn_string(url) as inner:`), then "
                "ReducingSaver(inner, ...) inside that block"
            )
        if not isinstance(inner, BaseCheckpointSaver):
            raise TypeError(
                f"ReducingSaver wraps a LangGraph BaseCheckpointSaver, got "
                f"{type(inner).__name__}: pass e.g. InMemorySaver(), PostgresSaver(...)"
            )
        if reducer is None:
            raise TypeError(
                "ReducingSaver needs a MessageReducer, got None; to store without reducing, "
                "use the inner saver directly"
            )
        _check_reducer("ReducingSaver", reducer)
        if not isinstance(messages_key, str) or not messages_key:
            raise ValueError(f"messages_key must be a channel name, got {messages_key!r}")
        options = Delivery.of(delivery)
        _check_summary(reducer)
        _check_bounds(reducer)
        if outbox is None and options != Delivery():
            raise ValueError(
                f"delivery={delivery!r} needs an outbox: pass outbox=RedisOutbox(client) "
                "(or RedisOutbox.for_saver(saver)); without one, hooks run inline after "
                "each put"
            )
        if outbox is not None:
            # Before `_adopt`, which hands the reducer to an inner saver with a free slot.
            _check_outbox(outbox, reducer, hasattr(inner, "reducer"))
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.reducer = reducer
        self.messages_key = messages_key
        self.passthrough = _adopt(inner, reducer)
        self.outbox = outbox
        self.delivery = (
            DeliveryRunner(inner, reducer, outbox, options) if outbox is not None else None
        )
        self._windows = _Windows()

    # -- reading ---------------------------------------------------------------------------

    @property
    def config_specs(self) -> list[Any]:
        return self.inner.config_specs

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        item = self.inner.get_tuple(config)
        return item if item is None else self._replayable(item)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        items = self.inner.list(config, filter=filter, before=before, limit=limit)
        return items if self.passthrough else self._replayed(items)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        item = await self.inner.aget_tuple(config)
        return item if item is None else await self._areplayable(item)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = aiter(self.inner.alist(config, filter=filter, before=before, limit=limit))
        async for item in items:
            if not self.passthrough and needs_history(item, self.messages_key):
                rest = [other async for other in items]  # see `_replayed`
                yield await self._areplayable(item)
                for other in rest:
                    yield await self._areplayable(other)
                return
            yield await self._areplayable(item)

    def _replayed(self, items: Iterator[CheckpointTuple]) -> Iterator[CheckpointTuple]:
        """`items`, each `_replayable`, read lazily until one needs its window rebuilt.

        SqliteSaver, PostgresSaver and their async twins hold their connection's lock (or
        cursor) until their `list` ends, and their `get_delta_channel_history` takes it
        again (a `get_state_history` hung): before the first history read, the rest of
        `items` is read into memory.
        """
        items = iter(items)  # one iteration, which the loop and the read of the rest share
        for item in items:
            if needs_history(item, self.messages_key):
                rest = [*items]  # ends the inner iteration, which frees its connection
                yield self._replayable(item)
                for other in rest:
                    yield self._replayable(other)
                return
            yield self._replayable(item)

    def _replayable(self, item: CheckpointTuple) -> CheckpointTuple:
        """A stored checkpoint whose pending writes replay onto its window (see `_replay`);
        with pass-through, as the inner saver returned it."""
        if self.passthrough:
            return item
        key = self.messages_key
        if not needs_history(item, key):
            return replayable(item, key)
        history = self.inner.get_delta_channel_history(config=item.config, channels=[key])
        return replayable(item, key, rebuilt(history, key))

    async def _areplayable(self, item: CheckpointTuple) -> CheckpointTuple:
        """`_replayable`, reading a `DeltaChannel`'s history with the async API."""
        if self.passthrough:
            return item
        key = self.messages_key
        if not needs_history(item, key):
            return replayable(item, key)
        history = await self.inner.aget_delta_channel_history(config=item.config, channels=[key])
        return replayable(item, key, rebuilt(history, key))

    # -- writing ---------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self.passthrough:
            return self.inner.put(config, checkpoint, metadata, new_versions)
        _check_put("ReducingSaver.put", config, checkpoint, new_versions)
        if self.delivery is not None:  # refused at the first put, not the first that prunes
            self._check_outbox_side("put", _SYNC_SIDE)
        if self.messages_key not in new_versions:
            _warn_other_messages(self.reducer, checkpoint["channel_values"], self.messages_key)
            same = self._windows.same(config, checkpoint, self.messages_key)
            stored = self.inner.put(config, same, metadata, new_versions)
            self._windows.passed(config, checkpoint["id"])
            return stored
        cut, resumed = self._resumed(config, checkpoint)
        reduced, result, namespace = plan_reduction(self.reducer, cut, config, self.messages_key)
        self._windows.stored(config, reduced, checkpoint, self.messages_key)
        pruned = list(result.pruned) if result is not None else []
        fresh = self._windows.unseen(resumed, pruned, namespace)
        if self.delivery is not None and fresh:
            batch = self.delivery.batch(config, checkpoint["id"], fresh, namespace)
            due = self.delivery.stage(batch)
            stored = self.inner.put(config, reduced, metadata, new_versions)
            self.delivery.stored(batch, fresh, namespace, due)
        else:
            stored = self.inner.put(config, reduced, metadata, new_versions)
            if self._delivers(fresh):
                self.reducer.deliver(fresh, namespace)
        self._ran(config, checkpoint, resumed, reduced, pruned, namespace)
        return stored

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self.passthrough:
            return await self.inner.aput(config, checkpoint, metadata, new_versions)
        _check_put("ReducingSaver.aput", config, checkpoint, new_versions)
        if self.delivery is not None:
            self._check_outbox_side("aput", _ASYNC_SIDE)
        if self.messages_key not in new_versions:
            _warn_other_messages(self.reducer, checkpoint["channel_values"], self.messages_key)
            same = self._windows.same(config, checkpoint, self.messages_key)
            stored = await self.inner.aput(config, same, metadata, new_versions)
            self._windows.passed(config, checkpoint["id"])
            return stored
        cut, resumed = self._resumed(config, checkpoint)
        reduced, result, namespace = await aplan_reduction(
            self.reducer, cut, config, self.messages_key
        )
        self._windows.stored(config, reduced, checkpoint, self.messages_key)
        pruned = list(result.pruned) if result is not None else []
        fresh = self._windows.unseen(resumed, pruned, namespace)
        if self.delivery is not None and fresh:
            batch = self.delivery.batch(config, checkpoint["id"], fresh, namespace)
            due = await self.delivery.astage(batch)
            stored = await self.inner.aput(config, reduced, metadata, new_versions)
            await self.delivery.astored(batch, fresh, namespace, due)
        else:
            stored = await self.inner.aput(config, reduced, metadata, new_versions)
            if self._delivers(fresh):
                await self.reducer.adeliver(fresh, namespace)
        self._ran(config, checkpoint, resumed, reduced, pruned, namespace)
        return stored

    def _resumed(
        self, config: RunnableConfig, checkpoint: Checkpoint
    ) -> tuple[Checkpoint, _Resumed | None]:
        """The checkpoint a put cuts, holding the list `_Windows.resumed` makes of its
        messages (a `DeltaChannel` snapshot stays one), and that; None when the channel
        holds no list (between a `DeltaChannel`'s snapshots, say)."""
        value = checkpoint["channel_values"].get(self.messages_key)
        messages = _listed(value)
        if type(messages) is not list:
            return checkpoint, None
        resumed = self._windows.resumed(config, messages)
        if resumed.messages is messages:
            return checkpoint, resumed
        snapshot = value is not messages  # a DeltaChannel's, unwrapped
        kept: Any = _DeltaSnapshot(resumed.messages) if snapshot else resumed.messages
        return _holding(checkpoint, self.messages_key, kept), resumed

    def _ran(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        resumed: _Resumed | None,
        reduced: Checkpoint,
        pruned: _Messages,
        namespace: Any,
    ) -> None:
        """After the put stored `reduced` (for `checkpoint`): remembers its window for the
        run's next put (see `_Windows.ran`)."""
        key = self.messages_key
        given = _listed(checkpoint["channel_values"].get(key))
        stored = _listed(reduced["channel_values"].get(key))
        size = len(given) if type(given) is list else 0
        self._windows.ran(config, checkpoint["id"], size, resumed, stored, pruned, namespace)

    def _delivers(self, fresh: _Messages) -> bool:
        """Whether a put without an outbox batch calls the reducer's delivery: for what it
        cut anew, and, when nothing is new, to retry what failed earlier (the reducer
        retries at each delivery; most puts of a run cut nothing, see `_Windows.resumed`)."""
        return self.delivery is None and bool(fresh or self.reducer.pending)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.inner.put_writes(config, writes, task_id, task_path)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.inner.aput_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.inner.adelete_thread(thread_id)

    # -- durable delivery -------------------------------------------------------------------

    def drain(self, limit: int | None = None) -> DrainReport:
        """Delivers up to `limit` due batches from the outbox (any process may have staged).

        Call it from a serverless handler, a cron job or a worker process in ``manual``
        mode; in the other modes it also picks up what a crashed process left.
        """
        return self._runner("drain").drain(limit)

    async def adrain(self, limit: int | None = None) -> DrainReport:
        """`drain`, for asyncio."""
        return await self._runner("adrain").adrain(limit)

    def delivery_stats(self) -> OutboxStats:
        """The outbox's backlog and counters, shared by every process that uses it."""
        return self._runner("delivery_stats").stats()

    async def adelivery_stats(self) -> OutboxStats:
        """`delivery_stats`, for asyncio."""
        return await self._runner("adelivery_stats").astats()

    def _runner(self, method: str) -> DeliveryRunner:
        if self.delivery is None:
            raise ValueError(
                f"ReducingSaver.{method}() needs an outbox: build the saver with "
                "outbox=RedisOutbox(...) (without one, hooks run inline after each put)"
            )
        twin = method[1:] if method.startswith("a") else f"a{method}"
        self._check_outbox_side(
            method, f"call {'saver.' if method.startswith('a') else 'await saver.'}{twin}() instead"
        )
        return self.delivery

    def _check_outbox_side(self, method: str, fix: str) -> None:
        """A `TypeError` naming `fix` when `method` (``a...``: the asyncio side) cannot use
        the client of the saver's `RedisOutbox`."""
        if not isinstance(self.outbox, RedisOutbox):
            return
        asked_async, has_async = method.startswith("a"), _is_async(self.outbox.client)
        if asked_async != has_async:
            client = self.outbox.client
            raise TypeError(
                f"ReducingSaver.{method}() needs an outbox with a "
                f"{'redis.asyncio' if asked_async else 'blocking'} client, but its "
                f"RedisOutbox has {type(client).__module__}.{type(client).__name__}: {fix}"
            )

    # -- the rest --------------------------------------------------------------------------

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.inner.get_next_version(current, channel)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> ReducingSaver:
        """A clone whose inner saver carries the derived msgpack allowlist.

        With an outbox, the clone's delivery encodes staged batches with that serializer
        too; it shares the counters, pending acks and background worker of this saver's
        delivery, so `saver.delivery.close()` also covers what the clone staged. Every drain
        of that delivery (this saver's `drain`, any clone's, the background worker) decodes
        with the original serializer allowing what all its clones allow, so a graph's
        batches decode whoever drains them; a batch holding a type none allows stays in the
        outbox, as one that does not decode.
        """
        extra_allowlist = tuple(extra_allowlist)  # read twice: by the inner saver and here
        inner = self.inner.with_allowlist(extra_allowlist)
        if inner is self.inner:
            return self
        clone = copy.copy(self)
        clone.inner = inner
        clone.serde = inner.serde
        if self.delivery is not None:
            clone.delivery = self.delivery.with_inner(inner, extra_allowlist)
        return clone

    def __repr__(self) -> str:
        mode = "pass-through" if self.passthrough else "reducing"
        if self.delivery is not None:
            mode += f", {self.delivery.mode} delivery via {self.outbox!r}"
        return f"ReducingSaver({self.inner!r}, {self.reducer!r}, {mode})"


def _adopt(inner: BaseCheckpointSaver[Any], reducer: MessageReducer) -> bool:
    """Decides pass-through, handing `reducer` to a saver that has a free slot for one."""
    if not hasattr(inner, "reducer"):
        return False
    current = inner.reducer
    if current is None:
        inner.reducer = reducer
        return True
    if current is reducer:
        return True
    raise ValueError(
        f"{type(inner).__name__} already has a different reducer ({current!r}). Two reducers "
        "keep two delivery ledgers, so every pruned turn would reach long-term memory twice. "
        "Wrap it with the same reducer object, or build the inner saver without one."
    )


def _check_sinks(where: str, reducer: MessageReducer) -> None:
    """The reducer dedupes what it hands over, and a `RedisSink` commits with its own
    ledger, so it must be the reducer's."""
    config = getattr(reducer, "config", None)
    if config is not None and not config.dedupe_on_prune:
        raise ValueError(
            f"{where} needs ReducerConfig(dedupe_on_prune=True), got False: LangGraph "
            "keeps a run's whole message list in memory, so a put that cannot go on from the "
            "run's last one (a fork, a retry in another process) cuts messages handed over "
            "before again (and an outbox redelivers after a crash); only the delivery ledger "
            "makes each reach the hooks once"
        )
    names: set[str] = set()
    for hook in getattr(getattr(reducer, "config", None), "on_prune", ()):
        if not isinstance(hook, RedisSink):
            continue
        if hook.ledger is not reducer.ledger:
            raise ValueError(
                f"{hook!r} records deliveries in {hook.ledger!r}, but the reducer checks "
                f"{reducer.ledger!r}; build it with the reducer's ledger: "
                "MessageReducer(config=..., ledger=ledger) and RedisMemoryWriter(ledger)"
            )
        if hook.name in names:
            raise ValueError(
                f"two sinks are named {hook.name!r}; give each a name= of its own, since "
                "the name is the hook's key in the delivery ledger"
            )
        names.add(hook.name)


def _check_bounds(reducer: MessageReducer) -> None:
    """A reducer without a bound never cuts: the wrapper would store every message."""
    config = getattr(reducer, "config", None)
    if config is None or config.max_messages is not None or config.max_tokens is not None:
        return
    warnings.warn(
        "ReducingSaver's reducer never cuts: its ReducerConfig sets neither max_messages nor "
        "max_tokens (MessageReducer() leaves both None), so every message is stored. Pass "
        "e.g. MessageReducer(config=ReducerConfig(min_messages=10, max_messages=20))",
        UserWarning,
        stacklevel=3,
    )


def _check_summary(reducer: MessageReducer) -> None:
    """The wrapper stores a summary only as the messages `inject_summary` puts in the
    window; `ReducerResult.summary` itself is not kept."""
    config = getattr(reducer, "config", None)
    if config is None or config.summarize_fn is None or config.inject_summary:
        return
    warnings.warn(
        "ReducingSaver keeps a summary only as the messages ReducerConfig(inject_summary=True) "
        "puts in the stored window; with inject_summary=False, summarize_fn runs on each cut "
        "and its text is dropped. Set inject_summary=True, or summarize in an on_prune hook",
        UserWarning,
        stacklevel=3,
    )


def _check_outbox(outbox: Outbox, reducer: MessageReducer, reduces_itself: bool) -> None:
    if not isinstance(outbox, Outbox):
        raise TypeError(
            f"outbox={outbox!r} does not implement the Outbox protocol "
            "(stage, claim, settle, stats and their a- twins); pass e.g. RedisOutbox(client)"
        )
    if reduces_itself:
        raise ValueError(
            "outbox= needs the wrapper to do the reduction, but this inner saver reduces "
            "itself (it took the reducer); build it without its own reduction, or store "
            "through a saver that has no reducer slot"
        )
    for index, hook in enumerate(reducer.config.on_prune):
        if isinstance(hook, (Background, AsyncBackground)):
            raise ValueError(
                f"on_prune[{index}] is a {type(hook).__name__}, which acknowledges before its "
                "hook ran; with an outbox pass the plain function and use "
                "delivery='background' instead"
            )
    if isinstance(reducer.ledger, InMemoryLedger):
        warnings.warn(
            "the reducer's delivery ledger is an InMemoryLedger: redelivery after a crash, "
            "or by another process, reaches the hooks again. Pass "
            "MessageReducer(..., ledger=RedisDeliveryLedger(client)) for exactly once",
            UserWarning,
            stacklevel=3,  # the line building the ReducingSaver
        )


def _delegate(name: str) -> Callable[..., Any]:
    if name in ("get_delta_channel_history", "aget_delta_channel_history"):
        return _history(name)
    if name.startswith("a"):

        async def forward_async(self: ReducingSaver, *args: Any, **kwargs: Any) -> Any:
            return await getattr(self.inner, name)(*args, **kwargs)

        forward_async.__name__ = name
        return forward_async

    def forward(self: ReducingSaver, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)

    forward.__name__ = name
    return forward


def _history(name: str) -> Callable[..., Any]:
    """The inner saver's `DeltaChannel` history, its messages writes cleaned against the
    cut snapshot they replay onto (see `_replay`); with pass-through, as it came."""

    def cleaned(self: ReducingSaver, histories: Any) -> Any:
        return histories if self.passthrough else replayable_history(histories, self.messages_key)

    if name.startswith("a"):

        async def history_async(self: ReducingSaver, **kwargs: Any) -> Any:
            return cleaned(self, await self.inner.aget_delta_channel_history(**kwargs))

        history_async.__name__ = name
        return history_async

    def history(self: ReducingSaver, **kwargs: Any) -> Any:
        return cleaned(self, self.inner.get_delta_channel_history(**kwargs))

    history.__name__ = name
    return history


# help(), inspect and IDEs show the parameters of `__init__`, not `__new__`'s catch-all.
setattr(  # noqa: B010 (the type has no such attribute to assign to)
    ReducingSaver,
    "__signature__",
    inspect.signature(ReducingSaver.__init__).replace(
        parameters=list(inspect.signature(ReducingSaver.__init__).parameters.values())[1:]
    ),
)

_CLASSES: dict[tuple[type, frozenset[str]], type] = {}
BASE_METHODS = (
    "get_tuple",
    "aget_tuple",
    "list",
    "alist",
    "put",
    "aput",
    "put_writes",
    "aput_writes",
    "delete_thread",
    "adelete_thread",
)


def _class_for(base: type, inner_type: type) -> type:
    """`base`, subclassed with delegates for the optional methods `inner_type` has."""
    if base is not ReducingSaver and not issubclass(base, ReducingSaver):
        return base
    if getattr(base, "_capabilities", None) is not None:
        return base  # already a capability class
    names = frozenset(
        n
        for n in (*OPTIONAL_METHODS, *SETUP_METHODS)
        if getattr(inner_type, n, None) is not getattr(BaseCheckpointSaver, n, None)
    )
    # The base methods the wrapper defines but the inner saver lacks (a sync-only saver
    # has no aput_writes, say) go back to the base class's, so probes see them missing.
    missing = frozenset(
        n for n in BASE_METHODS if getattr(inner_type, n, None) is getattr(BaseCheckpointSaver, n)
    )
    key = (base, names | {f"-{n}" for n in missing})
    if key not in _CLASSES:
        namespace: dict[str, Any] = {n: _delegate(n) for n in names}
        namespace.update({n: getattr(BaseCheckpointSaver, n) for n in missing})
        namespace["_capabilities"] = names
        namespace["__module__"] = base.__module__
        namespace["__qualname__"] = base.__qualname__
        _CLASSES[key] = type(base.__name__, (base,), namespace)
    return _CLASSES[key]
