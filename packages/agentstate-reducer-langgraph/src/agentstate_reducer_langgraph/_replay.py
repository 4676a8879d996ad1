"""Pending writes replayed onto a stored window. No I/O.

LangGraph keeps a run's whole message list in memory; ReducingSaver stores its cut. When a
step ends with some tasks done and one interrupted or failed, LangGraph keeps the done
tasks' writes as the pending writes of the checkpoint the step started from, and replays
them onto that checkpoint's stored list on `get_state`, on resume and on a retry. Those
writes were made against the whole list: a `RemoveMessage` of a message the cut left out
names an id the window does not hold (`add_messages` raises, and every later read of the
thread with it), and a tool result rewritten under its id after the cut took its call is
appended at the end of the window, a result without its call.

So a read returns the pending writes to the messages channel without the removes of
messages that neither the window nor the other writes hold (removing a message that is gone
is what the remove asked for), and without the tool results whose call neither holds (the
cut takes such a result with its call). Writes are stored as LangGraph made them.

A `DeltaChannel` stores its value only at its snapshots, which ReducingSaver cuts, and
rebuilds it on a read from the newest snapshot and the writes made since
(`get_delta_channel_history`): those writes are cleaned the same way against the snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import CheckpointTuple, PendingWrite
from langgraph.checkpoint.serde.types import _DeltaSnapshot

if TYPE_CHECKING:  # from langgraph-checkpoint 4.2 (the DeltaChannel history it types)
    from langgraph.checkpoint.base import DeltaChannelHistory

from agentstate_reducer._messages import (  # the reducer's own reading of a message (pinned <0.7)
    REMOVE,
    TOOL,
    id_of,
    role_of,
    tool_call_id_of,
    tool_call_ids,
)

__all__ = ["needs_history", "rebuilt", "replayable", "replayable_history"]

# langgraph.graph.message.REMOVE_ALL_MESSAGES: a remove that names no message.
_REMOVE_ALL = "__remove_all__"


def replayable(item: CheckpointTuple, key: str, window: list[Any] | None = None) -> CheckpointTuple:
    """`item`, its pending writes to channel `key` as they replay onto its window: without
    removes of messages, nor tool results of calls, that neither the window nor those writes
    hold (the same object when there are none). The window is the list `item` stores (a
    `DeltaChannel` snapshot's), else `window`, rebuilt by the caller (`needs_history`)."""
    if not item.pending_writes:
        return item
    if window is None:
        window = _stored(item.checkpoint["channel_values"].get(key))
    if window is None:
        return item
    pending = _cleaned(window, item.pending_writes, key)
    return item if pending is None else item._replace(pending_writes=pending)


def needs_history(item: CheckpointTuple, key: str) -> bool:
    """Whether `item` holds no value of `key`, a `DeltaChannel` between its snapshots
    (its metadata counts the channel's updates since one), while pending writes to it could
    be dropped: its window is then rebuilt from the history (`rebuilt`) to clean them."""
    counters = (item.metadata or {}).get("counters_since_delta_snapshot") or {}
    written = [
        m for _, channel, v in item.pending_writes or () if channel == key for m in _items(v)
    ]
    return key not in item.checkpoint["channel_values"] and key in counters and _droppable(written)


def rebuilt(histories: Mapping[str, DeltaChannelHistory], key: str) -> list[Any]:
    """The window of a `DeltaChannel` checkpoint, by message id, from its history: the seed's
    list with the writes since replayed as `add_messages` replays them (a remove takes its id
    out, `REMOVE_ALL_MESSAGES` empties, a message replaces the one of its id or is appended)."""
    history = histories.get(key) or {"writes": []}
    held: dict[Any, Any] = {}

    def hold(message: Any) -> None:
        found = id_of(message)
        held[found if found is not None else object()] = message

    for message in _stored(history.get("seed")) or []:
        hold(message)
    for _, channel, value in history["writes"]:
        if channel != key:
            continue
        reset, value = _overwrite(value)
        if reset:
            held.clear()
        for message in _items(value if value is not None else []):
            if not _is_remove(message):
                hold(message)
            elif id_of(message) == _REMOVE_ALL:
                held.clear()
            else:
                held.pop(id_of(message), None)
    return list(held.values())


def replayable_history(
    histories: Mapping[str, DeltaChannelHistory], key: str
) -> Mapping[str, DeltaChannelHistory]:
    """`histories` (of `get_delta_channel_history`), the writes of channel `key` cleaned as
    `replayable` cleans pending writes, against the seed they replay onto: the cut window a
    `DeltaChannel` snapshot holds (the same mapping when there is nothing to drop)."""
    history = histories.get(key)
    if history is None or not history["writes"]:
        return histories
    seed = history.get("seed")
    window = [] if seed is None else _stored(seed)  # no seed: the channel replays from empty
    if window is None:
        return histories
    writes = _cleaned(window, history["writes"], key)
    if writes is None:
        return histories
    return {**histories, key: {**history, "writes": writes}}


def _cleaned(
    window: list[Any], writes: Sequence[PendingWrite], key: str
) -> list[PendingWrite] | None:
    """`writes` without the messages of channel `key` that would replay onto `window` as
    removes of messages nothing holds or tool results of calls nothing holds; None when
    there are none."""
    written = [m for _, channel, v in writes if channel == key for m in _items(v)]
    if not _droppable(written):
        return None
    held = [*window, *(m for m in written if not _is_remove(m))]
    present = {id_of(m) for m in held}
    calls = {call for m in held for call in tool_call_ids(m)}

    def gone(message: Any) -> bool:
        if _is_tool(message):
            return tool_call_id_of(message) not in calls
        found = id_of(message)
        return _is_remove(message) and found not in present and found != _REMOVE_ALL

    cleaned: list[PendingWrite] = []
    changed = False
    for task, channel, value in writes:
        if channel == key:
            kept = _without(value, gone)
            changed = changed or kept is not value
            value = kept
        cleaned.append((task, channel, value))
    return cleaned if changed else None


def _without(value: Any, drop: Any) -> Any:
    """A write's value without the messages `drop` picks: the same object when it picks
    none; an empty list in place of a single message it picks (a write of nothing)."""
    if isinstance(value, list):
        kept = [m for m in value if not drop(m)]
        return value if len(kept) == len(value) else kept
    return [] if drop(value) else value


def _stored(value: Any) -> list[Any] | None:
    """The message list a stored channel value holds: a list, or a `DeltaChannel` snapshot's."""
    if isinstance(value, _DeltaSnapshot):
        value = value.value
    return value if isinstance(value, list) else None


def _overwrite(value: Any) -> tuple[bool, Any]:
    """Whether a write is an `Overwrite` (LangGraph's class, or its two dict forms), and the
    value it writes; the write itself when it is not one. (LangGraph snapshots a
    `DeltaChannel` an `Overwrite` wrote, so a history rarely holds one.)"""
    if type(value).__name__ == "Overwrite" and hasattr(value, "value"):
        return True, value.value
    if isinstance(value, dict):
        if "__overwrite__" in value and len(value) == 1:
            return True, value["__overwrite__"]
        if value.get("type") == "__overwrite__" and set(value) == {"type", "value"}:
            return True, value["value"]
    return False, value


def _droppable(messages: Iterable[Any]) -> bool:
    """Whether any of `messages` is a remove or a tool result, which a cleaning may drop."""
    return any(_is_remove(m) or _is_tool(m) for m in messages)


def _items(value: Any) -> Iterable[Any]:
    """The messages of a write to an `add_messages` channel: a list, or one message."""
    return value if isinstance(value, list) else (value,)


def _is_remove(message: Any) -> bool:
    return role_of(message) == REMOVE


def _is_tool(message: Any) -> bool:
    return role_of(message) == TOOL and tool_call_id_of(message) is not None
