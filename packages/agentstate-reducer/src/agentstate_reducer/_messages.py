"""Read roles, ids and tool-call links from any supported message shape.

Supported shapes: plain dicts (`role` or `type` key), LangChain `BaseMessage`s, and any
object with a `type` or `role` attribute. Nothing here imports LangChain.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

HUMAN = "human"
AI = "ai"
SYSTEM = "system"
TOOL = "tool"
FUNCTION = "function"
REMOVE = "remove"

_ROLES: dict[str, str] = {
    "human": HUMAN,
    "user": HUMAN,
    "humanmessagechunk": HUMAN,
    "ai": AI,
    "assistant": AI,
    "agent": AI,
    "aimessagechunk": AI,
    "system": SYSTEM,
    "developer": SYSTEM,
    "systemmessagechunk": SYSTEM,
    "tool": TOOL,
    "toolmessagechunk": TOOL,
    "function": FUNCTION,
    "functionmessagechunk": FUNCTION,
    "remove": REMOVE,
}

_KNOWN = frozenset(_ROLES.values())

_LANGCHAIN_CLASSES: dict[str, str] = {
    HUMAN: "HumanMessage",
    AI: "AIMessage",
    SYSTEM: "SystemMessage",
    TOOL: "ToolMessage",
}

_is_langchain_cache: dict[type, bool] = {}


def is_mapping(message: Any) -> bool:
    """True for dict messages; checks `dict` first because the `Mapping` check is slow."""
    return isinstance(message, dict) or isinstance(message, Mapping)


def _normalize(raw: object) -> str:
    text = raw.lower() if isinstance(raw, str) else ""
    return _ROLES.get(text, text)


def role_of(message: Any) -> str:
    """Return the normalized role: `human`, `ai`, `system`, `tool`, or the raw lowercase role.

    A dict's `role` wins over its `type`. So does an object's, unless its `type` names a
    role itself: a LangChain message's `type` is its role (a `ChatMessage`'s is ``chat``,
    its `role` the real one), where the OpenAI SDK's Responses-API items carry
    ``type="message"`` beside the role.
    """
    if is_mapping(message):
        return _normalize(message.get("role") or message.get("type"))
    typed = _normalize(getattr(message, "type", None))
    if typed in _KNOWN:
        return typed
    role = getattr(message, "role", None)
    return _normalize(role) if isinstance(role, str) and role else typed


def _identity_role(message: Any) -> str:
    """The role an id-less message's identity is hashed with: read as before `role_of`
    preferred an object's `role` to a `type` that names no role, so that identities (which
    durable ledgers and staged batches store) stay the same across upgrades."""
    if is_mapping(message):
        return _normalize(message.get("role") or message.get("type"))
    raw = getattr(message, "type", None)
    if raw == "chat":
        raw = getattr(message, "role", raw)
    elif not isinstance(raw, str):
        raw = getattr(message, "role", None)
    return _normalize(raw)


def _get(message: Any, key: str) -> Any:
    if is_mapping(message):
        return message.get(key)
    return getattr(message, key, None)


def id_of(message: Any) -> str | None:
    """Return the message id as a string, or None when it has none."""
    value = _get(message, "id")
    if value is None or value == "":
        return None
    return str(value)


def tool_call_ids(message: Any) -> list[str]:
    """Return the ids of the tool calls an AI message makes, in order."""
    calls = _get(message, "tool_calls")
    if not calls:
        return []
    ids: list[str] = []
    for call in calls:
        value = call.get("id") if is_mapping(call) else getattr(call, "id", None)
        if value is not None and value != "":
            ids.append(str(value))
    return ids


def tool_call_id_of(message: Any) -> str | None:
    """Return the id of the tool call a tool message answers."""
    value = _get(message, "tool_call_id")
    return None if value is None or value == "" else str(value)


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump()
    return str(value)


def json_key(key: Any) -> str:
    """`key` as `json.dumps` writes a dict key (it takes str, int, float, bool and None)."""
    if not isinstance(key, str):
        if key is not None and not isinstance(key, (int, float)):
            raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")
        key = json.dumps(key)
    return json.dumps(key)


def mixed_key_order(key: Any) -> tuple[str, str]:
    """Orders the keys of a dict whose keys `sorted` cannot compare: by the JSON text of the
    key, then by its type's name (``1`` before ``"1"``, which have one text)."""
    return json_key(key), type(key).__name__


def sorted_json(value: Any, **options: Any) -> str:
    """`json.dumps(value, sort_keys=True, **options)`, also for a dict whose keys do not
    compare (``1`` and ``"a"``, a tool's status-code map), at any depth: its keys are then
    ordered by `mixed_key_order`. Any other value gets the text it always had."""
    try:
        return json.dumps(value, sort_keys=True, **options)
    except TypeError:
        pass
    default = options.pop("default", None)
    if default is not None:
        options["default"] = lambda item: _ordered(default(item))
    return json.dumps(_ordered(value), **options)


def _ordered(value: Any) -> Any:
    """`value` with each dict's items in the order `sort_keys` would give them, by
    `mixed_key_order` where its keys do not compare; lists and tuples gone through."""
    if isinstance(value, dict):
        try:
            items = sorted(value.items(), key=lambda item: item[0])
        except TypeError:
            items = sorted(value.items(), key=lambda item: mixed_key_order(item[0]))
        return {key: _ordered(item) for key, item in items}
    if isinstance(value, (list, tuple)):
        return [_ordered(item) for item in value]
    return value


def message_identity(message: Any) -> str:
    """Return the identity used to deliver `message` to each hook once.

    Args:
        message: A dict, LangChain message or look-alike.

    Returns:
        The message id when it has one; otherwise `"sha256:"` and 32 hex digits of a hash of
        its role, content, tool-call ids and tool-call id. The hash is the same in every
        process, so a durable ledger can store it. Two id-less messages with the same role,
        content and tool links share an identity.
    """
    found = id_of(message)
    if found is not None:
        return found
    payload = [
        _identity_role(message),
        _get(message, "content"),
        tool_call_ids(message),
        tool_call_id_of(message),
    ]
    text = sorted_json(payload, separators=(",", ":"), ensure_ascii=False, default=_jsonable)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def is_message(item: Any) -> bool:
    """Whether `item` is a message: a mapping, or an object with a `type`, `role` or
    `content` attribute (a LangChain message, a look-alike); not a str, a tuple or a list."""
    if is_mapping(item) or is_langchain_message(item):
        return True
    return any(hasattr(item, name) for name in ("type", "role", "content"))


def check_messages(messages: Sequence[Any], what: str = "message") -> None:
    """Raise `TypeError` for an item that is no message: not a mapping, and no object with a
    `type`, `role` or `content` attribute (a str, an int, None, a tuple).

    Such items all got one identity, so a hook was handed only the first of them.

    Args:
        messages: The items to check.
        what: What the items are, for the error (`message`, `pruned message`).
    """
    for index, message in enumerate(messages):
        if is_message(message):
            continue
        raise TypeError(
            f"{what} {index} is a {type(message).__name__} ({shown(message, 60)}), not a message; "
            "pass message objects or {'role': ..., 'content': ...} dicts"
        )


# The roles `check_roles` names as accepted, for its error.
_ACCEPTED = "'user', 'assistant', 'system', 'tool' (or 'human', 'ai', 'developer', 'function')"


def check_roles(messages: Sequence[Any], roles: Sequence[str]) -> None:
    """Raise `ValueError` for a message a cut cannot place.

    A message without a role (a dict with neither a `role` nor a `type` string, an object
    with only `content`) was preserved at index 0 as if it were a system prompt. A removal
    marker (LangChain's `RemoveMessage`, type `remove`) was kept as if it were a message:
    removals apply to a state before it is cut. A role the package does not know
    (`ChatMessage(role="critic")`) is accepted: an ordinary message, pruned like any other.

    Args:
        messages: The list to cut.
        roles: `role_of` of each message, in order.
    """
    if "" not in roles and REMOVE not in roles:
        return
    for index, role in enumerate(roles):
        message = messages[index]
        if role == "":
            if is_mapping(message):
                what, where = "dict", "a 'role' or 'type' key"
            else:
                what, where = type(message).__name__, "a `type` or `role` attribute"
            raise ValueError(
                f"message {index} has no role ({what} {shown(message, 60)}): give it "
                f"{where} naming its role (a non-empty string), such as {_ACCEPTED}; any "
                "other role string is an ordinary message, pruned like the rest"
            )
        if role == REMOVE:
            raise ValueError(
                f"message {index} is a removal marker (RemoveMessage, id {id_of(message)!r}), "
                "not a message: apply removals before cutting, with LangGraph's "
                "add_messages(state, updates) or reducer.as_langgraph_reducer(), which merges "
                "like it, or pass the state's stored list"
            )


def shown(value: Any, limit: int = 80) -> str:
    """`repr(value)` for an error message, cut to about `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_langchain_message(message: Any) -> bool:
    """Return True when `message` is a LangChain `BaseMessage`, without importing LangChain."""
    cls = type(message)
    known = _is_langchain_cache.get(cls)
    if known is None:
        known = any(
            base.__name__ == "BaseMessage" and base.__module__.startswith("langchain_core")
            for base in cls.__mro__
        )
        _is_langchain_cache[cls] = known
    return known


def to_langchain_message(message: Mapping[str, Any]) -> Any:
    """Build the LangChain message a dict describes.

    Only called when the input already holds LangChain messages, so `langchain_core` is
    loaded by then and this adds no dependency.
    """
    module = sys.modules.get("langchain_core.messages") or importlib.import_module(
        "langchain_core.messages"
    )
    role = role_of(message)
    fields = {k: v for k, v in message.items() if k not in ("role", "type")}
    class_name = _LANGCHAIN_CLASSES.get(role)
    if class_name is None:
        return module.ChatMessage(role=str(message.get("role") or message.get("type")), **fields)
    return getattr(module, class_name)(**fields)


def with_id(message: Any, new_id: str) -> Any:
    """Return `message` carrying `new_id` when it has no id yet; dicts are copied, not changed."""
    if id_of(message) is not None:
        return message
    if is_mapping(message):
        return {**message, "id": new_id}
    try:
        message.id = new_id
    except (AttributeError, TypeError):
        pass  # Immutable look-alike: it keeps no id, and its identity falls back to a hash.
    return message


def kind_of(messages: Sequence[Any]) -> str:
    """Return `"langchain"`, `"dict"` or `"object"`: the kind of message a list holds."""
    saw_dict = False
    for message in messages:
        if is_langchain_message(message):
            return "langchain"
        if is_mapping(message):
            saw_dict = True
    if saw_dict or not messages:
        return "dict"
    return "object"
