"""LangGraph `add_messages` semantics for the `as_langgraph_reducer` bridge."""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable, Mapping
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
