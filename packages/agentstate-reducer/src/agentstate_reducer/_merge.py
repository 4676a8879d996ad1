"""LangGraph `add_messages` semantics for the `as_langgraph_reducer` bridge."""

from __future__ import annotations

import importlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._messages import REMOVE, id_of, role_of, with_id

REMOVE_ALL_MESSAGES = "__remove_all__"


def as_list(value: Any) -> list[Any]:
    """Return `value` as a list: a single message becomes a one-item list."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, tuple) and not (len(value) == 2 and isinstance(value[0], str)):
        return list(value)  # a tuple of messages, not a ("role", "content") message
    return [value]


def merge_messages(left: Any, right: Any) -> list[Any]:
    """Merge `right` into `left` the way LangGraph's `add_messages` does.

    Plain dicts are merged here and stay dicts. Any other input goes to LangGraph's own
    `add_messages` when LangGraph is installed (it also converts tuples and strings), else
    is merged here.
    """
    left_list, right_list = as_list(left), as_list(right)
    if not all(isinstance(m, Mapping) for m in (*left_list, *right_list)):
        add_messages = _langgraph_add_messages()
        if add_messages is not None:
            merged: list[Any] = add_messages(left_list, right_list)
            return merged
    return _merge(left_list, right_list)


class CutIds:
    """The ids of the last `size` messages a bridge cut, in every conversation it serves.

    LangGraph applies the writes of one step to a channel one after the other, each through
    the bridge, so a write can cut a message that a parallel node, which read the state
    before the cut, then removes. That removal asks for what the cut already did; dropping
    it is harmless even when the id came from another conversation.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, messages: Iterable[Any]) -> None:
        """Remember the ids of `messages`, forgetting the oldest beyond `size`."""
        with self._lock:
            for message in messages:
                message_id = id_of(message)
                if message_id is not None:
                    self._ids[message_id] = None
                    self._ids.move_to_end(message_id)
            while len(self._ids) > self._size:
                self._ids.popitem(last=False)

    def drop_removals(self, left: Any, right: Any) -> Any:
        """`right` without its removals of cut ids that neither `left` nor an earlier message
        of `right` holds (`add_messages` raises on those), or `right` itself when it has no
        removal."""
        updates = as_list(right)
        removals = [id_of(m) for m in updates if role_of(m) == REMOVE]
        if not removals or REMOVE_ALL_MESSAGES in removals:
            return right  # after a remove-all the merge keeps only what follows it, as given
        present = {id_of(m) for m in as_list(left)}
        kept: list[Any] = []
        with self._lock:
            for message in updates:
                message_id = id_of(message)
                if role_of(message) != REMOVE:
                    present.add(message_id)
                elif message_id in self._ids and message_id not in present:
                    continue
                kept.append(message)
        return kept


def _langgraph_add_messages() -> Callable[[Any, Any], Any] | None:
    try:
        module = importlib.import_module("langgraph.graph.message")
    except ImportError:
        return None
    function: Callable[[Any, Any], Any] = module.add_messages
    return function


def _merge(left: list[Any], right: list[Any]) -> list[Any]:
    left = [with_id(m, str(uuid.uuid4())) for m in left]
    right = [with_id(m, str(uuid.uuid4())) for m in right]
    for index in range(len(right) - 1, -1, -1):
        message = right[index]
        if role_of(message) == REMOVE and id_of(message) == REMOVE_ALL_MESSAGES:
            return right[index + 1 :]
    merged = list(left)
    position = {id_of(m): i for i, m in enumerate(merged)}
    removed: set[str] = set()
    for message in right:
        message_id = id_of(message)
        is_removal = role_of(message) == REMOVE
        if message_id is None:  # an immutable look-alike that cannot take an id
            merged.append(message)
        elif message_id in position:
            if is_removal:
                removed.add(message_id)
            else:
                removed.discard(message_id)
                merged[position[message_id]] = message
        elif is_removal:
            raise ValueError(
                f"cannot remove message id {message_id!r}: no message has it; remove only "
                "ids already in the list"
            )
        else:
            position[message_id] = len(merged)
            merged.append(message)
    return [m for m in merged if id_of(m) not in removed]
