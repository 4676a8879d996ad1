"""Pending writes replayed onto a stored window. No I/O.

LangGraph keeps a run's whole message list in memory; ReducingSaver stores its cut. When a
step ends with some tasks done and one interrupted or failed, LangGraph keeps the done
tasks' writes as the pending writes of the checkpoint the step started from, and replays
them onto that checkpoint's stored list on `get_state`, on resume and on a retry. Those
writes were made against the whole list: a `RemoveMessage` of a message the cut left out
names an id the window does not hold (`add_messages` raises, and every later read of the
thread with it), and a message rewritten under the id of one the cut left out is appended
at the end of the window (a tool result after its call was cut, say).

So each put that stores a cut window notes in the checkpoint's metadata (under `CUT_KEY`)
what the cut left out of the list in memory (`CutOff`, `noting`), and a read replays the
pending writes as they would replay onto the whole list (`replayable`): without what refers
to messages left out, and without removes of messages neither the window nor the other
writes hold (removing a message that is gone is what the remove asked for; this also
covers writes of a checkpoint stored without a note). Writes are stored as LangGraph made
them: a task's writes may be stored before the put of their checkpoint has run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from langgraph.checkpoint.base import CheckpointTuple

__all__ = ["CUT_KEY", "CutOff", "noting", "replayable"]

# langgraph.graph.message.REMOVE_ALL_MESSAGES: a remove that names no message.
_REMOVE_ALL = "__remove_all__"
# The checkpoint metadata key of a cut's note: {"ids": [...], "calls": [...]}.
CUT_KEY = "agentstate_cut"


class CutOff(NamedTuple):
    """What a cut left out of the window of one checkpoint."""

    ids: frozenset[str]  # the ids of the messages left out
    calls: frozenset[str]  # the ids of the tool calls the AI messages among them make

    @classmethod
    def of(cls, given: Sequence[Any], window: Sequence[Any]) -> CutOff:
        """What the cut of `given` (the list in memory) to `window` (the list stored) left out."""
        kept = {_id(m) for m in window}
        ids: set[str] = set()
        calls: set[str] = set()
        for message in given:
            found = _id(message)
            if found is not None and found not in kept:
                ids.add(found)
                calls.update(_calls(message))
        return cls(frozenset(ids), frozenset(calls))

    def names(self, message: Any) -> bool:
        """Whether `message` (an item of a write) refers to a message left out: it has the id
        of one (a remove, or the message rewritten), or is the result of one's tool call."""
        found = _id(message)
        if found is not None and found in self.ids:
            return True
        return _role(message) == "tool" and _get(message, "tool_call_id") in self.calls


def noting(metadata: Any, cut: CutOff | None) -> Any:
    """`metadata` with `cut` noted under `CUT_KEY` (the same object without a cut)."""
    if cut is None:
        return metadata
    return {**metadata, CUT_KEY: {"ids": sorted(cut.ids), "calls": sorted(cut.calls)}}


def replayable(item: CheckpointTuple, key: str) -> CheckpointTuple:
    """`item`, its pending writes to channel `key` as they replay onto its window: without
    the messages that refer to what its cut left out, nor removes of messages neither the
    window nor those writes hold (the same object when there are none)."""
    if not item.pending_writes:
        return item
    window = item.checkpoint["channel_values"].get(key)
    writes = [value for _, channel, value in item.pending_writes if channel == key]
    if not isinstance(window, list) or not writes:
        return item
    cut = _noted(item.metadata)
    present = {_id(m) for m in window}
    present.update(_id(m) for v in writes for m in _items(v) if not _is_remove(m))

    def gone(message: Any) -> bool:
        if cut is not None and cut.names(message):
            return True
        found = _id(message)
        return _is_remove(message) and found not in present and found != _REMOVE_ALL

    pending = []
    changed = False
    for task, channel, value in item.pending_writes:
        if channel == key:
            cleaned = _filtered(value, gone)
            changed = changed or cleaned is not value
            value = cleaned
        pending.append((task, channel, value))
    return item._replace(pending_writes=pending) if changed else item


def _noted(metadata: Any) -> CutOff | None:
    """The cut noted in a checkpoint's metadata, if any (one of another shape is none)."""
    note = metadata.get(CUT_KEY) if isinstance(metadata, dict) else None
    if not isinstance(note, dict):
        return None
    ids, calls = note.get("ids"), note.get("calls")
    if not isinstance(ids, list) or not isinstance(calls, list):
        return None
    return CutOff(frozenset(map(str, ids)), frozenset(map(str, calls)))


def _filtered(value: Any, drop: Callable[[Any], bool]) -> Any:
    """A write's value without the messages `drop` picks: the same object when it picks
    none; an empty list in place of a single message it picks (a write of nothing)."""
    if isinstance(value, list):
        kept = [m for m in value if not drop(m)]
        return value if len(kept) == len(value) else kept
    return [] if drop(value) else value


def _items(value: Any) -> Iterable[Any]:
    """The messages of a write to an `add_messages` channel: a list, or one message."""
    return value if isinstance(value, list) else (value,)


def _get(message: Any, field: str) -> Any:
    if isinstance(message, dict):
        return message.get(field)
    if isinstance(message, (str, tuple)):  # ("human", "hi") and "hi" carry no fields
        return None
    return getattr(message, field, None)


def _id(message: Any) -> str | None:
    found = _get(message, "id")
    return None if found is None or found == "" else str(found)


def _role(message: Any) -> Any:
    if isinstance(message, dict):
        return message.get("role") or message.get("type")
    return _get(message, "type")


def _is_remove(message: Any) -> bool:
    return bool(_role(message) == "remove")


def _calls(message: Any) -> list[str]:
    calls = _get(message, "tool_calls") or ()
    found = (
        call.get("id") if isinstance(call, dict) else getattr(call, "id", None) for call in calls
    )
    return [str(c) for c in found if c]
